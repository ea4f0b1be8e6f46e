// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/data/transforms.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/core/error.h"
#include "engine/data/augment_draw.h"
#include "engine/data/dataset.h"
#include "engine/data/sample_rng.h"

namespace tb {

namespace {
// kTransformStream (augment_draw.h) keeps the transform's random stream apart
// from the shuffle's; gpu_augment redraws from it on the device.

void check_chw(const Shape& chw, const char* what) {
  TB_CHECK(chw.size() == 3 && chw[0] >= 1 && chw[1] >= 1 && chw[2] >= 1, what,
           ": sample shape must be {C, H, W}, got ", shape_str(chw));
}
}  // namespace

NormStats standard_norm_stats(const std::string& dataset_name, int64_t channels) {
  const std::string base = dataset_name.substr(0, dataset_name.find_first_of("/["));
  NormStats s;
  if (base == "fashion-mnist") {
    s = {{0.2860f}, {0.3530f}};
  } else if (base == "mnist") {
    s = {{0.1307f}, {0.3081f}};
  } else if (base == "cifar10") {
    s = {{0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f}};
  } else if (base == "synthetic") {
    // 128 +- (50, 30 amplitude waves) + N(0, 40): std sqrt(1250 + 450 + 1600) / 255.
    s = {std::vector<float>(static_cast<size_t>(std::max<int64_t>(channels, 1)), 0.5f),
         std::vector<float>(static_cast<size_t>(std::max<int64_t>(channels, 1)), 0.225f)};
  } else {
    TB_FAIL("no standard normalisation constants for data set '", dataset_name,
            "' (known: fashion-mnist, mnist, cifar10, synthetic)");
  }
  TB_CHECK(static_cast<int64_t>(s.mean.size()) == channels, "normalisation constants of '", base,
           "' are for ", s.mean.size(), " channel(s), but the samples have ", channels);
  return s;
}

NormStats compute_norm_stats(const Dataset& ds, int64_t max_samples) {
  const Shape chw = ds.sample_shape();
  const int64_t C = chw[0], HW = chw[1] * chw[2];
  const int64_t n = max_samples > 0 ? std::min(max_samples, ds.size()) : ds.size();
  TB_CHECK(n > 0, ds.name(), ": cannot compute normalisation statistics of an empty data set");
  std::vector<double> sum(static_cast<size_t>(C)), sq(static_cast<size_t>(C));
  std::vector<uint8_t> px(static_cast<size_t>(C * HW));
  int32_t label = 0;
  for (int64_t i = 0; i < n; ++i) {
    ds.get(i, px.data(), &label);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t j = 0; j < HW; ++j) {
        const double v = px[static_cast<size_t>(c * HW + j)] / 255.0;
        sum[static_cast<size_t>(c)] += v;
        sq[static_cast<size_t>(c)] += v * v;
      }
  }
  NormStats s;
  const double count = double(n) * double(HW);
  for (int64_t c = 0; c < C; ++c) {
    const double m = sum[static_cast<size_t>(c)] / count;
    const double var = std::max(sq[static_cast<size_t>(c)] / count - m * m, 1e-12);
    s.mean.push_back(static_cast<float>(m));
    s.std.push_back(static_cast<float>(std::sqrt(var)));
  }
  return s;
}

void hflip(const uint8_t* in, uint8_t* out, const Shape& chw) {
  check_chw(chw, "hflip");
  const int64_t W = chw[2], rows = chw[0] * chw[1];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t x = 0; x < W; ++x) out[r * W + x] = in[r * W + (W - 1 - x)];
}

void crop_padded(const uint8_t* in, uint8_t* out, const Shape& chw, int64_t pad, int64_t dy,
                 int64_t dx) {
  check_chw(chw, "crop_padded");
  TB_CHECK(pad >= 0 && dy >= 0 && dy <= 2 * pad && dx >= 0 && dx <= 2 * pad,
           "crop_padded: offset (", dy, ", ", dx, ") outside 0..", 2 * pad, " for padding ", pad);
  const int64_t C = chw[0], H = chw[1], W = chw[2];
  for (int64_t c = 0; c < C; ++c)
    for (int64_t y = 0; y < H; ++y) {
      const int64_t sy = y + dy - pad;
      for (int64_t x = 0; x < W; ++x) {
        const int64_t sx = x + dx - pad;
        const bool inside = sy >= 0 && sy < H && sx >= 0 && sx < W;
        out[(c * H + y) * W + x] = inside ? in[(c * H + sy) * W + sx] : 0;
      }
    }
}

void pad_to(const uint8_t* in, uint8_t* out, const Shape& chw, int64_t out_h, int64_t out_w) {
  check_chw(chw, "pad_to");
  const int64_t C = chw[0], H = chw[1], W = chw[2];
  TB_CHECK(out_h >= H && out_w >= W, "pad_to: cannot pad ", H, "x", W, " down to ", out_h, "x",
           out_w);
  const int64_t top = (out_h - H) / 2, left = (out_w - W) / 2;
  std::memset(out, 0, static_cast<size_t>(C * out_h * out_w));
  for (int64_t c = 0; c < C; ++c)
    for (int64_t y = 0; y < H; ++y)
      std::memcpy(out + (c * out_h + top + y) * out_w + left, in + (c * H + y) * W,
                  static_cast<size_t>(W));
}

void normalize(const uint8_t* in, float* out, const Shape& chw, const NormStats& stats) {
  check_chw(chw, "normalize");
  const int64_t C = chw[0], HW = chw[1] * chw[2];
  TB_CHECK(stats.mean.size() == stats.std.size() &&
               (stats.mean.empty() || static_cast<int64_t>(stats.mean.size()) == C),
           "normalize: ", stats.mean.size(), " means and ", stats.std.size(), " stds for ", C,
           " channel(s)");
  thread_local std::vector<float> scale, shift;
  norm_scale_shift(stats, C, scale, shift);
  for (int64_t c = 0; c < C; ++c) {
    const float sc = scale[static_cast<size_t>(c)], sh = shift[static_cast<size_t>(c)];
    const uint8_t* src = in + c * HW;
    float* dst = out + c * HW;
    for (int64_t j = 0; j < HW; ++j) dst[j] = static_cast<float>(src[j]) * sc + sh;
  }
}

void norm_scale_shift(const NormStats& stats, int64_t channels, std::vector<float>& scale,
                      std::vector<float>& shift) {
  TB_CHECK(stats.mean.empty() || static_cast<int64_t>(stats.mean.size()) == channels,
           "normalize: ", stats.mean.size(), " means for ", channels, " channel(s)");
  scale.assign(static_cast<size_t>(channels), 1.0f / 255.0f);
  shift.assign(static_cast<size_t>(channels), 0.0f);
  if (stats.mean.empty()) return;
  for (size_t c = 0; c < scale.size(); ++c) {
    // (b/255 - m)/s = b * scale + shift: one multiply-add per pixel.
    scale[c] = 1.0f / (255.0f * stats.std[c]);
    shift[c] = -stats.mean[c] / stats.std[c];
  }
}

SampleTransform::SampleTransform(const Shape& in_chw, const TransformOptions& options)
    : options_(options), in_(in_chw) {
  check_chw(in_chw, "transform");
  const TransformOptions& o = options_;
  TB_CHECK((o.pad_to_h == 0) == (o.pad_to_w == 0),
           "transform: pad_to needs both height and width, got ", o.pad_to_h, "x", o.pad_to_w);
  out_ = in_;
  if (o.pad_to_h > 0) {
    TB_CHECK(o.pad_to_h >= in_[1] && o.pad_to_w >= in_[2], "transform: cannot pad ", in_[1], "x",
             in_[2], " samples to ", o.pad_to_h, "x", o.pad_to_w);
    out_[1] = o.pad_to_h;
    out_[2] = o.pad_to_w;
  }
  TB_CHECK(!o.random_crop ||
               (o.crop_padding >= 0 && o.crop_padding <= out_[1] && o.crop_padding <= out_[2]),
           "transform: crop padding ", o.crop_padding, " must be 0..", std::min(out_[1], out_[2]));
  const NormStats& n = o.norm;
  TB_CHECK(n.mean.size() == n.std.size() &&
               (n.mean.empty() || static_cast<int64_t>(n.mean.size()) == in_[0]),
           "transform: ", n.mean.size(), " means and ", n.std.size(), " stds for ", in_[0],
           " channel(s)");
  for (float s : n.std)
    TB_CHECK(s > 0.0f, "transform: normalisation std must be positive, got ", s);
}

void SampleTransform::apply(const uint8_t* in, uint8_t* out, uint64_t seed, int64_t epoch,
                            int64_t index) const {
  const int64_t C = in_[0], H = in_[1], W = in_[2];
  const int64_t OH = out_[1], OW = out_[2];
  const int64_t top = (OH - H) / 2, left = (OW - W) / 2;  // pad_to placement

  int64_t dy = 0, dx = 0;  // crop offset relative to the unshifted window
  bool flip = false;
  if (options_.random_crop || options_.random_hflip) {
    SampleRng rng(seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index),
                  kTransformStream);
    if (options_.random_crop) {
      const int64_t P = options_.crop_padding;
      dy = static_cast<int64_t>(rng.uniform_int(static_cast<uint64_t>(2 * P + 1))) - P;
      dx = static_cast<int64_t>(rng.uniform_int(static_cast<uint64_t>(2 * P + 1))) - P;
    }
    if (options_.random_hflip) flip = rng.coin();
  }

  // Output (y, x) <- canvas (y + dy, xf + dx) <- input (that - (top, left)),
  // where xf mirrors x; anything outside the input is zero padding.
  for (int64_t c = 0; c < C; ++c)
    for (int64_t y = 0; y < OH; ++y) {
      const int64_t sy = y + dy - top;
      uint8_t* dst = out + (c * OH + y) * OW;
      if (sy < 0 || sy >= H) {
        std::memset(dst, 0, static_cast<size_t>(OW));
        continue;
      }
      const uint8_t* src = in + (c * H + sy) * W;
      for (int64_t x = 0; x < OW; ++x) {
        const int64_t sx = (flip ? OW - 1 - x : x) + dx - left;
        dst[x] = (sx >= 0 && sx < W) ? src[sx] : 0;
      }
    }
}

void SampleTransform::normalize(const uint8_t* in, float* out) const {
  tb::normalize(in, out, out_, options_.norm);
}

AugmentSpec augment_spec(const SampleTransform& t, uint64_t seed, int64_t epoch) {
  const TransformOptions& o = t.options();
  AugmentSpec s;
  s.out_h = t.output_shape()[1];
  s.out_w = t.output_shape()[2];
  s.random_crop = o.random_crop;
  s.crop_padding = o.crop_padding;
  s.random_hflip = o.random_hflip;
  s.seed = seed;
  s.epoch = epoch;
  return s;
}

}  // namespace tb
