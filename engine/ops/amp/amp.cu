// SPDX-License-Identifier: GPL-3.0-or-later
// Mixed-precision kernels: f32 <-> f16/bf16 casts and the dynamic loss
// scaler's device side (PyTorch GradScaler semantics). The scaler's state is a
// f32 [4] device array (scale, growth tracker, found_inf, skipped); every
// kernel here reads or writes it in place, so no step needs the host.
// amp_cpu.cpp is the reference these must agree with (contract: amp.h).
//
// Ran on an H200 (2026-11-26, commit b0014f2): test_op_amp's GPU rows, which
// compare these with the CPU, passed, and memcheck was clean. Moved from
// engine/backend/cuda/ without a change; not run on a GPU since.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "engine/ops/amp/amp.cuh"

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/device_utils.cuh"

namespace tb::cuda {

namespace {

// A bit test, not isfinite(): stays correct under fast-math flags.
__device__ __forceinline__ bool non_finite(float v) {
  return (__float_as_uint(v) & 0x7f800000u) == 0x7f800000u;
}

__global__ void cast_f32_f16_kernel(const float* s, uint16_t* d, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    d[i] = __half_as_ushort(__float2half_rn(s[i]));
}
__global__ void cast_f16_f32_kernel(const uint16_t* s, float* d, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    d[i] = __half2float(__ushort_as_half(s[i]));
}
__global__ void cast_f32_bf16_kernel(const float* s, uint16_t* d, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    d[i] = __bfloat16_as_ushort(__float2bfloat16_rn(s[i]));
}
__global__ void cast_bf16_f32_kernel(const uint16_t* s, float* d, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    d[i] = __bfloat162float(__ushort_as_bfloat16(s[i]));
}

__global__ void amp_scale_kernel(float* t, int64_t n, const float* state) {
  const float sc = state[0];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    t[i] *= sc;
}

// Every thread that sees a non-finite value stores 1 into found_inf; the
// stores race only with each other and all write the same value, so no atomic
// is needed. The flag is only ever set here, cleared by amp_update_scale.
__global__ void amp_unscale_check_kernel(float* g, int64_t n, float* state) {
  const float inv = 1.0f / state[0];  // the scale is a power of two: exact
  bool bad = false;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float v = g[i];
    bad |= non_finite(v);
    g[i] = v * inv;
  }
  if (bad) state[2] = 1.0f;
}

__global__ void amp_update_scale_kernel(float* state, float growth, float backoff,
                                        float interval) {
  if (state[2] != 0.0f) {
    state[0] *= backoff;
    state[1] = 0.0f;
    state[3] += 1.0f;
  } else {
    state[1] += 1.0f;
    if (state[1] >= interval) {
      const float grown = state[0] * growth;
      if (!non_finite(grown)) state[0] = grown;  // never grow into inf
      state[1] = 0.0f;
    }
  }
  state[2] = 0.0f;
}

}  // namespace

void launch_cast_f32_f16(const float* src, uint16_t* dst, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  cast_f32_f16_kernel<<<grid_for(n), kThreads, 0, s>>>(src, dst, n);
  TB_CUDA_LAUNCH_CHECK("cast_f32_f16_kernel");
}
void launch_cast_f16_f32(const uint16_t* src, float* dst, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  cast_f16_f32_kernel<<<grid_for(n), kThreads, 0, s>>>(src, dst, n);
  TB_CUDA_LAUNCH_CHECK("cast_f16_f32_kernel");
}
void launch_cast_f32_bf16(const float* src, uint16_t* dst, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  cast_f32_bf16_kernel<<<grid_for(n), kThreads, 0, s>>>(src, dst, n);
  TB_CUDA_LAUNCH_CHECK("cast_f32_bf16_kernel");
}
void launch_cast_bf16_f32(const uint16_t* src, float* dst, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  cast_bf16_f32_kernel<<<grid_for(n), kThreads, 0, s>>>(src, dst, n);
  TB_CUDA_LAUNCH_CHECK("cast_bf16_f32_kernel");
}

void launch_amp_scale(float* t, int64_t n, const float* state, cudaStream_t s) {
  if (n <= 0) return;
  amp_scale_kernel<<<grid_for(n), kThreads, 0, s>>>(t, n, state);
  TB_CUDA_LAUNCH_CHECK("amp_scale_kernel");
}

void launch_amp_unscale_check(float* g, int64_t n, float* state, cudaStream_t s) {
  if (n <= 0) return;
  amp_unscale_check_kernel<<<grid_for(n), kThreads, 0, s>>>(g, n, state);
  TB_CUDA_LAUNCH_CHECK("amp_unscale_check_kernel");
}

void launch_amp_update_scale(float* state, float growth, float backoff, int64_t interval,
                             cudaStream_t s) {
  amp_update_scale_kernel<<<1, 1, 0, s>>>(state, growth, backoff, float(interval));
  TB_CUDA_LAUNCH_CHECK("amp_update_scale_kernel");
}

}  // namespace tb::cuda
