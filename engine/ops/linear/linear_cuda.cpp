// SPDX-License-Identifier: GPL-3.0-or-later
// The CUDA backend's linear Kernels (contract: linear.h) on cuBLAS and
// cuBLASLt, PyTorch's convention (as linear_cpu.cpp):
//
//   x (N, K)   w (M, K)   b (M)   y (N, M) = act(x wᵀ + b)
//   dx (N, K) = dz w      dw (M, K) (+)= dzᵀ x      db (M) (+)= Σ_n dz[n, :]
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
//
// f16/bf16 x and w (amp): the same GEMMs with f16/bf16 A and B, an f32 C and
// CUBLAS_COMPUTE_32F: Tensor Core GEMMs with fp32 sums. dy is rounded once
// to x's dtype for dx and dw; db sums the unrounded f32 dy. With
// low-precision activations (y, dy, dx in x's dtype) y is cuBLASLt's BIAS
// epilogue with an lp D and the f32 bias (or, where it has no algorithm, an
// lp-C GEMM then bias.cu's lp add), dx an lp-C GEMM, dw the f32 GEMM from
// the lp dy, db bias.cu's sum of the lp dy.
//
// The activation epilogue (fuse_pointwise, f32; kernels in linear.cu):
// - ReLU forward: one cuBLASLt matmul with the RELU_BIAS epilogue (bias and ReLU
//   applied to the accumulator before the store: no extra kernel, no extra
//   pass over y). The house rule is "the well-kept library for the job", and
//   this is exactly the job the epilogue exists for. When cuBLASLt offers no
//   algorithm for the shape (its heuristic returns none, or the call reports
//   NOT_SUPPORTED), a bias-free GEMM plus linear.cu's bias+ReLU kernel does it.
// - GELU forward: a bias-free GEMM into `pre`, then one kernel for bias + GELU.
//   cuBLASLt's GELU epilogues compute the tanh approximation of GELU (PyTorch
//   only routes approximate="tanh" through them); this engine's GELU is the
//   exact erf form, which the CPU oracle and the unfused path use.
// - Backward: one kernel for dz = dy·act'(·) and the bias gradient, then the
//   two GEMMs of the plain backward. cuBLASLt's DRELU_BGRAD/DGELU_BGRAD
//   epilogues apply the activation gradient to the output of the *following*
//   layer's dgrad GEMM; with layer-local backward passes (nn/) that GEMM
//   belongs to another layer, so the mask is applied here in one sweep that
//   also reduces db.
// Determinism: the kernels use no atomics (linear.cu). cuBLASLt picks the same
// algorithm for the same shape; under BackendOptions::deterministic we also
// forbid split-K reduction schemes so no result depends on reduction order.
//
// Ran on an H200 before the move (gpu-runs/2026-11-26-h200: test_op_linear,
// test_op_fused and test_op_amp passed, as cuda/linear.cpp, fused_ops.cpp and
// amp_ops.cpp); moved without a change to the arithmetic, not run on a GPU
// since.
#include <algorithm>

#include "engine/backend/cuda/cuda_internal.h"
#include "engine/ops/amp/amp.h"
#include "engine/ops/linear/linear.cuh"
#include "engine/ops/linear/linear.h"

namespace tb {

using cuda::fptr;

namespace {

using linear::Dims;

// What the CUDA backend adds to the contract: x on this device, f32 (or
// f16/bf16 on the mixed-precision path), sizes within cuBLAS's int.
void check_cuda(const CudaBackend& be, const Dims& d, const Tensor& x, const char* op) {
  cuda::check_on(be, x, op, "x");
  if (!d.low_precision) cuda::check_f32(x, op, "x");
  TB_CHECK(d.N <= INT32_MAX && d.K <= INT32_MAX && d.M <= INT32_MAX, op,
           ": dimensions exceed cuBLAS's 32-bit sizes");
}

// The dtype cuBLAS reads x and w (A and B) in.
cudaDataType_t ab_type(const Tensor& x) {
  switch (x.dtype()) {
    case DType::F16: return CUDA_R_16F;
    case DType::BF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

// C (m, n) = alpha·op(A)·op(B) + beta·C, column-major, A and B of type `ab`,
// C of type `ct` (f32, or f16/bf16 rounded once from the sum), fp32 sums.
void gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
          int64_t k, cudaDataType_t ab, const void* A, int64_t lda, const void* B, int64_t ldb,
          float beta, void* C, cudaDataType_t ct, int64_t ldc) {
  const float alpha = 1.0f;
  TB_CUBLAS_CHECK(cublasGemmEx(h, ta, tb, int(m), int(n), int(k), &alpha, A, ab, int(lda), B, ab,
                               int(ldb), &beta, C, ct, int(ldc), CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
}
void gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
          int64_t k, cudaDataType_t ab, const void* A, int64_t lda, const void* B, int64_t ldb,
          float beta, float* C, int64_t ldc) {
  gemm(h, ta, tb, m, n, k, ab, A, lda, B, ldb, beta, C, CUDA_R_32F, ldc);
}

// db (M) (+)= Σ_n dy[n, :] (bias.cu's column sum), f32 dy; nothing when db is
// undefined.
void bias_grad(const CudaBackend::Impl& m, const Dims& d, const Tensor& dy, Tensor& db,
               bool accumulate) {
  if (!db.defined() || d.M == 0) return;
  Tensor work = m.scratch(cuda::bias_grad_scratch_bytes(d.N, d.M, 1, true));
  if (dy.dtype() == DType::F32)
    cuda::launch_bias_grad(fptr(dy), fptr(db), d.N, d.M, 1, true, accumulate,
                           work.data_as<double>(), m.stream);
  else  // low-precision activations' dy
    cuda::launch_bias_grad_lp(dy.data_as<uint16_t>(), dy.dtype() == DType::BF16, fptr(db), d.N,
                              d.M, 1, true, accumulate, work.data_as<double>(), m.stream);
}

// Destroys the cuBLASLt descriptors on every path out.
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

constexpr size_t kLtWorkspace = size_t(4) << 20;

// y (N, M) = act(x wᵀ + b) in one cuBLASLt call, all f32: with ReLU the
// RELU_BIAS epilogue (RELU without bias), without an activation BIAS (a bias
// is then required). Returns false, having enqueued nothing, when cuBLASLt
// has no algorithm for it; throws on other errors.
bool lt_linear(const CudaBackend::Impl& m, bool deterministic, bool relu, const float* x,
               const float* w, const float* b, float* y, int64_t N, int64_t K, int64_t M) {
  const cudaDataType_t ab = CUDA_R_32F, dt = CUDA_R_32F;
  LtDescs d;
  TB_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  TB_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  TB_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  const cublasLtEpilogue_t epi = relu ? (b ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU)
                                      : CUBLASLT_EPILOGUE_BIAS;
  TB_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (b)  // length M = rows of the column-major output
    TB_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof(b)));
  // Column-major: A = w as (K, M) ld K, transposed; B = xᵀ (K, N) ld K; D = yᵀ (M, N) ld M.
  TB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.a, ab, uint64_t(K), uint64_t(M), K));
  TB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.b, ab, uint64_t(K), uint64_t(N), K));
  TB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.d, dt, uint64_t(M), uint64_t(N), M));
  TB_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&d.pref));
  const size_t ws_bytes = kLtWorkspace;
  TB_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes)));
  // The heuristics assume 256-byte aligned A, B, C and D unless told, and w
  // and b are views into the model's flat parameter block (128-byte aligned
  // for fmnist-cnn's fc1): say what the pointers are, as PyTorch does, so no
  // algorithm needing more comes back. The bias is judged with C and D.
  const uint32_t align_a = cuda::address_alignment(w, 256);
  const uint32_t align_b = cuda::address_alignment(x, 256);
  const uint32_t align_cd =
      std::min(cuda::address_alignment(y, 256), b ? cuda::address_alignment(b, 256) : 256u);
  for (auto [attr, value] : {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a},
                             std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b},
                             std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_cd},
                             std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_cd}})
    TB_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(d.pref, attr, &value, sizeof(value)));
  if (deterministic) {
    const uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
    TB_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        d.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &none, sizeof(none)));
  }
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(m.cublaslt, d.op, d.a, d.b, d.d, d.d,
                                                           d.pref, 1, &heur, &found);
  if (hs == CUBLAS_STATUS_NOT_SUPPORTED || (hs == CUBLAS_STATUS_SUCCESS && found == 0))
    return false;
  TB_CUBLAS_CHECK(hs);
  Tensor ws = m.scratch(std::max<size_t>(heur.workspaceSize, 8));
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t st =
      cublasLtMatmul(m.cublaslt, d.op, &alpha, w, d.a, x, d.b, &beta, y, d.d, y, d.d, &heur.algo,
                     ws.data(), heur.workspaceSize, m.stream);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) return false;
  TB_CUBLAS_CHECK(st);
  return true;
}

class CudaKernels final : public linear::Kernels {
 public:
  explicit CudaKernels(CudaBackend& be) : be_(be) {}

  void forward(const Dims& d, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
               const Epilogue& epilogue) override;
  void backward(const Dims& d, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx,
                Tensor& dw, Tensor& db, bool accumulate, const EpilogueGrad& epilogue) override;

 private:
  void forward_act(const Dims& d, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                   const Epilogue& epilogue);
  void forward_lp_activations(const Dims& d, const Tensor& x, const Tensor& w, const Tensor& b,
                              Tensor& y);
  // dx = dz·w, dw (+)= dzᵀ·x, db (+)= Σ_n dz (each when defined); dz in
  // x's dtype.
  void backward_gemms(const Dims& d, const Tensor& x, const Tensor& w, const Tensor& dz,
                      Tensor& dx, Tensor& dw, Tensor& db, bool accumulate);

  CudaBackend& be_;
};

}  // namespace

void CudaKernels::forward(const Dims& d, const Tensor& x, const Tensor& w, const Tensor& b,
                          Tensor& y, const Epilogue& epilogue) {
  check_cuda(be_, d, x, "linear_forward");
  if (epilogue.active()) {
    forward_act(d, x, w, b, y, epilogue);
    return;
  }
  const int64_t N = d.N, K = d.K, M = d.M;
  const CudaBackend::Impl& m = be_.impl();
  m.activate();
  if (N == 0 || M == 0) return;
  if (d.lp_activations) {
    forward_lp_activations(d, x, w, b, y);
    return;
  }
  if (b.defined() || K == 0) {  // y = b (or 0 for K = 0, the empty sum), the GEMM adds onto it
    cuda::launch_fill(y.data(), y.numel(), 4, 0, m.stream);
    if (b.defined()) cuda::launch_bias_add(fptr(y), fptr(b), N, M, 1, true, m.stream);
  }
  if (K == 0) return;  // cuBLAS rejects k = 0
  gemm(m.cublas, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, ab_type(x), w.data(), K, x.data(), K,
       b.defined() ? 1.0f : 0.0f, fptr(y), M);
}

// y (N, M) in x's f16/bf16 = round(round(x wᵀ) + b): a GEMM with an lp C
// (rounded once), then bias.cu's add of the f32 bias (rounded again).
// cuBLASLt's BIAS epilogue would round once, but its bias has D's type
// outside the IMMA and fp8 kernels (cublasLt.h,
// CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE): asked for our f32 bias with a bf16
// D, cuBLASLt 13.1's heuristic answered CUBLAS_STATUS_INVALID_VALUE (H200,
// 2026-11-28), and a bias rounded to bf16 would be another op than the CPU
// reference's.
void CudaKernels::forward_lp_activations(const Dims& d, const Tensor& x, const Tensor& w,
                                         const Tensor& b, Tensor& y) {
  const int64_t N = d.N, K = d.K, M = d.M;
  const CudaBackend::Impl& m = be_.impl();
  const cudaDataType_t t = ab_type(x);
  if (K == 0) {
    cuda::launch_fill(y.data(), y.numel(), 2, 0, m.stream);
  } else {
    gemm(m.cublas, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, t, w.data(), K, x.data(), K, 0.0f, y.data(),
         t, M);
  }
  if (b.defined())
    cuda::launch_bias_add_lp(y.data_as<uint16_t>(), y.dtype() == DType::BF16, fptr(b), N, M, 1,
                             true, m.stream);
}

void CudaKernels::forward_act(const Dims& d, const Tensor& x, const Tensor& w, const Tensor& b,
                              Tensor& y, const Epilogue& epilogue) {
  const int64_t N = d.N, K = d.K, M = d.M;
  const Activation act = epilogue.act;
  const CudaBackend::Impl& m = be_.impl();
  m.activate();
  if (N == 0 || M == 0) return;
  const int act_id = act == Activation::ReLU ? 0 : 1;
  float* t = act == Activation::GELU ? fptr(epilogue.pre) : fptr(y);
  if (K == 0) {  // empty sum: cuBLAS rejects k = 0; t = 0, then bias and activation
    cuda::launch_fill(t, N * M, 4, 0, m.stream);
    cuda::launch_bias_act(t, fptr(b), act_id, fptr(y), N, M, m.stream);
    return;
  }
  if (act == Activation::ReLU &&
      lt_linear(m, be_.options().deterministic, true, fptr(x), fptr(w), fptr(b), fptr(y), N, K, M))
    return;
  gemm(m.cublas, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, CUDA_R_32F, fptr(w), K, fptr(x), K, 0.0f, t,
       M);
  cuda::launch_bias_act(t, fptr(b), act_id, fptr(y), N, M, m.stream);
}

void CudaKernels::backward(const Dims& d, const Tensor& x, const Tensor& w, const Tensor& dy,
                           Tensor& dx, Tensor& dw, Tensor& db, bool accumulate,
                           const EpilogueGrad& epilogue) {
  check_cuda(be_, d, x, "linear_backward");
  const CudaBackend::Impl& m = be_.impl();
  m.activate();
  if (epilogue.active()) {
    // dz and db in one sweep, then the GEMMs from dz.
    const Activation act = epilogue.act;
    cuda::launch_act_backward_bgrad(fptr(epilogue.y), fptr(epilogue.pre), fptr(dy),
                                    act == Activation::ReLU ? 0 : 1, fptr(epilogue.dz), fptr(db),
                                    accumulate, d.N, d.M, m.stream);
    Tensor none;
    backward_gemms(d, x, w, epilogue.dz, dx, dw, none, accumulate);
    return;
  }
  if (!d.low_precision || d.lp_activations) {  // lp activations: dy as it is, dx in lp
    backward_gemms(d, x, w, dy, dx, dw, db, accumulate);
    return;
  }
  // dy rounded once into scratch (given back when this returns; stream
  // order has the GEMMs below done with it first) for dx and dw; db sums
  // the unrounded dy.
  Tensor dy_lp = be_.scratch(dy.shape(), x.dtype());
  if (dy.numel() > 0) amp::cast(be_, dy, dy_lp);
  Tensor none;
  backward_gemms(d, x, w, dy_lp, dx, dw, none, accumulate);
  bias_grad(m, d, dy, db, accumulate);
}

void CudaKernels::backward_gemms(const Dims& d, const Tensor& x, const Tensor& w,
                                 const Tensor& dz, Tensor& dx, Tensor& dw, Tensor& db,
                                 bool accumulate) {
  const int64_t N = d.N, K = d.K, M = d.M;
  const CudaBackend::Impl& m = be_.impl();
  const cudaDataType_t t = ab_type(x);
  // Degenerate sizes: cuBLAS rejects k = 0, so write the empty sums ourselves.
  if (dx.defined() && dx.numel() > 0) {
    // dx f32, or (low-precision activations) x's dtype, rounded once.
    const cudaDataType_t dxt = dx.dtype() == DType::F32 ? CUDA_R_32F : t;
    if (M == 0)
      cuda::launch_fill(dx.data(), dx.numel(), int(dtype_size(dx.dtype())), 0, m.stream);
    else
      gemm(m.cublas, CUBLAS_OP_N, CUBLAS_OP_N, K, N, M, t, w.data(), K, dz.data(), M, 0.0f,
           dx.data(), dxt, K);
  }
  if (dw.defined() && dw.numel() > 0) {
    if (N == 0) {
      if (!accumulate) cuda::launch_fill(dw.data(), dw.numel(), 4, 0, m.stream);
    } else {
      gemm(m.cublas, CUBLAS_OP_N, CUBLAS_OP_T, K, M, N, t, x.data(), K, dz.data(), M,
           accumulate ? 1.0f : 0.0f, fptr(dw), K);
    }
  }
  bias_grad(m, d, dz, db, accumulate);
}

namespace linear {
void register_cuda_kernels() {
  register_kernels<Kernels, CudaKernels, CudaBackend>(DeviceKind::CUDA);
}
}  // namespace linear

}  // namespace tb
