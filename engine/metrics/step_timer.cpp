// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/metrics/step_timer.h"

#include <algorithm>

#include "engine/core/error.h"

namespace tb {

namespace {
double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
}  // namespace

const char* phase_metric(Phase p) {
  switch (p) {
    case Phase::DataWait: return "data_wait_ms";
    case Phase::H2D: return "h2d_ms";
    case Phase::Forward: return "forward_ms";
    case Phase::Backward: return "backward_ms";
    case Phase::Optimizer: return "optimizer_ms";
    case Phase::Replicate: return "dp_replicate_ms";
    case Phase::Scatter: return "dp_scatter_ms";
    case Phase::Reduce: return "dp_reduce_ms";
  }
  return "?";
}

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::DataWait: return "data_wait";
    case Phase::H2D: return "h2d";
    case Phase::Forward: return "forward";
    case Phase::Backward: return "backward";
    case Phase::Optimizer: return "optimizer";
    case Phase::Replicate: return "dp_replicate";
    case Phase::Scatter: return "dp_scatter";
    case Phase::Reduce: return "dp_reduce";
  }
  return "?";
}

double StepTimes::measured_ms() const {
  double s = step_end_ms;
  for (int i = 0; i < kPhaseCount; ++i) {
    const Phase p = static_cast<Phase>(i);
    if ((p != Phase::H2D || has_h2d) && (!is_dp_phase(p) || has_dp)) s += phase_ms[i];
  }
  return s;
}

double StepTimes::other_ms() const { return std::max(0.0, total_ms - measured_ms()); }

void StepTimes::write_metrics(nlohmann::json& metrics) const {
  metrics["step_time_ms"] = total_ms;
  for (int i = 0; i < kPhaseCount; ++i) {
    const Phase p = static_cast<Phase>(i);
    if ((p == Phase::H2D && !has_h2d) || (is_dp_phase(p) && !has_dp)) continue;
    metrics[phase_metric(p)] = phase_ms[i];
  }
  metrics["step_end_ms"] = step_end_ms;
  metrics["other_ms"] = other_ms();
}

void StepMarks::open() {
  taken_ = 1;
  last_end_ = -1;
  work_end_ = -1;
  open_.fill(-1);
  for (std::vector<Entry>& e : entries_) e.clear();
}

std::optional<int> StepMarks::begin(Phase p) {
  const int i = static_cast<int>(p);
  TB_CHECK(open_[i] < 0, "step timer: phase ", phase_name(p), " begun while it is open");
  std::optional<int> take;
  if (last_end_ >= 0) {
    open_[i] = last_end_;  // follows a phase's end: its mark
  } else {
    open_[i] = taken_++;
    take = open_[i];
  }
  last_end_ = -1;
  return take;
}

int StepMarks::end(Phase p) {
  const int i = static_cast<int>(p);
  TB_CHECK(open_[i] >= 0, "step timer: phase ", phase_name(p), " ended without a begin");
  const int m = taken_++;
  entries_[i].push_back({open_[i], m});
  open_[i] = -1;
  last_end_ = m;
  return m;
}

std::optional<int> StepMarks::end_work() {
  std::optional<int> take;
  if (last_end_ >= 0) {
    work_end_ = last_end_;
  } else {
    work_end_ = taken_++;
    take = work_end_;
  }
  last_end_ = -1;
  return take;
}

void HostStepTimer::begin_step(int64_t step) {
  const Clock::time_point now = Clock::now();
  if (open_) close_at(now);
  current_ = StepTimes{};
  current_.step = step;
  current_.has_h2d = report_h2d_;
  marks_.open();
  mark(0) = now;
  open_ = true;
}

HostStepTimer::Clock::time_point& HostStepTimer::mark(int i) {
  if (size_t(i) >= at_.size()) at_.resize(size_t(i) + 1);
  return at_[size_t(i)];
}

void HostStepTimer::end_step() {
  if (!phases_ || !open_) return;
  if (std::optional<int> m = marks_.end_work()) mark(*m) = Clock::now();
}

void HostStepTimer::close_step() {
  if (open_) close_at(Clock::now());
}

void HostStepTimer::close_at(Clock::time_point t) {
  marks_.fill(
      current_, [&](int a, int b) { return ms_between(at_[size_t(a)], at_[size_t(b)]); },
      [&](int a) { return ms_between(at_[size_t(a)], t); });
  ready_.push_back(current_);
  open_ = false;
}

void HostStepTimer::begin(Phase p) {
  if (!phases_) return;
  if (std::optional<int> m = marks_.begin(p)) mark(*m) = Clock::now();
}

void HostStepTimer::end(Phase p) {
  if (!phases_) return;
  mark(marks_.end(p)) = Clock::now();
}

std::optional<StepTimes> HostStepTimer::poll() {
  if (ready_.empty()) return std::nullopt;
  StepTimes t = ready_.front();
  ready_.pop_front();
  return t;
}

void LaggedStepTimer::collect() {
  while (std::optional<StepTimes> t = inner_->poll()) held_.push_back(*t);
}

void LaggedStepTimer::begin_step(int64_t step) {
  inner_->begin_step(step);
  collect();
  flushed_ = false;
}

void LaggedStepTimer::close_step() {
  inner_->close_step();
  collect();
}

void LaggedStepTimer::flush() {
  inner_->flush();
  collect();
  flushed_ = true;
}

std::optional<StepTimes> LaggedStepTimer::poll() {
  if (held_.empty() || (!flushed_ && int(held_.size()) <= lag_)) return std::nullopt;
  StepTimes t = held_.front();
  held_.pop_front();
  return t;
}

}  // namespace tb
