// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The pooling family's CUDA launchers (pooling.cu), f32, on raw device
// pointers and a stream: pooling_cuda.cpp checks the Tensors and calls these;
// pooling.cu never sees a Tensor. Each enqueues on `s` and returns at once;
// each checks its launches (tb::Error on failure).
//   x, dx (N, C, H, W), y, dy, argmax (N, C, H_out, W_out); `nhwc` picks the
//   memory order.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tb::cuda {

struct PoolDims {
  int64_t N, C, H, W, kernel, stride, pad, H_out, W_out;
  bool nhwc;
};
// argmax (same shape as y) = ih*W + iw of the first maximum (NaN wins), as the CPU.
void launch_maxpool_forward(const PoolDims& d, const float* x, float* y, int32_t* argmax,
                            cudaStream_t s);
// dx written (not accumulated): each input cell gathers the dy of the windows
// whose argmax it is, in window order (deterministic, no atomics).
void launch_maxpool_backward(const PoolDims& d, const float* dy, const int32_t* argmax, float* dx,
                             cudaStream_t s);
void launch_avgpool_forward(const PoolDims& d, const float* x, float* y, cudaStream_t s);
void launch_avgpool_backward(const PoolDims& d, const float* dy, float* dx, cudaStream_t s);
// x (N,C,H,W) -> y (N,C) and back; sums in double.
void launch_global_avgpool_forward(const float* x, float* y, int64_t N, int64_t C, int64_t HW,
                                   bool nhwc, cudaStream_t s);
void launch_global_avgpool_backward(const float* dy, float* dx, int64_t N, int64_t C, int64_t HW,
                                    bool nhwc, cudaStream_t s);

}  // namespace tb::cuda
