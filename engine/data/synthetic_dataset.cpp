// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/data/synthetic_dataset.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "engine/core/error.h"
#include "engine/data/sample_rng.h"

namespace tb {

namespace {

// The per-pixel noise: standard normal values by inverse transform from 12
// random bits, the quantiles at the middles of 4096 equally likely bins
// (tails cut at ±3.67σ; neighbours at most 0.0006σ apart near the centre,
// far below a pixel level at the default σ of 40), five draws from each
// 64-bit number. Box-Muller (log, sqrt and cos in double for every pixel)
// took ≈ 110 µs a 3×32×32 sample, ≈ 9,000 samples a second a loader thread:
// the GPU benchmarks' 8 loader threads would have held the engine near 70,000
// samples/s, below the step they feed (bench/NOTES.md, "The loader").
constexpr int kNoiseBits = 12;
constexpr uint64_t kNoiseMask = (uint64_t(1) << kNoiseBits) - 1;
constexpr int kDrawsPerWord = 64 / kNoiseBits;

const std::array<float, size_t(1) << kNoiseBits>& normal_quantiles() {
  static const auto table = [] {
    std::array<float, size_t(1) << kNoiseBits> t{};
    const size_t n = t.size();
    for (size_t j = 0; j < n / 2; ++j) {
      // Φ(x) = erfc(−x/√2)/2 increases: bisect for Φ(x) = (j + ½)/n, then
      // mirror, so the table is exactly symmetric (its mean exactly 0).
      const double p = (double(j) + 0.5) / double(n);
      double lo = -10.0, hi = 0.0;
      for (int it = 0; it < 64; ++it) {
        const double mid = 0.5 * (lo + hi);
        (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
      }
      t[j] = float(0.5 * (lo + hi));
      t[n - 1 - j] = -t[j];
    }
    return t;
  }();
  return table;
}

}  // namespace

float synthetic_noise_table_value(int index) {
  return normal_quantiles()[size_t(index) & kNoiseMask];
}

SyntheticDataset::SyntheticDataset(const SyntheticOptions& options, const std::string& split)
    : options_(options), split_(split) {
  const Shape& s = options_.shape;
  TB_CHECK(s.size() == 3 && s[0] >= 1 && s[1] >= 1 && s[2] >= 1,
           "synthetic: shape must be [C, H, W] with positive sizes, got ", shape_str(s));
  TB_CHECK(shape_numel(s) <= (int64_t(1) << 24), "synthetic: sample shape ", shape_str(s),
           " is too large");
  TB_CHECK(options_.size >= 1, "synthetic: size must be positive, got ", options_.size);
  TB_CHECK(options_.classes >= 2 && options_.classes <= 100000,
           "synthetic: classes must be 2..100000, got ", options_.classes);
  TB_CHECK(options_.noise >= 0.0f, "synthetic: noise must be >= 0, got ", options_.noise);
  TB_CHECK(split == "train" || split == "test", "synthetic: unknown split '", split,
           "' (expected train or test)");
  stream_ = split == "train" ? 1 : 2;

  const int64_t C = s[0], H = s[1], W = s[2];
  prototypes_.resize(static_cast<size_t>(options_.classes * C * H * W));
  constexpr double kTwoPi = 6.283185307179586;
  for (int k = 0; k < options_.classes; ++k) {
    for (int64_t c = 0; c < C; ++c) {
      // Stream 0 is reserved for the class images so both splits share them.
      SampleRng rng(options_.seed, 0, static_cast<uint64_t>(k), static_cast<uint64_t>(c));
      float* p = &prototypes_[static_cast<size_t>((k * C + c) * H * W)];
      double fy[2], fx[2], phase[2];
      for (int j = 0; j < 2; ++j) {
        // Up to 2 cycles across the image: low enough to survive a 4-pixel shift.
        fy[j] = (rng.uniform01() * 4.0 - 2.0) / double(H);
        fx[j] = (rng.uniform01() * 4.0 - 2.0) / double(W);
        phase[j] = rng.uniform01() * kTwoPi;
      }
      for (int64_t y = 0; y < H; ++y)
        for (int64_t x = 0; x < W; ++x)
          p[y * W + x] = static_cast<float>(
              128.0 + 50.0 * std::sin(kTwoPi * (fy[0] * y + fx[0] * x) + phase[0]) +
              30.0 * std::sin(kTwoPi * (fy[1] * y + fx[1] * x) + phase[1]));
    }
  }
}

std::string SyntheticDataset::name() const {
  const Shape& s = options_.shape;
  return detail::concat("synthetic/", split_, "[", s[0], "x", s[1], "x", s[2], ", ",
                        options_.classes, " classes, seed ", options_.seed, "]");
}

void SyntheticDataset::get(int64_t index, uint8_t* pixels, int32_t* label) const {
  check_index(index);
  const int k = static_cast<int>(index % options_.classes);
  const int64_t n = sample_numel();
  const float* p = &prototypes_[static_cast<size_t>(k * n)];
  const auto& z = normal_quantiles();
  SampleRng rng(options_.seed, stream_, static_cast<uint64_t>(index));
  uint64_t bits = 0;
  int left = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (left == 0) bits = rng.next_u64(), left = kDrawsPerWord;
    const float v = std::clamp(p[i] + options_.noise * z[bits & kNoiseMask], 0.0f, 255.0f);
    bits >>= kNoiseBits, --left;
    pixels[i] = static_cast<uint8_t>(v + 0.5f);  // to the nearest level, halves up
  }
  *label = k;
}

}  // namespace tb
