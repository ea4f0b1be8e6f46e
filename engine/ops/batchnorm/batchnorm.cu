// SPDX-License-Identifier: GPL-3.0-or-later
// The batch-norm family's CUDA kernels and their launchers (batchnorm.cuh),
// f32, NCHW and NHWC; contract in batchnorm.h, the CPU's in batchnorm_cpu.cpp:
//
//   x, y, dy, dx (N, C, HW)    M = N·HW values per channel
//   train:  μ = Σx/M,  σ² = Σ(x−μ)²/M (two passes, double accumulators)
//           y = γ·(x−μ)·invstd + β,   invstd = 1/sqrt(σ² + eps)
//           running_mean = (1−m)·running_mean + m·μ
//           running_var  = (1−m)·running_var  + m·σ²·M/(M−1)   (unbiased, as PyTorch)
//   eval:   the same with the running statistics
//   backward (x̂ = (x−μ)·invstd):
//           dβ = Σdy,  dγ = Σdy·x̂,  dx = γ·invstd/M·(M·dy − dβ − x̂·dγ)
//
// Statistics: one block per channel, fixed tree, so the same input gives the
// same bits every run. That is fine for the wide layers of CNNs; a layer with
// few channels and a huge M uses few SMs (later: split M over several blocks
// per channel with a second, fixed-order combine, as reduce.cu does).
// Apply passes are elementwise over the whole tensor.
//
// Epilogue (fuse_pointwise): y = act(BN(x) + r), act = ReLU or identity;
// backward dz = dy·[y > 0] (or dy), dres = dz, then the formulas above with dz.
// What it saves against the unfused kernels (train, one BN layer followed by
// ReLU and a residual add): unfused = stats, apply, add, relu (4 launches, the
// tensor read 5 and written 3 times); fused = stats, apply (2 launches, read 3
// and written once). Backward: unfused = relu mask, add's gradient routing,
// reduce, dx; fused = reduce (which also writes dres), dx. The epilogue's
// kernels are their own (bn_act_*), moved here as they were; the speed work
// merges them with the plain ones.
// Determinism: no atomics; one block per channel with a fixed tree
// (block_sum), so every kernel here gives the same bits run to run.
//
// Ran on an H200 before the move (gpu-runs/2026-11-26-h200: test_op_batchnorm
// and test_op_fused passed); moved without a change to the arithmetic, not
// run on a GPU since.
#include "engine/ops/batchnorm/batchnorm.cuh"

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/device_utils.cuh"

namespace tb::cuda {

namespace {

constexpr int kStatThreads = 512;

// Element m (0 ≤ m < M) of channel c.
__device__ __forceinline__ int64_t bn_at(int64_t m, int64_t c, int64_t C, int64_t HW, bool nhwc) {
  if (nhwc) return m * C + c;
  const int64_t n = m / HW, i = m - n * HW;
  return (n * C + c) * HW + i;
}
__device__ __forceinline__ int64_t bn_channel(int64_t j, int64_t C, int64_t HW, bool nhwc) {
  return nhwc ? j % C : (j / HW) % C;
}

__global__ void bn_stats_kernel(const float* x, float* running_mean, float* running_var,
                                double momentum, double eps, float* save_mean, float* save_invstd,
                                int64_t M, int64_t C, int64_t HW, bool nhwc) {
  __shared__ double smem[32];
  __shared__ double mean_s;
  const int64_t c = blockIdx.x;
  double acc = 0.0;
  for (int64_t m = threadIdx.x; m < M; m += blockDim.x) acc += double(x[bn_at(m, c, C, HW, nhwc)]);
  acc = block_sum(acc, smem);
  if (threadIdx.x == 0) mean_s = acc / double(M);
  __syncthreads();
  const double mean = mean_s;
  double ss = 0.0;
  for (int64_t m = threadIdx.x; m < M; m += blockDim.x) {
    const double dev = double(x[bn_at(m, c, C, HW, nhwc)]) - mean;
    ss += dev * dev;
  }
  ss = block_sum(ss, smem);
  if (threadIdx.x == 0) {
    const double var = ss / double(M);
    const double unbiased = M > 1 ? ss / double(M - 1) : var;
    save_mean[c] = float(mean);
    save_invstd[c] = float(1.0 / sqrt(var + eps));
    running_mean[c] = float((1.0 - momentum) * double(running_mean[c]) + momentum * mean);
    running_var[c] = float((1.0 - momentum) * double(running_var[c]) + momentum * unbiased);
  }
}

// y = γ·(x − mean)·invstd + β; `invstd_is_var`: the vector holds a variance
// (eval mode, running_var) and invstd = 1/sqrt(var + eps).
__global__ void bn_apply_kernel(const float* x, const float* gamma, const float* beta,
                                const float* mean, const float* invstd_or_var, bool invstd_is_var,
                                float eps, float* y, int64_t total, int64_t C, int64_t HW,
                                bool nhwc) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < total;
       j += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = bn_channel(j, C, HW, nhwc);
    const float is = invstd_is_var ? rsqrtf(invstd_or_var[c] + eps) : invstd_or_var[c];
    y[j] = gamma[c] * (x[j] - mean[c]) * is + beta[c];
  }
}

// work[2c] = Σdy, work[2c+1] = Σdy·x̂ (double); dγ, dβ written or accumulated.
__global__ void bn_backward_reduce_kernel(const float* x, const float* dy, const float* mean_v,
                                          const float* invstd_v, float* dgamma, float* dbeta,
                                          bool accumulate, double* work, int64_t M, int64_t C,
                                          int64_t HW, bool nhwc) {
  __shared__ double smem[32];
  const int64_t c = blockIdx.x;
  const double mean = mean_v[c], invstd = invstd_v[c];
  double sdy = 0.0, sdyxh = 0.0;
  for (int64_t m = threadIdx.x; m < M; m += blockDim.x) {
    const int64_t k = bn_at(m, c, C, HW, nhwc);
    const double g = dy[k];
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

__global__ void bn_backward_dx_kernel(const float* x, const float* dy, const float* gamma,
                                      const float* mean_v, const float* invstd_v,
                                      const double* work, float* dx, int64_t total, int64_t M,
                                      int64_t C, int64_t HW, bool nhwc) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < total;
       j += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = bn_channel(j, C, HW, nhwc);
    const double invstd = invstd_v[c];
    const double xh = (double(x[j]) - double(mean_v[c])) * invstd;
    const double a = double(gamma[c]) * invstd / double(M);
    dx[j] = float(a * (double(M) * double(dy[j]) - work[2 * c] - xh * work[2 * c + 1]));
  }
}

// y = act(γ·(x − mean)·is + β [+ r]); the BN part written exactly as
// bn_apply_kernel, then the add and the ReLU as add_kernel/relu would.
// `invstd_is_var`: eval mode, the vector holds running_var and is = rsqrt(var + eps).
__global__ void bn_act_apply_kernel(const float* x, const float* gamma, const float* beta,
                                    const float* mean, const float* invstd_or_var,
                                    bool invstd_is_var, float eps, const float* r, bool relu,
                                    float* y, int64_t total, int64_t C, int64_t HW, bool nhwc) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < total;
       j += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = bn_channel(j, C, HW, nhwc);
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
    const int64_t k = bn_at(m, c, C, HW, nhwc);
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
    const int64_t c = bn_channel(j, C, HW, nhwc);
    const float gz = relu ? (y[j] > 0.0f ? dy[j] : 0.0f) : dy[j];
    const double invstd = invstd_v[c];
    const double xh = (double(x[j]) - double(mean_v[c])) * invstd;
    const double a = double(gamma[c]) * invstd / double(M);
    dx[j] = float(a * (double(M) * double(gz) - work[2 * c] - xh * work[2 * c + 1]));
  }
}

}  // namespace

void launch_bn_stats(const float* x, float* running_mean, float* running_var, float momentum,
                     float eps, float* save_mean, float* save_invstd, int64_t N, int64_t C,
                     int64_t HW, bool nhwc, cudaStream_t s) {
  const int64_t M = N * HW;
  if (C <= 0 || M <= 0) return;
  bn_stats_kernel<<<unsigned(C), kStatThreads, 0, s>>>(x, running_mean, running_var, momentum, eps,
                                                       save_mean, save_invstd, M, C, HW, nhwc);
  TB_CUDA_LAUNCH_CHECK("bn_stats_kernel");
}

void launch_bn_forward_train(const float* x, const float* gamma, const float* beta,
                             float* running_mean, float* running_var, float momentum, float eps,
                             float* y, float* save_mean, float* save_invstd, int64_t N, int64_t C,
                             int64_t HW, bool nhwc, cudaStream_t s) {
  const int64_t M = N * HW, total = M * C;
  if (C <= 0 || M <= 0) return;
  launch_bn_stats(x, running_mean, running_var, momentum, eps, save_mean, save_invstd, N, C, HW,
                  nhwc, s);
  bn_apply_kernel<<<grid_for(total), kThreads, 0, s>>>(x, gamma, beta, save_mean, save_invstd,
                                                       false, eps, y, total, C, HW, nhwc);
  TB_CUDA_LAUNCH_CHECK("bn_apply_kernel");
}

void launch_bn_forward_eval(const float* x, const float* gamma, const float* beta,
                            const float* running_mean, const float* running_var, float eps,
                            float* y, int64_t N, int64_t C, int64_t HW, bool nhwc, cudaStream_t s) {
  const int64_t total = N * C * HW;
  if (total <= 0) return;
  bn_apply_kernel<<<grid_for(total), kThreads, 0, s>>>(x, gamma, beta, running_mean, running_var,
                                                       true, eps, y, total, C, HW, nhwc);
  TB_CUDA_LAUNCH_CHECK("bn_apply_kernel");
}

void launch_bn_backward(const float* x, const float* dy, const float* gamma, const float* save_mean,
                        const float* save_invstd, float* dx, float* dgamma, float* dbeta,
                        bool accumulate, double* work, int64_t N, int64_t C, int64_t HW, bool nhwc,
                        cudaStream_t s) {
  const int64_t M = N * HW, total = M * C;
  if (C <= 0 || M <= 0) return;
  bn_backward_reduce_kernel<<<unsigned(C), kStatThreads, 0, s>>>(
      x, dy, save_mean, save_invstd, dgamma, dbeta, accumulate, work, M, C, HW, nhwc);
  TB_CUDA_LAUNCH_CHECK("bn_backward_reduce_kernel");
  if (!dx) return;
  bn_backward_dx_kernel<<<grid_for(total), kThreads, 0, s>>>(x, dy, gamma, save_mean, save_invstd,
                                                             work, dx, total, M, C, HW, nhwc);
  TB_CUDA_LAUNCH_CHECK("bn_backward_dx_kernel");
}

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

}  // namespace tb::cuda
