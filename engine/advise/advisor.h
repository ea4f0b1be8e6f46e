// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The advisor: rules over a run's measured series, each naming its evidence
// and threshold, and the most it can gain from the measured breakdown
// (Amdahl: removing a part that is a share s of the step gives at most
// 1 / (1 - s)). A rule that lacks its evidence (no kernel census on the CPU,
// no device memory figure) stays quiet instead of guessing, and a phase the
// run did not measure (the steps replayed a CUDA graph: forward, backward and
// optimizer read 0 and their time sits in other_ms) is no evidence at all.
//
// The rules (thresholds are the constants below):
//   input_wait        data wait (+ host-to-device copy) > 5% of the step
//                     -> workers, pinned + non-blocking, uint8 uploads
//   tensor_cores      Tensor Core share ~0 on a GPU with amp off
//                     -> amp (bf16), channels-last, channel padding to 8
//   memory_headroom   peak device memory < 50% of the device -> a bigger batch
//                     with lr scaling and warm-up
//   launch_bound      many short kernels and a device idle between them
//                     -> CUDA graphs, fused pointwise, multi-tensor optimizer
//   sync_every_step   a host sync every step on a GPU -> every log_every steps
//   debug_checks      anomaly_check or profiler on -> off
//   grad_zeroing      gradients zeroed (memsets) each step -> set-to-none
//   cpu_with_gpu      trained on the CPU while a GPU is present -> the GPU
//   pointwise_passes  the run's per-layer profile (docs/layers.md): memory-bound
//                     ReLU/GELU layers and residual adds, separate passes over
//                     an activation, > 5% of the step -> fused pointwise
//                     kernels (they fold those passes into batch norm's or the
//                     linear layer's); the evidence cites the largest row's
//                     layer, phase, share, GB/s and share of the roofline
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/metrics/layer_profile.h"

namespace tb {

class RunStore;

constexpr double kInputWaitShare = 0.05;    // input_wait fires above this share of the step
constexpr double kTensorCoreShareZero = 0.05;  // tensor_cores: "about 0" below this
constexpr double kMemoryHeadroom = 0.5;     // memory_headroom: peak below this of the device
constexpr double kLaunchKernels = 100;      // launch_bound: at least this many kernels per step
constexpr double kLaunchMeanKernelUs = 20;  // ... averaging under this many microseconds
constexpr double kLaunchBusyShare = 0.8;    // ... with the device busy less than this share
constexpr double kPointwisePassShare = 0.05;  // pointwise_passes: the passes' share of the step

// What the rules read: a run's configuration and summary, the median of each
// step series over its steady steps, and what else is known of the machine.
struct RunEvidence {
  nlohmann::json config, summary;
  std::string device;  // "cpu", "cuda:0"
  std::map<std::string, double> median;  // series name -> median over the steady steps
  bool gpu_present = false;  // a GPU this build can use (cpu_with_gpu)
  // Why the phase breakdown (forward, backward, optimizer, other) is left out
  // of `median`; empty when the run measured its phases.
  std::string phases_unmeasured;
  // The mean of the run's sampled per-layer profiles (no rows when it has
  // none) and its device's peaks, which say which rows are memory-bound.
  LayerProfileStep layers;
  DevicePeaks peaks;

  // The median of `series`, NaN when the run has no such series.
  double get(const std::string& series) const;
  bool on_gpu() const { return device.rfind("cuda", 0) == 0; }
};

// Medians of series over their steady part: the first quarter of the steps
// (at least one, at most warmup) is left out, where allocators, autotuning
// and caches settle. With cuda_graphs on, steady steps whose forward,
// backward and optimizer all read exactly 0 were graph replays that the
// engine did not split into phases: when they are most of the steady steps,
// forward_ms, backward_ms, optimizer_ms and other_ms are left out of the
// medians and phases_unmeasured says why.
RunEvidence evidence_from_series(const nlohmann::json& config, const nlohmann::json& summary,
                                 const std::string& device,
                                 const std::map<std::string, std::vector<double>>& series,
                                 int64_t warmup = 10);
// The same from a stored run (its step series, its per-layer profile and the
// peaks in its environment); gpu_present is left false.
RunEvidence evidence_from_store(const RunStore& store, int64_t run_id);

struct Advice {
  std::string rule;       // "input_wait", ...
  std::string title;      // what is wrong, in a few words
  std::string evidence;   // the measured figures that made it fire
  std::string threshold;  // what it fires on
  std::string action;     // what to try, in words
  nlohmann::json changes = nlohmann::json::object();  // keys to set ("apply and re-run")
  // The most applying it can gain, from the measured breakdown, as a factor
  // on samples/s (NaN when the breakdown does not bound it; bound_reason says why).
  double max_speedup = NAN;
  std::string bound_reason;
  // The per-layer row the evidence cites, {"layer", "phase"}; null when none.
  nlohmann::json cites;

  nlohmann::json to_json() const;
};

// True for a step of a cuda_graphs run whose forward, backward and optimizer
// all read exactly 0: a replayed graph, not a step without phases (an eager
// step's phases take time). The workbench's breakdown plot reads it too.
bool phases_unmeasured_at(bool cuda_graphs, double forward_ms, double backward_ms, double optimizer_ms);
// The words for why: shown by the advisor's bounds and the breakdown plot.
extern const char* const kGraphReplayUnmeasured;

// Every rule that fires, in the order of the list above.
std::vector<Advice> advise(const RunEvidence& evidence);

// "Apply and re-run": the configuration of the re-run (the run's own with the
// advice's changes), and the link the store keeps between the pair.
nlohmann::json applied_config(const nlohmann::json& config, const Advice& advice);
void link_advice(RunStore& store, int64_t before, int64_t after, const Advice& advice);

// The re-runs made from a run's advice, each with the bound that was predicted
// next to the measured speed-up (samples/s after over before):
// [{"run_id", "rule", "title", "max_speedup", "measured_speedup", "status"}].
nlohmann::json advice_outcomes(const RunStore& store, int64_t before);

}  // namespace tb
