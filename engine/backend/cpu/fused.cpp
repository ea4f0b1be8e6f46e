// SPDX-License-Identifier: GPL-3.0-or-later
// CPU fused linear + activation (fuse_pointwise, trick 11). Batch norm's
// epilogue (+ residual, ReLU) moved to its op family, engine/ops/batchnorm/;
// this file follows as the linear family's epilogue when that family moves.
//
//   linear:   x (N, K)  w (M, K)  b (M)  pre, y, dy, dpre (N, M)
//             pre = x wᵀ + b,  y = act(pre),  act = ReLU or exact GELU
//
// reference<T> (f64, or BackendOptions::reference): literally the unfused
// reference ops in sequence, so the fused ops are checked against the
// definition. fast f32: a bias-free GEMM, then bias and activation in one
// sweep.
#include <cmath>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/ops/pointwise/pointwise.h"

namespace tb {

namespace {

template <typename T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_as<T>() : nullptr;
}

constexpr int64_t kParallelMin = 1 << 15;  // elements below which threads cost more

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

void CpuBackend::linear_act_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                    Activation act, Tensor& y, Tensor& pre) {
  const char* op = "linear_act_forward";
  check_linear_activation(act, op);
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
      pointwise::relu_forward(*this, y, y);
    } else {
      pointwise::gelu_forward(*this, pre, y);
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
  check_linear_activation(act, op);
  if (act == Activation::ReLU) {
    TB_CHECK(y.defined(), op, ": ReLU backward needs y");
    pointwise::relu_backward(*this, y, dy, dpre);
  } else {
    TB_CHECK(pre.defined(), op, ": GELU backward needs the pre-activation");
    pointwise::gelu_backward(*this, pre, dy, dpre);
  }
  linear_backward(x, w, dpre, dx, dw, db, accumulate);
}

}  // namespace tb
