// SPDX-License-Identifier: GPL-3.0-or-later
// The augment family's normalize_u8 kernel (contract: augment.h; trick 6,
// h2d_uint8): uint8 images are copied (4x fewer bytes than f32) and
// normalised here.
//
//   src u8 (N, C, H, W)   dst f32 (N, C, H, W)   same layout
//   dst[n,c,h,w] = float(src[n,c,h,w]) * scale[c] + shift[c]
//
// __fmul_rn/__fadd_rn keep nvcc from contracting the expression into one fused
// multiply-add: the result then has the same bits as the loader's host
// normalisation (engine/data/transforms.cpp), which the tests check.
#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/device_utils.cuh"
#include "engine/ops/augment/augment.cuh"

namespace tb::cuda {

namespace {

__global__ void normalize_u8_kernel(const uint8_t* src, float* dst, const float* scale,
                                    const float* shift, int64_t n, int64_t C, int64_t HW,
                                    bool nhwc) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = nhwc ? i % C : (i / HW) % C;
    dst[i] = __fadd_rn(__fmul_rn(float(src[i]), scale[c]), shift[c]);
  }
}

}  // namespace

void launch_normalize_u8(const uint8_t* src, float* dst, const float* scale, const float* shift,
                         int64_t N, int64_t C, int64_t HW, bool nhwc, cudaStream_t s) {
  const int64_t n = N * C * HW;
  if (n == 0) return;
  normalize_u8_kernel<<<grid_for(n), kThreads, 0, s>>>(src, dst, scale, shift, n, C, HW, nhwc);
  TB_CUDA_LAUNCH_CHECK("normalize_u8_kernel");
}

}  // namespace tb::cuda
