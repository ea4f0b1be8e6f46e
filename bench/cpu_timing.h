// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// What the CPU per-op timers (cpu_conv_paths.cpp, cpu_norm_pool_onednn.cpp)
// share: random f32 operands, the median of a round's times, the load.
#include <algorithm>
#include <cstdlib>
#include <random>
#include <vector>

#include "engine/core/tensor.h"

namespace tb::bench {

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

// The 1-minute load average, -1 when unknown.
inline double load_average() {
  double l[1] = {0};
  return getloadavg(l, 1) == 1 ? l[0] : -1.0;
}

}  // namespace tb::bench
