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

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/cpu_features.h"
#include "engine/ops/amp/amp.h"
#include "engine/ops/pointwise/pointwise.h"

namespace tb {

namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1/sqrt(2π)

// ---------------------------------------------------------------- reference
// Plain loops in T (float or double): the test oracle.

// The reference loops are also the fast path's bodies for add and accumulate
// and its tails for ReLU (below, compiled for the processor's ISA). The
// selects read both operands unconditionally (a conditional load would keep
// the compiler from vectorising them). TB_IVDEP: y may alias x and dx may
// alias dy; without it the compiler's overlap check sends the in-place case to
// its scalar loop.
template <typename T>
void relu_forward_ref(const T* x, T* y, int64_t n) {
  TB_IVDEP
  for (int64_t i = 0; i < n; ++i) {
    const T v = x[i];
    y[i] = v > T(0) ? v : T(0);
  }
}

// dx = dy * (y > 0): y is the forward output (so the layer may drop x).
template <typename T>
void relu_backward_ref(const T* y, const T* dy, T* dx, int64_t n) {
  TB_IVDEP
  for (int64_t i = 0; i < n; ++i) {
    const T g = dy[i];
    dx[i] = y[i] > T(0) ? g : T(0);
  }
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
  TB_IVDEP
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

template <typename T>
void accumulate_ref(const T* src, T* dst, int64_t n) {
  TB_IVDEP
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

// ---------------------------------------------------------------- fast f32
// ReLU (a bit mask), add and accumulate (the reference loops) compiled for the
// processor's widest ISA (engine/core/cpu_features.h: the same bits in every
// copy); GELU
// in float arithmetic (erff/expf) instead of the reference's double. With
// OpenMP the range is split across the backend's threads (elementwise: no
// effect on the values).

constexpr int64_t kParallelMin = 1 << 16;  // elements below which threads cost more

#ifdef _OPENMP
#define TB_PARALLEL_FOR \
  _Pragma("omp parallel for schedule(static) num_threads(threads) if (n >= kParallelMin)")
#else
#define TB_PARALLEL_FOR
#endif

// out = m > 0 ? v : 0 as a bit mask, (m > 0) & v: ReLU's forward is
// (x, x, y), its backward (y, dy, dx). The reference's values for every input
// (NaN and -0 give +0), two registers of the copy's width an iteration (one
// is too few to keep the loads busy; the compiler does not unroll vector
// loops by itself), each block read in full before it is written (out may
// alias m and v). The tail is the reference loop.
template <int kVecBytes>
inline void relu_mask_vec(const float* m, const float* v, float* out, int64_t n) {
  using F = typename CpuVec<kVecBytes>::F32;
  using I = typename CpuVec<kVecBytes>::I32;
  constexpr int64_t kPer = kVecBytes / 4;
  const F zero = {};
  int64_t i = 0;
  for (; i + 2 * kPer <= n; i += 2 * kPer) {
    F ma, mb, va, vb;
    std::memcpy(&ma, m + i, sizeof ma);
    std::memcpy(&mb, m + i + kPer, sizeof mb);
    std::memcpy(&va, v + i, sizeof va);
    std::memcpy(&vb, v + i + kPer, sizeof vb);
    va = F(I(ma > zero) & I(va));
    vb = F(I(mb > zero) & I(vb));
    std::memcpy(out + i, &va, sizeof va);
    std::memcpy(out + i + kPer, &vb, sizeof vb);
  }
  relu_backward_ref(m + i, v + i, out + i, n - i);
}

// Compiled for the processor's widest ISA (engine/core/cpu_features.h).
TB_CPU_KERNEL_BY_WIDTH(void, relu_mask_isa, (const float* m, const float* v, float* out, int64_t n),
                       (m, v, out, n), relu_mask_vec)
TB_CPU_KERNEL(void, add_isa, (const float* a, const float* b, float* y, int64_t n), (a, b, y, n),
              add_ref<float>)
TB_CPU_KERNEL(void, accumulate_isa, (const float* src, float* dst, int64_t n), (src, dst, n),
              accumulate_ref<float>)

// ReLU in spans of kSpan elements, each one call of this ISA's copy (the
// threads split the spans).
constexpr int64_t kSpan = 1 << 12;

void relu_mask_f32(const float* m, const float* v, float* out, int64_t n,
                   [[maybe_unused]] int threads) {
  const int64_t spans = (n + kSpan - 1) / kSpan;
  TB_PARALLEL_FOR
  for (int64_t s = 0; s < spans; ++s)
    relu_mask_isa(m + s * kSpan, v + s * kSpan, out + s * kSpan, std::min(kSpan, n - s * kSpan));
}

void relu_forward_f32(const float* x, float* y, int64_t n, int threads) {
  relu_mask_f32(x, x, y, n, threads);
}

void relu_backward_f32(const float* y, const float* dy, float* dx, int64_t n, int threads) {
  relu_mask_f32(y, dy, dx, n, threads);
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

// add and accumulate: the fast path is the reference loop compiled for the
// processor's ISA, single-threaded.
void CpuKernels::add(const Tensor& a, const Tensor& b, Tensor& y) {
  TB_POINTWISE_LP(a, y, false, add, a, b);
  const DType dt = a.dtype();
  const int64_t n = a.numel();
#define ARGS(T) a.data_as<T>(), b.data_as<T>(), y.data_as<T>(), n
  if (dt == DType::F64)
    add_ref(ARGS(double));
  else if (be_.use_reference(dt))
    add_ref(ARGS(float));
  else
    add_isa(ARGS(float));
#undef ARGS
}

void CpuKernels::accumulate(const Tensor& src, Tensor& dst) {
  TB_POINTWISE_LP(src, dst, true, accumulate, src);
  const DType dt = src.dtype();
  const int64_t n = src.numel();
#define ARGS(T) src.data_as<T>(), dst.data_as<T>(), n
  if (dt == DType::F64)
    accumulate_ref(ARGS(double));
  else if (be_.use_reference(dt))
    accumulate_ref(ARGS(float));
  else
    accumulate_isa(ARGS(float));
#undef ARGS
}

void CpuKernels::scale(Tensor& t, double alpha) {
  if (amp::is_low_precision(t.dtype()))
    return amp::widen_compute_round(be_, t, true, [&](Tensor& wide) { scale(wide, alpha); });
  if (t.dtype() == DType::F64) {
    double* p = t.data_as<double>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] *= alpha;
    return;
  }
  // Not cblas_sscal: OpenBLAS writes zeros for alpha = 0 without multiplying,
  // so NaN and inf would vanish where t *= 0 (the contract, and the GPU) keeps NaN.
  float* p = t.data_as<float>();
  const float a = static_cast<float>(alpha);
  for (int64_t i = 0; i < t.numel(); ++i) p[i] *= a;
}

#undef TB_POINTWISE_LP

namespace pointwise {
void register_cpu_kernels() { register_kernels<Kernels, CpuKernels, CpuBackend>(DeviceKind::CPU); }
}  // namespace pointwise

}  // namespace tb
