// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The augment family's CUDA launchers (normalize_u8.cu, augment.cu) on raw
// device pointers and a stream: augment_cuda.cpp checks the Tensors and calls
// these; the .cu files never see a Tensor. Each enqueues on `s` and returns
// at once; each checks its launch (tb::Error on failure).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/data/augment_draw.h"

namespace tb::cuda {

// normalize_u8.cu (h2d_uint8): dst f32 (N,C,H,W) = src u8 * scale[c] +
// shift[c] (scale/shift: C floats on the device), without fused
// multiply-add: the host loader's bits exactly.
void launch_normalize_u8(const uint8_t* src, float* dst, const float* scale, const float* shift,
                         int64_t N, int64_t C, int64_t HW, bool nhwc, cudaStream_t s);

// augment.cu (gpu_augment): dst f32 (N, C, spec.out_h, spec.out_w) = the
// loader's pad_to + random crop + flip + normalisation of src u8 (N, C, H, W)
// NCHW, with the draws of SampleRng(spec.seed, spec.epoch, indices[n])
// (indices i32 (N) on the device). scale/shift travel in the kernel's
// parameters (C <= kAugmentMaxC).
constexpr int kAugmentMaxC = 16;
struct AugmentCoef {
  float scale[kAugmentMaxC], shift[kAugmentMaxC];
};
void launch_augment_normalize_u8(const uint8_t* src, const int32_t* indices, float* dst, int64_t N,
                                 int64_t C, int64_t H, int64_t W, const AugmentSpec& spec,
                                 const AugmentCoef& coef, bool nhwc, cudaStream_t s);

}  // namespace tb::cuda
