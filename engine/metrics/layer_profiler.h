// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Per-layer time of sampled steps. The model's walk opens a scope around
// every layer's forward and backward (Context::scopes,
// forward_layer/backward_layer), nested for a residual block's inner layers;
// the trainer's phases come through ProfilingStepTimer. Every scope entry and
// exit is a mark on a clock; the time between two marks goes to the innermost
// scope open between them (a block's row is its own add and ReLU, its inner
// layers have theirs), or to "unattributed" where none is, so the rows of a
// step never overlap and add up to the step's time exactly.
//
// Clocks: steady_clock on the CPU backend (an op has finished when its call
// returns); on the CUDA backend one event per mark on the compute stream, so
// the kernels a layer launched (cuDNN's and cuBLAS's included) count in its
// row, read back with cudaEventQuery once the step's last mark completed
// (flush() waits). NOT RUN ON A GPU: the CUDA clock is compiled with
// TRAINBENCH_HAVE_CUDA and used only where the run asks for the costly
// measurements (cupti_sampling or profiler) and does not replay CUDA graphs.
//
// Sampled like the kernel census (kernel_census.h, samples_step): steps N+1,
// 2N+1, ... for measure_every N, never the warm-up step 1. A step that is not
// sampled costs a virtual call and a branch per layer scope.
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

// Timestamps numbered 0, 1, ... within a step.
class ScopeClock {
 public:
  virtual ~ScopeClock() = default;
  virtual void mark(size_t i) = 0;
  // Whether marks 0..n-1 can be read without waiting.
  virtual bool ready(size_t n) = 0;
  // Milliseconds from mark i to mark i+1, for i < n-1 (waits for the device).
  virtual std::vector<double> intervals(size_t n) = 0;
};

class HostScopeClock final : public ScopeClock {
 public:
  void mark(size_t i) override;
  bool ready(size_t) override { return true; }
  std::vector<double> intervals(size_t n) override;

 private:
  std::vector<std::chrono::steady_clock::time_point> t_;
};

// Events on `stream` (a cudaStream_t), made as the marks need them.
// Returns null in a build without CUDA.
std::unique_ptr<ScopeClock> make_cuda_scope_clock(void* stream);

class LayerProfiler final : public LayerScopes {
 public:
  // interval: measure_every; work: the dtypes and layout the layers run in
  // (its pass, batch and need_dx are set per scope).
  LayerProfiler(int64_t interval, WorkQuery work,
                std::unique_ptr<ScopeClock> clock = std::make_unique<HostScopeClock>());

  // Step boundaries, as the step timer sees them.
  void begin_step(int64_t step);  // closes the open step, opens `step`
  void end_work();                // the step's training work is issued
  void close_step();
  void begin_phase(Phase p);
  void end_phase(Phase p);
  void enter(const Layer& layer, LayerPass pass, int64_t batch, bool need_dx) override;
  void exit() override;

  // The last closed sampled step's profile, once its marks can be read
  // (wait: read them even if that waits for the device).
  std::optional<LayerProfileStep> take(bool wait = false);
  int64_t sampled_steps() const { return sampled_; }

 private:
  static constexpr size_t kNone = size_t(-1);  // no scope open: unattributed
  size_t row(const std::string& layer, const std::string& kind, const std::string& phase);
  void mark(size_t active_after);  // a mark; `active_after` is the row the time from it goes to
  size_t innermost() const;
  void close();
  void resolve();  // the closed step's intervals into its rows (they must be ready)

  int64_t interval_;
  WorkQuery work_;
  std::unique_ptr<ScopeClock> clock_;
  bool sampling_ = false, work_ended_ = false, closed_pending_ = false;
  int64_t sampled_ = 0;
  LayerProfileStep current_;
  std::optional<LayerProfileStep> ready_;
  std::unordered_map<std::string, size_t> rows_;  // "phase\tlayer" -> index in current_.rows
  std::vector<size_t> active_after_;              // per mark: the row its interval goes to
  std::vector<size_t> stack_;                     // open scopes' rows, innermost last
  std::vector<std::string> names_;                // full names of the open layer scopes
  int phase_depth_ = 0;
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
