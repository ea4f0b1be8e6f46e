// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Everything the trainer measures per step, behind one object: the phase
// timer (host clock, CUDA events read back late, or the step total only),
// the queue of steps whose times are not known yet, the sampled kernel
// census, the tensor pipe counters, the trace's device rows, NVML, device
// memory, and the process's RSS and CPU time. The trainer marks phases on
// timer() and hands each step's own metrics (loss, lr, ...) to end_step();
// the "step" events go out, in order, once their times are known.
//
// It lives in train/, not metrics/: it composes the metrics/ instruments into
// the trainer's event stream (EventBus), which metrics/ does not know. It is
// also the one place that picks instruments by backend type (the CUDA event
// timer needs the compute stream), so the trainer does not.
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/metrics/step_timer.h"
#include "engine/nn/layer_work.h"
#include "engine/train/events.h"
#include "engine/train/tricks.h"

namespace tb {

class Backend;
class ChromeTrace;
class DeviceTraceRecorder;
class KernelCensus;
class LayerProfiler;
class LayerScopes;
class ProfilingStepTimer;
class NvmlSampler;
class TensorPipeProfiler;
class TracingStepTimer;

struct TelemetryOptions {
  bool measure = true;           // off: the step total only (bench/truth.py cost)
  // measure_every (settings table): steps between the sampled figures (the
  // driver's memory, NVML, host RSS and CPU use; the census and the tensor
  // pipe counters when the plan has them). The first step is sampled too.
  int64_t measure_every = 20;
  int timer_lag_for_test = 0;    // step times handed back this many steps late
  ChromeTrace* trace = nullptr;  // host spans (steps, phases) and device rows
  bool cupti_requested = false;  // profiler or cupti_sampling: a missing census is then a warning
  int64_t samples_per_step = 0;     // for samples_per_s
  // The dtypes and layout the layers run in, for the per-layer profile's counted work.
  WorkQuery layer_work{};
};

class StepTelemetry {
 public:
  StepTelemetry(Backend& backend, const RunPlan& plan, const TelemetryOptions& options,
                EventBus& bus);
  ~StepTelemetry();
  StepTelemetry(const StepTelemetry&) = delete;
  StepTelemetry& operator=(const StepTelemetry&) = delete;

  // The timer the step's phases are marked on.
  StepTimer& timer() { return *timer_; }
  // The per-layer profile's scopes, for Context::scopes (null where the
  // profile is not measured: see write_summary's "layer_profile").
  LayerScopes* layer_scopes();
  // The boundary before step `step` (1-based): it closes the previous step
  // and opens this one; then the censuses and counters that sample it start.
  void begin_step(int64_t step);
  // The boundary after a step that an evaluation or an epoch end follows.
  void close_step();
  // After step `step` of `epoch` ran (timer().end_step() marked its work
  // issued), with its own metrics and the bytes it copied to the device: adds
  // the measurements and publishes every step whose times are known. Part of
  // the step's end-of-step work.
  void end_step(int64_t step, int64_t epoch, nlohmann::json metrics, int64_t h2d_bytes);
  // Publishes every closed step still pending (waits for the device's times).
  void flush();
  // empty_cache_between_phases: cached blocks go back to the driver and the
  // peak counters restart, so each phase's own peak shows; the run's peak so
  // far is kept first.
  void release_cached_memory();
  // Writes the run's figures into the summary: median step time,
  // samples/s, peak memory (and finishes the trace's device rows).
  void write_summary(nlohmann::json& summary);

 private:
  struct PendingStep {
    int64_t step, epoch;
    nlohmann::json metrics;
  };
  void publish_ready(bool flush);
  void publish_layer_profile(bool wait);
  void log(const std::string& level, const std::string& message);

  Backend& be_;
  EventBus& bus_;
  TelemetryOptions options_;
  bool on_host_;
  std::unique_ptr<StepTimer> base_timer_;
  std::unique_ptr<TracingStepTimer> tracing_timer_;
  std::unique_ptr<LayerProfiler> layer_profiler_;
  std::unique_ptr<ProfilingStepTimer> profiling_timer_;
  std::string layer_profile_absent_;  // why there is no profiler
  StepTimer* timer_ = nullptr;
  std::deque<PendingStep> pending_;
  std::vector<double> step_ms_;
  std::unique_ptr<NvmlSampler> nvml_;  // GPU telemetry, read on its own thread
  std::unique_ptr<KernelCensus> census_;
  std::unique_ptr<TensorPipeProfiler> pipe_;
  std::unique_ptr<DeviceTraceRecorder> device_trace_;
  int64_t device_peak_bytes_ = 0;  // over the run (peaks reset between phases)
  double cpu_mark_ = 0;
  std::chrono::steady_clock::time_point wall_mark_;
};

}  // namespace tb
