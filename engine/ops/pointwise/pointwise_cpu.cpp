// SPDX-License-Identifier: GPL-3.0-or-later
// The CPU backend's pointwise ops (contract: pointwise.h): ReLU, exact (erf)
// GELU, add, accumulate, scale. Elementwise, so the layout does not matter as
// long as every operand has the same one. y may alias x and dx may alias dy:
// every loop reads element i before it writes element i and touches nothing
// else.
//
// f16/bf16: widen-compute-round (amp::widen_compute_round): the inputs
// widened to f32 exactly, the f32 op below, each output rounded once, as the
// CUDA kernels do value by value.
#include <cblas.h>

#include <cmath>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/ops/amp/amp.h"
#include "engine/ops/pointwise/pointwise.h"

namespace tb {

namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1/sqrt(2π)

// ---------------------------------------------------------------- reference
// Plain loops in T (float or double): the test oracle.

template <typename T>
void relu_forward_ref(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > T(0) ? x[i] : T(0);
}

// dx = dy * (y > 0): y is the forward output (so the layer may drop x).
template <typename T>
void relu_backward_ref(const T* y, const T* dy, T* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] > T(0) ? dy[i] : T(0);
}

// GELU(x) = x·Φ(x) = x/2·(1 + erf(x/√2))
template <typename T>
void gelu_forward_ref(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    y[i] = T(0.5 * v * (1.0 + std::erf(v * kInvSqrt2)));
  }
}

// GELU'(x) = Φ(x) + x·φ(x), φ(x) = exp(−x²/2)/√(2π)
template <typename T>
void gelu_backward_ref(const T* x, const T* dy, T* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double cdf = 0.5 * (1.0 + std::erf(v * kInvSqrt2));
    const double pdf = kInvSqrt2Pi * std::exp(-0.5 * v * v);
    dx[i] = T(double(dy[i]) * (cdf + v * pdf));
  }
}

template <typename T>
void add_ref(const T* a, const T* b, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

template <typename T>
void accumulate_ref(const T* src, T* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

// ---------------------------------------------------------------- fast f32
// Branch-free loops (ReLU vectorises); GELU in float arithmetic
// (erff/expf) instead of the reference's double. With OpenMP the range is split
// across the backend's threads (elementwise: no effect on the values).

constexpr int64_t kParallelMin = 1 << 16;  // elements below which threads cost more

#ifdef _OPENMP
#define TB_PARALLEL_FOR \
  _Pragma("omp parallel for schedule(static) num_threads(threads) if (n >= kParallelMin)")
#else
#define TB_PARALLEL_FOR
#endif

// ReLU as a bit mask: (v > 0) & v. Same values as the reference's select for
// every input (NaN and -0 give +0). Written with SSE2 because y may alias x and
// dx may alias dy: the compiler's overlap check would send the in-place case
// to its scalar loop, which branches on the sign and mispredicts on half the
// elements. Each block reads all its inputs before it writes.
void relu_forward_f32(const float* x, float* y, int64_t n, [[maybe_unused]] int threads) {
  const int64_t nv = n & ~int64_t(7);
  TB_PARALLEL_FOR
  for (int64_t i = 0; i < nv; i += 8) {
#if defined(__SSE2__)
    const __m128 z = _mm_setzero_ps();
    const __m128 a = _mm_loadu_ps(x + i), b = _mm_loadu_ps(x + i + 4);
    _mm_storeu_ps(y + i, _mm_and_ps(_mm_cmpgt_ps(a, z), a));
    _mm_storeu_ps(y + i + 4, _mm_and_ps(_mm_cmpgt_ps(b, z), b));
#else
    for (int64_t j = i; j < i + 8; ++j) y[j] = x[j] > 0.0f ? x[j] : 0.0f;
#endif
  }
  for (int64_t i = nv; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void relu_backward_f32(const float* y, const float* dy, float* dx, int64_t n,
                       [[maybe_unused]] int threads) {
  const int64_t nv = n & ~int64_t(7);
  TB_PARALLEL_FOR
  for (int64_t i = 0; i < nv; i += 8) {
#if defined(__SSE2__)
    const __m128 z = _mm_setzero_ps();
    const __m128 m0 = _mm_cmpgt_ps(_mm_loadu_ps(y + i), z);
    const __m128 m1 = _mm_cmpgt_ps(_mm_loadu_ps(y + i + 4), z);
    const __m128 g0 = _mm_loadu_ps(dy + i), g1 = _mm_loadu_ps(dy + i + 4);
    _mm_storeu_ps(dx + i, _mm_and_ps(m0, g0));
    _mm_storeu_ps(dx + i + 4, _mm_and_ps(m1, g1));
#else
    for (int64_t j = i; j < i + 8; ++j) dx[j] = y[j] > 0.0f ? dy[j] : 0.0f;
#endif
  }
  for (int64_t i = nv; i < n; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

void gelu_forward_f32(const float* x, float* y, int64_t n, [[maybe_unused]] int threads) {
  TB_PARALLEL_FOR
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + std::erf(v * float(kInvSqrt2)));
  }
}

void gelu_backward_f32(const float* x, const float* dy, float* dx, int64_t n,
                       [[maybe_unused]] int threads) {
  TB_PARALLEL_FOR
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float cdf = 0.5f * (1.0f + std::erf(v * float(kInvSqrt2)));
    const float pdf = float(kInvSqrt2Pi) * std::exp(-0.5f * v * v);
    dx[i] = dy[i] * (cdf + v * pdf);
  }
}

#undef TB_PARALLEL_FOR

class CpuKernels final : public pointwise::Kernels {
 public:
  explicit CpuKernels(CpuBackend& be) : be_(be) {}

  void relu_forward(const Tensor& x, Tensor& y) override;
  void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) override;
  void gelu_forward(const Tensor& x, Tensor& y) override;
  void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) override;
  void add(const Tensor& a, const Tensor& b, Tensor& y) override;
  void accumulate(const Tensor& src, Tensor& dst) override;
  void scale(Tensor& t, double alpha) override;

 private:
  CpuBackend& be_;
};

}  // namespace

// Dispatch: f64 or options.reference -> reference in T; otherwise the f32 path.
#define TB_POINTWISE_DISPATCH(REF, FAST, ...)  \
  do {                                         \
    if (dt == DType::F64) {                    \
      REF<double>(__VA_ARGS__(double));        \
    } else if (be_.use_reference(dt)) {        \
      REF<float>(__VA_ARGS__(float));          \
    } else {                                   \
      FAST(__VA_ARGS__(float), be_.threads()); \
    }                                          \
  } while (0)

// f16/bf16 operands: the f32 kernel METHOD by widen-compute-round (file
// comment); `reads_out` for the ops that update their output in place.
#define TB_POINTWISE_LP(lead, out, reads_out, METHOD, ...)                                \
  if (amp::is_low_precision(lead.dtype()))                                                \
    return amp::widen_compute_round(                                                      \
        be_, out, reads_out, [&](auto&&... wide) { METHOD(wide...); }, __VA_ARGS__)

void CpuKernels::relu_forward(const Tensor& x, Tensor& y) {
  TB_POINTWISE_LP(x, y, false, relu_forward, x);
  const DType dt = x.dtype();
  const int64_t n = x.numel();
#define ARGS(T) x.data_as<T>(), y.data_as<T>(), n
  TB_POINTWISE_DISPATCH(relu_forward_ref, relu_forward_f32, ARGS);
#undef ARGS
}

void CpuKernels::relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  TB_POINTWISE_LP(y, dx, false, relu_backward, y, dy);
  const DType dt = y.dtype();
  const int64_t n = y.numel();
#define ARGS(T) y.data_as<T>(), dy.data_as<T>(), dx.data_as<T>(), n
  TB_POINTWISE_DISPATCH(relu_backward_ref, relu_backward_f32, ARGS);
#undef ARGS
}

void CpuKernels::gelu_forward(const Tensor& x, Tensor& y) {
  TB_POINTWISE_LP(x, y, false, gelu_forward, x);
  const DType dt = x.dtype();
  const int64_t n = x.numel();
#define ARGS(T) x.data_as<T>(), y.data_as<T>(), n
  TB_POINTWISE_DISPATCH(gelu_forward_ref, gelu_forward_f32, ARGS);
#undef ARGS
}

void CpuKernels::gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  TB_POINTWISE_LP(x, dx, false, gelu_backward, x, dy);
  const DType dt = x.dtype();
  const int64_t n = x.numel();
#define ARGS(T) x.data_as<T>(), dy.data_as<T>(), dx.data_as<T>(), n
  TB_POINTWISE_DISPATCH(gelu_backward_ref, gelu_backward_f32, ARGS);
#undef ARGS
}

#undef TB_POINTWISE_DISPATCH

// add and accumulate: the reference loop is already the fast loop.
void CpuKernels::add(const Tensor& a, const Tensor& b, Tensor& y) {
  TB_POINTWISE_LP(a, y, false, add, a, b);
  if (a.dtype() == DType::F64)
    add_ref(a.data_as<double>(), b.data_as<double>(), y.data_as<double>(), a.numel());
  else
    add_ref(a.data_as<float>(), b.data_as<float>(), y.data_as<float>(), a.numel());
}

void CpuKernels::accumulate(const Tensor& src, Tensor& dst) {
  TB_POINTWISE_LP(src, dst, true, accumulate, src);
  if (src.dtype() == DType::F64)
    accumulate_ref(src.data_as<double>(), dst.data_as<double>(), src.numel());
  else
    accumulate_ref(src.data_as<float>(), dst.data_as<float>(), src.numel());
}

void CpuKernels::scale(Tensor& t, double alpha) {
  if (amp::is_low_precision(t.dtype()))
    return amp::widen_compute_round(be_, t, true, [&](Tensor& wide) { scale(wide, alpha); });
  if (t.dtype() == DType::F64) {
    double* p = t.data_as<double>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] *= alpha;
    return;
  }
  cblas_sscal(static_cast<blasint>(t.numel()), static_cast<float>(alpha), t.data_as<float>(), 1);
}

#undef TB_POINTWISE_LP

namespace pointwise {
void register_cpu_kernels() { register_kernels<Kernels, CpuKernels, CpuBackend>(DeviceKind::CPU); }
}  // namespace pointwise

}  // namespace tb
