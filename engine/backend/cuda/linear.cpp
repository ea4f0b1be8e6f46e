// SPDX-License-Identifier: GPL-3.0-or-later
// Fully connected layer on cuBLAS, PyTorch's convention (as cpu/linear.cpp):
//
//   x (N, K)   w (M, K)   b (M)   y (N, M) = x wᵀ + b
//   dx (N, K) = dy w      dw (M, K) (+)= dyᵀ x      db (M) (+)= Σ_n dy[n, :]
//
// cuBLAS is column-major; a row-major (R, C) matrix is the column-major (C, R)
// matrix, i.e. its transpose. So each row-major product A·B is computed as the
// column-major Bᵀ·Aᵀ with the operands swapped:
//   y:  yᵀ (M,N) = w (M,K)·xᵀ (K,N)   -> gemm(T, N, m=M, n=N, k=K, w, ld K, x, ld K, y, ld M)
//   dx: dxᵀ(K,N) = wᵀ(K,M)·dyᵀ(M,N)   -> gemm(N, N, m=K, n=N, k=M, w, ld K, dy, ld M, dx, ld K)
//   dw: dwᵀ(K,M) = xᵀ(K,N)·dy (N,M)   -> gemm(N, T, m=K, n=M, k=N, x, ld K, dy, ld M, dw, ld K)
// FP32 inputs with CUBLAS_COMPUTE_32F (no TF32, see the handle's math mode).
// The bias is broadcast into y by bias.cu's kernel and the GEMM adds onto it
// (beta = 1), as the CPU fast path does; db is bias.cu's column sum.
// Later: cuBLASLt with the BIAS/GELU epilogues and bf16/fp16 inputs under AMP.
#include "engine/backend/cuda/cuda_internal.h"

namespace tb {

using cuda::check_f32;
using cuda::check_on;
using cuda::fptr;

namespace {

void check_linear(const CudaBackend& be, const char* op, const Tensor& x, const Tensor& w,
                  int64_t& N, int64_t& K, int64_t& M) {
  check_on(be, x, op, "x");
  check_on(be, w, op, "weight");
  TB_CHECK(x.rank() == 2, op, ": input must be (N, K), got ", x.describe(),
           " (flatten rank-4 activations first)");
  TB_CHECK(w.rank() == 2, op, ": weight must be (M, K), got ", w.describe());
  check_f32(x, op, "x");
  check_f32(w, op, "weight");
  N = x.dim(0), K = x.dim(1), M = w.dim(0);
  TB_CHECK(w.dim(1) == K, op, ": input ", x.describe(), " has ", K, " features but weight ",
           w.describe(), " expects ", w.dim(1));
  TB_CHECK(N <= INT32_MAX && K <= INT32_MAX && M <= INT32_MAX, op,
           ": dimensions exceed cuBLAS's 32-bit sizes");
}

void check_out(const CudaBackend& be, const char* op, const char* what, const Tensor& t,
               const Shape& shape) {
  check_on(be, t, op, what);
  check_f32(t, op, what);
  TB_CHECK(t.shape() == shape, op, ": ", what, " ", t.describe(), " does not match ",
           shape_str(shape));
}

// C (m, n) = alpha·op(A)·op(B) + beta·C, column-major, fp32 in and out.
void gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
          int64_t k, const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc) {
  const float alpha = 1.0f;
  TB_CUBLAS_CHECK(cublasGemmEx(h, ta, tb, int(m), int(n), int(k), &alpha, A, CUDA_R_32F, int(lda),
                               B, CUDA_R_32F, int(ldb), &beta, C, CUDA_R_32F, int(ldc),
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void CudaBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  const char* op = "linear_forward";
  int64_t N, K, M;
  check_linear(*this, op, x, w, N, K, M);
  if (b.defined()) check_out(*this, op, "bias", b, {M});
  check_out(*this, op, "output y", y, {N, M});
  Impl& m = *impl_;
  m.activate();
  if (N == 0 || M == 0) return;
  if (K == 0) {  // empty sum: y = b or 0
    cuda::launch_fill(y.data(), y.numel(), 4, 0, m.stream);
    if (b.defined()) cuda::launch_bias_add(fptr(y), fptr(b), N, M, 1, true, m.stream);
    return;
  }
  if (b.defined()) {
    cuda::launch_fill(y.data(), y.numel(), 4, 0, m.stream);
    cuda::launch_bias_add(fptr(y), fptr(b), N, M, 1, true, m.stream);
  }
  gemm(m.cublas, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, fptr(w), K, fptr(x), K,
       b.defined() ? 1.0f : 0.0f, fptr(y), M);
}

void CudaBackend::linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx,
                                  Tensor& dw, Tensor& db, bool accumulate) {
  const char* op = "linear_backward";
  int64_t N, K, M;
  check_linear(*this, op, x, w, N, K, M);
  check_out(*this, op, "gradient dy", dy, {N, M});
  if (dx.defined()) check_out(*this, op, "dx", dx, {N, K});
  if (dw.defined()) check_out(*this, op, "dw", dw, {M, K});
  if (db.defined()) check_out(*this, op, "db", db, {M});
  Impl& m = *impl_;
  m.activate();
  // Degenerate sizes: cuBLAS rejects k = 0, so write the empty sums ourselves.
  if (dx.defined() && dx.numel() > 0) {
    if (M == 0)
      cuda::launch_fill(dx.data(), dx.numel(), 4, 0, m.stream);
    else
      gemm(m.cublas, CUBLAS_OP_N, CUBLAS_OP_N, K, N, M, fptr(w), K, fptr(dy), M, 0.0f, fptr(dx), K);
  }
  if (dw.defined() && dw.numel() > 0) {
    if (N == 0) {
      if (!accumulate) cuda::launch_fill(dw.data(), dw.numel(), 4, 0, m.stream);
    } else {
      gemm(m.cublas, CUBLAS_OP_N, CUBLAS_OP_T, K, M, N, fptr(x), K, fptr(dy), M,
           accumulate ? 1.0f : 0.0f, fptr(dw), K);
    }
  }
  if (db.defined() && M > 0) {
    Tensor work = m.scratch(cuda::bias_grad_scratch_bytes(N, M, 1, true));
    cuda::launch_bias_grad(fptr(dy), fptr(db), N, M, 1, true, accumulate, work.data_as<double>(),
                           m.stream);
  }
}

}  // namespace tb
