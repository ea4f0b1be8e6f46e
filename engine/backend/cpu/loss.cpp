// SPDX-License-Identifier: GPL-3.0-or-later
// CPU softmax cross-entropy with label smoothing, mean over the batch.
//
//   logits, dlogits (N, K)   labels i32 (N)   stats f64 (2)
//
// Per sample, with log p = z − logsumexp(z) (max-shifted, so exp never overflows)
// and target q = (1−ε)·onehot(y) + ε/K:
//   loss_i = −Σ_k q_k log p_k = −(1−ε)·log p_y − ε/K · Σ_k log p_k
//   dlogits = grad_scale · (p − q) / N          (d mean-loss / d logits)
//   stats += {Σ_i loss_i, #(argmax z == y)}      (first maximum wins ties)
#include <cmath>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"

namespace tb {

namespace {

// ---------------------------------------------------------------- reference
// Row by row in double, whatever T is.
template <typename T>
void softmax_xent_ref(const T* z, const int32_t* labels, int64_t N, int64_t K, double eps,
                      double grad_scale, T* dz, double* stats) {
  double loss_sum = 0.0, correct = 0.0;
  for (int64_t n = 0; n < N; ++n) {
    const T* row = z + n * K;
    const int32_t y = labels[n];
    int64_t arg = 0;
    for (int64_t k = 1; k < K; ++k)
      if (row[k] > row[arg]) arg = k;
    const double m = row[arg];
    double se = 0.0, sum_z = 0.0;
    for (int64_t k = 0; k < K; ++k) {
      se += std::exp(double(row[k]) - m);
      sum_z += double(row[k]);
    }
    const double lse = m + std::log(se);
    const double logp_y = double(row[y]) - lse;
    const double sum_logp = sum_z - double(K) * lse;
    loss_sum += -(1.0 - eps) * logp_y - eps / double(K) * sum_logp;
    if (arg == y) correct += 1.0;
    if (dz) {
      const double s = grad_scale / double(N);
      for (int64_t k = 0; k < K; ++k) {
        const double p = std::exp(double(row[k]) - lse);
        const double q = (k == y ? 1.0 - eps : 0.0) + eps / double(K);
        dz[n * K + k] = T(s * (p - q));
      }
    }
  }
  stats[0] += loss_sum;
  stats[1] += correct;
}

// ---------------------------------------------------------------- fast f32
// exp in float (about twice as fast as the double reference), row sums in double; one exp per
// element (kept in dz between the two passes when the gradient is wanted).
void softmax_xent_f32(const float* z, const int32_t* labels, int64_t N, int64_t K, double eps,
                      double grad_scale, float* dz, double* stats) {
  double loss_sum = 0.0, correct = 0.0;
  const float smooth = float(eps / double(K));
  for (int64_t n = 0; n < N; ++n) {
    const float* row = z + n * K;
    const int32_t y = labels[n];
    int64_t arg = 0;
    for (int64_t k = 1; k < K; ++k)
      if (row[k] > row[arg]) arg = k;
    const float m = row[arg];
    double se = 0.0, sum_z = 0.0;
    if (dz) {
      float* e = dz + n * K;
      for (int64_t k = 0; k < K; ++k) e[k] = std::exp(row[k] - m);
      for (int64_t k = 0; k < K; ++k) {
        se += e[k];
        sum_z += row[k];
      }
    } else {
      for (int64_t k = 0; k < K; ++k) {
        se += std::exp(row[k] - m);
        sum_z += row[k];
      }
    }
    const double lse = double(m) + std::log(se);
    loss_sum += -(1.0 - eps) * (double(row[y]) - lse) - eps / double(K) * (sum_z - double(K) * lse);
    if (arg == y) correct += 1.0;
    if (dz) {
      // p_k = e_k / se; dz = s·(p − q)
      const float s = float(grad_scale / double(N));
      const float inv_se = float(1.0 / se);
      float* d = dz + n * K;
      for (int64_t k = 0; k < K; ++k) d[k] = s * (d[k] * inv_se - smooth);
      d[y] -= s * float(1.0 - eps);
    }
  }
  stats[0] += loss_sum;
  stats[1] += correct;
}

}  // namespace

void CpuBackend::softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                                       float label_smoothing, float grad_scale, Tensor& dlogits,
                                       Tensor& stats) {
  TB_CHECK(logits.device().is_cpu() && labels.device().is_cpu() && stats.device().is_cpu(),
           "softmax_cross_entropy: cpu backend given ", logits.describe());
  TB_CHECK(logits.rank() == 2, "softmax_cross_entropy: logits must be (N, K), got ",
           logits.describe());
  const int64_t N = logits.dim(0), K = logits.dim(1);
  TB_CHECK(K > 0, "softmax_cross_entropy: no classes in ", logits.describe());
  TB_CHECK(logits.dtype() == DType::F32 || logits.dtype() == DType::F64,
           "softmax_cross_entropy: logits must be f32 or f64, got ", logits.describe());
  expect_shape(labels, {N}, "softmax_cross_entropy: labels");
  expect_dtype(labels, DType::I32, "softmax_cross_entropy: labels");
  expect_shape(stats, {2}, "softmax_cross_entropy: stats");
  expect_dtype(stats, DType::F64, "softmax_cross_entropy: stats");
  if (dlogits.defined()) {
    expect_shape(dlogits, logits.shape(), "softmax_cross_entropy: dlogits");
    expect_dtype(dlogits, logits.dtype(), "softmax_cross_entropy: dlogits");
    TB_CHECK(dlogits.data() != logits.data(),
             "softmax_cross_entropy: dlogits must not alias logits");
  }
  TB_CHECK(label_smoothing >= 0.0f && label_smoothing <= 1.0f,
           "softmax_cross_entropy: label smoothing must be in [0, 1], got ", label_smoothing);
  const int32_t* y = labels.data_as<int32_t>();
  for (int64_t n = 0; n < N; ++n)
    TB_CHECK(y[n] >= 0 && y[n] < K, "softmax_cross_entropy: label ", y[n], " of sample ", n,
             " is outside [0, ", K, ")");

  double* st = stats.data_as<double>();
  if (logits.dtype() == DType::F64) {
    softmax_xent_ref<double>(logits.data_as<double>(), y, N, K, label_smoothing, grad_scale,
                             dlogits.defined() ? dlogits.data_as<double>() : nullptr, st);
  } else if (use_reference(logits.dtype())) {
    softmax_xent_ref<float>(logits.data_as<float>(), y, N, K, label_smoothing, grad_scale,
                            dlogits.defined() ? dlogits.data_as<float>() : nullptr, st);
  } else {
    softmax_xent_f32(logits.data_as<float>(), y, N, K, label_smoothing, grad_scale,
                     dlogits.defined() ? dlogits.data_as<float>() : nullptr, st);
  }
}

}  // namespace tb
