// SPDX-License-Identifier: GPL-3.0-or-later
// Per-channel bias, forward and backward, for convolutions (N, C, HW) and
// linear layers (N, M) seen as (N, M, 1). Sums in double, fixed order. The
// activations (y, dy) are f32, or f16/bf16 (low-precision activations: read
// widened, y's sum rounded once on store); b and db are f32.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/device_utils.cuh"
#include "engine/backend/cuda/kernels.h"

namespace tb::cuda {

namespace {

__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ float widen(__half v) { return __half2float(v); }
__device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T narrow(float v);
template <>
__device__ __forceinline__ float narrow<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half narrow<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// y[n,c,i] += b[c]
template <typename T>
__global__ void bias_add_kernel(T* y, const float* b, int64_t total, int64_t C, int64_t HW,
                                bool nhwc) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < total;
       j += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = nhwc ? j % C : (j / HW) % C;
    y[j] = narrow<T>(widen(y[j]) + b[c]);
  }
}

// NCHW: one block per channel c; the channel's N runs of HW contiguous values.
template <typename T>
__global__ void bias_grad_nchw_kernel(const T* dy, float* db, int64_t N, int64_t C, int64_t HW,
                                      bool accumulate) {
  __shared__ double smem[32];
  const int64_t c = blockIdx.x;
  double acc = 0.0;
  for (int64_t n = 0; n < N; ++n) {
    const T* row = dy + (n * C + c) * HW;
    for (int64_t i = threadIdx.x; i < HW; i += blockDim.x) acc += double(widen(row[i]));
  }
  acc = block_sum(acc, smem);
  if (threadIdx.x == 0) db[c] = accumulate ? db[c] + float(acc) : float(acc);
}

// Rows-by-channels (R = N·HW rows, C columns): column sums in two fixed-order
// passes. One block per channel group alone would leave an NHWC conv's
// N·H·W rows (200k for a 28x28 batch of 256) to one SM; instead block
// (slice, group) sums kBiasRowsPerSlice rows of 32 adjacent channels into
// partials[slice][c] (each warp reads 32 consecutive floats, coalesced; the
// 8 row-strided sums meet in shared memory), and a second kernel adds the
// slices in order.
constexpr int64_t kBiasRowsPerSlice = 1024;

template <typename T>
__global__ void bias_grad_rows_partial_kernel(const T* dy, double* partials, int64_t R,
                                              int64_t C) {
  __shared__ double part[8][33];
  const int64_t slice = blockIdx.x;
  const int64_t c = int64_t(blockIdx.y) * 32 + threadIdx.x;
  const int64_t r_end = min(R, (slice + 1) * kBiasRowsPerSlice);
  double acc = 0.0;
  if (c < C)
    for (int64_t r = slice * kBiasRowsPerSlice + threadIdx.y; r < r_end; r += 8)
      acc += double(widen(dy[r * C + c]));
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    double s = 0.0;
    for (int k = 0; k < 8; ++k) s += part[k][threadIdx.x];
    partials[slice * C + c] = s;
  }
}

__global__ void bias_grad_rows_finish_kernel(const double* partials, float* db, int64_t slices,
                                             int64_t C, bool accumulate) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < C;
       c += int64_t(gridDim.x) * blockDim.x) {
    double s = 0.0;
    for (int64_t k = 0; k < slices; ++k) s += partials[k * C + c];
    db[c] = accumulate ? db[c] + float(s) : float(s);
  }
}

int64_t bias_grad_slices(int64_t N, int64_t HW) {
  return std::max<int64_t>(1, (N * HW + kBiasRowsPerSlice - 1) / kBiasRowsPerSlice);
}

template <typename T>
void bias_add(T* y, const float* b, int64_t N, int64_t C, int64_t HW, bool nhwc, cudaStream_t s) {
  const int64_t total = N * C * HW;
  if (total <= 0) return;
  bias_add_kernel<T><<<grid_for(total), kThreads, 0, s>>>(y, b, total, C, HW, nhwc || HW == 1);
  TB_CUDA_LAUNCH_CHECK("bias_add_kernel");
}

template <typename T>
void bias_grad(const T* dy, float* db, int64_t N, int64_t C, int64_t HW, bool nhwc,
               bool accumulate, double* scratch, cudaStream_t s) {
  if (C <= 0) return;
  if (nhwc || HW == 1) {
    const int64_t slices = bias_grad_slices(N, HW);
    const int64_t groups = (C + 31) / 32;
    TB_CHECK(groups <= 65535, "bias_grad: ", C, " channels exceed the grid's y limit");
    bias_grad_rows_partial_kernel<T><<<dim3(unsigned(slices), unsigned(groups)), dim3(32, 8), 0,
                                       s>>>(dy, scratch, N * HW, C);
    TB_CUDA_LAUNCH_CHECK("bias_grad_rows_partial_kernel");
    bias_grad_rows_finish_kernel<<<grid_for(C), kThreads, 0, s>>>(scratch, db, slices, C,
                                                                 accumulate);
    TB_CUDA_LAUNCH_CHECK("bias_grad_rows_finish_kernel");
  } else {
    bias_grad_nchw_kernel<T><<<unsigned(C), kThreads, 0, s>>>(dy, db, N, C, HW, accumulate);
    TB_CUDA_LAUNCH_CHECK("bias_grad_nchw_kernel");
  }
}

}  // namespace

void launch_bias_add(float* y, const float* b, int64_t N, int64_t C, int64_t HW, bool nhwc,
                     cudaStream_t s) {
  bias_add(y, b, N, C, HW, nhwc, s);
}

void launch_bias_add_lp(uint16_t* y, bool bf16, const float* b, int64_t N, int64_t C, int64_t HW,
                        bool nhwc, cudaStream_t s) {
  if (bf16)
    bias_add(reinterpret_cast<__nv_bfloat16*>(y), b, N, C, HW, nhwc, s);
  else
    bias_add(reinterpret_cast<__half*>(y), b, N, C, HW, nhwc, s);
}

size_t bias_grad_scratch_bytes(int64_t N, int64_t C, int64_t HW, bool nhwc) {
  if (!(nhwc || HW == 1) || C <= 0) return 0;
  return size_t(bias_grad_slices(N, HW) * C) * sizeof(double);
}

void launch_bias_grad(const float* dy, float* db, int64_t N, int64_t C, int64_t HW, bool nhwc,
                      bool accumulate, double* scratch, cudaStream_t s) {
  bias_grad(dy, db, N, C, HW, nhwc, accumulate, scratch, s);
}

void launch_bias_grad_lp(const uint16_t* dy, bool bf16, float* db, int64_t N, int64_t C,
                         int64_t HW, bool nhwc, bool accumulate, double* scratch, cudaStream_t s) {
  if (bf16)
    bias_grad(reinterpret_cast<const __nv_bfloat16*>(dy), db, N, C, HW, nhwc, accumulate, scratch,
              s);
  else
    bias_grad(reinterpret_cast<const __half*>(dy), db, N, C, HW, nhwc, accumulate, scratch, s);
}

}  // namespace tb::cuda
