// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The tensor-layout family's CUDA launchers (layout.cu) on raw device
// pointers and a stream: layout_cuda.cpp checks the Tensors and calls these;
// layout.cu never sees a Tensor. Each enqueues on `s` and returns at once;
// each checks its launch (tb::Error on failure).
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tb::cuda {

// Channel padding (trick 22), elements of elem_size bytes (2, 4 or 8):
// forward  x (N, C, HW) -> y (N, Cp, HW): y[:, :C] = x, y[:, C:] = 0;
// backward dy (N, Cp, HW) -> dx (N, C, HW): dx = dy[:, :C].
void launch_pad_channels_forward(const void* x, void* y, int64_t N, int64_t C, int64_t Cp,
                                 int64_t HW, int elem_size, bool nhwc, cudaStream_t s);
void launch_pad_channels_backward(const void* dy, void* dx, int64_t N, int64_t C, int64_t Cp,
                                  int64_t HW, int elem_size, bool nhwc, cudaStream_t s);

}  // namespace tb::cuda
