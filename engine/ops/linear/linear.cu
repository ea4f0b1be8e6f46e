// SPDX-License-Identifier: GPL-3.0-or-later
// The linear family's activation epilogue (fuse_pointwise, trick 11), f32;
// forward and backward side by side; launchers declared in linear.cuh. The
// CPU reference is linear_cpu.cpp's (the plain op and the pointwise ops
// composed).
//
//   linear epilogue, t (N, M) row-major = x wᵀ from a bias-free GEMM:
//             z = t + b;  ReLU: y = max(z, 0);  GELU: pre = z, y = z·Φ(z)
//   backward: dpre = dy·act'(·);  db = Σ_n dpre  (one sweep)
//
// Determinism: no atomics. The bias gradient uses a fixed 32x8 block per 32
// columns, rows in a fixed order. So every kernel here gives the same bits
// run to run, with or without BackendOptions::deterministic.
//
// Ran on an H200 before the move (gpu-runs/2026-11-26-h200: test_op_linear
// and test_op_fused passed, as engine/backend/cuda/fused.cu); moved without a
// change to the arithmetic, not run on a GPU since.
#include "engine/ops/linear/linear.cuh"

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/device_utils.cuh"
#include "engine/backend/cuda/kernels.h"  // launch_fill (memory.cu)

namespace tb::cuda {

namespace {

// Φ(z) = erfc(−z/√2)/2, as pointwise.cu's GELU (exact, not the tanh form).
__device__ __forceinline__ float gelu_f(float z) {
  return 0.5f * z * erfcf(-z * 0.70710678118654752440f);
}
__device__ __forceinline__ float gelu_grad_f(float z) {
  const float cdf = 0.5f * erfcf(-z * 0.70710678118654752440f);
  const float pdf = 0.39894228040143267794f * expf(-0.5f * z * z);
  return cdf + z * pdf;
}

__global__ void bias_act_kernel(float* t, const float* b, int act, float* y, int64_t total,
                                int64_t M) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < total;
       j += int64_t(gridDim.x) * blockDim.x) {
    const float z = b ? t[j] + b[j % M] : t[j];
    if (act == 0) {
      y[j] = z > 0.0f ? z : 0.0f;
    } else {
      t[j] = z;
      y[j] = gelu_f(z);
    }
  }
}

// A block of 32x8 threads owns 32 adjacent columns (coalesced rows); the 8
// row-strided partial sums meet in shared memory in a fixed order (bias.cu's
// bias_grad_rows_kernel, with the activation's gradient applied on the way).
__global__ void act_backward_bgrad_kernel(const float* y, const float* pre, const float* dy,
                                          int act, float* dpre, float* db, bool accumulate,
                                          int64_t N, int64_t M) {
  __shared__ double part[8][33];
  const int64_t c = int64_t(blockIdx.x) * 32 + threadIdx.x;
  double acc = 0.0;
  if (c < M)
    for (int64_t r = threadIdx.y; r < N; r += 8) {
      const int64_t k = r * M + c;
      const float g = act == 0 ? (y[k] > 0.0f ? dy[k] : 0.0f) : dy[k] * gelu_grad_f(pre[k]);
      dpre[k] = g;
      acc += double(g);
    }
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (db && threadIdx.y == 0 && c < M) {
    double s = 0.0;
    for (int k = 0; k < 8; ++k) s += part[k][threadIdx.x];
    db[c] = accumulate ? db[c] + float(s) : float(s);
  }
}

}  // namespace

void launch_bias_act(float* t, const float* b, int act, float* y, int64_t N, int64_t M,
                     cudaStream_t s) {
  const int64_t total = N * M;
  if (total <= 0) return;
  bias_act_kernel<<<grid_for(total), kThreads, 0, s>>>(t, b, act, y, total, M);
  TB_CUDA_LAUNCH_CHECK("bias_act_kernel");
}

void launch_act_backward_bgrad(const float* y, const float* pre, const float* dy, int act,
                               float* dpre, float* db, bool accumulate, int64_t N, int64_t M,
                               cudaStream_t s) {
  if (M <= 0) return;
  if (N <= 0) {  // empty sum: db = 0 (or unchanged when accumulating)
    if (db && !accumulate) launch_fill(db, M, 4, 0, s);
    return;
  }
  const unsigned blocks = unsigned((M + 31) / 32);
  act_backward_bgrad_kernel<<<blocks, dim3(32, 8), 0, s>>>(y, pre, dy, act, dpre, db, accumulate, N,
                                                           M);
  TB_CUDA_LAUNCH_CHECK("act_backward_bgrad_kernel");
}

}  // namespace tb::cuda
