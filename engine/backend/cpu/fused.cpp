// SPDX-License-Identifier: GPL-3.0-or-later
// CPU fused pointwise ops (trick 11), NCHW only like batchnorm.cpp:
//
//   x, residual, y, dy, dx, dresidual (N, C, H, W)   M = N·H·W per channel
//   gamma, beta, running_*, save_* (C)
//   forward:  y = act(γ·(x−μ)·invstd + β + residual),  act = ReLU or identity
//   backward: dz = dy·[y > 0] (or dy);  dresidual = dz;  dx, dγ, dβ = BN'(x, dz)
//
//   linear:   x (N, K)  w (M, K)  b (M)  pre, y, dy, dpre (N, M)
//             pre = x wᵀ + b,  y = act(pre),  act = ReLU or exact GELU
//
// reference<T> (f64, or BackendOptions::reference): literally the unfused
// reference ops in sequence, so the fused ops are checked against the
// definition. fast f32: the batch-norm apply, residual add and ReLU in one
// sweep (the unfused path makes three, each reading and writing the tensor);
// the backward folds the ReLU mask into batch norm's two sweeps instead of a
// separate masking pass. The arithmetic of each element is the one of the
// unfused fast path in the same order (same per-lane double sums for the
// statistics, same float apply), so on x86-64 without FMA contraction the two
// give the same bits; the tests still only ask for a stated tolerance.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"

namespace tb {

namespace {

struct Dims {
  int64_t N, C, HW;
  int64_t M() const { return N * HW; }
};

Dims check_x(const Tensor& x, const char* op) {
  TB_CHECK(x.defined(), op, ": x is undefined");
  TB_CHECK(x.device().is_cpu(), op, ": cpu backend given ", x.describe());
  TB_CHECK(x.rank() == 4, op, ": expected a rank-4 (N, C, H, W) input, got ", x.describe());
  TB_CHECK(x.layout() == Layout::NCHW, op, ": the cpu backend supports only NCHW, got ",
           layout_name(x.layout()), " (", x.describe(), ")");
  TB_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::F64, op, ": expected f32 or f64, got ",
           x.describe());
  return {x.n(), x.c(), x.h() * x.w()};
}

void check_channel(const Tensor& t, const Tensor& x, const char* op, const char* what) {
  TB_CHECK(t.defined(), op, ": ", what, " is undefined");
  TB_CHECK(t.device().is_cpu(), op, ": ", what, " ", t.describe(), " is not on the cpu");
  TB_CHECK(t.shape() == Shape{x.c()} && t.dtype() == x.dtype(), op, ": ", what, " ", t.describe(),
           " does not match (", x.c(), ") ", dtype_name(x.dtype()));
}

void check_like(const Tensor& t, const Tensor& x, const char* op, const char* what) {
  TB_CHECK(t.defined(), op, ": ", what, " is undefined");
  TB_CHECK(t.device().is_cpu(), op, ": ", what, " ", t.describe(), " is not on the cpu");
  TB_CHECK(t.shape() == x.shape() && t.dtype() == x.dtype() && t.layout() == x.layout(), op, ": ",
           what, " ", t.describe(), " does not match x ", x.describe());
}

inline int64_t at(const Dims& d, int64_t n, int64_t c) { return (n * d.C + c) * d.HW; }

template <typename T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_as<T>() : nullptr;
}

// ---------------------------------------------------------------- fast f32
constexpr int64_t kParallelMin = 1 << 15;  // elements below which threads cost more
constexpr int kLanes = 8;

// s += Σ g, sx += Σ g·x in kLanes double lanes, lane l on elements i+l: the
// lanes and order of batchnorm.cpp's sum_dot, so the statistics are the same bits.
void lane_sum_dot(const float* g, const float* x, int64_t n, double& s, double& sx) {
  double a[kLanes] = {}, b[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const double v = g[i + l];
      a[l] += v;
      b[l] += v * double(x[i + l]);
    }
  for (; i < n; ++i) {
    a[0] += g[i];
    b[0] += double(g[i]) * double(x[i]);
  }
  for (int l = 0; l < kLanes; ++l) s += a[l], sx += b[l];
}

// One channel's rows: y = act(x·scale + shift [+ r]).
inline void apply_rows(const Dims& d, int64_t c, const float* x, const float* r, bool relu,
                       float scale, float shift, float* y) {
  for (int64_t n = 0; n < d.N; ++n) {
    const float* xr = x + at(d, n, c);
    float* out = y + at(d, n, c);
    if (r) {
      const float* rr = r + at(d, n, c);
      if (relu)
        for (int64_t i = 0; i < d.HW; ++i) {
          const float v = (xr[i] * scale + shift) + rr[i];
          out[i] = v > 0.0f ? v : 0.0f;
        }
      else
        for (int64_t i = 0; i < d.HW; ++i) out[i] = (xr[i] * scale + shift) + rr[i];
    } else if (relu) {
      for (int64_t i = 0; i < d.HW; ++i) {
        const float v = xr[i] * scale + shift;
        out[i] = v > 0.0f ? v : 0.0f;
      }
    } else {
      for (int64_t i = 0; i < d.HW; ++i) out[i] = xr[i] * scale + shift;
    }
  }
}

// Statistics as batchnorm.cpp's bn_train_f32 (Σx, Σx² in double lanes), then
// one apply sweep with the residual and the ReLU.
void bn_act_train_f32(const Dims& d, const float* x, const float* gamma, const float* beta,
                      const float* r, bool relu, float* rmean, float* rvar, double momentum,
                      double eps, float* y, float* smean, float* sinvstd,
                      [[maybe_unused]] int threads) {
  const double M = double(d.M());
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(threads) if (d.M() * d.C >= kParallelMin)
#endif
  for (int64_t c = 0; c < d.C; ++c) {
    double s = 0.0, s2 = 0.0;
    for (int64_t n = 0; n < d.N; ++n) lane_sum_dot(x + at(d, n, c), x + at(d, n, c), d.HW, s, s2);
    const double mean = s / M;
    const double var = std::max(s2 / M - mean * mean, 0.0);
    const double invstd = 1.0 / std::sqrt(var + eps);
    const float scale = float(double(gamma[c]) * invstd);
    const float shift = float(double(beta[c]) - mean * double(gamma[c]) * invstd);
    apply_rows(d, c, x, r, relu, scale, shift, y);
    const double unbiased = d.M() > 1 ? var * M / (M - 1.0) : var;
    rmean[c] = float((1.0 - momentum) * rmean[c] + momentum * mean);
    rvar[c] = float((1.0 - momentum) * rvar[c] + momentum * unbiased);
    smean[c] = float(mean);
    sinvstd[c] = float(invstd);
  }
}

void bn_act_eval_f32(const Dims& d, const float* x, const float* gamma, const float* beta,
                     const float* r, bool relu, const float* rmean, const float* rvar, double eps,
                     float* y, [[maybe_unused]] int threads) {
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(threads) if (d.M() * d.C >= kParallelMin)
#endif
  for (int64_t c = 0; c < d.C; ++c) {
    const double invstd = 1.0 / std::sqrt(double(rvar[c]) + eps);
    const float scale = float(double(gamma[c]) * invstd);
    const float shift = float(double(beta[c]) - double(rmean[c]) * double(gamma[c]) * invstd);
    apply_rows(d, c, x, r, relu, scale, shift, y);
  }
}

// Sweep 1 per channel: dz = mask(dy) row by row (into dresidual when wanted,
// else a row of scratch), Σdz and Σdz·x. Sweep 2: dx from the same formula as
// batchnorm.cpp's bn_backward_f32, dz recomputed from y and dy.
void bn_act_backward_f32(const Dims& d, const float* x, const float* y, const float* dy,
                         const float* gamma, const float* smean, const float* sinvstd, bool relu,
                         float* dx, float* dres, float* dgamma, float* dbeta, bool accumulate,
                         [[maybe_unused]] int threads) {
  const double M = double(d.M());
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(threads) if (d.M() * d.C >= kParallelMin)
#endif
  for (int64_t c = 0; c < d.C; ++c) {
    std::vector<float> scratch(relu && !dres ? size_t(d.HW) : 0);
    const double mean = smean[c], invstd = sinvstd[c];
    double sdy = 0.0, sdyx = 0.0;
    for (int64_t n = 0; n < d.N; ++n) {
      const float* gr = dy + at(d, n, c);
      const float* xr = x + at(d, n, c);
      const float* dz = gr;
      if (relu) {
        const float* yr = y + at(d, n, c);
        float* mz = dres ? dres + at(d, n, c) : scratch.data();
        // gr[i] loaded unconditionally: a conditional load keeps GCC from
        // vectorizing the select (the unfused relu_backward is SIMD).
        for (int64_t i = 0; i < d.HW; ++i) {
          const float g = gr[i];
          mz[i] = yr[i] > 0.0f ? g : 0.0f;
        }
        dz = mz;
      } else if (dres) {
        std::copy_n(gr, d.HW, dres + at(d, n, c));
      }
      lane_sum_dot(dz, xr, d.HW, sdy, sdyx);
    }
    const double sdyxh = invstd * (sdyx - mean * sdy);
    if (dx) {
      const double g = double(gamma[c]) * invstd;
      const double kx = -g / M * sdyxh * invstd;
      const float a = float(g);
      const float b = float(kx);
      const float c0 = float(-g / M * sdy - kx * mean);
      for (int64_t n = 0; n < d.N; ++n) {
        const float* xr = x + at(d, n, c);
        const float* gr = dy + at(d, n, c);
        float* out = dx + at(d, n, c);
        if (relu) {
          const float* yr = y + at(d, n, c);
          for (int64_t i = 0; i < d.HW; ++i) {
            const float g = gr[i];
            const float dz = yr[i] > 0.0f ? g : 0.0f;
            out[i] = dz * a + xr[i] * b + c0;
          }
        } else {
          for (int64_t i = 0; i < d.HW; ++i) out[i] = gr[i] * a + xr[i] * b + c0;
        }
      }
    }
    if (dgamma) dgamma[c] = float(accumulate ? dgamma[c] + sdyxh : sdyxh);
    if (dbeta) dbeta[c] = float(accumulate ? dbeta[c] + sdy : sdy);
  }
}

constexpr double kInvSqrt2 = 0.70710678118654752440;

// pre/y (N, M) hold x wᵀ (no bias yet): one sweep adds the bias, keeps the
// pre-activation for GELU's backward and applies the activation. Float GELU
// with erff, as pointwise.cpp's fast path.
void bias_act_f32(int64_t N, int64_t M, const float* b, Backend::Activation act, float* pre,
                  float* y, [[maybe_unused]] int threads) {
  const int64_t n_all = N * M;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(threads) if (n_all >= kParallelMin)
#endif
  for (int64_t n = 0; n < N; ++n) {
    float* yr = y + n * M;
    if (act == Backend::Activation::ReLU) {
      for (int64_t m = 0; m < M; ++m) {
        const float z = b ? yr[m] + b[m] : yr[m];
        yr[m] = z > 0.0f ? z : 0.0f;
      }
    } else {
      float* pr = pre + n * M;
      for (int64_t m = 0; m < M; ++m) {
        const float z = b ? pr[m] + b[m] : pr[m];
        pr[m] = z;
        yr[m] = 0.5f * z * (1.0f + std::erf(z * float(kInvSqrt2)));
      }
    }
  }
}

}  // namespace

void CpuBackend::batchnorm_act_forward_train(const Tensor& x, const Tensor& gamma,
                                             const Tensor& beta, const Tensor& residual, bool relu,
                                             Tensor& running_mean, Tensor& running_var,
                                             float momentum, float eps, Tensor& y,
                                             Tensor& save_mean, Tensor& save_invstd) {
  const char* op = "batchnorm_act_forward_train";
  const Dims d = check_x(x, op);
  check_channel(gamma, x, op, "gamma");
  check_channel(beta, x, op, "beta");
  check_channel(running_mean, x, op, "running_mean");
  check_channel(running_var, x, op, "running_var");
  check_channel(save_mean, x, op, "save_mean");
  check_channel(save_invstd, x, op, "save_invstd");
  check_like(y, x, op, "y");
  if (residual.defined()) check_like(residual, x, op, "residual");
  TB_CHECK(d.M() > 0, op, ": empty batch ", x.describe());
  TB_CHECK(y.data() != x.data(), op, ": y must not alias x (", x.describe(), ")");
  if (use_reference(x.dtype())) {
    batchnorm_forward_train(x, gamma, beta, running_mean, running_var, momentum, eps, y, save_mean,
                            save_invstd);
    if (residual.defined()) add(y, residual, y);
    if (relu) relu_forward(y, y);
    return;
  }
  bn_act_train_f32(d, x.data_as<float>(), gamma.data_as<float>(), beta.data_as<float>(),
                   ptr_or_null<float>(residual), relu, running_mean.data_as<float>(),
                   running_var.data_as<float>(), momentum, eps, y.data_as<float>(),
                   save_mean.data_as<float>(), save_invstd.data_as<float>(), threads_);
}

void CpuBackend::batchnorm_act_forward_eval(const Tensor& x, const Tensor& gamma,
                                            const Tensor& beta, const Tensor& residual, bool relu,
                                            const Tensor& running_mean, const Tensor& running_var,
                                            float eps, Tensor& y) {
  const char* op = "batchnorm_act_forward_eval";
  const Dims d = check_x(x, op);
  check_channel(gamma, x, op, "gamma");
  check_channel(beta, x, op, "beta");
  check_channel(running_mean, x, op, "running_mean");
  check_channel(running_var, x, op, "running_var");
  check_like(y, x, op, "y");
  if (residual.defined()) check_like(residual, x, op, "residual");
  if (use_reference(x.dtype())) {
    batchnorm_forward_eval(x, gamma, beta, running_mean, running_var, eps, y);
    if (residual.defined()) add(y, residual, y);
    if (relu) relu_forward(y, y);
    return;
  }
  bn_act_eval_f32(d, x.data_as<float>(), gamma.data_as<float>(), beta.data_as<float>(),
                  ptr_or_null<float>(residual), relu, running_mean.data_as<float>(),
                  running_var.data_as<float>(), eps, y.data_as<float>(), threads_);
}

void CpuBackend::batchnorm_act_backward(const Tensor& x, const Tensor& y, const Tensor& dy,
                                        const Tensor& gamma, const Tensor& save_mean,
                                        const Tensor& save_invstd, bool relu, Tensor& dx,
                                        Tensor& dresidual, Tensor& dgamma, Tensor& dbeta,
                                        bool accumulate) {
  const char* op = "batchnorm_act_backward";
  const Dims d = check_x(x, op);
  check_like(dy, x, op, "dy");
  if (relu) check_like(y, x, op, "y");
  check_channel(gamma, x, op, "gamma");
  check_channel(save_mean, x, op, "save_mean");
  check_channel(save_invstd, x, op, "save_invstd");
  if (dx.defined()) check_like(dx, x, op, "dx");
  if (dresidual.defined()) check_like(dresidual, x, op, "dresidual");
  if (dgamma.defined()) check_channel(dgamma, x, op, "dgamma");
  if (dbeta.defined()) check_channel(dbeta, x, op, "dbeta");
  for (const Tensor* out : {&dx, &dresidual})
    TB_CHECK(!out->defined() || (out->data() != x.data() && out->data() != dy.data() &&
                                 (!y.defined() || out->data() != y.data())),
             op, ": dx and dresidual must not alias x, y or dy");
  TB_CHECK(!dx.defined() || !dresidual.defined() || dx.data() != dresidual.data(), op,
           ": dx and dresidual must be different buffers");
  if (use_reference(x.dtype())) {
    Tensor dz = dy;
    if (relu || dresidual.defined()) {
      dz = dresidual.defined() ? dresidual : Tensor::empty(x.shape(), x.dtype());
      if (relu)
        relu_backward(y, dy, dz);
      else
        copy(dy, dz);
    }
    batchnorm_backward(x, dz, gamma, save_mean, save_invstd, dx, dgamma, dbeta, accumulate);
    return;
  }
  bn_act_backward_f32(d, x.data_as<float>(), relu ? y.data_as<float>() : nullptr,
                      dy.data_as<float>(), gamma.data_as<float>(), save_mean.data_as<float>(),
                      save_invstd.data_as<float>(), relu, ptr_or_null<float>(dx),
                      ptr_or_null<float>(dresidual), ptr_or_null<float>(dgamma),
                      ptr_or_null<float>(dbeta), accumulate, threads_);
}

void CpuBackend::linear_act_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                    Activation act, Tensor& y, Tensor& pre) {
  const char* op = "linear_act_forward";
  TB_CHECK(act != Activation::GELU || pre.defined(), op,
           ": GELU needs the pre-activation buffer `pre` (its backward reads it)");
  TB_CHECK(!pre.defined() || (pre.shape() == y.shape() && pre.dtype() == y.dtype() &&
                              pre.device().is_cpu() && pre.data() != y.data()),
           op, ": pre ", pre.defined() ? pre.describe() : std::string("(undefined)"),
           " must be a separate buffer like y ", y.describe());
  // x, w and y are checked by linear_forward; b here, as the fast path's
  // GEMM does not see it.
  TB_CHECK(w.defined() && w.rank() == 2, op, ": weight must be (M, K), got ",
           w.defined() ? w.describe() : std::string("(undefined)"));
  if (b.defined())
    TB_CHECK(b.device().is_cpu() && b.dtype() == w.dtype() && (b.shape() == Shape{w.dim(0)}), op,
             ": bias ", b.describe(), " does not match weight ", w.describe());
  Tensor& gemm_out = act == Activation::GELU ? pre : y;
  if (use_reference(x.dtype())) {
    linear_forward(x, w, b, gemm_out);
    if (act == Activation::ReLU) {
      relu_forward(y, y);
    } else {
      gelu_forward(pre, y);
    }
    return;
  }
  // GEMM without bias (beta = 0), then bias and activation in one sweep: the
  // unfused path broadcasts the bias into y, runs the GEMM onto it, then makes
  // a second sweep for the activation.
  linear_forward(x, w, Tensor{}, gemm_out);
  bias_act_f32(y.dim(0), y.dim(1), ptr_or_null<float>(b), act, ptr_or_null<float>(pre),
               y.data_as<float>(), threads_);
}

// The activation's gradient is one elementwise sweep either way; what the CPU
// gains from fusing Linear+act is in the forward. Both paths reuse the
// pointwise and linear kernels (reference or fast by the usual dispatch).
void CpuBackend::linear_act_backward(const Tensor& x, const Tensor& w, const Tensor& y,
                                     const Tensor& pre, const Tensor& dy, Activation act,
                                     Tensor& dpre, Tensor& dx, Tensor& dw, Tensor& db,
                                     bool accumulate) {
  const char* op = "linear_act_backward";
  TB_CHECK(dpre.defined() && dpre.data() != dy.data(), op,
           ": dpre must be a work buffer of its own (not dy)");
  if (act == Activation::ReLU) {
    TB_CHECK(y.defined(), op, ": ReLU backward needs y");
    relu_backward(y, dy, dpre);
  } else {
    TB_CHECK(pre.defined(), op, ": GELU backward needs the pre-activation");
    gelu_backward(pre, dy, dpre);
  }
  linear_backward(x, w, dpre, dx, dw, db, accumulate);
}

}  // namespace tb
