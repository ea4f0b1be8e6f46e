// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Per-layer time of sampled steps on the host clock (the CPU backend, where
// an op has finished when its call returns). The model's walk opens a scope
// around every layer's forward and backward (Context::scopes,
// forward_layer/backward_layer), nested for a residual block's inner layers;
// the trainer's phases come through ProfilingStepTimer. Time goes to the
// innermost open scope (a block's row is its own add and ReLU, its inner
// layers have theirs), so the rows of a step never overlap, and with
// "unattributed", the time in no scope, they add up to the step's time.
//
// Sampled like the kernel census (kernel_census.h, samples_step): steps N+1,
// 2N+1, ... for measure_every N, never the warm-up step 1. A step that is not
// sampled costs a virtual call and a branch per layer scope.
//
// On the CUDA backend the host clock would time launches, not kernels: there
// the profile is not measured (not_measured_reason); attributing kernels to
// the scope that launched them (a CUPTI external correlation id pushed per
// scope) is not implemented.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/metrics/layer_profile.h"
#include "engine/metrics/step_timer.h"
#include "engine/nn/layer_work.h"

namespace tb {

class LayerProfiler final : public LayerScopes {
 public:
  // interval: measure_every; work: the dtypes and layout the layers run in
  // (its pass, batch and need_dx are set per scope).
  LayerProfiler(int64_t interval, WorkQuery work);

  // Step boundaries, as the step timer sees them.
  void begin_step(int64_t step);  // closes the open step, opens `step`
  void end_work();                // the step's training work is issued
  void close_step();
  void begin_phase(Phase p);
  void end_phase(Phase p);
  void enter(const Layer& layer, LayerPass pass, int64_t batch, bool need_dx) override;
  void exit() override;

  // The last closed sampled step's profile, once (then nothing until the next).
  std::optional<LayerProfileStep> take();
  int64_t sampled_steps() const { return sampled_; }

 private:
  using Clock = std::chrono::steady_clock;
  size_t row(const std::string& layer, const std::string& kind, const std::string& phase);
  void push(size_t row, Clock::time_point now);
  void pop(Clock::time_point now);
  void close_at(Clock::time_point now);

  int64_t interval_;
  WorkQuery work_;
  bool sampling_ = false, work_ended_ = false;
  int64_t step_ = 0, sampled_ = 0;
  Clock::time_point step_start_, work_end_;
  LayerProfileStep current_;
  std::optional<LayerProfileStep> ready_;
  std::unordered_map<std::string, size_t> rows_;  // "phase\tlayer" -> index in current_.rows
  struct Open {
    size_t row;
    Clock::time_point since;  // when its self time last started accruing
  };
  std::vector<Open> stack_;
  std::vector<std::string> names_;  // full names of the open layer scopes
  int phase_depth_ = 0;             // open phases (a layer row needs its phase's name)
  Phase phase_ = Phase::Forward;
};

// A step timer that also marks the profiler's boundaries and phases, so the
// trainer marks each once.
class ProfilingStepTimer final : public StepTimer {
 public:
  ProfilingStepTimer(StepTimer& inner, LayerProfiler& profiler) : inner_(inner), p_(profiler) {}
  void begin_step(int64_t step) override {
    inner_.begin_step(step);
    p_.begin_step(step);
  }
  void end_step() override {
    inner_.end_step();
    p_.end_work();
  }
  void close_step() override {
    inner_.close_step();
    p_.close_step();
  }
  void begin(Phase p) override {
    inner_.begin(p);
    p_.begin_phase(p);
  }
  void end(Phase p) override {
    p_.end_phase(p);
    inner_.end(p);
  }
  std::optional<StepTimes> poll() override { return inner_.poll(); }
  void flush() override { inner_.flush(); }
  int lag_steps() const override { return inner_.lag_steps(); }

 private:
  StepTimer& inner_;
  LayerProfiler& p_;
};

}  // namespace tb
