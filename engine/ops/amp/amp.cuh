// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The mixed-precision family's CUDA launchers (amp.cu) on raw device pointers
// and a stream: amp_cuda.cpp checks the Tensors and calls these; amp.cu never
// sees a Tensor. Each enqueues on `s` and returns at once; each checks its
// launch (tb::Error on failure). `state` is the loss scaler's f32 [4] device
// array (scale, growth tracker, found_inf, skipped), see amp::kScalerStateSize.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/core/dtype.h"

namespace tb::cuda {

// f32 <-> f16/bf16, round to nearest even; n elements.
void launch_cast_f32_f16(const float* src, uint16_t* dst, int64_t n, cudaStream_t s);
void launch_cast_f16_f32(const uint16_t* src, float* dst, int64_t n, cudaStream_t s);
void launch_cast_f32_bf16(const float* src, uint16_t* dst, int64_t n, cudaStream_t s);
void launch_cast_bf16_f32(const uint16_t* src, float* dst, int64_t n, cudaStream_t s);
// The one of those four for the dtypes `from` -> `to` (a pair the contract
// allows: amp_cuda.cpp's cast, and the tests that run it on the emulator).
inline void launch_cast(DType from, DType to, const void* src, void* dst, int64_t n,
                        cudaStream_t s) {
  if (from == DType::F32 && to == DType::F16)
    launch_cast_f32_f16(static_cast<const float*>(src), static_cast<uint16_t*>(dst), n, s);
  else if (from == DType::F32 && to == DType::BF16)
    launch_cast_f32_bf16(static_cast<const float*>(src), static_cast<uint16_t*>(dst), n, s);
  else if (from == DType::F16 && to == DType::F32)
    launch_cast_f16_f32(static_cast<const uint16_t*>(src), static_cast<float*>(dst), n, s);
  else
    launch_cast_bf16_f32(static_cast<const uint16_t*>(src), static_cast<float*>(dst), n, s);
}
// t *= state[0]
void launch_amp_scale(float* t, int64_t n, const float* state, cudaStream_t s);
// state[2] := 1 when any g is inf/NaN (never cleared here); g *= 1/state[0].
void launch_amp_unscale_check(float* g, int64_t n, float* state, cudaStream_t s);
// One thread: backoff or growth from state[2], then state[2] := 0.
void launch_amp_update_scale(float* state, float growth, float backoff, int64_t interval,
                             cudaStream_t s);

}  // namespace tb::cuda
