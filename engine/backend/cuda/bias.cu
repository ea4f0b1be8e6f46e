// SPDX-License-Identifier: GPL-3.0-or-later
// Per-channel bias, forward and backward, for convolutions (N, C, HW) and
// linear layers (N, M) seen as (N, M, 1). Sums in double, fixed order.
#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/device_utils.cuh"
#include "engine/backend/cuda/kernels.h"

namespace tb::cuda {

namespace {

// y[n,c,i] += b[c]
__global__ void bias_add_kernel(float* y, const float* b, int64_t total, int64_t C, int64_t HW,
                                bool nhwc) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < total;
       j += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = nhwc ? j % C : (j / HW) % C;
    y[j] += b[c];
  }
}

// NCHW: one block per channel c; the channel's N runs of HW contiguous values.
__global__ void bias_grad_nchw_kernel(const float* dy, float* db, int64_t N, int64_t C, int64_t HW,
                                      bool accumulate) {
  __shared__ double smem[32];
  const int64_t c = blockIdx.x;
  double acc = 0.0;
  for (int64_t n = 0; n < N; ++n) {
    const float* row = dy + (n * C + c) * HW;
    for (int64_t i = threadIdx.x; i < HW; i += blockDim.x) acc += double(row[i]);
  }
  acc = block_sum(acc, smem);
  if (threadIdx.x == 0) db[c] = accumulate ? db[c] + float(acc) : float(acc);
}

// Rows-by-channels (R = N·HW rows, C columns): column sums. A block of 32x8
// threads owns 32 adjacent channels, so each warp reads 32 consecutive floats
// (coalesced); the 8 row-strided partial sums meet in shared memory.
__global__ void bias_grad_rows_kernel(const float* dy, float* db, int64_t R, int64_t C,
                                      bool accumulate) {
  __shared__ double part[8][33];
  const int64_t c = int64_t(blockIdx.x) * 32 + threadIdx.x;
  double acc = 0.0;
  if (c < C)
    for (int64_t r = threadIdx.y; r < R; r += 8) acc += double(dy[r * C + c]);
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    double s = 0.0;
    for (int k = 0; k < 8; ++k) s += part[k][threadIdx.x];
    db[c] = accumulate ? db[c] + float(s) : float(s);
  }
}

}  // namespace

void launch_bias_add(float* y, const float* b, int64_t N, int64_t C, int64_t HW, bool nhwc,
                     cudaStream_t s) {
  const int64_t total = N * C * HW;
  if (total <= 0) return;
  bias_add_kernel<<<grid_for(total), kThreads, 0, s>>>(y, b, total, C, HW, nhwc || HW == 1);
  TB_CUDA_LAUNCH_CHECK("bias_add_kernel");
}

void launch_bias_grad(const float* dy, float* db, int64_t N, int64_t C, int64_t HW, bool nhwc,
                      bool accumulate, cudaStream_t s) {
  if (C <= 0) return;
  if (nhwc || HW == 1) {
    const unsigned blocks = unsigned((C + 31) / 32);
    bias_grad_rows_kernel<<<blocks, dim3(32, 8), 0, s>>>(dy, db, N * HW, C, accumulate);
    TB_CUDA_LAUNCH_CHECK("bias_grad_rows_kernel");
  } else {
    bias_grad_nchw_kernel<<<unsigned(C), kThreads, 0, s>>>(dy, db, N, C, HW, accumulate);
    TB_CUDA_LAUNCH_CHECK("bias_grad_nchw_kernel");
  }
}

}  // namespace tb::cuda
