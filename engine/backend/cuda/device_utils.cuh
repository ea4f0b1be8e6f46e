// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Small device helpers shared by the .cu files: grid sizing and fixed-order
// reductions (a warp tree, then a block tree through shared memory). The order
// of additions depends only on blockDim, never on timing, so results are
// reproducible run to run.
#include <cuda_runtime.h>

#include <cstdint>

namespace tb::cuda {

constexpr int kThreads = 256;
// The most blocks grid_for gives a grid-stride loop (CUDA's y and z limit;
// the loop covers the rest).
constexpr int64_t kMaxGridBlocks = 65535;

// Blocks for a grid-stride loop over n elements (capped: the loop covers the rest).
inline unsigned grid_for(int64_t n, int threads = kThreads, int64_t cap = kMaxGridBlocks) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > cap) b = cap;
  return static_cast<unsigned>(b);
}

// for j in [0, n), one value a thread, striding by the grid, in the index
// type I (int64_t, or int32_t where n plus one grid's stride fits).
#define TB_GRID_STRIDE(I, j, n)                                                \
  for (I j = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); j < (n); \
       j += I(gridDim.x) * I(blockDim.x))

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;  // valid in lane 0
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024). The result is
// valid in thread 0. `smem` holds 32 T. Every thread must call it.
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* smem) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // smem may still be read by a previous call
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  v = threadIdx.x < warps ? smem[threadIdx.x] : T(0);
  if (warp == 0) v = warp_sum(v);
  return v;
}

}  // namespace tb::cuda
