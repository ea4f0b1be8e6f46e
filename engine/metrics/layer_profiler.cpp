// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/metrics/layer_profiler.h"

#include <cmath>

#include "engine/core/error.h"
#include "engine/metrics/kernel_census.h"

namespace tb {

namespace {

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The row a phase's own time (outside every layer) goes to.
const char* phase_row(Phase p) {
  if (p == Phase::Forward) return "loss";
  if (p == Phase::Backward) return "backward_other";
  return phase_name(p);
}

}  // namespace

LayerProfiler::LayerProfiler(int64_t interval, WorkQuery work)
    : interval_(interval < 1 ? 1 : interval), work_(work) {}

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

void LayerProfiler::push(size_t r, Clock::time_point now) {
  if (!stack_.empty()) current_.rows[stack_.back().row].time_ms += ms_between(stack_.back().since, now);
  stack_.push_back({r, now});
}

void LayerProfiler::pop(Clock::time_point now) {
  TB_CHECK(!stack_.empty(), "layer profiler: a scope closed that was never opened");
  current_.rows[stack_.back().row].time_ms += ms_between(stack_.back().since, now);
  stack_.pop_back();
  if (!stack_.empty()) stack_.back().since = now;
}

void LayerProfiler::begin_step(int64_t step) {
  const Clock::time_point now = Clock::now();
  close_at(now);
  step_ = step;
  sampling_ = samples_step(step, interval_);
  if (!sampling_) return;
  step_start_ = now;
  work_ended_ = false;
  current_ = LayerProfileStep{};
  current_.step = step;
  rows_.clear();
  stack_.clear();
  names_.clear();
  phase_depth_ = 0;
}

void LayerProfiler::end_work() {
  if (!sampling_) return;
  work_end_ = Clock::now();
  work_ended_ = true;
}

void LayerProfiler::close_step() { close_at(Clock::now()); }

void LayerProfiler::close_at(Clock::time_point now) {
  if (!sampling_) return;
  sampling_ = false;
  // A scope left open (an error unwound the step) ends here.
  while (!stack_.empty()) pop(now);
  if (work_ended_) current_.rows[row("", "", "step_end")].time_ms += ms_between(work_end_, now);
  current_.step_time_ms = ms_between(step_start_, now);
  double attributed = 0;
  for (const LayerProfileRow& r : current_.rows) attributed += r.time_ms;
  current_.rows[row("", "", "unattributed")].time_ms =
      std::max(0.0, current_.step_time_ms - attributed);
  ready_ = std::move(current_);
  ++sampled_;
}

void LayerProfiler::begin_phase(Phase p) {
  if (!sampling_) return;
  push(row("", "", phase_row(p)), Clock::now());
  phase_ = p;
  ++phase_depth_;
}

void LayerProfiler::end_phase(Phase) {
  if (!sampling_ || phase_depth_ == 0) return;
  pop(Clock::now());
  --phase_depth_;
}

void LayerProfiler::enter(const Layer& layer, LayerPass pass, int64_t batch, bool need_dx) {
  if (!sampling_) return;
  const Clock::time_point now = Clock::now();
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
  push(r, now);
}

void LayerProfiler::exit() {
  // Called from scope destructors, also while an error unwinds: never throws.
  if (!sampling_ || names_.empty() || stack_.empty()) return;
  names_.pop_back();
  pop(Clock::now());
}

std::optional<LayerProfileStep> LayerProfiler::take() {
  std::optional<LayerProfileStep> out = std::move(ready_);
  ready_.reset();
  return out;
}

}  // namespace tb
