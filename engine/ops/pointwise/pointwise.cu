// SPDX-License-Identifier: GPL-3.0-or-later
// The pointwise family's CUDA kernels (contract: pointwise.h): ReLU, exact
// (erf) GELU, add, accumulate, scale; forward and backward side by side. Any
// rank, n elements, grid-stride loops; each thread reads element i before
// writing element i, so y may alias x and dx may alias dy. T = float,
// double, __half or __nv_bfloat16: each value is loaded into its compute type
// A (float for f16/bf16; amp_elements.cuh), the arithmetic is A's, and each
// output is rounded once to T; for float and double the conversions are the
// identity (the kernels' arithmetic before f16/bf16). The f32 GELU uses
// erfcf/expf in float (the CPU reference uses double: compare with a
// tolerance).
#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/device_utils.cuh"
#include "engine/ops/amp/amp_elements.cuh"
#include "engine/ops/pointwise/pointwise.cuh"

namespace tb::cuda {

namespace {

#define TB_GRID_STRIDE(i, n)                                                \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); \
       i += int64_t(gridDim.x) * blockDim.x)

// Φ(x) = erfc(−x/√2)/2: erfc keeps the relative accuracy of Φ for negative x,
// where 1 + erf(x/√2) would cancel.
__device__ __forceinline__ float erfc_(float v) { return erfcf(v); }
__device__ __forceinline__ double erfc_(double v) { return erfc(v); }
__device__ __forceinline__ float exp_(float v) { return expf(v); }
__device__ __forceinline__ double exp_(double v) { return exp(v); }

// y = x > 0 ? x : 0, as the CPU (a NaN input gives 0).
template <typename T>
__global__ void relu_forward_kernel(const T* x, T* y, int64_t n) {
  using A = compute_t<T>;
  TB_GRID_STRIDE(i, n) {
    const A v = to_compute(x[i]);
    y[i] = from_compute<T>(v > A(0) ? v : A(0));
  }
}

// dx = dy·(y > 0): y is the forward output, so the layer may drop x.
template <typename T>
__global__ void relu_backward_kernel(const T* y, const T* dy, T* dx, int64_t n) {
  using A = compute_t<T>;
  TB_GRID_STRIDE(i, n) {
    dx[i] = from_compute<T>(to_compute(y[i]) > A(0) ? to_compute(dy[i]) : A(0));
  }
}

// GELU(x) = x/2·(1 + erf(x/√2)) = x·Φ(x)
template <typename T>
__global__ void gelu_forward_kernel(const T* x, T* y, int64_t n) {
  using A = compute_t<T>;
  const A inv_sqrt2 = A(0.70710678118654752440);
  TB_GRID_STRIDE(i, n) {
    const A v = to_compute(x[i]);
    y[i] = from_compute<T>(A(0.5) * v * erfc_(-v * inv_sqrt2));
  }
}

// GELU'(x) = Φ(x) + x·φ(x), φ(x) = exp(−x²/2)/√(2π)
template <typename T>
__global__ void gelu_backward_kernel(const T* x, const T* dy, T* dx, int64_t n) {
  using A = compute_t<T>;
  const A inv_sqrt2 = A(0.70710678118654752440), inv_sqrt2pi = A(0.39894228040143267794);
  TB_GRID_STRIDE(i, n) {
    const A v = to_compute(x[i]);
    const A cdf = A(0.5) * erfc_(-v * inv_sqrt2);
    const A pdf = inv_sqrt2pi * exp_(A(-0.5) * v * v);
    dx[i] = from_compute<T>(to_compute(dy[i]) * (cdf + v * pdf));
  }
}

template <typename T>
__global__ void add_kernel(const T* a, const T* b, T* y, int64_t n) {
  TB_GRID_STRIDE(i, n) { y[i] = from_compute<T>(to_compute(a[i]) + to_compute(b[i])); }
}

template <typename T>
__global__ void accumulate_kernel(const T* src, T* dst, int64_t n) {
  TB_GRID_STRIDE(i, n) { dst[i] = from_compute<T>(to_compute(dst[i]) + to_compute(src[i])); }
}

template <typename T>
__global__ void scale_kernel(T* t, compute_t<T> alpha, int64_t n) {
  TB_GRID_STRIDE(i, n) { t[i] = from_compute<T>(to_compute(t[i]) * alpha); }
}

}  // namespace

template <typename T>
void launch_relu_forward(const T* x, T* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  relu_forward_kernel<<<grid_for(n), kThreads, 0, s>>>(x, y, n);
  TB_CUDA_LAUNCH_CHECK("relu_forward_kernel");
}
template <typename T>
void launch_relu_backward(const T* y, const T* dy, T* dx, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  relu_backward_kernel<<<grid_for(n), kThreads, 0, s>>>(y, dy, dx, n);
  TB_CUDA_LAUNCH_CHECK("relu_backward_kernel");
}
template <typename T>
void launch_gelu_forward(const T* x, T* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  gelu_forward_kernel<<<grid_for(n), kThreads, 0, s>>>(x, y, n);
  TB_CUDA_LAUNCH_CHECK("gelu_forward_kernel");
}
template <typename T>
void launch_gelu_backward(const T* x, const T* dy, T* dx, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  gelu_backward_kernel<<<grid_for(n), kThreads, 0, s>>>(x, dy, dx, n);
  TB_CUDA_LAUNCH_CHECK("gelu_backward_kernel");
}
template <typename T>
void launch_add(const T* a, const T* b, T* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  add_kernel<<<grid_for(n), kThreads, 0, s>>>(a, b, y, n);
  TB_CUDA_LAUNCH_CHECK("add_kernel");
}
template <typename T>
void launch_accumulate(const T* src, T* dst, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  accumulate_kernel<<<grid_for(n), kThreads, 0, s>>>(src, dst, n);
  TB_CUDA_LAUNCH_CHECK("accumulate_kernel");
}
template <typename T>
void launch_scale(T* t, double alpha, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  scale_kernel<<<grid_for(n), kThreads, 0, s>>>(t, compute_t<T>(alpha), n);
  TB_CUDA_LAUNCH_CHECK("scale_kernel");
}

#define TB_INSTANTIATE(T)                                                               \
  template void launch_relu_forward<T>(const T*, T*, int64_t, cudaStream_t);            \
  template void launch_relu_backward<T>(const T*, const T*, T*, int64_t, cudaStream_t); \
  template void launch_gelu_forward<T>(const T*, T*, int64_t, cudaStream_t);            \
  template void launch_gelu_backward<T>(const T*, const T*, T*, int64_t, cudaStream_t); \
  template void launch_add<T>(const T*, const T*, T*, int64_t, cudaStream_t);           \
  template void launch_accumulate<T>(const T*, T*, int64_t, cudaStream_t);              \
  template void launch_scale<T>(T*, double, int64_t, cudaStream_t);
TB_INSTANTIATE(float)
TB_INSTANTIATE(double)
TB_INSTANTIATE(__half)
TB_INSTANTIATE(__nv_bfloat16)
#undef TB_INSTANTIATE

}  // namespace tb::cuda
