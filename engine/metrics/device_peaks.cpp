// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/metrics/device_peaks.h"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/metrics/process_memory.h"

namespace tb {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

// Runs body(t) on `threads` threads at once; returns the wall seconds of the
// slowest, best of `reps` after one warm-up.
template <typename Body>
double best_parallel_seconds(int threads, int reps, Body body) {
  double best = 1e30;
  for (int rep = 0; rep <= reps; ++rep) {
    const auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { body(t); });
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (rep > 0) best = std::min(best, s);
  }
  return best;
}

std::string default_cache_path() {
  if (const char* p = std::getenv("TRAINBENCH_PEAKS_CACHE"); p && *p) return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::string(x) + "/trainbench/device-peaks.json";
  if (const char* h = std::getenv("HOME"); h && *h)
    return std::string(h) + "/.cache/trainbench/device-peaks.json";
  return "";
}

}  // namespace

json probe_cpu_peaks(int threads) {
  threads = std::max(1, threads);
  // The CPU backend's GEMMs are single-threaded OpenBLAS calls on each of its
  // threads (cpu_backend.cpp): the probe runs one per thread, side by side.
  constexpr int n = 768, reps = 5;
  std::vector<std::vector<float>> a(threads), b(threads), c(threads);
  for (int t = 0; t < threads; ++t) {
    a[t].assign(size_t(n) * n, 1.0f / float(t + 2));
    b[t].assign(size_t(n) * n, 0.5f);
    c[t].assign(size_t(n) * n, 0.0f);
  }
  const double gemm_s = best_parallel_seconds(threads, reps, [&](int t) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a[t].data(), n,
                b[t].data(), n, 0.0f, c[t].data(), n);
  });
  const double gemm_flops = 2.0 * n * n * double(n) * threads;
  // 128 MiB copied, far past any cache; each thread its slice.
  const size_t bytes = size_t(128) << 20, slice = bytes / size_t(threads);
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  const double copy_s = best_parallel_seconds(threads, reps, [&](int t) {
    std::memcpy(dst.data() + size_t(t) * slice, src.data() + size_t(t) * slice, slice);
  });
  const double moved = 2.0 * double(slice) * threads;  // read + written
  return {{"flops_per_s", gemm_flops / gemm_s},
          {"bytes_per_s", moved / copy_s},
          {"dtype", "f32"},  // the FMA rate's: the roofline's compute roof is f32's
          {"source", "probe: f32 sgemm " + std::to_string(n) + "^3 on each of " +
                         std::to_string(threads) + " threads (OpenBLAS), 128 MiB copy (read + "
                         "written), best of " + std::to_string(reps)},
          {"gemm", {{"size", n}, {"threads", threads}, {"seconds", gemm_s}}},
          {"copy", {{"bytes", moved}, {"threads", threads}, {"seconds", copy_s}}}};
}

json device_peaks(const Backend& be, std::string cache_path) {
  if (!be.device().is_cpu())
    return {{"not_measured", "no peaks probe for " + be.device().str() +
                                 " yet: the probe measures the CPU backend only"}};
  const json d = be.describe();
  const int threads = d.value("threads", 1);
  const std::string key = d.value("device_name", std::string("cpu")) + " | " +
                          std::to_string(threads) + " threads | " + d.value("kernels", std::string()) +
                          " | " + d.value("openblas", std::string());
  if (cache_path.empty()) cache_path = default_cache_path();
  json cache = json::object();
  if (!cache_path.empty()) {
    std::ifstream in(cache_path);
    if (in) {
      try {
        cache = json::parse(in);
      } catch (const json::exception&) {
        cache = json::object();  // a damaged cache is measured again and rewritten
      }
      if (!cache.is_object()) cache = json::object();
      // An entry from before the probe recorded its dtype is measured again.
      if (cache.contains(key) && cache[key].is_object() && cache[key].contains("flops_per_s") &&
          cache[key].contains("dtype"))
        return cache[key];
    }
  }
  json peaks;
  // Its buffers are not the run's memory (peak_memory_bytes on the CPU is the
  // process's peak RSS): 270 MiB on a run that holds 300.
  run_outside_peak_rss([&] { peaks = probe_cpu_peaks(threads); });
  if (!cache_path.empty()) {
    // Written beside and renamed into place: a reader never sees half a file.
    std::error_code ec;
    fs::create_directories(fs::path(cache_path).parent_path(), ec);
    cache[key] = peaks;
    const std::string tmp = cache_path + ".tmp-" + std::to_string(getpid());
    std::ofstream out(tmp, std::ios::trunc);
    if (out << cache.dump(2) << "\n") {
      out.close();
      fs::rename(tmp, cache_path, ec);
    }
    if (ec || !out) fs::remove(tmp, ec);  // no cache: the next run probes again
  }
  return peaks;
}

}  // namespace tb
