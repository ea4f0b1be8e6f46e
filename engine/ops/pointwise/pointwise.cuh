// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The pointwise family's CUDA launchers (pointwise.cu) on raw device pointers
// and a stream: pointwise_cuda.cpp checks the Tensors and calls these (as do
// the convolutions, for accumulate); pointwise.cu never sees a Tensor. Each
// enqueues on `s` and returns at once; each checks its launch (tb::Error on
// failure). Any rank, n elements; y may alias x, dx may alias dy.
// T = float, double, __half or __nv_bfloat16 (amp_elements.cuh: f16/bf16
// computed in float, each output rounded once).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/ops/amp/amp_elements.cuh"

namespace tb::cuda {

template <typename T>
void launch_relu_forward(const T* x, T* y, int64_t n, cudaStream_t s);
template <typename T>
void launch_relu_backward(const T* y, const T* dy, T* dx, int64_t n, cudaStream_t s);
template <typename T>
void launch_gelu_forward(const T* x, T* y, int64_t n, cudaStream_t s);
template <typename T>
void launch_gelu_backward(const T* x, const T* dy, T* dx, int64_t n, cudaStream_t s);
template <typename T>
void launch_add(const T* a, const T* b, T* y, int64_t n, cudaStream_t s);
template <typename T>
void launch_accumulate(const T* src, T* dst, int64_t n, cudaStream_t s);
template <typename T>
void launch_scale(T* t, double alpha, int64_t n, cudaStream_t s);

}  // namespace tb::cuda
