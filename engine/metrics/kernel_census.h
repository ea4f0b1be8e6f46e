// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A census of one training step's kernels from CUPTI activity records: how
// many kernels and memsets ran, their summed time, and the share of that time
// in Tensor Core kernels (kernel_classifier.h). Published as the step's
// `tensor_core_share`, `kernels_per_step`, `memsets_per_step`, `kernel_time_ms`.
//
// Recording every kernel costs time, so by default one step in `interval` is
// sampled (the records are switched on for that step only, and the host waits
// for the device once at its end to collect them); with the `profiler` trick
// every step is. Where CUPTI is missing or refuses (another profiler holds it,
// counters disabled) the census is unavailable with the reason, and the
// figures are absent, never zero.
//
// NOT RUN ON A GPU: compiled with TRAINBENCH_HAVE_CUPTI; without it, always
// unavailable.
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/metrics/kernel_classifier.h"

namespace tb {

class Backend;

// In-app CUPTI (the kernel census, the tensor pipe counters, a trace's device
// rows) is switched off by the environment variable TRAINBENCH_CUPTI=off (or
// 0), so that an outside profiler (ncu, nsys) has CUPTI to itself; each then
// reports "not available: switched off by TRAINBENCH_CUPTI=off". `env_value`
// is the variable's value (null: unset, on). Returns that reason when off,
// "" when on; throws tb::Error naming the value for anything but
// on/off/1/0/empty.
std::string cupti_switched_off(const char* env_value);
// The same for this process's environment.
std::string cupti_switched_off();

// The classifier with what the engine knows of its own kernels: they use no
// Tensor Cores (declared, so no name rule can misfile them).
KernelClassifier engine_kernel_classifier();

// The sampled steps of an interval: every step for 1, else N+1, 2N+1, ...
// (never the warm-up step 1). The census and the per-layer profile share it.
inline bool samples_step(int64_t step, int64_t interval) {
  return interval <= 1 || (step > 1 && (step - 1) % interval == 0);
}

class KernelCensus {
 public:
  // interval 1: every step (profiler on); N: steps N+1, 2N+1, ... (never the
  // warm-up step 1)
  KernelCensus(Backend& backend, int64_t interval);
  ~KernelCensus();
  KernelCensus(const KernelCensus&) = delete;
  KernelCensus& operator=(const KernelCensus&) = delete;

  bool available() const { return available_; }
  const std::string& reason() const { return reason_; }
  KernelClassifier& classifier() { return classifier_; }

  // Around one optimizer step; a no-op for steps that are not sampled.
  void begin_step(int64_t step);
  // Adds the figures of a sampled step to `metrics` (waits for the device).
  void end_step(nlohmann::json& metrics);

 private:
  // CUPTI refused after the probe had passed: available() turns false with
  // the reason; the caller says so and drops the census.
  void give_up(const std::string& why);
  Backend& be_;
  int64_t interval_;
  bool available_ = false;
  bool sampling_ = false;
  std::string reason_;
  KernelClassifier classifier_;
};

// The device rows of `trainbench-engine trace` on a GPU: every kernel, copy
// and memset from start() to finish() (CUPTI activity records), added to the
// trace on the host's time base, one row per stream. Unavailable, with the
// reason, where CUPTI is. NOT RUN ON A GPU.
class ChromeTrace;
class DeviceTraceRecorder {
 public:
  // Starts recording; false (and reason()) when it cannot.
  bool start(ChromeTrace& trace);
  // Waits for the device, stops recording and appends the records to the trace.
  void finish(Backend& backend, const KernelClassifier& classifier);
  const std::string& reason() const { return reason_; }

 private:
  ChromeTrace* trace_ = nullptr;
  uint64_t cupti_ns_at_trace_zero_ = 0;
  std::string reason_;
};

}  // namespace tb
