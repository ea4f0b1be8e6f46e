// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/train/step_telemetry.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/metrics/chrome_trace.h"
#include "engine/metrics/kernel_census.h"
#include "engine/metrics/layer_profiler.h"
#include "engine/metrics/nvml_telemetry.h"
#include "engine/metrics/process_memory.h"
#include "engine/metrics/tensor_pipe_profiler.h"

#ifdef TRAINBENCH_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/metrics/cuda_step_timer.h"
#endif

namespace tb {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) m = 0.5 * (m + *std::max_element(v.begin(), v.begin() + mid));
  return m;
}

// GPU memory series: the allocator's figures every step (host-side counters),
// the driver's used/total when query_device (a driver call: sampled steps).
void write_memory_metrics(const DeviceMemoryStats& m, json& metrics) {
  metrics["gpu_mem_allocated_bytes"] = double(m.allocated_bytes);
  metrics["gpu_mem_reserved_bytes"] = double(m.reserved_bytes);
  metrics["gpu_mem_peak_bytes"] = double(m.peak_allocated_bytes);
  if (m.device_used_bytes >= 0) {
    metrics["gpu_mem_used_bytes"] = double(m.device_used_bytes);
    metrics["gpu_mem_total_bytes"] = double(m.device_total_bytes);
  }
}

// The run log's line on what is measured how often (measure_every shown).
std::string describe_measurement(bool on_host, bool measure, int lag, int64_t every,
                                 const RunPlan& plan, const NvmlSampler* nvml) {
  const std::string n = std::to_string(every);
  std::string s = "measurement: ";
  s += measure ? "step time and its breakdown every step" : "step time only (measurement off)";
  if (!on_host)
    s += " (CUDA events, read back " + std::to_string(lag) + " steps late, no sync)";
  s += on_host ? "; host RSS and CPU use" : "; driver memory";
  if (nvml) s += " and the newest GPU telemetry reading";
  s += " on step 1 and every " + n + " steps (measure_every)";
  if (nvml)
    s += "; NVML read every " + std::to_string(nvml->period().count()) +
         " ms on its own thread";
  if (!on_host) {
    if (plan.census_every_step)
      s += "; kernel census every step (profiler), tensor pipe counters sampled";
    else if (plan.kernel_census)
      s += "; kernel census and tensor pipe counters (CUPTI) sampled every " + n +
           " steps (cupti_sampling)";
    else
      s += "; no CUPTI (cupti_sampling off)";
  }
  return s;
}

// Step boundaries and phase times: CUDA events on the CUDA backend (device
// time, read back a few steps late: measuring never waits for the device),
// steady_clock on the CPU.
std::unique_ptr<StepTimer> make_step_timer(Backend& be, bool measure, int test_lag) {
  std::unique_ptr<StepTimer> t;
#ifdef TRAINBENCH_HAVE_CUDA
  if (auto* cuda = dynamic_cast<CudaBackend*>(&be))
    t = std::make_unique<CudaStepTimer>(static_cast<cudaStream_t>(cuda->stream_handle()), 3, 64,
                                        measure);
#endif
  if (!t) t = std::make_unique<HostStepTimer>(/*report_h2d=*/!be.device().is_cpu(), measure);
  if (test_lag > 0) t = std::make_unique<LaggedStepTimer>(std::move(t), test_lag);
  return t;
}

}  // namespace

StepTelemetry::StepTelemetry(Backend& be, const RunPlan& plan, const TelemetryOptions& options,
                             EventBus& bus)
    : be_(be), bus_(bus), options_(options), on_host_(plan.on_host) {
  base_timer_ = make_step_timer(be, options.measure, options.timer_lag_for_test);
  timer_ = base_timer_.get();
  if (options.trace) {
    tracing_timer_ = std::make_unique<TracingStepTimer>(*base_timer_, *options.trace);
    timer_ = tracing_timer_.get();
  }
  const int64_t every = std::max<int64_t>(1, options.measure_every);
  // Per-layer time (layer_profiler.h): the host clock on the CPU; on a GPU
  // events on the compute stream, only with the costly measurements asked
  // for (a sampled step's profile is read back once its events completed).
  std::unique_ptr<ScopeClock> layer_clock;
  if (!options.measure) {
    layer_profile_absent_ = "not measured: measurement was off (TRAINBENCH_MEASURE=off)";
  } else if (on_host_) {
    layer_clock = std::make_unique<HostScopeClock>();
  } else if (plan.cuda_graphs) {
    layer_profile_absent_ =
        "not measured: cuda_graphs replays the whole step as one graph, with no layer scopes";
  } else if (!options.cupti_requested) {
    layer_profile_absent_ =
        "not measured by default on " + be.device().str() +
        ": on a GPU per-layer times come with the sampled measurements (cupti_sampling or "
        "profiler), events around every layer scope";
  } else {
#ifdef TRAINBENCH_HAVE_CUDA
    if (auto* cuda = dynamic_cast<CudaBackend*>(&be))
      layer_clock = make_cuda_scope_clock(cuda->stream_handle());
#endif
    if (!layer_clock)
      layer_profile_absent_ = "not measured on this backend (" + be.device().str() + ")";
  }
  if (layer_clock) {
    layer_profiler_ = std::make_unique<LayerProfiler>(every, options.layer_work, std::move(layer_clock));
    profiling_timer_ = std::make_unique<ProfilingStepTimer>(*timer_, *layer_profiler_);
    timer_ = profiling_timer_.get();
  }
  cpu_mark_ = process_cpu_seconds();
  wall_mark_ = Clock::now();
  // GPU telemetry (NVML, from the driver at run time), read on its own
  // thread; absent, with the reason logged, where there is none. NVML numbers
  // devices in PCI order and ignores CUDA_VISIBLE_DEVICES: the device is
  // found by its PCI bus id.
  if (!on_host_) {
    auto nvml = std::make_unique<NvmlTelemetry>(unsigned(be.device().index),
                                                be.describe().value("pci_bus_id", std::string()));
    if (nvml->available())
      nvml_ = std::make_unique<NvmlSampler>(std::move(nvml));
    else
      log("info", "GPU telemetry " + nvml->reason());
  }
  if (plan.device_trace) {
    device_trace_ = std::make_unique<DeviceTraceRecorder>();
    if (!device_trace_->start(*options.trace))
      log("warning", "trace: device rows " + device_trace_->reason());
  }
  if (plan.kernel_census) {
    census_ = std::make_unique<KernelCensus>(be, plan.census_every_step ? 1 : every);
    if (!census_->available()) {
      log(options.cupti_requested ? "warning" : "info", "kernel census " + census_->reason());
      census_.reset();
    }
  }
  // Tensor pipe counters (CUPTI range profiler) halfway between censuses; a
  // step never has both (two CUPTI collections), the census gives way.
  if (plan.tensor_pipe) {
    // At least every other step: a census on every step would always give way.
    const auto [first, interval] = tensor_pipe_schedule(
        std::max<int64_t>(2, every), std::getenv("TRAINBENCH_TENSOR_PIPE_EVERY"));
    pipe_ = std::make_unique<TensorPipeProfiler>(be, first, interval);
    log("info", "tensor pipe counters " + pipe_->describe());
    if (!pipe_->available()) pipe_.reset();
  }
  log("info", describe_measurement(on_host_, options.measure, timer_->lag_steps(), every, plan,
                                   nvml_.get()));
}

StepTelemetry::~StepTelemetry() = default;

LayerScopes* StepTelemetry::layer_scopes() { return layer_profiler_.get(); }

// A sampled step's profile goes out with the next step's end-of-step work
// (its closing boundary is the next step's start) once its clock can be read
// without waiting (a GPU's events completed), or at a flush (which waits).
void StepTelemetry::publish_layer_profile(bool wait) {
  if (!layer_profiler_) return;
  if (std::optional<LayerProfileStep> p = layer_profiler_->take(wait))
    bus_.publish("layer_profile", p->to_json());
}

void StepTelemetry::log(const std::string& level, const std::string& message) {
  bus_.publish("log", {{"level", level}, {"message", message}});
}

void StepTelemetry::begin_step(int64_t step) {
  // The boundary first: what sampling this step costs is part of it.
  timer_->begin_step(step);
  const bool pipe_step = pipe_ && pipe_->samples(step);
  if (census_ && !pipe_step) census_->begin_step(step);
  if (pipe_step) pipe_->begin_step(step);
}

void StepTelemetry::close_step() { timer_->close_step(); }

void StepTelemetry::end_step(int64_t step, int64_t epoch, json metrics, int64_t h2d_bytes) {
  if (census_) {
    census_->end_step(metrics);
    if (!census_->available()) {  // CUPTI refused mid-run: said once, the run goes on
      log("warning", "kernel census " + census_->reason());
      census_.reset();
    }
  }
  if (pipe_ && !pipe_->end_step(metrics)) {
    log("warning", "tensor pipe counters " + pipe_->reason());
    pipe_.reset();
  }
  const bool sampled = step == 1 || step % std::max<int64_t>(1, options_.measure_every) == 0;
  if (!on_host_) {
    metrics["h2d_bytes"] = double(h2d_bytes);
    if (DeviceMemory* mem = be_.memory()) {
      const DeviceMemoryStats m = mem->stats(/*query_device=*/sampled);
      write_memory_metrics(m, metrics);
      device_peak_bytes_ = std::max(device_peak_bytes_, m.peak_allocated_bytes);
    }
    if (nvml_ && sampled)
      if (std::optional<GpuTelemetry> g = nvml_->latest()) g->write_metrics(metrics);
  } else if (sampled) {
    metrics["host_rss_bytes"] = double(process_rss_bytes());
    const double wall = std::chrono::duration<double>(Clock::now() - wall_mark_).count();
    const double cpu = process_cpu_seconds();
    if (wall > 0) metrics["cpu_threads_busy"] = (cpu - cpu_mark_) / wall;
    cpu_mark_ = cpu, wall_mark_ = Clock::now();
  }
  pending_.push_back({step, epoch, std::move(metrics)});
  publish_ready(/*flush=*/false);
  publish_layer_profile(/*wait=*/false);
}

void StepTelemetry::flush() {
  publish_ready(/*flush=*/true);
  publish_layer_profile(/*wait=*/true);
}

// A step's event goes out when its times are known: at once with host
// timers, a few steps later with CUDA events (so no step waits to be timed).
void StepTelemetry::publish_ready(bool flush) {
  if (flush) timer_->flush();
  while (std::optional<StepTimes> t = timer_->poll()) {
    TB_CHECK(!pending_.empty() && pending_.front().step == t->step, "step timer: times of step ",
             t->step, " arrived, but the next unpublished step is ",
             pending_.empty() ? int64_t(-1) : pending_.front().step);
    PendingStep p = std::move(pending_.front());
    pending_.pop_front();
    step_ms_.push_back(t->total_ms);
    if (options_.measure)
      t->write_metrics(p.metrics);
    else
      p.metrics["step_time_ms"] = t->total_ms;
    p.metrics["samples_per_s"] = 1e3 * double(options_.samples_per_step) / t->total_ms;
    bus_.publish("step", {{"step", p.step}, {"epoch", p.epoch}, {"metrics", p.metrics}});
  }
}

void StepTelemetry::release_cached_memory() {
  DeviceMemory* mem = be_.memory();
  if (!mem) return;
  device_peak_bytes_ = std::max(device_peak_bytes_, mem->stats(false).peak_allocated_bytes);
  mem->empty_cache();
  mem->reset_peak();
}

void StepTelemetry::write_summary(json& summary) {
  if (device_trace_) device_trace_->finish(be_, engine_kernel_classifier());
  const double med = median(step_ms_);
  summary["median_step_time_ms"] = med;
  summary["samples_per_s"] =
      std::isfinite(med) && med > 0 ? 1e3 * double(options_.samples_per_step) / med : 0.0;
  if (DeviceMemory* mem = be_.memory())
    device_peak_bytes_ = std::max(device_peak_bytes_, mem->stats(false).peak_allocated_bytes);
  summary["peak_memory_bytes"] = on_host_ ? process_peak_rss_bytes() : device_peak_bytes_;
  summary["peak_memory_kind"] = on_host_ ? "host_peak_rss" : "device_peak_allocated";
  if (!on_host_) summary["gpu_mem_peak_bytes"] = device_peak_bytes_;
  if (nvml_) {
    const NvmlSampler::ReadCost c = nvml_->read_cost();
    summary["gpu_telemetry_reads"] = {{"readings", c.readings},
                                      {"period_ms", nvml_->period().count()},
                                      {"mean_ms", c.mean_ms},
                                      {"max_ms", c.max_ms}};
  }
  // What `trainbench-engine layers` says of a run without a profile.
  const int64_t every = std::max<int64_t>(1, options_.measure_every);
  if (!layer_profiler_)
    summary["layer_profile"] = {{"not_measured", layer_profile_absent_}};
  else if (layer_profiler_->sampled_steps() == 0)
    summary["layer_profile"] = {
        {"not_measured", "no step was sampled: per-layer times are taken at steps " +
                             (every == 1 ? std::string("1, 2, 3, ...")
                                         : std::to_string(every + 1) + ", " +
                                               std::to_string(2 * every + 1) + ", ...") +
                             " (measure_every " + std::to_string(every) + ") and the run had " +
                             std::to_string(step_ms_.size()) + " steps"}};
  else
    summary["layer_profile"] = {{"sampled_steps", layer_profiler_->sampled_steps()},
                                {"measure_every", every}};
}

}  // namespace tb
