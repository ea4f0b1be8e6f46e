// SPDX-License-Identifier: GPL-3.0-or-later
// gpu_augment (trick 15): the loader's per-sample pipeline on the device. The
// batch arrives as the data set's bytes; one kernel places each image on its
// pad_to canvas, crops with zero padding, flips and normalises.
//
//   src u8 (N, C, H, W) NCHW   indices i32 (N)   dst f32 (N, C, OH, OW) NCHW or NHWC
//   one thread block per sample; its threads walk the sample's outputs in
//   memory order (coalesced stores), gathering from src.
//
// The draws are augment_draw() (engine/data/augment_draw.h), the host
// SampleRng's SplitMix64 with __umul64hi for the 128-bit product, so the crop
// offsets and flips are the host loader's. __fmul_rn/__fadd_rn forbid the
// fused multiply-add nvcc would otherwise form: same bits as the loader's
// normalisation. Reference: the CPU backend's augment_normalize_u8
// (augment_cpu.cpp), compared bit for bit in test_op_augment's GPU slot.
//
// Ran on an H200 (2026-11-26, commit b0014f2, as backend/cuda/augment.cu):
// test_op_augment's GPU rows passed, memcheck clean. Moved here unchanged;
// not run on a GPU since.
#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/device_utils.cuh"
#include "engine/data/augment_draw.h"
#include "engine/ops/augment/augment.cuh"

namespace tb::cuda {

namespace {

__global__ void augment_normalize_u8_kernel(const uint8_t* __restrict__ src,
                                            const int32_t* __restrict__ indices,
                                            float* __restrict__ dst, int C, int H, int W,
                                            AugmentSpec spec, AugmentCoef coef, bool nhwc) {
  // Within a sample every offset fits in 32 bits (checked by the caller): the
  // divisions below are then 32-bit, not the slow emulated 64-bit ones.
  const int64_t n = blockIdx.x;
  const int OH = int(spec.out_h), OW = int(spec.out_w), per = C * OH * OW;
  const int top = (OH - H) / 2, left = (OW - W) / 2;
  // Every thread redraws its sample's choices: a few dozen integer ops,
  // cheaper than a shared-memory broadcast and a barrier.
  const AugmentDraw a = augment_draw(spec, static_cast<uint64_t>(indices[n]));
  const int dy = int(a.dy), dx = int(a.dx);
  const uint8_t* s = src + n * C * H * W;
  float* d = dst + n * per;
  for (int i = threadIdx.x; i < per; i += blockDim.x) {
    int c, y, x;
    if (nhwc) {
      c = i % C, x = (i / C) % OW, y = i / (C * OW);
    } else {
      x = i % OW, y = (i / OW) % OH, c = i / (OH * OW);
    }
    const int sy = y + dy - top;
    const int sx = (a.flip ? OW - 1 - x : x) + dx - left;
    const bool inside = sy >= 0 && sy < H && sx >= 0 && sx < W;
    const float b = inside ? float(s[(c * H + sy) * W + sx]) : 0.0f;
    d[i] = __fadd_rn(__fmul_rn(b, coef.scale[c]), coef.shift[c]);
  }
}

}  // namespace

void launch_augment_normalize_u8(const uint8_t* src, const int32_t* indices, float* dst, int64_t N,
                                 int64_t C, int64_t H, int64_t W, const AugmentSpec& spec,
                                 const AugmentCoef& coef, bool nhwc, cudaStream_t s) {
  if (N == 0) return;
  augment_normalize_u8_kernel<<<static_cast<unsigned>(N), kThreads, 0, s>>>(src, indices, dst, C, H,
                                                                            W, spec, coef, nhwc);
  TB_CUDA_LAUNCH_CHECK("augment_normalize_u8_kernel");
}

}  // namespace tb::cuda
