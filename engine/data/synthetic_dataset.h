// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/dataset.h"

namespace tb {

struct SyntheticOptions {
  Shape shape{3, 32, 32};  // {C, H, W}
  int64_t size = 1000;     // samples in this split
  int classes = 10;
  uint64_t seed = 0;
  float noise = 40.0f;  // std of the per-pixel Gaussian noise, in 0..255 units
};

// A learnable stand-in for a real data set, for tests and benchmarks that
// must not depend on files. Each class has a smooth mean image (two plane
// waves per channel, so small shifts and flips keep most of the signal);
// a sample is its class image plus Gaussian noise (a normal quantile picked by
// 12 random bits: synthetic_dataset.cpp), rounded and clamped to 0..255.
// Sample i has label i % classes. Everything is a pure function of
// (seed, split, index): the class images are shared by both splits, the
// noise is not, so "test" is held-out data from the same distribution.
// Samples are computed in get(); nothing but the class images is stored.
class SyntheticDataset : public Dataset {
 public:
  explicit SyntheticDataset(const SyntheticOptions& options, const std::string& split = "train");

  std::string name() const override;
  int64_t size() const override { return options_.size; }
  Shape sample_shape() const override { return options_.shape; }
  int num_classes() const override { return options_.classes; }
  void get(int64_t index, uint8_t* pixels, int32_t* label) const override;

 private:
  SyntheticOptions options_;
  std::string split_;
  uint64_t stream_;                // 1 for train, 2 for test
  std::vector<float> prototypes_;  // classes * C*H*W, 0..255
};

// Entry `index` (0..4095) of the noise's table of standard normal quantiles
// (for tests).
float synthetic_noise_table_value(int index);

}  // namespace tb
