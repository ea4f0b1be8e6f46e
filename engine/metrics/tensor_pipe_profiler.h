// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The second Tensor Core figure: how busy the SMs' tensor (MMA) pipe was during
// one sampled training step, read from hardware counters through CUPTI's range
// profiler (one user range around the step, user replay). Published as the
// step's `tensor_pipe_active_pct` (0..100: tensor pipe active cycles over the
// SMs' active cycles, averaged over SMs).
//
// The counter name differs between chips, so an ordered list of candidates is
// tried (tensor_pipe_metric_candidates) and the first one the chip's metric
// tables accept is kept (metrics()). A candidate may name several pipes (Hopper
// has one for mma.sync and one for wgmma); their percentages are summed.
//
// Counters cost time (the host waits for the device once at the step's end,
// and kernels inside the range are not overlapped with the previous step), so
// one step in `interval` is sampled. When the chosen metric needs more than one
// pass, the passes are taken on consecutive steps (a training step cannot be
// replayed), and the figure mixes those steps. Where counters are not permitted
// (NVreg_RestrictProfilingToAdminUsers, another profiler attached, no CUPTI in
// the build) the profiler is unavailable with the reason: no number, never 0.
//
// NOT RUN ON A GPU: the CUPTI part compiles with TRAINBENCH_HAVE_CUPTI only and
// has never been executed. The metric choice and the arithmetic are plain C++
// and tested.
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tb {

class Backend;

// Candidate metric sets, best first: the pipe-wide counter (all MMA kinds),
// Hopper's two pipes (mma.sync + wgmma), then the Volta..Ada HMMA pipe.
const std::vector<std::vector<std::string>>& tensor_pipe_metric_candidates();

// The first candidate all of whose metrics `accepts`; empty when none is.
std::vector<std::string> choose_tensor_pipe_metrics(
    const std::vector<std::vector<std::string>>& candidates,
    const std::function<bool(const std::string&)>& accepts);

// The step's figure from the chosen metrics' values (percentages): their sum,
// clamped to [0, 100] (counter rounding can overshoot a little); nothing when
// there is no value or one is not finite.
std::optional<double> combine_tensor_pipe_pct(const std::vector<double>& values);

// Which steps are sampled: {first, interval}. By default halfway between the
// kernel censuses (census_interval 50: steps 26, 76, ...). `every_env` is
// TRAINBENCH_TENSOR_PIPE_EVERY (null: unset): N samples steps 2, 2+N, ...
// (step 1 is left out: it holds the one-off autotuning). Throws tb::Error
// when it is set to anything but a positive integer.
std::pair<int64_t, int64_t> tensor_pipe_schedule(int64_t census_interval, const char* every_env);

class TensorPipeProfiler {
 public:
  // Samples steps first, first+interval, first+2*interval, ... (1-based).
  TensorPipeProfiler(Backend& backend, int64_t first, int64_t interval);
  ~TensorPipeProfiler();
  TensorPipeProfiler(const TensorPipeProfiler&) = delete;
  TensorPipeProfiler& operator=(const TensorPipeProfiler&) = delete;

  bool available() const { return available_; }
  // "not available: ..." when unavailable.
  const std::string& reason() const { return reason_; }
  // The metric names in use (empty when unavailable), and the passes they need.
  const std::vector<std::string>& metrics() const { return metrics_; }
  int64_t passes() const { return passes_; }
  // For the run log: the reason, or "on: METRIC, 1 pass, steps 26, 76, ...".
  std::string describe() const;

  // Whether begin_step(step) would collect counters (a sample or the next pass
  // of one): the caller keeps other CUPTI collection off that step.
  bool samples(int64_t step) const;
  // Around one optimizer step; no-ops for steps that are not sampled.
  void begin_step(int64_t step);
  // Adds `tensor_pipe_active_pct` once a sample's passes are all collected
  // (waits for the device). Returns false on the step collection failed: the
  // profiler is then unavailable and reason() says why (log it once).
  bool end_step(nlohmann::json& metrics);

  // What CUPTI holds (opaque here so that the header needs no CUPTI types).
  struct State;

 private:
  Backend& be_;
  int64_t first_, interval_;
  bool available_ = false;
  bool in_pass_ = false;            // between begin_step and end_step of a collected step
  bool continuing_ = false;         // a multi-pass sample takes the next step too
  bool failed_unreported_ = false;  // begin_step failed; end_step says so
  std::string reason_;
  std::vector<std::string> metrics_;
  int64_t passes_ = 0;
  std::unique_ptr<State> st_;
};

}  // namespace tb
