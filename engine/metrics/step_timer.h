// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The step-time breakdown: data wait, host-to-device copy, forward, backward,
// optimizer and "other", which is what is left of the step, so the parts always
// add up to step_time_ms. The trainer marks phases on a StepTimer; a host
// implementation reads steady_clock, a device one (cuda_step_timer.h) records
// events and hands a step's times back a few steps later, so that measuring
// never makes the host wait for the device.
#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>

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

  double phase(Phase p) const { return phase_ms[static_cast<int>(p)]; }
  double measured_ms() const;  // the sum of the phases that are reported
  // total - phases, never negative; with the phases it adds up to total_ms
  // except when the phases overlap (then it is 0 and the sum exceeds total).
  double other_ms() const;
  // Adds step_time_ms, the phases (h2d_ms only with has_h2d) and other_ms.
  void write_metrics(nlohmann::json& metrics) const;
};

class StepTimer {
 public:
  virtual ~StepTimer() = default;
  virtual void begin_step(int64_t step) = 0;
  virtual void end_step() = 0;
  // A phase may be entered several times per step (micro-batches); times add.
  virtual void begin(Phase p) = 0;
  virtual void end(Phase p) = 0;
  // A duration the host measured by other means (the loader's wait for a batch).
  virtual void add_host_ms(Phase p, double ms) = 0;
  // The next step whose times are known, oldest first; std::nullopt while none
  // is. The host timer has each step ready at end_step(); a device timer some
  // steps later.
  virtual std::optional<StepTimes> poll() = 0;
  // Makes every ended step ready (may wait for the device: call it at the end).
  virtual void flush() = 0;
  // How many steps poll() lags behind end_step() in steady state.
  virtual int lag_steps() const = 0;
};

// steady_clock around every phase; the step total is end_step - begin_step.
class HostStepTimer final : public StepTimer {
 public:
  explicit HostStepTimer(bool report_h2d) : report_h2d_(report_h2d) {}
  void begin_step(int64_t step) override;
  void end_step() override;
  void begin(Phase p) override;
  void end(Phase p) override;
  void add_host_ms(Phase p, double ms) override;
  std::optional<StepTimes> poll() override;
  void flush() override {}
  int lag_steps() const override { return 0; }

 private:
  using Clock = std::chrono::steady_clock;
  bool report_h2d_;
  StepTimes current_;
  Clock::time_point step_start_;
  std::array<Clock::time_point, kPhaseCount> phase_start_{};
  std::deque<StepTimes> ready_;
};

// Measurement off: only the step total (the run summary needs it); no phase
// clocks. Used to measure what the breakdown costs.
class TotalOnlyStepTimer final : public StepTimer {
 public:
  void begin_step(int64_t step) override;
  void end_step() override;
  void begin(Phase) override {}
  void end(Phase) override {}
  void add_host_ms(Phase, double) override {}
  std::optional<StepTimes> poll() override;
  void flush() override {}
  int lag_steps() const override { return 0; }

 private:
  StepTimes current_;
  std::chrono::steady_clock::time_point step_start_;
  std::optional<StepTimes> ready_;
};

// Hands another timer's steps back `lag` steps late, the way the CUDA event
// timer does on a GPU: lets the CPU tests drive the trainer's late publishing.
class LaggedStepTimer final : public StepTimer {
 public:
  LaggedStepTimer(std::unique_ptr<StepTimer> inner, int lag) : inner_(std::move(inner)), lag_(lag) {}
  void begin_step(int64_t step) override { inner_->begin_step(step); }
  void end_step() override;
  void begin(Phase p) override { inner_->begin(p); }
  void end(Phase p) override { inner_->end(p); }
  void add_host_ms(Phase p, double ms) override { inner_->add_host_ms(p, ms); }
  std::optional<StepTimes> poll() override;
  void flush() override { flushed_ = true; }
  int lag_steps() const override { return lag_; }

 private:
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
