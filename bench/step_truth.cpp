// SPDX-License-Identifier: GPL-3.0-or-later
// trainbench-step-truth: times the trainer's loop from outside and compares
// with what the engine reports (bench/README.md, "Truth of the measurements").
//
// The trainer calls a hook at every step boundary (Trainer::set_step_boundary_hook);
// here the hook reads the host clock and, on the CUDA backend, records a CUDA
// event on the compute stream, so consecutive boundaries bracket one step of
// the loop exactly as PyTorch users time theirs. Over the timed steps the sum
// of the engine's step_time_ms is compared with the outside total (device
// events on a GPU, the host clock on the CPU), and the device memory the
// engine reports (allocator and driver) with cudaMemGetInfo deltas taken here.
//
//   trainbench-step-truth --set model=resnet18-cifar --set dataset=synthetic
//       --set 'synthetic_shape=[3,32,32]' --set batch_size=512 --set max_steps=230
//       --set device=cuda --warmup 30 --output truth-step.json   (one command line)
//
// --measure off: the trainer's measurement off (step total only, as
// TRAINBENCH_MEASURE=off); --cupti off: in-app CUPTI off (no kernel census or
// tensor pipe counters, as TRAINBENCH_CUPTI=off). bench/truth.py runs it.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/train/config.h"
#include "engine/train/events.h"
#include "engine/train/trainer.h"

#ifdef TRAINBENCH_HAVE_CUDA
#include <cuda_runtime.h>

#include "engine/backend/cuda/cuda_backend.h"
#endif

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Keeps the events the comparison needs.
struct CollectSink final : tb::EventSink {
  json started, finished, steps = json::array(), logs = json::array();
  void on_event(const json& e) override {
    const std::string type = e.value("type", "");
    if (type == "run_started") started = e;
    if (type == "finished") finished = e;
    if (type == "step") steps.push_back({{"step", e["step"]}, {"metrics", e["metrics"]}});
    if (type == "log" && e.value("level", "") != "info") logs.push_back(e.value("message", ""));
  }
};

struct Boundary {
  int64_t next_step;
  double host_ms;  // since the first boundary
  int event = -1;  // index into the CUDA events, -1 on the CPU
};

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p / 100.0 * double(v.size() - 1) + 0.5))];
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

#ifdef TRAINBENCH_HAVE_CUDA
#define TRUTH_CUDA(call)                                                                       \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    TB_CHECK(e_ == cudaSuccess, #call, ": ", cudaGetErrorString(e_));                          \
  } while (0)

int64_t device_used_bytes() {
  size_t free_b = 0, total_b = 0;
  TRUTH_CUDA(cudaMemGetInfo(&free_b, &total_b));
  return int64_t(total_b) - int64_t(free_b);
}
#endif

void usage() {
  std::fprintf(stderr,
               "usage: trainbench-step-truth [--config FILE] [--set key=value]... [--warmup N]\n"
               "                             [--measure on|off] [--cupti on|off] --output FILE\n");
}

}  // namespace

int main(int argc, char** argv) {
  json cfg = json::object();
  std::string output, config_file;
  int64_t warmup = 20;
  bool measure = true, cupti = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "error: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--set") {
      try {
        tb::apply_assignment(cfg, value());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
      }
    } else if (a == "--config") {
      config_file = value();
    } else if (a == "--warmup") {
      warmup = std::atoll(value().c_str());
    } else if (a == "--output") {
      output = value();
    } else if (a == "--measure" || a == "--cupti") {
      const std::string v = value();
      if (v != "on" && v != "off") {
        std::fprintf(stderr, "error: %s takes on or off, got '%s'\n", a.c_str(), v.c_str());
        return 2;
      }
      (a == "--measure" ? measure : cupti) = v == "on";
    } else {
      usage();
      return 2;
    }
  }
  if (output.empty()) {
    usage();
    return 2;
  }
  if (!config_file.empty()) {
    std::ifstream f(config_file);
    json file;
    try {
      file = json::parse(f);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "error: %s: %s\n", config_file.c_str(), e.what());
      return 2;
    }
    for (auto& [k, v] : cfg.items()) file[k] = v;  // --set wins
    cfg = file;
  }
  if (!cupti) setenv("TRAINBENCH_CUPTI", "off", 1);

  tb::RunConfig config;
  try {
    config = tb::RunConfig::from_json(tb::validate_config(cfg, "step-truth"));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  if (config.name.empty()) config.name = "step-truth " + config.model;

  json result = {{"harness", "trainbench-step-truth"},
                 {"date", utc_now()},
                 {"what", "the engine's step_time_ms against an outside timing of the same loop "
                          "(CUDA events on the compute stream at every step boundary on a GPU, "
                          "the host clock on the CPU), and its memory figures against "
                          "cudaMemGetInfo deltas"},
                 {"mode", {{"measure", measure}, {"cupti", cupti}}},
                 {"warmup_steps", warmup},
                 {"config", config.values}};

  std::vector<Boundary> bounds;
  bounds.reserve(size_t(std::max<int64_t>(config.max_steps, 1000) + 64));
  const auto t0 = Clock::now();
#ifdef TRAINBENCH_HAVE_CUDA
  std::vector<cudaEvent_t> events;
  int64_t used_before = -1;
  bool on_cuda = false;
  if (config.device.rfind("cuda", 0) == 0 || config.device == "auto") {
    int n = 0;
    on_cuda = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    cudaGetLastError();  // no device: clear the error, the run then says what it found
  }
  if (on_cuda) {
    // The context first (the engine's backend uses the same primary context),
    // so the delta below starts after it.
    TRUTH_CUDA(cudaFree(nullptr));
    used_before = device_used_bytes();
  }
#endif

  tb::EventBus bus;
  CollectSink sink;
  bus.add(&sink);
  std::atomic<bool> stop{false};
  tb::Trainer trainer(config, bus, stop);
  trainer.set_measure(measure);
  trainer.set_step_boundary_hook([&](tb::Backend& be, int64_t next_step) {
    Boundary b{next_step, std::chrono::duration<double, std::milli>(Clock::now() - t0).count()};
#ifdef TRAINBENCH_HAVE_CUDA
    if (auto* cuda = dynamic_cast<tb::CudaBackend*>(&be)) {
      cudaEvent_t ev = nullptr;
      TRUTH_CUDA(cudaEventCreate(&ev));
      TRUTH_CUDA(cudaEventRecord(ev, static_cast<cudaStream_t>(cuda->stream_handle())));
      b.event = int(events.size());
      events.push_back(ev);
    }
#else
    (void)be;
#endif
    bounds.push_back(b);
  });

  tb::TrainResult r;
  try {
    r = trainer.run(1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: the run failed: %s\n", e.what());
    result["error"] = e.what();
    std::ofstream(output) << result.dump(1) << "\n";
    return 1;
  }
  result["status"] = r.status;
  result["summary"] = r.summary;
  result["environment"] = sink.started.value("environment", json::object());
  result["tricks"] = sink.started.value("tricks", json::object());
  result["warnings"] = sink.logs;

  // Per step: the engine's figures, and the outside span between its two boundaries.
  std::vector<double> eng, out_dev, out_host, diff_pct;
  json per_step = json::array();
  double eng_sum = 0, dev_sum = 0, host_sum = 0;
  bool have_dev = false;
  int64_t timed = 0, crossing_eval = 0;
  for (const json& s : sink.steps) {
    const int64_t step = s["step"].get<int64_t>();
    if (step <= warmup) continue;
    const double e_ms = s["metrics"].value("step_time_ms", NAN);
    // start: the last boundary before the step (after an evaluation, the one
    // at the top of the loop); end: the first one after it.
    int begin = -1, end = -1;
    for (int i = 0; i < int(bounds.size()); ++i)
      if (bounds[size_t(i)].next_step == step) begin = i;
    for (int i = begin + 1; begin >= 0 && i < int(bounds.size()); ++i)
      if (bounds[size_t(i)].next_step == step + 1) {
        end = i;
        break;
      }
    if (begin < 0 || end < 0) continue;
    if (end != begin + 1) ++crossing_eval;  // should not happen: the end follows at once
    const double h_ms = bounds[size_t(end)].host_ms - bounds[size_t(begin)].host_ms;
    double d_ms = NAN;
#ifdef TRAINBENCH_HAVE_CUDA
    if (bounds[size_t(begin)].event >= 0 && bounds[size_t(end)].event >= 0) {
      float ms = 0;
      TRUTH_CUDA(cudaEventSynchronize(events[size_t(bounds[size_t(end)].event)]));
      TRUTH_CUDA(cudaEventElapsedTime(&ms, events[size_t(bounds[size_t(begin)].event)],
                                      events[size_t(bounds[size_t(end)].event)]));
      d_ms = ms;
      have_dev = true;
    }
#endif
    const double outside = std::isfinite(d_ms) ? d_ms : h_ms;
    ++timed;
    eng.push_back(e_ms), out_host.push_back(h_ms);
    eng_sum += e_ms, host_sum += h_ms;
    if (std::isfinite(d_ms)) out_dev.push_back(d_ms), dev_sum += d_ms;
    diff_pct.push_back(100.0 * (e_ms - outside) / outside);
    json row = {step, e_ms, h_ms};
    if (std::isfinite(d_ms)) row.push_back(d_ms);
    per_step.push_back(row);
  }
  const double outside_sum = have_dev ? dev_sum : host_sum;
  json st = {
      {"outside_clock", have_dev ? "CUDA events on the compute stream" : "host steady_clock"},
      {"timed_steps", timed},
      {"engine_sum_ms", eng_sum},
      {"outside_sum_ms", outside_sum},
      {"difference_pct", timed ? 100.0 * (eng_sum - outside_sum) / outside_sum : NAN},
      {"engine_median_ms", median(eng)},
      {"outside_median_ms", median(have_dev ? out_dev : out_host)},
      {"per_step_difference_pct_p50", median(diff_pct)},
      {"per_step_difference_pct_p10", percentile(diff_pct, 10)},
      {"per_step_difference_pct_p90", percentile(diff_pct, 90)},
      {"host_clock_sum_ms", host_sum},
      {"target_pct", 2.0},
      {"steps_not_adjacent", crossing_eval},
      {"per_step_columns", have_dev ? json{"step", "engine_ms", "host_ms", "cuda_event_ms"}
                                    : json{"step", "engine_ms", "host_ms"}},
      {"per_step", per_step}};
  if (timed) st["within_target"] = std::abs(st["difference_pct"].get<double>()) <= 2.0;
  result["step_time"] = st;

  // Memory: the engine's last step figures against the driver's delta from before the run.
  json mem = json::object();
  for (auto it = sink.steps.rbegin(); it != sink.steps.rend(); ++it) {
    const json& m = (*it)["metrics"];
    if (!m.contains("gpu_mem_used_bytes")) continue;
    mem = {{"at_step", (*it)["step"]},
           {"engine_allocated_bytes", m.value("gpu_mem_allocated_bytes", -1.0)},
           {"engine_reserved_bytes", m.value("gpu_mem_reserved_bytes", -1.0)},
           {"engine_peak_allocated_bytes", m.value("gpu_mem_peak_bytes", -1.0)},
           {"engine_device_used_bytes", m.value("gpu_mem_used_bytes", -1.0)}};
    break;
  }
#ifdef TRAINBENCH_HAVE_CUDA
  if (on_cuda) {
    mem["used_before_run_bytes"] = used_before;
    if (mem.contains("engine_device_used_bytes")) {
      const double delta = mem["engine_device_used_bytes"].get<double>() - double(used_before);
      mem["driver_delta_bytes"] = delta;
      // What the driver holds for the run beyond the caching allocator's
      // reservation: library handles and workspaces not taken from it, lazily
      // loaded kernel modules, CUPTI buffers.
      mem["driver_delta_minus_reserved_bytes"] = delta - mem["engine_reserved_bytes"].get<double>();
    }
    for (cudaEvent_t ev : events) cudaEventDestroy(ev);
    mem["used_after_run_bytes"] = device_used_bytes();  // the backend is gone by now
    int dev = 0, driver = 0, runtime = 0;
    cudaGetDevice(&dev);
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, dev) == cudaSuccess) result["device"] = p.name;
    result["cuda_driver_version"] = driver;
    result["cuda_runtime_version"] = runtime;
  }
#endif
  if (!result.contains("device")) result["device"] = config.device;
  result["memory"] = mem;

  std::ofstream f(output);
  f << result.dump(1) << "\n";
  if (!f) {
    std::fprintf(stderr, "error: cannot write %s\n", output.c_str());
    return 1;
  }
  std::printf("%s\n", json{{"timed_steps", timed},
                           {"outside_clock", st["outside_clock"]},
                           {"engine_sum_ms", eng_sum},
                           {"outside_sum_ms", outside_sum},
                           {"difference_pct", st["difference_pct"]}}
                          .dump()
                          .c_str());
  return timed > 0 ? 0 : 1;
}
