// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Kernels that test the CUDA emulator itself (test_cuda_emulator.cpp): each
// launcher enqueues one kernel and checks its launch (tb::Error on failure).
// Only the emulator builds emulator_kernels.cu (the engine never does).
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tb::cuda {

// out[z][y][x...]: every thread of grid × block writes its global linear
// index at that index (blockIdx, threadIdx, gridDim, blockDim all used).
void launch_write_global_index(int64_t* out, dim3 grid, dim3 block);
// out[b] = Σ x[b·n .. (b+1)·n) by blocks of `threads`, through
// device_utils.cuh's block_sum (warp shuffles, then shared memory).
void launch_block_sums(const float* x, float* out, int n, unsigned blocks, unsigned threads);
// One block of n threads: s[t] = in[t]; (a barrier if `barrier`); out[t] = s[(t+1) % n].
void launch_neighbour(const int* in, int* out, int n, bool barrier);
// Warp exchanges in one 32-thread block: xor_out[t] = t ^ 5's value, bcast_out[t] = lane 7's.
void launch_shuffles(const int* in, int* xor_out, int* bcast_out);
// Faults the emulator reports: half the block at another __syncthreads;
// a __syncthreads after thread 0 returned; a full-mask shuffle in a 48-thread block.
void launch_divergent_barrier(int* out);
void launch_barrier_after_exit(int* out);
void launch_partial_warp_shuffle(float* out);
// A shuffle after one lane returned; lane 0 in a shuffle while the others
// wait at a barrier (a deadlock).
void launch_shuffle_after_exit(float* out);
void launch_shuffle_against_barrier(float* out);
// An empty kernel on grid × block (the configuration checks).
void launch_empty(dim3 grid, dim3 block);

}  // namespace tb::cuda
