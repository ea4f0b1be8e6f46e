// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/metrics/layer_profiler.h"

#include <cmath>

#include "engine/core/error.h"
#include "engine/metrics/kernel_census.h"

namespace tb {

namespace {

// The row a phase's own time (outside every layer) goes to.
const char* phase_row(Phase p) {
  if (p == Phase::Forward) return "loss";
  if (p == Phase::Backward) return "backward_other";
  return phase_name(p);
}

}  // namespace

void HostScopeClock::mark(size_t i) {
  if (t_.size() <= i) t_.resize(i + 1);
  t_[i] = std::chrono::steady_clock::now();
}

std::vector<double> HostScopeClock::intervals(size_t n) {
  std::vector<double> out;
  for (size_t i = 0; i + 1 < n; ++i)
    out.push_back(std::chrono::duration<double, std::milli>(t_[i + 1] - t_[i]).count());
  return out;
}

LayerProfiler::LayerProfiler(int64_t interval, WorkQuery work, std::unique_ptr<ScopeClock> clock)
    : interval_(interval < 1 ? 1 : interval), work_(work), clock_(std::move(clock)) {}

size_t LayerProfiler::row(const std::string& layer, const std::string& kind,
                          const std::string& phase) {
  auto [it, added] = rows_.try_emplace(phase + "\t" + layer, current_.rows.size());
  if (added) {
    LayerProfileRow r;
    r.layer = layer, r.kind = kind, r.phase = phase;
    if (!layer.empty()) r.flops = r.bytes = 0;  // a layer's work is counted
    current_.rows.push_back(std::move(r));
  }
  return it->second;
}

void LayerProfiler::mark(size_t active_after) {
  clock_->mark(active_after_.size());
  active_after_.push_back(active_after);
}

size_t LayerProfiler::innermost() const {
  if (!stack_.empty()) return stack_.back();
  return kNone;
}

void LayerProfiler::begin_step(int64_t step) {
  close();
  sampling_ = samples_step(step, interval_);
  if (!sampling_) return;
  // One step's marks at a time: a profile not read yet is read now.
  if (closed_pending_) resolve();
  work_ended_ = false;
  current_ = LayerProfileStep{};
  current_.step = step;
  rows_.clear();
  stack_.clear();
  names_.clear();
  active_after_.clear();
  phase_depth_ = 0;
  mark(kNone);
}

void LayerProfiler::end_work() {
  if (!sampling_) return;
  work_ended_ = true;
  stack_.clear();  // (none is open here; an error may have left one)
  names_.clear();
  mark(row("", "", "step_end"));
}

void LayerProfiler::close_step() { close(); }

void LayerProfiler::close() {
  if (!sampling_) return;
  sampling_ = false;
  mark(kNone);  // the closing boundary
  closed_pending_ = true;
}

void LayerProfiler::resolve() {
  const std::vector<double> ms = clock_->intervals(active_after_.size());
  const size_t unattributed = row("", "", "unattributed");
  current_.step_time_ms = 0;
  for (size_t i = 0; i < ms.size(); ++i) {
    const double t = std::max(0.0, ms[i]);
    current_.rows[active_after_[i] == kNone ? unattributed : active_after_[i]].time_ms += t;
    current_.step_time_ms += t;
  }
  // "unattributed" last, where readers look for the remainder.
  LayerProfileRow rest = current_.rows[unattributed];
  current_.rows.erase(current_.rows.begin() + long(unattributed));
  current_.rows.push_back(std::move(rest));
  ready_ = std::move(current_);
  current_ = LayerProfileStep{};
  closed_pending_ = false;
  ++sampled_;
}

void LayerProfiler::begin_phase(Phase p) {
  if (!sampling_ || work_ended_) return;
  stack_.push_back(row("", "", phase_row(p)));
  ++phase_depth_;
  mark(innermost());
}

void LayerProfiler::end_phase(Phase) {
  if (!sampling_ || work_ended_ || phase_depth_ == 0 || stack_.empty()) return;
  stack_.pop_back();
  --phase_depth_;
  mark(innermost());
}

void LayerProfiler::enter(const Layer& layer, LayerPass pass, int64_t batch, bool need_dx) {
  if (!sampling_ || work_ended_) return;
  const std::string name = names_.empty() ? layer.name() : names_.back() + "." + layer.name();
  const size_t r = row(name, layer.kind(), pass == LayerPass::Forward ? "forward" : "backward");
  WorkQuery q = work_;
  q.pass = pass, q.batch = batch, q.need_dx = need_dx;
  try {
    const Work w = layer_work(layer, q);
    current_.rows[r].flops += w.flops();
    current_.rows[r].bytes += w.bytes;
  } catch (const Error&) {  // a kind with no count: its row says "not counted"
    current_.rows[r].flops = current_.rows[r].bytes = std::nan("");
  }
  names_.push_back(name);
  stack_.push_back(r);
  mark(r);
}

void LayerProfiler::exit() {
  // Called from scope destructors, also while an error unwinds: never throws.
  if (!sampling_ || work_ended_ || names_.empty() || stack_.empty()) return;
  names_.pop_back();
  stack_.pop_back();
  mark(innermost());
}

std::optional<LayerProfileStep> LayerProfiler::take(bool wait) {
  if (closed_pending_ && (wait || clock_->ready(active_after_.size()))) resolve();
  std::optional<LayerProfileStep> out = std::move(ready_);
  ready_.reset();
  return out;
}

}  // namespace tb
