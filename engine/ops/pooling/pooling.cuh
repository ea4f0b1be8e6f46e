// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The pooling family's CUDA launchers (pooling.cu) on raw device pointers and
// a stream: pooling_cuda.cpp checks the Tensors and calls these; pooling.cu
// never sees a Tensor. Each enqueues on `s` and returns at once; each checks
// its launches (tb::Error on failure).
//   x, dx (N, C, H, W), y, dy, argmax (N, C, H_out, W_out); `nhwc` picks the
//   memory order. T = float, __half or __nv_bfloat16 (amp_elements.cuh: each
//   value read into float, each output rounded once).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "engine/ops/amp/amp_elements.cuh"

namespace tb::cuda {

struct PoolDims {
  int64_t N, C, H, W, kernel, stride, pad, H_out, W_out;
  bool nhwc;
};
// argmax (same shape as y) = ih*W + iw of the first maximum (NaN wins), as the CPU.
template <typename T>
void launch_maxpool_forward(const PoolDims& d, const T* x, T* y, int32_t* argmax,
                            cudaStream_t s);
// dx written (not accumulated): each input cell gathers the dy of the windows
// whose argmax it is, in window order (deterministic, no atomics).
template <typename T>
void launch_maxpool_backward(const PoolDims& d, const T* dy, const int32_t* argmax, T* dx,
                             cudaStream_t s);
template <typename T>
void launch_avgpool_forward(const PoolDims& d, const T* x, T* y, cudaStream_t s);
template <typename T>
void launch_avgpool_backward(const PoolDims& d, const T* dy, T* dx, cudaStream_t s);
// x (N,C,H,W) -> y (N,C) and back; sums in double.
template <typename T>
void launch_global_avgpool_forward(const T* x, T* y, int64_t N, int64_t C, int64_t HW, bool nhwc,
                                   cudaStream_t s);
template <typename T>
void launch_global_avgpool_backward(const T* dy, T* dx, int64_t N, int64_t C, int64_t HW,
                                    bool nhwc, cudaStream_t s);

}  // namespace tb::cuda
