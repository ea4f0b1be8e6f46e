// SPDX-License-Identifier: GPL-3.0-or-later
// CpuBackend fully connected layer, PyTorch's convention:
//
//   x (N, K)   w (M, K)   b (M)   y (N, M) = x w^T + b
//   dx (N, K) = dy w        dw (M, K) = dy^T x        db (M) = sum_n dy[n, :]
//
// reference<T>: the sums as loops (f64, or BackendOptions::reference).
// fast f32: three OpenBLAS GEMMs; the bias is copied into y first and the GEMM
// adds onto it (beta = 1). With OpenMP each GEMM is split into row blocks of
// its output, one per thread, each a single-threaded GEMM (OpenBLAS runs with
// one thread, see cpu_backend.cpp): no output cell is shared, so there is
// nothing to reduce and the values do not depend on the thread count.
#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"

namespace tb {

namespace {

void check_tensor(const char* op, const char* what, const Tensor& t, const Shape& shape,
                  DType dtype) {
  TB_CHECK(t.device().is_cpu(), op, ": ", what, " on ", t.device().str(),
           " given to the cpu backend");
  expect_dtype(t, dtype, op);
  TB_CHECK(t.shape() == shape, op, ": ", what, " ", t.describe(), " does not match ",
           shape_str(shape));
}

// Returns (N, K, M) after checking x (N,K), w (M,K), and b (M) when defined.
void check_linear(const char* op, const Tensor& x, const Tensor& w, const Tensor& b, int64_t& N,
                  int64_t& K, int64_t& M) {
  TB_CHECK(x.defined() && w.defined(), op, ": x and w must be defined");
  TB_CHECK(x.rank() == 2, op, ": input must be (N, K), got ", x.describe(),
           " (flatten rank-4 activations first)");
  TB_CHECK(w.rank() == 2, op, ": weight must be (M, K), got ", w.describe());
  TB_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::F64, op,
           ": the cpu backend supports f32 and f64, got ", x.describe());
  N = x.dim(0), K = x.dim(1), M = w.dim(0);
  TB_CHECK(w.dim(1) == K, op, ": input ", x.describe(), " has ", K,
           " features but weight ", w.describe(), " expects ", w.dim(1));
  check_tensor(op, "x", x, {N, K}, x.dtype());
  check_tensor(op, "weight", w, {M, K}, x.dtype());
  if (b.defined()) check_tensor(op, "bias", b, {M}, x.dtype());
}

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

}  // namespace

void CpuBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  const char* op = "linear_forward";
  int64_t N, K, M;
  check_linear(op, x, w, b, N, K, M);
  TB_CHECK(y.defined(), op, ": output y must be defined");
  check_tensor(op, "output y", y, {N, M}, x.dtype());
  if (x.dtype() == DType::F64)
    linear_forward_ref<double>(N, K, M, ptr<double>(x), ptr<double>(w), ptr<double>(b),
                               ptr<double>(y));
  else if (use_reference(x.dtype()))
    linear_forward_ref<float>(N, K, M, ptr<float>(x), ptr<float>(w), ptr<float>(b), ptr<float>(y));
  else
    linear_forward_fast(N, K, M, ptr<float>(x), ptr<float>(w), ptr<float>(b), ptr<float>(y),
                        threads_);
}

void CpuBackend::linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx,
                                 Tensor& dw, Tensor& db, bool accumulate) {
  const char* op = "linear_backward";
  int64_t N, K, M;
  check_linear(op, x, w, Tensor{}, N, K, M);
  TB_CHECK(dy.defined(), op, ": gradient dy must be defined");
  check_tensor(op, "gradient dy", dy, {N, M}, x.dtype());
  if (dx.defined()) check_tensor(op, "dx", dx, {N, K}, x.dtype());
  if (dw.defined()) check_tensor(op, "dw", dw, {M, K}, x.dtype());
  if (db.defined()) check_tensor(op, "db", db, {M}, x.dtype());
  if (x.dtype() == DType::F64)
    linear_backward_ref<double>(N, K, M, ptr<double>(x), ptr<double>(w), ptr<double>(dy),
                                ptr<double>(dx), ptr<double>(dw), ptr<double>(db), accumulate);
  else if (use_reference(x.dtype()))
    linear_backward_ref<float>(N, K, M, ptr<float>(x), ptr<float>(w), ptr<float>(dy),
                               ptr<float>(dx), ptr<float>(dw), ptr<float>(db), accumulate);
  else
    linear_backward_fast(N, K, M, ptr<float>(x), ptr<float>(w), ptr<float>(dy), ptr<float>(dx),
                         ptr<float>(dw), ptr<float>(db), accumulate, threads_);
}

}  // namespace tb
