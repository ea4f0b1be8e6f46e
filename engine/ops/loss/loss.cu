// SPDX-License-Identifier: GPL-3.0-or-later
// The loss family's CUDA kernels and their launcher (loss.cuh): softmax
// cross-entropy with label smoothing, mean over the batch (contract in loss.h,
// the CPU's in loss_cpu.cpp):
//
//   logits, dlogits (N, K)   labels i32 (N)   stats f64 (2), all on the device
//   log p = z − lse(z) (max-shifted),  q = (1−ε)·onehot(y) + ε/K
//   loss_i = −(1−ε)·log p_y − ε/K · Σ_k log p_k
//   dlogits = grad_scale · (p − q) / N
//   stats += {Σ_i loss_i, #(argmax z == y)}   (first maximum wins ties)
//
// One warp per sample (row): K is small for classifiers, and a warp needs no
// shared memory or block barrier. exp in float, row sums in double (as the CPU
// fast path). The per-row results go to scratch and one block adds them in row
// order, so the stats are deterministic (no atomics) and never read by the host.
//
// Ran on an H200 before the move (gpu-runs/2026-11-26-h200: test_op_loss
// passed); moved without a change to the arithmetic, not run on a GPU since.
#include "engine/ops/loss/loss.cuh"

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/device_utils.cuh"

namespace tb::cuda {

namespace {

constexpr int kRowsPerBlock = 8;  // 8 warps

// rows[2n] = loss_n, rows[2n+1] = 1 when argmax == label.
__global__ void softmax_xent_rows_kernel(const float* z, const int32_t* labels, int64_t N,
                                         int64_t K, float eps, float grad_scale, float* dz,
                                         double* rows) {
  const int lane = threadIdx.x & 31;
  const int64_t n = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (n >= N) return;  // whole warp leaves together
  const float* row = z + n * K;
  // Max and its first index: per lane over k = lane, lane+32, ... (increasing k,
  // strict >), then a tree where ties keep the smaller index.
  float best = row[lane < K ? lane : 0];
  int64_t arg = lane < K ? lane : 0;
  for (int64_t k = lane + 32; k < K; k += 32)
    if (row[k] > best) best = row[k], arg = k;
  for (int o = 16; o > 0; o >>= 1) {
    const float ob = __shfl_down_sync(0xffffffffu, best, o);
    const int64_t oa = __shfl_down_sync(0xffffffffu, arg, o);
    if (ob > best || (ob == best && oa < arg)) best = ob, arg = oa;
  }
  best = __shfl_sync(0xffffffffu, best, 0);
  arg = __shfl_sync(0xffffffffu, arg, 0);
  double se = 0.0, sum_z = 0.0;
  for (int64_t k = lane; k < K; k += 32) {
    se += double(expf(row[k] - best));
    sum_z += double(row[k]);
  }
  se = warp_sum(se);
  sum_z = warp_sum(sum_z);
  se = __shfl_sync(0xffffffffu, se, 0);
  const int32_t y = labels[n];
  const bool valid = y >= 0 && y < K;
  const double lse = double(best) + log(se);
  if (lane == 0) {
    const double dK = double(K), e = double(eps);
    const double loss = valid ? -(1.0 - e) * (double(row[y]) - lse) - e / dK * (sum_z - dK * lse)
                              : __longlong_as_double(0x7ff8000000000000ll);  // NaN: bad label
    rows[2 * n] = loss;
    rows[2 * n + 1] = (valid && arg == y) ? 1.0 : 0.0;
  }
  if (dz) {
    const float s = float(double(grad_scale) / double(N));
    const float inv_se = float(1.0 / se);
    const float smooth = float(double(eps) / double(K));
    const float hit = float(1.0 - double(eps));
    float* d = dz + n * K;
    for (int64_t k = lane; k < K; k += 32) {
      const float p = expf(row[k] - best) * inv_se;
      d[k] = s * (p - smooth - (k == y ? hit : 0.0f));
    }
  }
}

// stats[0] += Σ loss_n, stats[1] += Σ correct_n, in row order per thread, then a tree.
__global__ void softmax_xent_sum_kernel(const double* rows, int64_t N, double* stats) {
  __shared__ double smem[32];
  double l = 0.0, c = 0.0;
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x) l += rows[2 * n], c += rows[2 * n + 1];
  l = block_sum(l, smem);
  c = block_sum(c, smem);
  if (threadIdx.x == 0) stats[0] += l, stats[1] += c;
}

}  // namespace

void launch_softmax_xent(const float* logits, const int32_t* labels, int64_t N, int64_t K,
                         float label_smoothing, float grad_scale, float* dlogits, double* rows,
                         double* stats, cudaStream_t s) {
  if (N <= 0) return;
  const unsigned blocks = unsigned((N + kRowsPerBlock - 1) / kRowsPerBlock);
  softmax_xent_rows_kernel<<<blocks, 32 * kRowsPerBlock, 0, s>>>(
      logits, labels, N, K, label_smoothing, grad_scale, dlogits, rows);
  TB_CUDA_LAUNCH_CHECK("softmax_xent_rows_kernel");
  softmax_xent_sum_kernel<<<1, 1024, 0, s>>>(rows, N, stats);
  TB_CUDA_LAUNCH_CHECK("softmax_xent_sum_kernel");
}

}  // namespace tb::cuda
