// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Host-side launchers of the backend's own kernels, one block per .cu file.
// The op families already moved keep theirs beside their kernels
// (engine/ops/<family>/<family>.cuh); the rest follow.
// Plain declarations on raw device pointers and a stream: the .cpp files that
// check Tensors call these; the .cu files never see a Tensor or JSON.
// Every launcher enqueues on `s` and returns at once (no host sync) unless it
// says otherwise; every launcher checks the launch (tb::Error on failure).
// Shapes are in the comments: (N, C, H, W) logical; `nhwc` picks the memory order.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tb::cuda {

// ---------------------------------------------------------------- memory.cu
// p[0, n) := pattern, an element of elem_size bytes (1, 2, 4 or 8).
void launch_fill(void* p, int64_t n, int elem_size, uint64_t pattern, cudaStream_t s);
uint16_t half_bits(float v);      // IEEE binary16, round to nearest even
uint16_t bfloat16_bits(float v);  // bfloat16, round to nearest even
void launch_cast_f32_f64(const float* src, double* dst, int64_t n, cudaStream_t s);
void launch_cast_f64_f32(const double* src, float* dst, int64_t n, cudaStream_t s);
// (N,C,H,W) in NCHW -> NHWC (to_nhwc) or back, elements of elem_size bytes.
void launch_convert_layout(const void* src, void* dst, int64_t N, int64_t C, int64_t H, int64_t W,
                           int elem_size, bool to_nhwc, cudaStream_t s);


// ---------------------------------------------------------------- bias.cu
// Per-channel bias of y (N, C, HW): y[n,c,i] += b[c]. A linear layer's y (N, M)
// is (N, M, 1) in either order.
void launch_bias_add(float* y, const float* b, int64_t N, int64_t C, int64_t HW, bool nhwc,
                     cudaStream_t s);
// db[c] (+)= Σ_{n,i} dy[n,c,i], sums in double in a fixed order. Rows-by-channels
// input (NHWC, or a linear layer's HW == 1) sums row slices into `scratch` of
// bias_grad_scratch_bytes() first (0 bytes, scratch unused, for NCHW).
size_t bias_grad_scratch_bytes(int64_t N, int64_t C, int64_t HW, bool nhwc);
void launch_bias_grad(const float* dy, float* db, int64_t N, int64_t C, int64_t HW, bool nhwc,
                      bool accumulate, double* scratch, cudaStream_t s);
// The same with f16 (bf16 = false) or bf16 activations y, dy (b, db f32): y's
// sum computed in f32 and rounded once; dy widened into the double sums.
void launch_bias_add_lp(uint16_t* y, bool bf16, const float* b, int64_t N, int64_t C, int64_t HW,
                        bool nhwc, cudaStream_t s);
void launch_bias_grad_lp(const uint16_t* dy, bool bf16, float* db, int64_t N, int64_t C,
                         int64_t HW, bool nhwc, bool accumulate, double* scratch, cudaStream_t s);


}  // namespace tb::cuda
