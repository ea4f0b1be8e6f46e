// SPDX-License-Identifier: GPL-3.0-or-later
// The CPU backend's linear layer (contract: linear.h), PyTorch's convention:
//
//   x (N, K)   w (M, K)   b (M)   y (N, M) = act(x w^T + b)
//   dx (N, K) = dz w        dw (M, K) = dz^T x        db (M) = sum_n dz[n, :]
//   dz = dy·act'(·), or dy without an activation
//
// reference<T>: the sums as loops (f64, or BackendOptions::reference).
// fast f32: three OpenBLAS GEMMs; the bias is copied into y first and the GEMM
// adds onto it (beta = 1). With OpenMP each GEMM is split into row blocks of
// its output, one per thread, each a single-threaded GEMM (OpenBLAS runs with
// one thread, see cpu_backend.cpp): no output cell is shared, so there is
// nothing to reduce and the values do not depend on the thread count.
//
// The activation epilogue (fuse_pointwise): the reference is literally the
// plain reference op followed by the pointwise reference ops, so the fused op
// is checked against its definition; the fast f32 path runs a bias-free GEMM,
// then bias and activation in one sweep. The activation's gradient is one
// elementwise sweep either way (the pointwise ops), then the plain backward:
// what the CPU gains from fusing is in the forward.
//
// f16/bf16 (amp): the inputs widened to f32 (exactly: every f16 and bf16
// value is an f32 value), then the f32 op. f32 activations: dy rounded to
// x's dtype and widened for the two GEMMs, db from the unrounded dy (as the
// fp32 layer's, bit for bit). Low-precision activations: dy widened for all
// three, y and dx rounded once from the f32 results. So the products of the low-precision values are summed in
// fp32; the GPU's Tensor Core GEMM differs only in summation order. The CPU
// never computes in half precision.
#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/ops/amp/amp.h"
#include "engine/ops/linear/linear.h"
#include "engine/ops/pointwise/pointwise.h"

namespace tb {

namespace {

// ---------------------------------------------------------------- reference

template <typename T>
void linear_forward_ref(int64_t N, int64_t K, int64_t M, const T* x, const T* w, const T* b,
                        T* y) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m) {
      T acc = b ? b[m] : T(0);
      for (int64_t k = 0; k < K; ++k) acc += x[n * K + k] * w[m * K + k];
      y[n * M + m] = acc;
    }
}

template <typename T>
void linear_backward_ref(int64_t N, int64_t K, int64_t M, const T* x, const T* w, const T* dy,
                         T* dx, T* dw, T* db, bool accumulate) {
  if (dx)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        T acc = 0;
        for (int64_t m = 0; m < M; ++m) acc += dy[n * M + m] * w[m * K + k];
        dx[n * K + k] = acc;
      }
  if (dw)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) {
        T acc = 0;
        for (int64_t n = 0; n < N; ++n) acc += dy[n * M + m] * x[n * K + k];
        dw[m * K + k] = accumulate ? dw[m * K + k] + acc : acc;
      }
  if (db)
    for (int64_t m = 0; m < M; ++m) {
      T acc = 0;
      for (int64_t n = 0; n < N; ++n) acc += dy[n * M + m];
      db[m] = accumulate ? db[m] + acc : acc;
    }
}

// ---------------------------------------------------------------- fast f32

// Runs f(lo, hi) over row blocks of [0, rows) on up to `threads` threads, when the
// GEMM (rows x cols x inner) is big enough to pay for waking them.
template <typename F>
void split_rows(int64_t rows, int64_t cols, int64_t inner, int threads, F&& f) {
#ifdef _OPENMP
  const int64_t work = rows * cols * inner;
  const int nt = int(std::clamp<int64_t>(std::min<int64_t>(work >> 19, rows), 1, std::max(threads, 1)));
  if (nt > 1) {
#pragma omp parallel num_threads(nt)
    {
      const int t = omp_get_thread_num(), n = omp_get_num_threads();
      const int64_t lo = rows * t / n, hi = rows * (t + 1) / n;
      if (lo < hi) f(lo, hi);
    }
    return;
  }
#endif
  if (rows > 0) f(0, rows);
}

void linear_forward_fast(int64_t N, int64_t K, int64_t M, const float* x, const float* w,
                         const float* b, float* y, int threads) {
  // y rows [lo, hi) (N, M) = x (N, K) * w^T (K, M) [+ y]
  split_rows(N, M, K, threads, [&](int64_t lo, int64_t hi) {
    if (b)
      for (int64_t n = lo; n < hi; ++n) std::copy_n(b, M, y + n * M);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(hi - lo), int(M), int(K), 1.0f,
                x + lo * K, int(K), w, int(K), b ? 1.0f : 0.0f, y + lo * M, int(M));
  });
}

void linear_backward_fast(int64_t N, int64_t K, int64_t M, const float* x, const float* w,
                          const float* dy, float* dx, float* dw, float* db, bool accumulate,
                          int threads) {
  // dx rows [lo, hi) (N, K) = dy (N, M) * w (M, K)
  if (dx)
    split_rows(N, K, M, threads, [&](int64_t lo, int64_t hi) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(hi - lo), int(K), int(M), 1.0f,
                  dy + lo * M, int(M), w, int(K), 0.0f, dx + lo * K, int(K));
    });
  // dw rows [lo, hi) (M, K) (+)= dy^T (M, N) * x (N, K)
  if (dw)
    split_rows(M, K, N, threads, [&](int64_t lo, int64_t hi) {
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(hi - lo), int(K), int(N), 1.0f,
                  dy + lo, int(M), x, int(K), accumulate ? 1.0f : 0.0f, dw + lo * K, int(K));
    });
  if (db) {
    // Row by row so the inner loop runs over contiguous memory.
    std::vector<double> acc(size_t(M), 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t m = 0; m < M; ++m) acc[m] += dy[n * M + m];
    for (int64_t m = 0; m < M; ++m) db[m] = accumulate ? db[m] + float(acc[m]) : float(acc[m]);
  }
}

template <typename T>
T* ptr(const Tensor& t) {
  return t.defined() ? t.data_as<T>() : nullptr;
}

// ---------------------------------------------------------------- activation epilogue

constexpr int64_t kParallelMin = 1 << 15;  // elements below which threads cost more

constexpr double kInvSqrt2 = 0.70710678118654752440;

// pre/y (N, M) hold x wᵀ (no bias yet): one sweep adds the bias, keeps the
// pre-activation for GELU's backward and applies the activation. Float GELU
// with erff, as pointwise.cpp's fast path.
void bias_act_f32(int64_t N, int64_t M, const float* b, Activation act, float* pre, float* y,
                  [[maybe_unused]] int threads) {
  const int64_t n_all = N * M;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(threads) if (n_all >= kParallelMin)
#endif
  for (int64_t n = 0; n < N; ++n) {
    float* yr = y + n * M;
    if (act == Activation::ReLU) {
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

// What the CPU backend adds to the contract: host tensors, f32 or f64 (f16
// and bf16 widened to f32).
void check_cpu(const Tensor& x, const char* op) {
  TB_CHECK(x.device().is_cpu(), op, ": ", x.describe(), " given to the cpu backend");
  const DType t = x.dtype();
  TB_CHECK(t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16, op,
           ": the cpu backend supports f32 and f64 (f16 and bf16 under amp), got ",
           x.describe());
}

using linear::Dims;

class CpuKernels final : public linear::Kernels {
 public:
  explicit CpuKernels(CpuBackend& be) : be_(be) {}

  void forward(const Dims& d, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
               const Epilogue& epilogue) override;
  void backward(const Dims& d, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx,
                Tensor& dw, Tensor& db, bool accumulate, const EpilogueGrad& epilogue) override;

 private:
  void forward_plain(const Dims& d, const Tensor& x, const Tensor& w, const Tensor& b,
                     Tensor& y);
  void backward_plain(const Dims& d, const Tensor& x, const Tensor& w, const Tensor& dy,
                      Tensor& dx, Tensor& dw, Tensor& db, bool accumulate);
  void forward_act(const Dims& d, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                   const Epilogue& epilogue);
  void forward_lp(const Dims& d, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);
  void backward_lp(const Dims& d, const Tensor& x, const Tensor& w, const Tensor& dy,
                   Tensor& dx, Tensor& dw, Tensor& db, bool accumulate);

  CpuBackend& be_;
};

}  // namespace

void CpuKernels::forward(const Dims& d, const Tensor& x, const Tensor& w, const Tensor& b,
                         Tensor& y, const Epilogue& epilogue) {
  check_cpu(x, "linear_forward");
  if (d.low_precision)
    forward_lp(d, x, w, b, y);
  else if (epilogue.active())
    forward_act(d, x, w, b, y, epilogue);
  else
    forward_plain(d, x, w, b, y);
}

void CpuKernels::backward(const Dims& d, const Tensor& x, const Tensor& w, const Tensor& dy,
                          Tensor& dx, Tensor& dw, Tensor& db, bool accumulate,
                          const EpilogueGrad& epilogue) {
  check_cpu(x, "linear_backward");
  if (d.low_precision) {
    backward_lp(d, x, w, dy, dx, dw, db, accumulate);
    return;
  }
  if (!epilogue.active()) {
    backward_plain(d, x, w, dy, dx, dw, db, accumulate);
    return;
  }
  // dz = dy·act'(·) by the pointwise ops (reference or fast by their own
  // dispatch), then the plain backward from dz.
  Tensor dz = epilogue.dz;
  if (epilogue.act == Activation::ReLU)
    pointwise::relu_backward(be_, epilogue.y, dy, dz);
  else
    pointwise::gelu_backward(be_, epilogue.pre, dy, dz);
  backward_plain(d, x, w, dz, dx, dw, db, accumulate);
}

void CpuKernels::forward_plain(const Dims& d, const Tensor& x, const Tensor& w, const Tensor& b,
                               Tensor& y) {
  const int64_t N = d.N, K = d.K, M = d.M;
  if (x.dtype() == DType::F64)
    linear_forward_ref<double>(N, K, M, ptr<double>(x), ptr<double>(w), ptr<double>(b),
                               ptr<double>(y));
  else if (be_.use_reference(x.dtype()))
    linear_forward_ref<float>(N, K, M, ptr<float>(x), ptr<float>(w), ptr<float>(b), ptr<float>(y));
  else
    linear_forward_fast(N, K, M, ptr<float>(x), ptr<float>(w), ptr<float>(b), ptr<float>(y),
                        be_.threads());
}

void CpuKernels::backward_plain(const Dims& d, const Tensor& x, const Tensor& w, const Tensor& dy,
                                Tensor& dx, Tensor& dw, Tensor& db, bool accumulate) {
  const int64_t N = d.N, K = d.K, M = d.M;
  if (x.dtype() == DType::F64)
    linear_backward_ref<double>(N, K, M, ptr<double>(x), ptr<double>(w), ptr<double>(dy),
                                ptr<double>(dx), ptr<double>(dw), ptr<double>(db), accumulate);
  else if (be_.use_reference(x.dtype()))
    linear_backward_ref<float>(N, K, M, ptr<float>(x), ptr<float>(w), ptr<float>(dy),
                               ptr<float>(dx), ptr<float>(dw), ptr<float>(db), accumulate);
  else
    linear_backward_fast(N, K, M, ptr<float>(x), ptr<float>(w), ptr<float>(dy), ptr<float>(dx),
                         ptr<float>(dw), ptr<float>(db), accumulate, be_.threads());
}

void CpuKernels::forward_act(const Dims& d, const Tensor& x, const Tensor& w, const Tensor& b,
                             Tensor& y, const Epilogue& epilogue) {
  const Activation act = epilogue.act;
  Tensor pre = epilogue.pre;
  Tensor& gemm_out = act == Activation::GELU ? pre : y;
  if (be_.use_reference(x.dtype())) {
    forward_plain(d, x, w, b, gemm_out);
    if (act == Activation::ReLU)
      pointwise::relu_forward(be_, y, y);
    else
      pointwise::gelu_forward(be_, pre, y);
    return;
  }
  // GEMM without bias (beta = 0), then bias and activation in one sweep: the
  // plain path broadcasts the bias into y, runs the GEMM onto it, then makes
  // a second sweep for the activation.
  forward_plain(d, x, w, Tensor{}, gemm_out);
  bias_act_f32(d.N, d.M, ptr<float>(b), act, ptr<float>(pre), y.data_as<float>(), be_.threads());
}

void CpuKernels::forward_lp(const Dims& d, const Tensor& x, const Tensor& w, const Tensor& b,
                            Tensor& y) {
  Tensor y32 = amp::f32_scratch(be_, y);  // y itself when f32, else rounded once into y
  forward_plain(d, amp::widened(be_, x), amp::widened(be_, w), b, y32);
  amp::round_into(be_, y32, y);
}

void CpuKernels::backward_lp(const Dims& d, const Tensor& x, const Tensor& w, const Tensor& dy,
                             Tensor& dx, Tensor& dw, Tensor& db, bool accumulate) {
  const Tensor xf = amp::widened(be_, x), wf = amp::widened(be_, w);
  if (d.lp_activations) {  // dy as it is for all three; dx rounded once
    Tensor dx32 = amp::f32_scratch(be_, dx);
    backward_plain(d, xf, wf, amp::widened(be_, dy), dx32, dw, db, accumulate);
    amp::round_into(be_, dx32, dx);
    return;
  }
  Tensor dy_lp = Tensor::empty(dy.shape(), x.dtype());
  amp::cast(be_, dy, dy_lp);
  Tensor none;
  backward_plain(d, xf, wf, amp::widened(be_, dy_lp), dx, dw, none, accumulate);
  if (db.defined()) {
    Tensor no_dx, no_dw;
    backward_plain(d, xf, wf, dy, no_dx, no_dw, db, accumulate);
  }
}

namespace linear {
void register_cpu_kernels() { register_kernels<Kernels, CpuKernels, CpuBackend>(DeviceKind::CPU); }
}  // namespace linear

}  // namespace tb
