// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The random choices of SampleTransform (random crop offset, horizontal flip),
// written once for the host and the device (gpu_augment, trick 15). Plain
// integers only, so nvcc and the host compiler both take it.
//
// It restates SampleRng (sample_rng.h) draw for draw: the same SplitMix64
// seeding from (seed, epoch, index, kTransformStream), then uniform_int(2P+1)
// for dy, for dx, then coin() for the flip. uniform_int's 128-bit product is
// __umul64hi on the device. tests/engine/test_device_data.cpp checks this
// against SampleRng and SampleTransform::apply over many samples.
#include <cstdint>

#if defined(__CUDACC__)
#define TB_AUGMENT_HD __host__ __device__ __forceinline__
#else
#define TB_AUGMENT_HD inline
#endif

namespace tb {

// Keeps the transform's random stream apart from the shuffle's ("transfor").
inline constexpr uint64_t kTransformStream = 0x7472616e73666f72ull;

// What the device needs to redo the loader's per-sample transform: the
// output canvas (pad_to, the input centred in it), the crop and flip options,
// and the seed and epoch of SampleRng. Built by augment_spec() (transforms.h).
struct AugmentSpec {
  int64_t out_h = 0, out_w = 0;  // output size (pad_to, or the input size)
  bool random_crop = false;
  int64_t crop_padding = 4;  // P: offsets drawn from 0..2P, then shifted by -P
  bool random_hflip = false;
  uint64_t seed = 0;
  int64_t epoch = 0;
};

// One sample's choices: the crop window shifted by (dy, dx) in -P..P, mirrored
// left-right when flip.
struct AugmentDraw {
  int64_t dy = 0, dx = 0;
  bool flip = false;
};

namespace augment_detail {

TB_AUGMENT_HD uint64_t mix(uint64_t z) {  // SampleRng::mix
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

TB_AUGMENT_HD uint64_t mulhi(uint64_t a, uint64_t b) {  // (a * b) >> 64, exactly
#if defined(__CUDA_ARCH__)
  return __umul64hi(a, b);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) >> 64);
#endif
}

}  // namespace augment_detail

// The draws SampleTransform::apply makes for sample `index` of `epoch`.
TB_AUGMENT_HD AugmentDraw augment_draw(const AugmentSpec& s, uint64_t index) {
  using namespace augment_detail;
  AugmentDraw d;
  if (!s.random_crop && !s.random_hflip) return d;  // apply() draws nothing then
  // SampleRng(seed, epoch, index, kTransformStream)
  uint64_t h = mix(s.seed ^ 0x6a09e667f3bcc909ull);
  h = mix(h ^ (static_cast<uint64_t>(s.epoch) + 0x3c6ef372fe94f82bull));
  h = mix(h ^ (index + 0xa54ff53a5f1d36f1ull));
  uint64_t state = mix(h ^ (kTransformStream + 0x510e527fade682d1ull));
  auto next = [&state]() {  // SampleRng::next_u64
    state += 0x9e3779b97f4a7c15ull;
    return mix(state);
  };
  if (s.random_crop) {
    const uint64_t n = static_cast<uint64_t>(2 * s.crop_padding + 1);
    d.dy = static_cast<int64_t>(mulhi(next(), n)) - s.crop_padding;
    d.dx = static_cast<int64_t>(mulhi(next(), n)) - s.crop_padding;
  }
  if (s.random_hflip) d.flip = (next() >> 63) != 0;
  return d;
}

}  // namespace tb

#undef TB_AUGMENT_HD
