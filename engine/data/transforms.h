// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/data/augment_draw.h"

namespace tb {

class Dataset;

// Per-channel mean and standard deviation in [0, 1] pixel units.
// Normalised value = (byte / 255 - mean[c]) / std[c].
struct NormStats {
  std::vector<float> mean, std;
};

// The usual constants: "fashion-mnist" (0.2860 / 0.3530), "mnist"
// (0.1307 / 0.3081), "cifar10" (0.4914, 0.4822, 0.4465 / 0.2470, 0.2435,
// 0.2616 - the true per-pixel std over the training set), "synthetic"
// (0.5 / 0.225 on every channel, matching SyntheticDataset's defaults).
// dataset_name may carry a "/split" or "[...]" suffix (a Dataset::name()).
// Throws tb::Error for an unknown name or a channel count that does not fit.
NormStats standard_norm_stats(const std::string& dataset_name, int64_t channels);
// Measured over the first max_samples samples (all if max_samples <= 0).
NormStats compute_norm_stats(const Dataset& ds, int64_t max_samples = 0);

// ---- primitives on one uint8 CHW sample (chw = {C, H, W} of the input) ----

// Mirror left-right. out may not alias in.
void hflip(const uint8_t* in, uint8_t* out, const Shape& chw);
// The H x W window at (dy, dx) of the image zero-padded by pad on every side;
// dy, dx in [0, 2*pad]. (pad, pad) returns the image unchanged.
void crop_padded(const uint8_t* in, uint8_t* out, const Shape& chw, int64_t pad, int64_t dy,
                 int64_t dx);
// Centre the image in an out_h x out_w canvas of zeros (e.g. 28x28 -> 32x32).
void pad_to(const uint8_t* in, uint8_t* out, const Shape& chw, int64_t out_h, int64_t out_w);
// (byte / 255 - mean[c]) / std[c]; empty stats means byte / 255.
void normalize(const uint8_t* in, float* out, const Shape& chw, const NormStats& stats);
// normalize's per-channel constants: out = float(b) * scale[c] + shift[c]
// (no statistics: scale 1/255, shift 0). augment::normalize_u8 uses the same
// constants, so normalising on the device gives the same bits.
void norm_scale_shift(const NormStats& stats, int64_t channels, std::vector<float>& scale,
                      std::vector<float>& shift);

// ---- the per-sample pipeline the loader runs ----

struct TransformOptions {
  int64_t pad_to_h = 0, pad_to_w = 0;  // resize by zero padding first; 0 keeps the size
  bool random_crop = false;            // random crop back to size after zero padding...
  int64_t crop_padding = 4;            // ...of this many pixels per side
  bool random_hflip = false;           // mirror with probability 1/2
  NormStats norm;                      // for float output; empty means byte / 255
};

// pad_to, random crop and flip fused into one pass over the sample. The
// random choices come from SampleRng(seed, epoch, index), so a sample looks
// the same whichever worker thread prepares it.
class SampleTransform {
 public:
  SampleTransform(const Shape& in_chw, const TransformOptions& options);

  const Shape& input_shape() const { return in_; }
  const Shape& output_shape() const { return out_; }
  const TransformOptions& options() const { return options_; }

  // in: input_shape() bytes; out: output_shape() bytes.
  void apply(const uint8_t* in, uint8_t* out, uint64_t seed, int64_t epoch, int64_t index) const;
  // out: output_shape() floats, from apply()'s output.
  void normalize(const uint8_t* in, float* out) const;

 private:
  TransformOptions options_;
  Shape in_, out_;
};

// What augment::augment_normalize_u8 needs to redo t.apply() for a batch of
// `epoch` on the device (gpu_augment): t's output size and options, the seed.
AugmentSpec augment_spec(const SampleTransform& t, uint64_t seed, int64_t epoch);

}  // namespace tb
