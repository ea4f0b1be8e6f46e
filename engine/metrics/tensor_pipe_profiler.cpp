// SPDX-License-Identifier: GPL-3.0-or-later
// NOT RUN ON A GPU: the CUPTI part is compiled only; see the header.
#include "engine/metrics/tensor_pipe_profiler.h"

#include <algorithm>
#include <cmath>
#include <exception>

#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/metrics/kernel_census.h"

#ifdef TRAINBENCH_HAVE_CUPTI
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>
#endif

namespace tb {

const std::vector<std::vector<std::string>>& tensor_pipe_metric_candidates() {
  // pct_of_peak_sustained_active: active pipe cycles over the SM's active
  // cycles, the figure `ncu --section ComputeWorkloadAnalysis` shows.
  static const std::vector<std::vector<std::string>> c = {
      // Every MMA kind (HMMA/IMMA/DMMA, wgmma, tcgen05) on one pipe counter.
      {"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"},
      // Hopper without the pipe-wide counter: mma.sync and wgmma apart.
      {"sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
       "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"},
      // Volta..Ada: HMMA is the only floating-point MMA pipe.
      {"sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"},
  };
  return c;
}

std::vector<std::string> choose_tensor_pipe_metrics(
    const std::vector<std::vector<std::string>>& candidates,
    const std::function<bool(const std::string&)>& accepts) {
  for (const std::vector<std::string>& set : candidates)
    if (!set.empty() && std::all_of(set.begin(), set.end(), accepts)) return set;
  return {};
}

std::optional<double> combine_tensor_pipe_pct(const std::vector<double>& values) {
  if (values.empty()) return std::nullopt;
  double sum = 0;
  for (double v : values) {
    if (!std::isfinite(v)) return std::nullopt;
    sum += v;
  }
  return std::clamp(sum, 0.0, 100.0);
}

std::pair<int64_t, int64_t> tensor_pipe_schedule(int64_t census_interval, const char* every_env) {
  if (census_interval < 1) census_interval = 1;
  if (!every_env) return {census_interval / 2 + 1, census_interval};
  const std::string text = every_env;
  size_t used = 0;
  long long every = 0;
  try {
    every = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TB_CHECK(used == text.size() && !text.empty() && every >= 1,
           "TRAINBENCH_TENSOR_PIPE_EVERY must be a positive integer, got '", text, "'");
  return {2, int64_t(every)};
}

std::string TensorPipeProfiler::describe() const {
  if (!available_) return reason_;
  std::string s = "on: ";
  for (size_t i = 0; i < metrics_.size(); ++i) s += (i ? " + " : "") + metrics_[i];
  s += ", " + std::to_string(passes_) + (passes_ == 1 ? " pass" : " passes") + ", steps " +
       std::to_string(first_) + ", " + std::to_string(first_ + interval_) + ", ...";
  return s;
}

bool TensorPipeProfiler::samples(int64_t step) const {
  if (!available_) return false;
  return continuing_ || (step >= first_ && (step - first_) % interval_ == 0);
}

#ifdef TRAINBENCH_HAVE_CUPTI

namespace {

constexpr int64_t kMaxPasses = 4;  // more would spread one sample over too many steps

void check(CUptiResult r, const char* call) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  TB_FAIL("CUPTI: ", call, ": ", msg ? msg : "unknown error", " (", int(r), ")");
}

// The runtime's current context, through the driver entry point: linking
// libcuda directly would stop the binaries loading on machines without a driver.
CUcontext current_context() {
  using CtxGetCurrent = CUresult (*)(CUcontext*);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  const cudaError_t e =
      cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 12000, cudaEnableDefault, &q);
  TB_CHECK(e == cudaSuccess && q == cudaDriverEntryPointSuccess && fn,
           "cudaGetDriverEntryPointByVersion(cuCtxGetCurrent): ", cudaGetErrorString(e));
  CUcontext ctx = nullptr;
  const CUresult r = reinterpret_cast<CtxGetCurrent>(fn)(&ctx);
  TB_CHECK(r == CUDA_SUCCESS && ctx, "cuCtxGetCurrent returned ", int(r), " (no current context)");
  return ctx;
}

// A CUPTI parameter block: zeroed, with its size set (CUPTI checks it).
template <class P>
P params(size_t struct_size) {
  P p{};
  p.structSize = struct_size;
  return p;
}

const char* support_level(CUpti_Profiler_Support_Level l) {
  switch (l) {
    case CUPTI_PROFILER_CONFIGURATION_SUPPORTED:
      return "supported";
    case CUPTI_PROFILER_CONFIGURATION_DISABLED:
      return "disabled";
    case CUPTI_PROFILER_CONFIGURATION_UNSUPPORTED:
      return "unsupported";
    default:
      return "unknown";
  }
}

}  // namespace

struct TensorPipeProfiler::State {
  CUcontext ctx = nullptr;
  bool profiler_initialized = false;
  CUpti_Profiler_Host_Object* host = nullptr;
  CUpti_RangeProfiler_Object* range = nullptr;  // enabled during a sample only
  std::vector<uint8_t> availability, config, counter_data;
  std::vector<const char*> names;  // point into TensorPipeProfiler::metrics_

  void host_init(const std::string& chip) {
    auto p = params<CUpti_Profiler_Host_Initialize_Params>(
        CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE);
    p.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
    p.pChipName = chip.c_str();
    p.pCounterAvailabilityImage = availability.data();
    check(cuptiProfilerHostInitialize(&p), "cuptiProfilerHostInitialize");
    host = p.pHostObject;
  }
  void host_deinit() {
    if (!host) return;
    auto p = params<CUpti_Profiler_Host_Deinitialize_Params>(
        CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE);
    p.pHostObject = host;
    cuptiProfilerHostDeinitialize(&p);
    host = nullptr;
  }

  // Enables the range profiler on the context with an empty counter data image
  // (one range) and the config: the start of every sample.
  void enable_and_configure() {
    auto en =
        params<CUpti_RangeProfiler_Enable_Params>(CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE);
    en.ctx = ctx;
    check(cuptiRangeProfilerEnable(&en), "cuptiRangeProfilerEnable");
    range = en.pRangeProfilerObject;

    auto sz = params<CUpti_RangeProfiler_GetCounterDataSize_Params>(
        CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE);
    sz.pRangeProfilerObject = range;
    sz.pMetricNames = names.data();
    sz.numMetrics = names.size();
    sz.maxNumOfRanges = 1;  // one user range: the step
    sz.maxNumRangeTreeNodes = 1;
    check(cuptiRangeProfilerGetCounterDataSize(&sz), "cuptiRangeProfilerGetCounterDataSize");
    counter_data.assign(sz.counterDataSize, 0);

    auto ci = params<CUpti_RangeProfiler_CounterDataImage_Initialize_Params>(
        CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE);
    ci.pRangeProfilerObject = range;
    ci.counterDataSize = counter_data.size();
    ci.pCounterData = counter_data.data();
    check(cuptiRangeProfilerCounterDataImageInitialize(&ci),
          "cuptiRangeProfilerCounterDataImageInitialize");

    auto sc = params<CUpti_RangeProfiler_SetConfig_Params>(
        CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE);
    sc.pRangeProfilerObject = range;
    sc.configSize = config.size();
    sc.pConfig = config.data();
    sc.counterDataImageSize = counter_data.size();
    sc.pCounterDataImage = counter_data.data();
    // A user range around the whole step, replayed by us (the next pass is the
    // next step): kernel replay would save and restore memory around every
    // kernel, auto range would serialise them.
    sc.range = CUPTI_UserRange;
    sc.replayMode = CUPTI_UserReplay;
    sc.maxRangesPerPass = 1;
    sc.numNestingLevels = 1;
    sc.minNestingLevel = 1;
    sc.passIndex = 0;
    sc.targetNestingLevel = 1;
    check(cuptiRangeProfilerSetConfig(&sc), "cuptiRangeProfilerSetConfig");
  }

  void disable() {
    if (!range) return;
    auto p =
        params<CUpti_RangeProfiler_Disable_Params>(CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE);
    p.pRangeProfilerObject = range;
    cuptiRangeProfilerDisable(&p);
    range = nullptr;
  }

  void start_pass() {
    auto s = params<CUpti_RangeProfiler_Start_Params>(CUpti_RangeProfiler_Start_Params_STRUCT_SIZE);
    s.pRangeProfilerObject = range;
    check(cuptiRangeProfilerStart(&s), "cuptiRangeProfilerStart");
    auto p = params<CUpti_RangeProfiler_PushRange_Params>(
        CUpti_RangeProfiler_PushRange_Params_STRUCT_SIZE);
    p.pRangeProfilerObject = range;
    p.pRangeName = "step";
    check(cuptiRangeProfilerPushRange(&p), "cuptiRangeProfilerPushRange");
  }

  // True when every pass of the config has been collected.
  bool end_pass() {
    auto p = params<CUpti_RangeProfiler_PopRange_Params>(
        CUpti_RangeProfiler_PopRange_Params_STRUCT_SIZE);
    p.pRangeProfilerObject = range;
    check(cuptiRangeProfilerPopRange(&p), "cuptiRangeProfilerPopRange");
    auto s = params<CUpti_RangeProfiler_Stop_Params>(CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE);
    s.pRangeProfilerObject = range;
    check(cuptiRangeProfilerStop(&s), "cuptiRangeProfilerStop");
    return s.isAllPassSubmitted != 0;
  }

  std::vector<double> decode_and_evaluate() {
    auto d = params<CUpti_RangeProfiler_DecodeData_Params>(
        CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE);
    d.pRangeProfilerObject = range;
    check(cuptiRangeProfilerDecodeData(&d), "cuptiRangeProfilerDecodeData");
    TB_CHECK(d.numOfRangeDropped == 0, "CUPTI: cuptiRangeProfilerDecodeData dropped ",
             d.numOfRangeDropped, " range(s)");
    auto info = params<CUpti_RangeProfiler_GetCounterDataInfo_Params>(
        CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE);
    info.pCounterDataImage = counter_data.data();
    info.counterDataImageSize = counter_data.size();
    check(cuptiRangeProfilerGetCounterDataInfo(&info), "cuptiRangeProfilerGetCounterDataInfo");
    TB_CHECK(info.numTotalRanges == 1, "CUPTI: counter data holds ", info.numTotalRanges,
             " ranges, expected 1");
    std::vector<double> values(names.size(), 0.0);
    auto e = params<CUpti_Profiler_Host_EvaluateToGpuValues_Params>(
        CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE);
    e.pHostObject = host;
    e.pCounterDataImage = counter_data.data();
    e.counterDataImageSize = counter_data.size();
    e.rangeIndex = 0;
    e.ppMetricNames = names.data();
    e.numMetrics = names.size();
    e.pMetricValues = values.data();
    check(cuptiProfilerHostEvaluateToGpuValues(&e), "cuptiProfilerHostEvaluateToGpuValues");
    return values;
  }

  ~State() {
    disable();
    host_deinit();
    if (profiler_initialized) {
      auto p = params<CUpti_Profiler_DeInitialize_Params>(
          CUpti_Profiler_DeInitialize_Params_STRUCT_SIZE);
      cuptiProfilerDeInitialize(&p);
    }
  }
};

TensorPipeProfiler::TensorPipeProfiler(Backend& backend, int64_t first, int64_t interval)
    : be_(backend), first_(first < 1 ? 1 : first), interval_(interval < 1 ? 1 : interval) {
  if (backend.device().is_cpu()) {
    reason_ = "not available: no tensor pipe on the cpu backend";
    return;
  }
  if (reason_ = cupti_switched_off(); !reason_.empty()) return;
  try {
    backend.synchronize();  // the backend's context exists and is current
    st_ = std::make_unique<State>();
    State& s = *st_;
    s.ctx = current_context();
    auto ip =
        params<CUpti_Profiler_Initialize_Params>(CUpti_Profiler_Initialize_Params_STRUCT_SIZE);
    check(cuptiProfilerInitialize(&ip), "cuptiProfilerInitialize");
    s.profiler_initialized = true;

    auto ds = params<CUpti_Profiler_DeviceSupported_Params>(
        CUpti_Profiler_DeviceSupported_Params_STRUCT_SIZE);
    ds.cuDevice = CUdevice(backend.device().index);
    ds.api = CUPTI_PROFILER_RANGE_PROFILING;
    check(cuptiProfilerDeviceSupported(&ds), "cuptiProfilerDeviceSupported");
    TB_CHECK(ds.isSupported == CUPTI_PROFILER_CONFIGURATION_SUPPORTED,
             "the device does not support range profiling (architecture ",
             support_level(ds.architecture), ", vGPU ", support_level(ds.vGpu),
             ", confidential compute ", support_level(ds.confidentialCompute), ", SLI ",
             support_level(ds.sli), ", WSL ", support_level(ds.wsl), ")");

    auto cn = params<CUpti_Device_GetChipName_Params>(CUpti_Device_GetChipName_Params_STRUCT_SIZE);
    cn.deviceIndex = size_t(backend.device().index);
    check(cuptiDeviceGetChipName(&cn), "cuptiDeviceGetChipName");
    const std::string chip = cn.pChipName ? cn.pChipName : "";

    // Counter availability: where counters are restricted to admins
    // (NVreg_RestrictProfilingToAdminUsers) this is CUPTI_ERROR_INSUFFICIENT_PRIVILEGES.
    auto ca = params<CUpti_Profiler_GetCounterAvailability_Params>(
        CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE);
    ca.ctx = s.ctx;
    check(cuptiProfilerGetCounterAvailability(&ca), "cuptiProfilerGetCounterAvailability");
    s.availability.assign(ca.counterAvailabilityImageSize, 0);
    ca.pCounterAvailabilityImage = s.availability.data();
    check(cuptiProfilerGetCounterAvailability(&ca), "cuptiProfilerGetCounterAvailability");

    s.host_init(chip);
    metrics_ =
        choose_tensor_pipe_metrics(tensor_pipe_metric_candidates(), [&](const std::string& m) {
          auto mp = params<CUpti_Profiler_Host_GetMetricProperties_Params>(
              CUpti_Profiler_Host_GetMetricProperties_Params_STRUCT_SIZE);
          mp.pHostObject = s.host;
          mp.pMetricName = m.c_str();
          return cuptiProfilerHostGetMetricProperties(&mp) == CUPTI_SUCCESS;
        });
    TB_CHECK(!metrics_.empty(), "chip ", chip, " knows none of the tensor pipe metrics");
    for (const std::string& m : metrics_) s.names.push_back(m.c_str());

    auto am = params<CUpti_Profiler_Host_ConfigAddMetrics_Params>(
        CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE);
    am.pHostObject = s.host;
    am.ppMetricNames = s.names.data();
    am.numMetrics = s.names.size();
    check(cuptiProfilerHostConfigAddMetrics(&am), "cuptiProfilerHostConfigAddMetrics");
    auto is = params<CUpti_Profiler_Host_GetConfigImageSize_Params>(
        CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE);
    is.pHostObject = s.host;
    check(cuptiProfilerHostGetConfigImageSize(&is), "cuptiProfilerHostGetConfigImageSize");
    s.config.assign(is.configImageSize, 0);
    auto gi = params<CUpti_Profiler_Host_GetConfigImage_Params>(
        CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE);
    gi.pHostObject = s.host;
    gi.configImageSize = s.config.size();
    gi.pConfigImage = s.config.data();
    check(cuptiProfilerHostGetConfigImage(&gi), "cuptiProfilerHostGetConfigImage");
    auto np = params<CUpti_Profiler_Host_GetNumOfPasses_Params>(
        CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE);
    np.configImageSize = s.config.size();
    np.pConfigImage = s.config.data();
    check(cuptiProfilerHostGetNumOfPasses(&np), "cuptiProfilerHostGetNumOfPasses");
    passes_ = int64_t(np.numOfPasses);
    TB_CHECK(passes_ >= 1 && passes_ <= kMaxPasses, "the tensor pipe metrics need ", passes_,
             " passes (at most ", kMaxPasses, " are taken)");

    // Probe the target side once: another profiler attached (Nsight Compute)
    // or restricted counters refuse here, before any step is sampled.
    s.enable_and_configure();
    s.disable();
    available_ = true;
  } catch (const Error& e) {
    reason_ = std::string("not available: ") + e.what();
    metrics_.clear();
    st_.reset();
  }
}

TensorPipeProfiler::~TensorPipeProfiler() = default;

void TensorPipeProfiler::begin_step(int64_t step) {
  if (!samples(step)) return;
  State& s = *st_;
  try {
    // Work of earlier steps still queued must stay out of this step's range.
    be_.synchronize();
    if (!continuing_) s.enable_and_configure();
    s.start_pass();
    in_pass_ = true;
  } catch (const Error& e) {
    s.disable();
    available_ = false;
    continuing_ = false;
    failed_unreported_ = true;
    reason_ = std::string("not available: ") + e.what();
  }
}

bool TensorPipeProfiler::end_step(nlohmann::json& metrics) {
  if (failed_unreported_) {  // begin_step failed: report it once
    failed_unreported_ = false;
    return false;
  }
  if (!in_pass_) return true;
  in_pass_ = false;
  State& s = *st_;
  try {
    be_.synchronize();  // every kernel of the step has run inside the range
    if (!s.end_pass()) {
      continuing_ = true;  // the next pass on the next step
      return true;
    }
    continuing_ = false;
    const std::vector<double> values = s.decode_and_evaluate();
    s.disable();
    if (std::optional<double> pct = combine_tensor_pipe_pct(values))
      metrics["tensor_pipe_active_pct"] = *pct;
    return true;
  } catch (const Error& e) {
    s.disable();
    available_ = false;
    continuing_ = false;
    reason_ = std::string("not available: ") + e.what();
    return false;
  }
}

#else  // no CUPTI in this build

struct TensorPipeProfiler::State {};

TensorPipeProfiler::TensorPipeProfiler(Backend& backend, int64_t first, int64_t interval)
    : be_(backend), first_(first < 1 ? 1 : first), interval_(interval < 1 ? 1 : interval) {
  reason_ = backend.device().is_cpu() ? "not available: no tensor pipe on the cpu backend"
                                      : "not available: this build has no CUPTI";
}

TensorPipeProfiler::~TensorPipeProfiler() = default;

void TensorPipeProfiler::begin_step(int64_t) {}

bool TensorPipeProfiler::end_step(nlohmann::json&) { return true; }

#endif  // TRAINBENCH_HAVE_CUPTI

}  // namespace tb
