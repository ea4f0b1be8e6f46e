// SPDX-License-Identifier: GPL-3.0-or-later
// optimizer::sum_squares on CUDA (launcher in optimizer.cuh): the sum of
// squares in double, deterministic: pass 1 has a fixed grid of
// kReducePartials blocks, each summing a grid-stride slice into partials[b];
// pass 2 is one block summing the partials in a fixed tree. No atomics, so the
// result is the same bit for bit on every run (gradient clipping reads it).
// Moved from engine/backend/cuda/reduce.cu without a change; not run on a GPU
// since the move.
#include "engine/ops/optimizer/optimizer.cuh"

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/device_utils.cuh"

namespace tb::cuda {

namespace {

template <typename T>
__global__ void sum_squares_partial_kernel(const T* x, int64_t n, double* partials) {
  __shared__ double smem[32];
  double acc = 0.0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const double v = double(x[i]);
    acc += v * v;
  }
  acc = block_sum(acc, smem);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void sum_partials_kernel(const double* partials, int count, double* out) {
  __shared__ double smem[32];
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  acc = block_sum(acc, smem);
  if (threadIdx.x == 0) out[0] = acc;
}

}  // namespace

template <typename T>
void launch_sum_squares(const T* x, int64_t n, double* partials, double* out, cudaStream_t s) {
  // Fewer blocks for small tensors; the partial count is part of the
  // summation order, so it depends on n only.
  const int blocks = int(grid_for(n, kThreads, kReducePartials));
  sum_squares_partial_kernel<T><<<blocks, kThreads, 0, s>>>(x, n, partials);
  TB_CUDA_LAUNCH_CHECK("sum_squares_partial_kernel");
  sum_partials_kernel<<<1, 1024, 0, s>>>(partials, blocks, out);
  TB_CUDA_LAUNCH_CHECK("sum_partials_kernel");
}

template void launch_sum_squares<float>(const float*, int64_t, double*, double*, cudaStream_t);
template void launch_sum_squares<double>(const double*, int64_t, double*, double*, cudaStream_t);

}  // namespace tb::cuda
