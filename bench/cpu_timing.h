// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// What the CPU timers (cpu_conv_paths.cpp, cpu_norm_pool_onednn.cpp,
// cpu_conv_dtypes.cpp, cpu_isa_kernels.cpp, loader_throughput.cpp) share:
// random f32 operands, the median of a round's times, candidates timed round
// by round, the load, a thread's CPU time.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/tensor.h"

namespace tb::bench {

// This thread's CPU time in seconds: what work cost while it ran, not the
// time another process held the core (the machine may be shared).
inline double thread_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// An f32 NCHW host tensor, uniform in [lo, hi).
inline Tensor random_f32(const Shape& s, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = Tensor::empty(s, DType::F32);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = u(rng);
  return t;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Candidates timed round by round, each round running every candidate once
// (so that other work on a shared machine slows them alike), after two
// warm-up calls each: {name: {median, min}} in milliseconds.
inline nlohmann::json time_candidates(
    const std::vector<std::pair<std::string, std::function<void()>>>& c, int rounds) {
  using Clock = std::chrono::steady_clock;
  for (const auto& [name, run] : c) run(), run();  // warm-up: primitives made, pages touched
  std::vector<std::vector<double>> ms(c.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < c.size(); ++i) {
      const auto t0 = Clock::now();
      c[i].second();
      ms[i].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
  nlohmann::json out;
  for (size_t i = 0; i < c.size(); ++i)
    out[c[i].first] = {{"median", median(ms[i])},
                       {"min", *std::min_element(ms[i].begin(), ms[i].end())}};
  return out;
}

// The 1-minute load average, -1 when unknown.
inline double load_average() {
  double l[1] = {0};
  return getloadavg(l, 1) == 1 ? l[0] : -1.0;
}

}  // namespace tb::bench
