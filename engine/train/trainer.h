// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/parallel/launch.h"
#include "engine/train/config.h"
#include "engine/train/events.h"

namespace tb {

class Backend;
class ChromeTrace;
class Model;

struct TrainResult {
  std::string status;  // "finished" or "stopped"
  nlohmann::json summary;
};

// Runs one training run from a validated configuration and reports everything
// through the event bus (which feeds the store, stdout and the terminal).
// Setup or training errors (a corrupt data file, out of memory, a NaN caught by
// anomaly_check) throw tb::Error; the caller marks the run failed.
class Trainer {
 public:
  // `stop` is polled after every step (SIGINT/SIGTERM set it): the current step
  // finishes, everything is reported, and the run ends as "stopped".
  Trainer(RunConfig config, EventBus& bus, const std::atomic<bool>& stop);
  TrainResult run(int64_t run_id);

  // Measurement off: only step_time_ms is timed (no phase breakdown); the
  // baseline of bench/truth.py cost. Default on, or off when the
  // environment has TRAINBENCH_MEASURE=off.
  void set_measure(bool on) { measure_ = on; }
  // Records host spans into `trace` (steps, phases, and every layer's forward
  // and backward) for `trainbench-engine trace`. Not owned.
  void set_trace(ChromeTrace* trace) { trace_ = trace; }
  // Test hook: apply `amp` on the cpu backend through its reference
  // low-precision ops (slow), so tests can check how the trainer drives the
  // loss scaler without a GPU. The trick is still reported "not applied" there.
  void set_amp_on_cpu(bool on) { amp_on_cpu_ = on; }

  // Test hook: step times are handed back `lag` steps late, as the CUDA event
  // timer does on a GPU, so the CPU tests cover the trainer's late publishing.
  void set_step_timer_lag_for_test(int lag) { timer_lag_for_test_ = lag; }

  // Bench hook (bench/step_truth.cpp times the loop from outside): called on
  // the training thread at every step boundary, next to the engine's own
  // boundary mark: before every step with the step about to start (1-based),
  // and after a step that an evaluation or an epoch end follows with the next
  // step's number, so consecutive calls bracket exactly one step of the loop.
  using StepBoundaryHook = std::function<void(Backend& backend, int64_t next_step)>;
  void set_step_boundary_hook(StepBoundaryHook hook) { step_hook_ = std::move(hook); }
  // Test hooks for ddp: run as if started by `launch` (a single-process
  // reference inside an mpirun job), and see the model after every step.
  void set_launch_for_test(const LaunchInfo& launch) { launch_for_test_ = launch; }
  void set_step_hook_for_test(std::function<void(int64_t step, const Model&)> hook) {
    step_hook_for_test_ = std::move(hook);
  }

  // Partial summary of what ran so far (for a failed run's record).
  const nlohmann::json& summary_so_far() const { return summary_; }

 private:
  RunConfig config_;
  EventBus& bus_;
  const std::atomic<bool>& stop_;
  nlohmann::json summary_ = nlohmann::json::object();
  bool measure_;
  ChromeTrace* trace_ = nullptr;
  int timer_lag_for_test_ = 0;
  bool amp_on_cpu_ = false;
  StepBoundaryHook step_hook_;
  std::optional<LaunchInfo> launch_for_test_;
  std::function<void(int64_t, const Model&)> step_hook_for_test_;
};

}  // namespace tb
