// SPDX-License-Identifier: GPL-3.0-or-later
// The tensor-layout family's CUDA kernels (contract: layout.h): channel
// padding (trick 22, pad_channels_to), NCHW and NHWC, as the CPU's
// layout_cpu.cpp:
//
//   forward:  y (N, Cp, HW)[n, c, i] = c < C ? x[n, c, i] : 0
//   backward: dx (N, C, HW)[n, c, i] = dy[n, c, i]          (the slice c < C)
//
// One thread per element of the output, the flat index decoded in its memory
// order, so consecutive threads write consecutive addresses in either layout.
// Elements are moved as raw 2-, 4- or 8-byte words (f16/bf16, f32, f64): no
// arithmetic, so the result equals the CPU's bit for bit.
// Ran on an H200 (2026-11-26, commit b0014f2, as backend/cuda/pad_channels.cu):
// test_op_tensor's GPU rows passed. Moved here unchanged; not run on a GPU since.
#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/device_utils.cuh"
#include "engine/ops/layout/layout.cuh"

namespace tb::cuda {

namespace {

// Flat index j of an (N, Cj, HW) tensor -> (n, c, i), in its layout.
__device__ __forceinline__ void decode3(int64_t j, int64_t Cj, int64_t HW, bool nhwc, int64_t& n,
                                        int64_t& c, int64_t& i) {
  if (nhwc) {
    c = j % Cj;
    j /= Cj;
    i = j % HW;
    n = j / HW;
  } else {
    i = j % HW;
    j /= HW;
    c = j % Cj;
    n = j / Cj;
  }
}

__device__ __forceinline__ int64_t at3(int64_t n, int64_t c, int64_t i, int64_t Cj, int64_t HW,
                                       bool nhwc) {
  return nhwc ? (n * HW + i) * Cj + c : (n * Cj + c) * HW + i;
}

template <typename E>
__global__ void pad_forward_kernel(const E* x, E* y, int64_t N, int64_t C, int64_t Cp, int64_t HW,
                                   bool nhwc) {
  const int64_t total = N * Cp * HW;
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < total;
       j += int64_t(gridDim.x) * blockDim.x) {
    int64_t n, c, i;
    decode3(j, Cp, HW, nhwc, n, c, i);
    y[j] = c < C ? x[at3(n, c, i, C, HW, nhwc)] : E(0);
  }
}

template <typename E>
__global__ void pad_backward_kernel(const E* dy, E* dx, int64_t N, int64_t C, int64_t Cp,
                                    int64_t HW, bool nhwc) {
  const int64_t total = N * C * HW;
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < total;
       j += int64_t(gridDim.x) * blockDim.x) {
    int64_t n, c, i;
    decode3(j, C, HW, nhwc, n, c, i);
    dx[j] = dy[at3(n, c, i, Cp, HW, nhwc)];
  }
}

}  // namespace

void launch_pad_channels_forward(const void* x, void* y, int64_t N, int64_t C, int64_t Cp,
                                 int64_t HW, int elem_size, bool nhwc, cudaStream_t s) {
  const int64_t total = N * Cp * HW;
  if (total == 0) return;
  if (elem_size == 2) {
    pad_forward_kernel<uint16_t><<<grid_for(total), kThreads, 0, s>>>(
        static_cast<const uint16_t*>(x), static_cast<uint16_t*>(y), N, C, Cp, HW, nhwc);
  } else if (elem_size == 4) {
    pad_forward_kernel<uint32_t><<<grid_for(total), kThreads, 0, s>>>(
        static_cast<const uint32_t*>(x), static_cast<uint32_t*>(y), N, C, Cp, HW, nhwc);
  } else if (elem_size == 8) {
    pad_forward_kernel<uint64_t><<<grid_for(total), kThreads, 0, s>>>(
        static_cast<const uint64_t*>(x), static_cast<uint64_t*>(y), N, C, Cp, HW, nhwc);
  } else {
    TB_FAIL("pad_channels_forward: unsupported element size ", elem_size);
  }
  TB_CUDA_LAUNCH_CHECK("pad_forward_kernel");
}

void launch_pad_channels_backward(const void* dy, void* dx, int64_t N, int64_t C, int64_t Cp,
                                  int64_t HW, int elem_size, bool nhwc, cudaStream_t s) {
  const int64_t total = N * C * HW;
  if (total == 0) return;
  if (elem_size == 2) {
    pad_backward_kernel<uint16_t><<<grid_for(total), kThreads, 0, s>>>(
        static_cast<const uint16_t*>(dy), static_cast<uint16_t*>(dx), N, C, Cp, HW, nhwc);
  } else if (elem_size == 4) {
    pad_backward_kernel<uint32_t><<<grid_for(total), kThreads, 0, s>>>(
        static_cast<const uint32_t*>(dy), static_cast<uint32_t*>(dx), N, C, Cp, HW, nhwc);
  } else if (elem_size == 8) {
    pad_backward_kernel<uint64_t><<<grid_for(total), kThreads, 0, s>>>(
        static_cast<const uint64_t*>(dy), static_cast<uint64_t*>(dx), N, C, Cp, HW, nhwc);
  } else {
    TB_FAIL("pad_channels_backward: unsupported element size ", elem_size);
  }
  TB_CUDA_LAUNCH_CHECK("pad_backward_kernel");
}

}  // namespace tb::cuda
