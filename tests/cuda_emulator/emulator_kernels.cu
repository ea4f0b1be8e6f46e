// SPDX-License-Identifier: GPL-3.0-or-later
// The CUDA emulator's own test kernels (emulator_kernels.cuh).
#include "tests/cuda_emulator/emulator_kernels.cuh"

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/device_utils.cuh"

namespace tb::cuda {

namespace {

__global__ void write_global_index_kernel(int64_t* out) {
  const int64_t block = blockIdx.x + int64_t(gridDim.x) * (blockIdx.y + int64_t(gridDim.y) * blockIdx.z);
  const int64_t thread = threadIdx.x + int64_t(blockDim.x) * (threadIdx.y + int64_t(blockDim.y) * threadIdx.z);
  const int64_t per_block = int64_t(blockDim.x) * blockDim.y * blockDim.z;
  const int64_t i = block * per_block + thread;
  out[i] = i;
}

__global__ void block_sums_kernel(const float* x, float* out, int n) {
  __shared__ float smem[32];
  float v = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) v += x[int64_t(blockIdx.x) * n + i];
  v = block_sum(v, smem);
  if (threadIdx.x == 0) out[blockIdx.x] = v;
}

__global__ void neighbour_kernel(const int* in, int* out, int n, bool barrier) {
  __shared__ int s[1024];
  const int t = threadIdx.x;
  s[t] = in[t];
  if (barrier) __syncthreads();
  out[t] = s[(t + 1) % n];
}

__global__ void shuffles_kernel(const int* in, int* xor_out, int* bcast_out) {
  const int t = threadIdx.x;
  xor_out[t] = __shfl_xor_sync(0xffffffffu, in[t], 5);
  bcast_out[t] = __shfl_sync(0xffffffffu, in[t], 7);
}

__global__ void divergent_barrier_kernel(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

__global__ void barrier_after_exit_kernel(int* out) {
  if (threadIdx.x == 0) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void partial_warp_shuffle_kernel(float* out) {
  out[threadIdx.x] = warp_sum(1.0f);
}

__global__ void shuffle_after_exit_kernel(float* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = warp_sum(1.0f);
}

__global__ void shuffle_against_barrier_kernel(float* out) {
  if (threadIdx.x == 0) out[0] = __shfl_sync(0xffffffffu, 1.0f, 1);
  __syncthreads();
}

__global__ void empty_kernel() {}

}  // namespace

void launch_write_global_index(int64_t* out, dim3 grid, dim3 block) {
  write_global_index_kernel<<<grid, block>>>(out);
  TB_CUDA_LAUNCH_CHECK("write_global_index_kernel");
}

void launch_block_sums(const float* x, float* out, int n, unsigned blocks, unsigned threads) {
  block_sums_kernel<<<blocks, threads>>>(x, out, n);
  TB_CUDA_LAUNCH_CHECK("block_sums_kernel");
}

void launch_neighbour(const int* in, int* out, int n, bool barrier) {
  neighbour_kernel<<<1, unsigned(n)>>>(in, out, n, barrier);
  TB_CUDA_LAUNCH_CHECK("neighbour_kernel");
}

void launch_shuffles(const int* in, int* xor_out, int* bcast_out) {
  shuffles_kernel<<<1, 32>>>(in, xor_out, bcast_out);
  TB_CUDA_LAUNCH_CHECK("shuffles_kernel");
}

void launch_divergent_barrier(int* out) {
  divergent_barrier_kernel<<<1, 32>>>(out);
  TB_CUDA_LAUNCH_CHECK("divergent_barrier_kernel");
}

void launch_barrier_after_exit(int* out) {
  barrier_after_exit_kernel<<<1, 64>>>(out);
  TB_CUDA_LAUNCH_CHECK("barrier_after_exit_kernel");
}

void launch_partial_warp_shuffle(float* out) {
  partial_warp_shuffle_kernel<<<1, 48>>>(out);
  TB_CUDA_LAUNCH_CHECK("partial_warp_shuffle_kernel");
}

void launch_shuffle_after_exit(float* out) {
  shuffle_after_exit_kernel<<<1, 32>>>(out);
  TB_CUDA_LAUNCH_CHECK("shuffle_after_exit_kernel");
}

void launch_shuffle_against_barrier(float* out) {
  shuffle_against_barrier_kernel<<<1, 32>>>(out);
  TB_CUDA_LAUNCH_CHECK("shuffle_against_barrier_kernel");
}

void launch_empty(dim3 grid, dim3 block) {
  empty_kernel<<<grid, block>>>();
  TB_CUDA_LAUNCH_CHECK("empty_kernel");
}

}  // namespace tb::cuda
