// SPDX-License-Identifier: GPL-3.0-or-later
// The pointwise family's CUDA kernels (contract: pointwise.h): ReLU, exact
// (erf) GELU, add, accumulate, scale; forward and backward side by side. Any
// rank, n elements, grid-stride loops over 16-byte packs where the pointers
// allow (pointwise_kernel); each thread reads element i before writing
// element i, so y may alias x and dx may alias dy. T = float,
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

// Φ(x) = erfc(−x/√2)/2: erfc keeps the relative accuracy of Φ for negative x,
// where 1 + erf(x/√2) would cancel.
__device__ __forceinline__ float erfc_(float v) { return erfcf(v); }
__device__ __forceinline__ double erfc_(double v) { return erfc(v); }
__device__ __forceinline__ float exp_(float v) { return expf(v); }
__device__ __forceinline__ double exp_(double v) { return exp(v); }

// What each kernel computes on one value (or pair), in the compute type A
// (float for f16/bf16): the operands arrive as an array in the launch's order.

// y = x > 0 ? x : 0, as the CPU (a NaN input gives 0).
struct ReluForward {
  template <typename A>
  __device__ A operator()(const A (&v)[1]) const { return v[0] > A(0) ? v[0] : A(0); }
};

// dx = dy·(y > 0), operands (y, dy): y is the forward output, so the layer may drop x.
struct ReluBackward {
  template <typename A>
  __device__ A operator()(const A (&v)[2]) const { return v[0] > A(0) ? v[1] : A(0); }
};

// GELU(x) = x/2·(1 + erf(x/√2)) = x·Φ(x)
struct GeluForward {
  template <typename A>
  __device__ A operator()(const A (&v)[1]) const {
    return A(0.5) * v[0] * erfc_(-v[0] * A(0.70710678118654752440));
  }
};

// GELU'(x) = Φ(x) + x·φ(x), φ(x) = exp(−x²/2)/√(2π); operands (x, dy).
struct GeluBackward {
  template <typename A>
  __device__ A operator()(const A (&v)[2]) const {
    const A x = v[0];
    const A cdf = A(0.5) * erfc_(-x * A(0.70710678118654752440));
    const A pdf = A(0.39894228040143267794) * exp_(A(-0.5) * x * x);
    return v[1] * (cdf + x * pdf);
  }
};

// a + b; accumulate is dst + src (operands (dst, src), written to dst).
struct Add {
  template <typename A>
  __device__ A operator()(const A (&v)[2]) const { return v[0] + v[1]; }
};

template <typename A>
struct Scale {
  A alpha;
  __device__ A operator()(const A (&v)[1]) const { return v[0] * alpha; }
};

// K operand pointers, passed by value.
template <typename T, int K>
struct Operands {
  const T* p[K];
};

// V values of T in one aligned piece: V = 16 / sizeof(T) is one 128-bit load
// or store a thread (LDG.E.128), V = 1 a plain element.
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// y[i] = op(x_0[i], ..., x_{K-1}[i]) for i < n: each value loaded into the
// compute type, each output rounded once to T. A thread takes V values of
// each operand at a time (the n / V whole packs, grid-stride), then the
// n mod V tail one value a thread. Each pack (and tail value) is read before
// it is written by the same thread, so y may alias an operand. V changes how
// values are moved, never their arithmetic: every V gives the same bits.
template <typename T, int K, int V, class Op>
__global__ void pointwise_kernel(Operands<T, K> x, T* y, int64_t n, Op op) {
  using A = compute_t<T>;
  using P = Pack<T, V>;
  const int64_t packs = n / V;
  TB_GRID_STRIDE(int64_t, i, packs) {
    P in[K];
#pragma unroll
    for (int k = 0; k < K; ++k) in[k] = reinterpret_cast<const P*>(x.p[k])[i];
    P out;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      A v[K];
#pragma unroll
      for (int k = 0; k < K; ++k) v[k] = to_compute(in[k].v[j]);
      out.v[j] = from_compute<T>(op(v));
    }
    reinterpret_cast<P*>(y)[i] = out;
  }
  if constexpr (V > 1) {
    TB_GRID_STRIDE(int64_t, i, n - packs * V) {
      const int64_t e = packs * V + i;
      A v[K];
#pragma unroll
      for (int k = 0; k < K; ++k) v[k] = to_compute(x.p[k][e]);
      y[e] = from_compute<T>(op(v));
    }
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// One launch of op over n values (none when n <= 0: returns false): 16 bytes
// a load where y and every operand are 16-byte aligned (a thread of a bf16
// kernel then has 8 values of each operand in flight instead of 1:
// bench/NOTES.md attempt 10), else one value at a time.
template <typename T, int K, class Op>
bool launch_pointwise(Operands<T, K> x, T* y, int64_t n, Op op, cudaStream_t s) {
  if (n <= 0) return false;
  constexpr int kPack = 16 / int(sizeof(T));
  bool aligned = aligned16(y);
  for (int k = 0; k < K; ++k) aligned = aligned && aligned16(x.p[k]);
  if (aligned && n >= kPack)
    pointwise_kernel<T, K, kPack, Op><<<grid_for(n / kPack), kThreads, 0, s>>>(x, y, n, op);
  else
    pointwise_kernel<T, K, 1, Op><<<grid_for(n), kThreads, 0, s>>>(x, y, n, op);
  return true;
}

}  // namespace

template <typename T>
void launch_relu_forward(const T* x, T* y, int64_t n, cudaStream_t s) {
  if (launch_pointwise<T, 1>({{x}}, y, n, ReluForward{}, s))
    TB_CUDA_LAUNCH_CHECK("relu_forward_kernel");
}
template <typename T>
void launch_relu_backward(const T* y, const T* dy, T* dx, int64_t n, cudaStream_t s) {
  if (launch_pointwise<T, 2>({{y, dy}}, dx, n, ReluBackward{}, s))
    TB_CUDA_LAUNCH_CHECK("relu_backward_kernel");
}
template <typename T>
void launch_gelu_forward(const T* x, T* y, int64_t n, cudaStream_t s) {
  if (launch_pointwise<T, 1>({{x}}, y, n, GeluForward{}, s))
    TB_CUDA_LAUNCH_CHECK("gelu_forward_kernel");
}
template <typename T>
void launch_gelu_backward(const T* x, const T* dy, T* dx, int64_t n, cudaStream_t s) {
  if (launch_pointwise<T, 2>({{x, dy}}, dx, n, GeluBackward{}, s))
    TB_CUDA_LAUNCH_CHECK("gelu_backward_kernel");
}
template <typename T>
void launch_add(const T* a, const T* b, T* y, int64_t n, cudaStream_t s) {
  if (launch_pointwise<T, 2>({{a, b}}, y, n, Add{}, s))
    TB_CUDA_LAUNCH_CHECK("add_kernel");
}
template <typename T>
void launch_accumulate(const T* src, T* dst, int64_t n, cudaStream_t s) {
  if (launch_pointwise<T, 2>({{dst, src}}, dst, n, Add{}, s))
    TB_CUDA_LAUNCH_CHECK("accumulate_kernel");
}
template <typename T>
void launch_scale(T* t, double alpha, int64_t n, cudaStream_t s) {
  if (launch_pointwise<T, 1>({{t}}, t, n, Scale<compute_t<T>>{compute_t<T>(alpha)}, s))
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
