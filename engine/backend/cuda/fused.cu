// SPDX-License-Identifier: GPL-3.0-or-later
// Fused pointwise kernels (trick 11), f32, NCHW and NHWC; forward and backward
// side by side. The CPU reference is cpu/fused.cpp (the unfused ops composed).
//
//   x, r, y, dy, dx, dres (N, C, HW)    M = N·HW values per channel
//   forward:  y = act(γ·(x−μ)·invstd + β + r),  act = ReLU or identity
//   backward: dz = dy·[y > 0] (or dy);  dres = dz
//             dβ = Σdz,  dγ = Σdz·x̂,  dx = γ·invstd/M·(M·dz − dβ − x̂·dγ)
//
//   linear epilogue, t (N, M) row-major = x wᵀ from a bias-free GEMM:
//             z = t + b;  ReLU: y = max(z, 0);  GELU: pre = z, y = z·Φ(z)
//   backward: dpre = dy·act'(·);  db = Σ_n dpre  (one sweep)
//
// What each fusion saves against the unfused kernels (train, one BN layer
// followed by ReLU and a residual add): unfused = stats, apply, add, relu
// (4 launches, the tensor read 5 and written 3 times); fused = stats, apply
// (2 launches, read 3 and written once). Backward: unfused = relu mask, add's
// gradient routing, reduce, dx; fused = reduce (which also writes dres), dx.
//
// Determinism: no atomics. Per-channel sums use one block per channel with
// batchnorm.cu's fixed tree (block_sum); the bias gradient uses a fixed
// 32x8 block per 32 columns, rows in a fixed order. So every kernel here gives
// the same bits run to run, with or without BackendOptions::deterministic.
//
// NOTE: written and compiled on a machine without a GPU; not run on a GPU yet.
#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/device_utils.cuh"
#include "engine/backend/cuda/kernels.h"

namespace tb::cuda {

namespace {

constexpr int kStatThreads = 512;  // as batchnorm.cu, so the statistics are the same bits

__device__ __forceinline__ int64_t fz_at(int64_t m, int64_t c, int64_t C, int64_t HW, bool nhwc) {
  if (nhwc) return m * C + c;
  const int64_t n = m / HW, i = m - n * HW;
  return (n * C + c) * HW + i;
}
__device__ __forceinline__ int64_t fz_channel(int64_t j, int64_t C, int64_t HW, bool nhwc) {
  return nhwc ? j % C : (j / HW) % C;
}

// y = act(γ·(x − mean)·is + β [+ r]); the BN part written exactly as
// batchnorm.cu's apply, then the add and the ReLU as add_kernel/relu would.
// `invstd_is_var`: eval mode, the vector holds running_var and is = rsqrt(var + eps).
__global__ void bn_act_apply_kernel(const float* x, const float* gamma, const float* beta,
                                    const float* mean, const float* invstd_or_var,
                                    bool invstd_is_var, float eps, const float* r, bool relu,
                                    float* y, int64_t total, int64_t C, int64_t HW, bool nhwc) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < total;
       j += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = fz_channel(j, C, HW, nhwc);
    const float is = invstd_is_var ? rsqrtf(invstd_or_var[c] + eps) : invstd_or_var[c];
    float v = gamma[c] * (x[j] - mean[c]) * is + beta[c];
    if (r) v = v + r[j];
    if (relu) v = v > 0.0f ? v : 0.0f;
    y[j] = v;
  }
}

// work[2c] = Σdz, work[2c+1] = Σdz·x̂ (double), with dz = mask(dy) computed on
// the fly and stored to dres when wanted; dγ, dβ written or accumulated.
__global__ void bn_act_backward_reduce_kernel(const float* x, const float* y, const float* dy,
                                              bool relu, const float* mean_v, const float* invstd_v,
                                              float* dres, float* dgamma, float* dbeta,
                                              bool accumulate, double* work, int64_t M, int64_t C,
                                              int64_t HW, bool nhwc) {
  __shared__ double smem[32];
  const int64_t c = blockIdx.x;
  const double mean = mean_v[c], invstd = invstd_v[c];
  double sdy = 0.0, sdyxh = 0.0;
  for (int64_t m = threadIdx.x; m < M; m += blockDim.x) {
    const int64_t k = fz_at(m, c, C, HW, nhwc);
    const float gz = relu ? (y[k] > 0.0f ? dy[k] : 0.0f) : dy[k];
    if (dres) dres[k] = gz;
    const double g = gz;
    sdy += g;
    sdyxh += g * (double(x[k]) - mean) * invstd;
  }
  sdy = block_sum(sdy, smem);
  sdyxh = block_sum(sdyxh, smem);
  if (threadIdx.x == 0) {
    work[2 * c] = sdy;
    work[2 * c + 1] = sdyxh;
    if (dbeta) dbeta[c] = accumulate ? dbeta[c] + float(sdy) : float(sdy);
    if (dgamma) dgamma[c] = accumulate ? dgamma[c] + float(sdyxh) : float(sdyxh);
  }
}

__global__ void bn_act_backward_dx_kernel(const float* x, const float* y, const float* dy,
                                          bool relu, const float* gamma, const float* mean_v,
                                          const float* invstd_v, const double* work, float* dx,
                                          int64_t total, int64_t M, int64_t C, int64_t HW,
                                          bool nhwc) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < total;
       j += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = fz_channel(j, C, HW, nhwc);
    const float gz = relu ? (y[j] > 0.0f ? dy[j] : 0.0f) : dy[j];
    const double invstd = invstd_v[c];
    const double xh = (double(x[j]) - double(mean_v[c])) * invstd;
    const double a = double(gamma[c]) * invstd / double(M);
    dx[j] = float(a * (double(M) * double(gz) - work[2 * c] - xh * work[2 * c + 1]));
  }
}

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

void launch_bn_act_forward_train(const float* x, const float* gamma, const float* beta,
                                 const float* r, bool relu, float* running_mean, float* running_var,
                                 float momentum, float eps, float* y, float* save_mean,
                                 float* save_invstd, int64_t N, int64_t C, int64_t HW, bool nhwc,
                                 cudaStream_t s) {
  const int64_t M = N * HW, total = M * C;
  if (C <= 0 || M <= 0) return;
  // batchnorm.cu's statistics kernel itself: the same bits as the unfused path.
  launch_bn_stats(x, running_mean, running_var, momentum, eps, save_mean, save_invstd, N, C, HW,
                  nhwc, s);
  bn_act_apply_kernel<<<grid_for(total), kThreads, 0, s>>>(
      x, gamma, beta, save_mean, save_invstd, false, eps, r, relu, y, total, C, HW, nhwc);
  TB_CUDA_LAUNCH_CHECK("bn_act_apply_kernel");
}

void launch_bn_act_forward_eval(const float* x, const float* gamma, const float* beta,
                                const float* r, bool relu, const float* running_mean,
                                const float* running_var, float eps, float* y, int64_t N, int64_t C,
                                int64_t HW, bool nhwc, cudaStream_t s) {
  const int64_t total = N * C * HW;
  if (total <= 0) return;
  bn_act_apply_kernel<<<grid_for(total), kThreads, 0, s>>>(
      x, gamma, beta, running_mean, running_var, true, eps, r, relu, y, total, C, HW, nhwc);
  TB_CUDA_LAUNCH_CHECK("bn_act_apply_kernel");
}

void launch_bn_act_backward(const float* x, const float* y, const float* dy, const float* gamma,
                            const float* save_mean, const float* save_invstd, bool relu, float* dx,
                            float* dres, float* dgamma, float* dbeta, bool accumulate, double* work,
                            int64_t N, int64_t C, int64_t HW, bool nhwc, cudaStream_t s) {
  const int64_t M = N * HW, total = M * C;
  if (C <= 0 || M <= 0) return;
  bn_act_backward_reduce_kernel<<<unsigned(C), kStatThreads, 0, s>>>(
      x, y, dy, relu, save_mean, save_invstd, dres, dgamma, dbeta, accumulate, work, M, C, HW,
      nhwc);
  TB_CUDA_LAUNCH_CHECK("bn_act_backward_reduce_kernel");
  if (!dx) return;
  bn_act_backward_dx_kernel<<<grid_for(total), kThreads, 0, s>>>(
      x, y, dy, relu, gamma, save_mean, save_invstd, work, dx, total, M, C, HW, nhwc);
  TB_CUDA_LAUNCH_CHECK("bn_act_backward_dx_kernel");
}

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
