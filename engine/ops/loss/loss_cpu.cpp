// SPDX-License-Identifier: GPL-3.0-or-later
// The CPU backend's loss Kernels (contract and formulas: loss.h). What the CPU
// adds to the contract: host tensors, logits f32 or f64.
#include <cmath>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/ops/loss/loss.h"

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

class CpuKernels final : public loss::Kernels {
 public:
  explicit CpuKernels(CpuBackend& be) : be_(be) {}

  void softmax_cross_entropy(const loss::Dims& d, const Tensor& logits, const Tensor& labels,
                             float label_smoothing, float grad_scale, Tensor& dlogits,
                             Tensor& stats) override {
    TB_CHECK(logits.device().is_cpu(),
             "softmax_cross_entropy: cpu backend given ", logits.describe());
    TB_CHECK(logits.dtype() == DType::F32 || logits.dtype() == DType::F64,
             "softmax_cross_entropy: logits must be f32 or f64, got ", logits.describe());
    const int32_t* y = labels.data_as<int32_t>();
    double* st = stats.data_as<double>();
    if (logits.dtype() == DType::F64) {
      softmax_xent_ref<double>(logits.data_as<double>(), y, d.N, d.K, label_smoothing, grad_scale,
                               dlogits.defined() ? dlogits.data_as<double>() : nullptr, st);
    } else if (be_.use_reference(logits.dtype())) {
      softmax_xent_ref<float>(logits.data_as<float>(), y, d.N, d.K, label_smoothing, grad_scale,
                              dlogits.defined() ? dlogits.data_as<float>() : nullptr, st);
    } else {
      softmax_xent_f32(logits.data_as<float>(), y, d.N, d.K, label_smoothing, grad_scale,
                       dlogits.defined() ? dlogits.data_as<float>() : nullptr, st);
    }
  }

 private:
  CpuBackend& be_;
};

}  // namespace

namespace loss {
void register_cpu_kernels() { register_kernels<Kernels, CpuKernels, CpuBackend>(DeviceKind::CPU); }
}  // namespace loss

}  // namespace tb
