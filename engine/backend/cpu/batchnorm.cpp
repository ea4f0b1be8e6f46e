// SPDX-License-Identifier: GPL-3.0-or-later
// CPU batch normalization over (N, H, W) per channel, NCHW and NHWC.
//
//   x, y, dy, dx   (N, C, H, W)       M = N·H·W elements per channel
//   gamma, beta    (C)                running_mean, running_var (C)
//   save_mean, save_invstd (C): batch mean and 1/sqrt(var_biased + eps)
//
// Training normalises with the biased batch variance and moves running_var
// towards the unbiased one (var·M/(M−1)), as PyTorch does.
// Backward (per channel, x̂ = (x−μ)·invstd):
//   dβ = Σ dy,  dγ = Σ dy·x̂,  dx = γ·invstd/M · (M·dy − dβ − x̂·dγ)
// The same backward serves as the parameter-gradient half of eval mode when the
// caller passes the running mean and 1/sqrt(running_var+eps) as the saved pair.
// dx may be undefined (not wanted); dgamma/dbeta are written or accumulated.
//
// Layouts: x, y, dy, dx share one. The reference visits each channel's elements
// in the same (n, i) order in both layouts (only the address differs), so NHWC
// gives the NCHW bits. NHWC takes the reference: the fast f32 path streams
// contiguous HW rows per channel; the CPU's NHWC is the oracle for the CUDA
// channels-last path, not a speed path, and is never transposed to reach it.
#include <algorithm>
#include <cmath>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"

namespace tb {

namespace {

struct BnDims {
  int64_t N, C, HW;
  bool nhwc;
  int64_t M() const { return N * HW; }
};

BnDims bn_dims(const Tensor& x, const char* op) {
  TB_CHECK(x.device().is_cpu(), op, ": cpu backend given ", x.describe());
  TB_CHECK(x.rank() == 4, op, ": expected a rank-4 (N, C, H, W) input, got ", x.describe());
  TB_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::F64, op, ": expected f32 or f64, got ",
           x.describe());
  return {x.n(), x.c(), x.h() * x.w(), x.layout() == Layout::NHWC};
}

void check_channel(const Tensor& t, const Tensor& x, const char* what) {
  TB_CHECK(t.defined(), what, " is undefined");
  expect_shape(t, {x.c()}, what);
  expect_dtype(t, x.dtype(), what);
}

void check_like(const Tensor& t, const Tensor& x, const char* what) {
  expect_shape(t, x.shape(), what);
  expect_dtype(t, x.dtype(), what);
  TB_CHECK(t.layout() == x.layout(), what, " ", t.describe(), " must have the layout of x (",
           layout_name(x.layout()), ")");
}

// Element (n, c, i) of the tensor seen as (N, C, HW), i = h*W + w; in NHWC
// memory that is (N, HW, C).
inline int64_t at(const BnDims& d, int64_t n, int64_t c, int64_t i) {
  return d.nhwc ? (n * d.HW + i) * d.C + c : (n * d.C + c) * d.HW + i;
}

// ---------------------------------------------------------------- reference
// Two passes per channel (mean, then centred sum of squares), double sums.

template <typename T>
void bn_train_ref(const BnDims& d, const T* x, const T* gamma, const T* beta, T* rmean, T* rvar,
                  double momentum, double eps, T* y, T* smean, T* sinvstd) {
  const double M = double(d.M());
  for (int64_t c = 0; c < d.C; ++c) {
    double sum = 0.0;
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t i = 0; i < d.HW; ++i) sum += x[at(d, n, c, i)];
    const double mean = sum / M;
    double ss = 0.0;
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t i = 0; i < d.HW; ++i) {
        const double dev = double(x[at(d, n, c, i)]) - mean;
        ss += dev * dev;
      }
    const double var = ss / M;
    const double invstd = 1.0 / std::sqrt(var + eps);
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t i = 0; i < d.HW; ++i) {
        const int64_t k = at(d, n, c, i);
        y[k] = T(double(gamma[c]) * (double(x[k]) - mean) * invstd + double(beta[c]));
      }
    const double unbiased = d.M() > 1 ? ss / (M - 1.0) : var;
    rmean[c] = T((1.0 - momentum) * double(rmean[c]) + momentum * mean);
    rvar[c] = T((1.0 - momentum) * double(rvar[c]) + momentum * unbiased);
    smean[c] = T(mean);
    sinvstd[c] = T(invstd);
  }
}

template <typename T>
void bn_eval_ref(const BnDims& d, const T* x, const T* gamma, const T* beta, const T* rmean,
                 const T* rvar, double eps, T* y) {
  for (int64_t c = 0; c < d.C; ++c) {
    const double invstd = 1.0 / std::sqrt(double(rvar[c]) + eps);
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t i = 0; i < d.HW; ++i) {
        const int64_t k = at(d, n, c, i);
        y[k] = T(double(gamma[c]) * (double(x[k]) - double(rmean[c])) * invstd + double(beta[c]));
      }
  }
}

template <typename T>
void bn_backward_ref(const BnDims& d, const T* x, const T* dy, const T* gamma, const T* smean,
                     const T* sinvstd, T* dx, T* dgamma, T* dbeta, bool accumulate) {
  const double M = double(d.M());
  for (int64_t c = 0; c < d.C; ++c) {
    const double mean = smean[c], invstd = sinvstd[c];
    double sdy = 0.0, sdyxh = 0.0;
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t i = 0; i < d.HW; ++i) {
        const int64_t k = at(d, n, c, i);
        sdy += dy[k];
        sdyxh += double(dy[k]) * (double(x[k]) - mean) * invstd;
      }
    if (dx) {
      const double a = double(gamma[c]) * invstd / M;
      for (int64_t n = 0; n < d.N; ++n)
        for (int64_t i = 0; i < d.HW; ++i) {
          const int64_t k = at(d, n, c, i);
          const double xh = (double(x[k]) - mean) * invstd;
          dx[k] = T(a * (M * double(dy[k]) - sdy - xh * sdyxh));
        }
    }
    if (dgamma) dgamma[c] = T(accumulate ? double(dgamma[c]) + sdyxh : sdyxh);
    if (dbeta) dbeta[c] = T(accumulate ? double(dbeta[c]) + sdy : sdy);
  }
}

// ---------------------------------------------------------------- fast f32
// With OpenMP, channels are split across the backend's threads; each channel's
// sums stay in one thread, so results do not depend on the thread count.
constexpr int64_t kParallelMin = 1 << 15;  // elements below which threads cost more

// Row sums in kLanes independent double accumulators: the compiler may not
// reorder one serial double sum, but it vectorises independent lanes.
constexpr int kLanes = 8;

#if defined(__SSE2__)
// Eight floats widened to four pairs of doubles, lanes (0,1) (2,3) (4,5) (6,7).
inline void widen8(const float* p, __m128d& v0, __m128d& v1, __m128d& v2, __m128d& v3) {
  const __m128 lo = _mm_loadu_ps(p), hi = _mm_loadu_ps(p + 4);
  v0 = _mm_cvtps_pd(lo);
  v1 = _mm_cvtps_pd(_mm_movehl_ps(lo, lo));
  v2 = _mm_cvtps_pd(hi);
  v3 = _mm_cvtps_pd(_mm_movehl_ps(hi, hi));
}
#endif

// s += Σ g, sx += Σ g·x over [0, n). The SSE2 loop keeps lane l on elements
// i+l exactly like the plain loop (GCC leaves that one scalar: cvtss2sd/addsd
// per element), so both give the same bits.
void sum_dot(const float* g, const float* x, int64_t n, double& s, double& sx) {
  double a[kLanes] = {}, b[kLanes] = {};
  int64_t i = 0;
#if defined(__SSE2__)
  {
    __m128d a0 = _mm_setzero_pd(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    for (; i + kLanes <= n; i += kLanes) {
      __m128d v0, v1, v2, v3, w0, w1, w2, w3;
      widen8(g + i, v0, v1, v2, v3);
      widen8(x + i, w0, w1, w2, w3);
      a0 = _mm_add_pd(a0, v0), a1 = _mm_add_pd(a1, v1);
      a2 = _mm_add_pd(a2, v2), a3 = _mm_add_pd(a3, v3);
      b0 = _mm_add_pd(b0, _mm_mul_pd(v0, w0)), b1 = _mm_add_pd(b1, _mm_mul_pd(v1, w1));
      b2 = _mm_add_pd(b2, _mm_mul_pd(v2, w2)), b3 = _mm_add_pd(b3, _mm_mul_pd(v3, w3));
    }
    _mm_storeu_pd(a, a0), _mm_storeu_pd(a + 2, a1), _mm_storeu_pd(a + 4, a2);
    _mm_storeu_pd(a + 6, a3);
    _mm_storeu_pd(b, b0), _mm_storeu_pd(b + 2, b1), _mm_storeu_pd(b + 4, b2);
    _mm_storeu_pd(b + 6, b3);
  }
#else
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const double v = g[i + l];
      a[l] += v;
      b[l] += v * double(x[i + l]);
    }
#endif
  for (; i < n; ++i) {
    a[0] += g[i];
    b[0] += double(g[i]) * double(x[i]);
  }
  for (int l = 0; l < kLanes; ++l) s += a[l], sx += b[l];
}

// s += Σ x, s2 += Σ x²: the same lanes and order as sum_dot(x, x).
void sum_sumsq(const float* x, int64_t n, double& s, double& s2) { sum_dot(x, x, n, s, s2); }

// One read of x for the statistics: Σx and Σx² in double, whose cancellation in
// E[x²] − E[x]² stays below f32 resolution unless |mean|/std exceeds ~10^4;
// then y = x·scale + shift with per-channel constants over contiguous HW rows.
void bn_train_f32(const BnDims& d, const float* x, const float* gamma, const float* beta,
                  float* rmean, float* rvar, double momentum, double eps, float* y, float* smean,
                  float* sinvstd, [[maybe_unused]] int threads) {
  const double M = double(d.M());
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(threads) if (d.M() * d.C >= kParallelMin)
#endif
  for (int64_t c = 0; c < d.C; ++c) {
    double s = 0.0, s2 = 0.0;
    for (int64_t n = 0; n < d.N; ++n) sum_sumsq(x + at(d, n, c, 0), d.HW, s, s2);
    const double mean = s / M;
    const double var = std::max(s2 / M - mean * mean, 0.0);
    const double invstd = 1.0 / std::sqrt(var + eps);
    const float scale = float(double(gamma[c]) * invstd);
    const float shift = float(double(beta[c]) - mean * double(gamma[c]) * invstd);
    for (int64_t n = 0; n < d.N; ++n) {
      const float* row = x + at(d, n, c, 0);
      float* out = y + at(d, n, c, 0);
      for (int64_t i = 0; i < d.HW; ++i) out[i] = row[i] * scale + shift;
    }
    const double unbiased = d.M() > 1 ? var * M / (M - 1.0) : var;
    rmean[c] = float((1.0 - momentum) * rmean[c] + momentum * mean);
    rvar[c] = float((1.0 - momentum) * rvar[c] + momentum * unbiased);
    smean[c] = float(mean);
    sinvstd[c] = float(invstd);
  }
}

void bn_eval_f32(const BnDims& d, const float* x, const float* gamma, const float* beta,
                 const float* rmean, const float* rvar, double eps, float* y,
                 [[maybe_unused]] int threads) {
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(threads) if (d.M() * d.C >= kParallelMin)
#endif
  for (int64_t c = 0; c < d.C; ++c) {
    const double invstd = 1.0 / std::sqrt(double(rvar[c]) + eps);
    const float scale = float(double(gamma[c]) * invstd);
    const float shift = float(double(beta[c]) - double(rmean[c]) * double(gamma[c]) * invstd);
    for (int64_t n = 0; n < d.N; ++n) {
      const float* row = x + at(d, n, c, 0);
      float* out = y + at(d, n, c, 0);
      for (int64_t i = 0; i < d.HW; ++i) out[i] = row[i] * scale + shift;
    }
  }
}

// Σdy·x̂ = invstd·(Σdy·x − μ·Σdy): one pass for both sums, then
// dx = dy·a + x·b + c0 with per-channel constants.
void bn_backward_f32(const BnDims& d, const float* x, const float* dy, const float* gamma,
                     const float* smean, const float* sinvstd, float* dx, float* dgamma,
                     float* dbeta, bool accumulate, [[maybe_unused]] int threads) {
  const double M = double(d.M());
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(threads) if (d.M() * d.C >= kParallelMin)
#endif
  for (int64_t c = 0; c < d.C; ++c) {
    const double mean = smean[c], invstd = sinvstd[c];
    double sdy = 0.0, sdyx = 0.0;
    for (int64_t n = 0; n < d.N; ++n)
      sum_dot(dy + at(d, n, c, 0), x + at(d, n, c, 0), d.HW, sdy, sdyx);
    const double sdyxh = invstd * (sdyx - mean * sdy);
    if (dx) {
      // dx = γ·invstd·dy − γ·invstd/M·(Σdy + x̂·Σdy·x̂), x̂ = (x − μ)·invstd
      const double g = double(gamma[c]) * invstd;
      const double kx = -g / M * sdyxh * invstd;  // coefficient of x
      const float a = float(g);
      const float b = float(kx);
      const float c0 = float(-g / M * sdy - kx * mean);
      for (int64_t n = 0; n < d.N; ++n) {
        const float* xr = x + at(d, n, c, 0);
        const float* gr = dy + at(d, n, c, 0);
        float* out = dx + at(d, n, c, 0);
        for (int64_t i = 0; i < d.HW; ++i) out[i] = gr[i] * a + xr[i] * b + c0;
      }
    }
    if (dgamma) dgamma[c] = float(accumulate ? dgamma[c] + sdyxh : sdyxh);
    if (dbeta) dbeta[c] = float(accumulate ? dbeta[c] + sdy : sdy);
  }
}

template <typename T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_as<T>() : nullptr;
}

}  // namespace

void CpuBackend::batchnorm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                         Tensor& running_mean, Tensor& running_var, float momentum,
                                         float eps, Tensor& y, Tensor& save_mean,
                                         Tensor& save_invstd) {
  const BnDims d = bn_dims(x, "batchnorm_forward_train");
  check_channel(gamma, x, "batchnorm_forward_train: gamma");
  check_channel(beta, x, "batchnorm_forward_train: beta");
  check_channel(running_mean, x, "batchnorm_forward_train: running_mean");
  check_channel(running_var, x, "batchnorm_forward_train: running_var");
  check_channel(save_mean, x, "batchnorm_forward_train: save_mean");
  check_channel(save_invstd, x, "batchnorm_forward_train: save_invstd");
  check_like(y, x, "batchnorm_forward_train: y");
  TB_CHECK(d.M() > 0, "batchnorm_forward_train: empty batch ", x.describe());
  if (x.dtype() == DType::F64) {
    bn_train_ref<double>(d, x.data_as<double>(), gamma.data_as<double>(), beta.data_as<double>(),
                         running_mean.data_as<double>(), running_var.data_as<double>(), momentum,
                         eps, y.data_as<double>(), save_mean.data_as<double>(),
                         save_invstd.data_as<double>());
  } else if (use_reference(x.dtype()) || d.nhwc) {  // NHWC: reference (file comment)
    bn_train_ref<float>(d, x.data_as<float>(), gamma.data_as<float>(), beta.data_as<float>(),
                        running_mean.data_as<float>(), running_var.data_as<float>(), momentum, eps,
                        y.data_as<float>(), save_mean.data_as<float>(),
                        save_invstd.data_as<float>());
  } else {
    bn_train_f32(d, x.data_as<float>(), gamma.data_as<float>(), beta.data_as<float>(),
                 running_mean.data_as<float>(), running_var.data_as<float>(), momentum, eps,
                 y.data_as<float>(), save_mean.data_as<float>(), save_invstd.data_as<float>(),
                 threads_);
  }
}

void CpuBackend::batchnorm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                        const Tensor& running_mean, const Tensor& running_var,
                                        float eps, Tensor& y) {
  const BnDims d = bn_dims(x, "batchnorm_forward_eval");
  check_channel(gamma, x, "batchnorm_forward_eval: gamma");
  check_channel(beta, x, "batchnorm_forward_eval: beta");
  check_channel(running_mean, x, "batchnorm_forward_eval: running_mean");
  check_channel(running_var, x, "batchnorm_forward_eval: running_var");
  check_like(y, x, "batchnorm_forward_eval: y");
  if (x.dtype() == DType::F64) {
    bn_eval_ref<double>(d, x.data_as<double>(), gamma.data_as<double>(), beta.data_as<double>(),
                        running_mean.data_as<double>(), running_var.data_as<double>(), eps,
                        y.data_as<double>());
  } else if (use_reference(x.dtype()) || d.nhwc) {  // NHWC: reference (file comment)
    bn_eval_ref<float>(d, x.data_as<float>(), gamma.data_as<float>(), beta.data_as<float>(),
                       running_mean.data_as<float>(), running_var.data_as<float>(), eps,
                       y.data_as<float>());
  } else {
    bn_eval_f32(d, x.data_as<float>(), gamma.data_as<float>(), beta.data_as<float>(),
                running_mean.data_as<float>(), running_var.data_as<float>(), eps,
                y.data_as<float>(), threads_);
  }
}

void CpuBackend::batchnorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                                    const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx,
                                    Tensor& dgamma, Tensor& dbeta, bool accumulate) {
  const BnDims d = bn_dims(x, "batchnorm_backward");
  check_like(dy, x, "batchnorm_backward: dy");
  check_channel(gamma, x, "batchnorm_backward: gamma");
  check_channel(save_mean, x, "batchnorm_backward: save_mean");
  check_channel(save_invstd, x, "batchnorm_backward: save_invstd");
  if (dx.defined()) check_like(dx, x, "batchnorm_backward: dx");
  if (dgamma.defined()) check_channel(dgamma, x, "batchnorm_backward: dgamma");
  if (dbeta.defined()) check_channel(dbeta, x, "batchnorm_backward: dbeta");
  TB_CHECK(!dx.defined() || (dx.data() != x.data() && dx.data() != dy.data()),
           "batchnorm_backward: dx must not alias x or dy");
  if (x.dtype() == DType::F64) {
    bn_backward_ref<double>(d, x.data_as<double>(), dy.data_as<double>(), gamma.data_as<double>(),
                            save_mean.data_as<double>(), save_invstd.data_as<double>(),
                            ptr_or_null<double>(dx), ptr_or_null<double>(dgamma),
                            ptr_or_null<double>(dbeta), accumulate);
  } else if (use_reference(x.dtype()) || d.nhwc) {  // NHWC: reference (file comment)
    bn_backward_ref<float>(d, x.data_as<float>(), dy.data_as<float>(), gamma.data_as<float>(),
                           save_mean.data_as<float>(), save_invstd.data_as<float>(),
                           ptr_or_null<float>(dx), ptr_or_null<float>(dgamma),
                           ptr_or_null<float>(dbeta), accumulate);
  } else {
    bn_backward_f32(d, x.data_as<float>(), dy.data_as<float>(), gamma.data_as<float>(),
                    save_mean.data_as<float>(), save_invstd.data_as<float>(),
                    ptr_or_null<float>(dx), ptr_or_null<float>(dgamma), ptr_or_null<float>(dbeta),
                    accumulate, threads_);
  }
}

}  // namespace tb
