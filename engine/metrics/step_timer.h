// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The step-time breakdown. A step is the interval between two consecutive
// step boundaries on one clock (begin_step of one step and begin_step of the
// next, or close_step when an evaluation or an epoch end follows), so the
// step times of a run add up to the loop's time, with nothing between steps
// left out. Its parts: data wait, host-to-device copy, forward, backward,
// optimizer (phases the trainer marks), step_end (from end_step, when the
// step's training work is issued, to the closing boundary: loss read-backs,
// measurement, publishing events) and "other", what is left (gradient
// zeroing before the first phase, a replayed graph, gaps between phases that
// do not follow each other), so the parts add up to step_time_ms and none
// exceeds it. A phase that begins as another ends starts on that end's clock
// reading (StepMarks). A host implementation reads steady_clock,
// a device one (cuda_step_timer.h) records events on the stream and hands a
// step's times back a few steps later, so that measuring never makes the host
// wait for the device.
#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

namespace tb {

// Replicate, Scatter, Reduce: parallel: dp's copies between devices
// (device_replicas.h), as the first device's stream sees them.
enum class Phase : int { DataWait = 0, H2D, Forward, Backward, Optimizer, Replicate, Scatter, Reduce };
constexpr int kPhaseCount = 8;
inline bool is_dp_phase(Phase p) { return p >= Phase::Replicate; }

// The metric name of a phase: "data_wait_ms", "h2d_ms", "forward_ms", ...
const char* phase_metric(Phase p);
const char* phase_name(Phase p);  // "data_wait", "h2d", "forward", ...

// One step's times in milliseconds.
struct StepTimes {
  int64_t step = 0;  // 1-based, as in the "step" event
  double total_ms = 0;
  std::array<double, kPhaseCount> phase_ms{};
  bool has_h2d = false;  // device backends only; absent (not zero) on the CPU
  bool has_dp = false;   // the dp phases: only in steps that entered one (parallel: dp)
  double step_end_ms = 0;  // end_step to the closing boundary

  double phase(Phase p) const { return phase_ms[static_cast<int>(p)]; }
  double measured_ms() const;  // the phases that are reported, and step_end_ms
  // total - measured, never negative; with the measured parts it adds up to
  // total_ms (the timers measure disjoint intervals inside the step on the
  // step's own clock, so they cannot exceed it but by rounding).
  double other_ms() const;
  // Adds step_time_ms, the phases (h2d_ms only with has_h2d), step_end_ms and other_ms.
  void write_metrics(nlohmann::json& metrics) const;
};

// Which clock readings ("marks") a step's parts run between. Mark 0 is the
// boundary that opened the step; every phase end takes a mark; a phase begin
// takes one unless the last mark taken was a phase's end (the scopes follow
// each other: end(Forward), begin(Backward)), whose mark it then shares;
// end_work likewise. On a GPU each mark is a cudaEventRecord (a few
// microseconds of the host's time, all of it in the step where the step is
// bound by launches), and the trainer's step (data wait, copy, forward,
// backward, optimizer, work end) takes 7 marks instead of 12. What the device
// ran between two scopes that share a mark counts to the later one; the
// trainer queues nothing there (host code; an event the stager records).
class StepMarks {
 public:
  // The most marks a step with at most `max_entries` entries of each phase
  // can take: the boundary, a begin and an end for each, the work end.
  static int capacity(int max_entries) { return 2 + 2 * kPhaseCount * max_entries; }
  StepMarks() { open(); }
  // The boundary opening a step (its mark 0).
  void open();
  // The mark p's entry begins at: a new one to take (its index), or
  // std::nullopt when it shares the previous end's.
  std::optional<int> begin(Phase p);
  // The mark to take for p's end (its index). Throws if p was not begun.
  int end(Phase p);
  int entries(Phase p) const { return int(entries_[static_cast<int>(p)].size()); }
  // The mark to take where the step's work ends, or std::nullopt when it
  // shares the previous end's.
  std::optional<int> end_work();
  int taken() const { return taken_; }  // marks taken this step, the boundary included
  // The step's times from the clock: between(i, j), milliseconds from mark i
  // to mark j; to_close(i), from mark i to the closing boundary. has_dp
  // when a dp phase was entered.
  template <class Between, class ToClose>
  void fill(StepTimes& t, Between between, ToClose to_close) const {
    t.total_ms = to_close(0);
    if (work_end_ >= 0) t.step_end_ms = to_close(work_end_);
    for (int p = 0; p < kPhaseCount; ++p) {
      double ms = 0;
      for (const Entry& e : entries_[p]) ms += between(e.begin, e.end);
      t.phase_ms[p] = ms;
      if (!entries_[p].empty() && is_dp_phase(static_cast<Phase>(p))) t.has_dp = true;
    }
  }

 private:
  struct Entry {
    int begin, end;
  };
  int taken_ = 1;
  int last_end_ = -1;   // the last mark taken, while it is a phase's end
  int work_end_ = -1;
  std::array<int, kPhaseCount> open_{};  // the open entry's begin mark, or -1
  std::array<std::vector<Entry>, kPhaseCount> entries_;
};

class StepTimer {
 public:
  virtual ~StepTimer() = default;
  // A step boundary: closes the open step, if any, and opens `step`; one
  // clock reading (one event) does both, so no time falls between steps.
  virtual void begin_step(int64_t step) = 0;
  // The step's training work is issued: what follows, up to the closing
  // boundary, is its end-of-step work (step_end_ms).
  virtual void end_step() = 0;
  // A boundary with no step after it (an evaluation or an epoch end follows):
  // closes the open step; nothing when none is open.
  virtual void close_step() = 0;
  // A phase may be entered several times per step (micro-batches); times add.
  virtual void begin(Phase p) = 0;
  virtual void end(Phase p) = 0;
  // The next closed step whose times are known, oldest first; std::nullopt
  // while none is. The host timer has a step ready at its closing boundary;
  // a device timer some steps later.
  virtual std::optional<StepTimes> poll() = 0;
  // Makes every closed step ready (may wait for the device).
  virtual void flush() = 0;
  // How many steps poll() lags behind a step's closing boundary in steady state.
  virtual int lag_steps() const = 0;
};

// steady_clock at every boundary and around every phase. phases = false
// (measurement off): the boundaries only, the baseline of what the breakdown
// costs.
class HostStepTimer final : public StepTimer {
 public:
  explicit HostStepTimer(bool report_h2d, bool phases = true)
      : report_h2d_(report_h2d), phases_(phases) {}
  void begin_step(int64_t step) override;
  void end_step() override;
  void close_step() override;
  void begin(Phase p) override;
  void end(Phase p) override;
  std::optional<StepTimes> poll() override;
  void flush() override {}
  int lag_steps() const override { return 0; }

 private:
  using Clock = std::chrono::steady_clock;
  void close_at(Clock::time_point t);
  Clock::time_point& mark(int i);
  bool report_h2d_, phases_;
  bool open_ = false;
  StepTimes current_;
  StepMarks marks_;
  std::vector<Clock::time_point> at_;  // the marks' readings, by index
  std::deque<StepTimes> ready_;
};

// Hands another timer's steps back `lag` steps late, the way the CUDA event
// timer does on a GPU: lets the CPU tests drive the trainer's late publishing.
class LaggedStepTimer final : public StepTimer {
 public:
  LaggedStepTimer(std::unique_ptr<StepTimer> inner, int lag) : inner_(std::move(inner)), lag_(lag) {}
  void begin_step(int64_t step) override;
  void end_step() override { inner_->end_step(); }
  void close_step() override;
  void begin(Phase p) override { inner_->begin(p); }
  void end(Phase p) override { inner_->end(p); }
  std::optional<StepTimes> poll() override;
  void flush() override;
  int lag_steps() const override { return lag_; }

 private:
  void collect();  // the inner timer's ready steps, held back here
  std::unique_ptr<StepTimer> inner_;
  int lag_;
  bool flushed_ = false;
  std::deque<StepTimes> held_;
};

// RAII phase mark.
class PhaseScope {
 public:
  PhaseScope(StepTimer& t, Phase p) : t_(t), p_(p) { t_.begin(p_); }
  ~PhaseScope() { t_.end(p_); }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  StepTimer& t_;
  Phase p_;
};

}  // namespace tb
