// SPDX-License-Identifier: GPL-3.0-or-later
// Mixed precision on the CUDA backend: the low-precision linear layer
// (cublasGemmEx, f16/bf16 in, f32 out). The casts and the loss scaler are the
// amp op family's (engine/ops/amp/). Semantics are the CPU reference's
// (engine/backend/cpu/amp.cpp).
//
// Ran on an H200 (2026-11-26, commit b0014f2): test_op_amp and
// test_amp_training's GPU slots passed.
#include "engine/backend/cuda/cuda_internal.h"
#include "engine/ops/amp/amp.h"

namespace tb {

namespace {

bool low_precision(DType t) { return t == DType::F16 || t == DType::BF16; }

}  // namespace

// ---------------------------------------------------------------- low-precision linear
// The same column-major mapping as linear.cpp (see its header), with f16/bf16
// A and B, an f32 C and CUBLAS_COMPUTE_32F: Tensor Core GEMMs with fp32 sums.

namespace {

cudaDataType_t cuda_type(DType t) { return t == DType::F16 ? CUDA_R_16F : CUDA_R_16BF; }

void gemm_lp(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
             int64_t k, cudaDataType_t ab, const void* A, int64_t lda, const void* B, int64_t ldb,
             float beta, float* C, int64_t ldc) {
  const float alpha = 1.0f;
  TB_CUBLAS_CHECK(cublasGemmEx(h, ta, tb, int(m), int(n), int(k), &alpha, A, ab, int(lda), B, ab,
                               int(ldb), &beta, C, CUDA_R_32F, int(ldc), CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
}

void check_linear_lp(const CudaBackend& be, const char* op, const Tensor& x, const Tensor& w,
                     int64_t& N, int64_t& K, int64_t& M) {
  cuda::check_on(be, x, op, "x");
  cuda::check_on(be, w, op, "weight");
  TB_CHECK(low_precision(x.dtype()) && x.dtype() == w.dtype(), op,
           ": x and weight must share one dtype, f16 or bf16; got ", x.describe(), " and ",
           w.describe());
  TB_CHECK(x.rank() == 2 && w.rank() == 2 && w.dim(1) == x.dim(1), op, ": x ", x.describe(),
           " and weight ", w.describe(), " must be (N, K) and (M, K)");
  N = x.dim(0), K = x.dim(1), M = w.dim(0);
  TB_CHECK(N <= INT32_MAX && K <= INT32_MAX && M <= INT32_MAX, op,
           ": dimensions exceed cuBLAS's 32-bit sizes");
}

void check_f32_out(const CudaBackend& be, const char* op, const char* what, const Tensor& t,
                   const Shape& shape) {
  cuda::check_on(be, t, op, what);
  cuda::check_f32(t, op, what);
  TB_CHECK(t.shape() == shape, op, ": ", what, " ", t.describe(), " does not match ",
           shape_str(shape));
}

}  // namespace

void CudaBackend::linear_forward_lp(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  const char* op = "linear_forward_lp";
  int64_t N, K, M;
  check_linear_lp(*this, op, x, w, N, K, M);
  if (b.defined()) check_f32_out(*this, op, "bias", b, {M});
  check_f32_out(*this, op, "output y", y, {N, M});
  Impl& m = *impl_;
  m.activate();
  if (N == 0 || M == 0) return;
  if (b.defined() || K == 0) {
    cuda::launch_fill(y.data(), y.numel(), 4, 0, m.stream);
    if (b.defined()) cuda::launch_bias_add(y.data_as<float>(), b.data_as<float>(), N, M, 1, true,
                                           m.stream);
  }
  if (K == 0) return;
  gemm_lp(m.cublas, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, cuda_type(x.dtype()), w.data(), K, x.data(),
          K, b.defined() ? 1.0f : 0.0f, y.data_as<float>(), M);
}

void CudaBackend::linear_backward_lp(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx,
                                     Tensor& dw, Tensor& db, bool accumulate) {
  const char* op = "linear_backward_lp";
  int64_t N, K, M;
  check_linear_lp(*this, op, x, w, N, K, M);
  check_f32_out(*this, op, "gradient dy", dy, {N, M});
  if (dx.defined()) check_f32_out(*this, op, "dx", dx, {N, K});
  if (dw.defined()) check_f32_out(*this, op, "dw", dw, {M, K});
  if (db.defined()) check_f32_out(*this, op, "db", db, {M});
  Impl& m = *impl_;
  m.activate();
  const cudaDataType_t t = cuda_type(x.dtype());
  // dy rounded once into scratch (back to the cache when this returns; the
  // allocator is stream-ordered, so the GEMMs below are done with it first).
  Tensor dy_lp = Tensor::empty(dy.shape(), x.dtype(), device());
  if (dy.numel() > 0) amp::cast(*this, dy, dy_lp);
  if (dx.defined() && dx.numel() > 0) {
    if (M == 0)
      cuda::launch_fill(dx.data(), dx.numel(), 4, 0, m.stream);
    else
      gemm_lp(m.cublas, CUBLAS_OP_N, CUBLAS_OP_N, K, N, M, t, w.data(), K, dy_lp.data(), M, 0.0f,
              dx.data_as<float>(), K);
  }
  if (dw.defined() && dw.numel() > 0) {
    if (N == 0) {
      if (!accumulate) cuda::launch_fill(dw.data(), dw.numel(), 4, 0, m.stream);
    } else {
      gemm_lp(m.cublas, CUBLAS_OP_N, CUBLAS_OP_T, K, M, N, t, x.data(), K, dy_lp.data(), M,
              accumulate ? 1.0f : 0.0f, dw.data_as<float>(), K);
    }
  }
  if (db.defined() && M > 0) {
    Tensor work = m.scratch(cuda::bias_grad_scratch_bytes(N, M, 1, true));
    cuda::launch_bias_grad(dy.data_as<float>(), db.data_as<float>(), N, M, 1, true, accumulate,
                           work.data_as<double>(), m.stream);
  }
}

}  // namespace tb
