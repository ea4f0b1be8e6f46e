// SPDX-License-Identifier: GPL-3.0-or-later
// Argument checks and dispatch for the fused linear + activation ops (fused.cu,
// trick 11); batch norm's epilogue is in its op family (engine/ops/batchnorm/).
//
// Linear + activation, x (N, K)  w (M, K)  b (M)  pre, y, dy, dpre (N, M):
// - ReLU forward: one cuBLASLt matmul with the RELU_BIAS epilogue (bias and ReLU
//   applied to the accumulator before the store: no extra kernel, no extra
//   pass over y). The house rule is "the well-kept library for the job", and
//   this is exactly the job the epilogue exists for. When cuBLASLt offers no
//   algorithm for the shape (its heuristic returns none, or the call reports
//   NOT_SUPPORTED), a bias-free GEMM plus fused.cu's bias+ReLU kernel does it.
// - GELU forward: a bias-free GEMM into `pre`, then one kernel for bias + GELU.
//   cuBLASLt's GELU epilogues compute the tanh approximation of GELU (PyTorch
//   only routes approximate="tanh" through them); this engine's GELU is the
//   exact erf form, which the CPU oracle and the unfused path use.
// - Backward: one kernel for dpre = dy·act'(·) and the bias gradient, then
//   the two GEMMs of linear_backward. cuBLASLt's DRELU_BGRAD/DGELU_BGRAD
//   epilogues apply the activation gradient to the output of the *following*
//   layer's dgrad GEMM; with layer-local backward passes (nn/) that GEMM
//   belongs to another layer, so the mask is applied here in one sweep that
//   also reduces db.
// Determinism: the kernels use no atomics (fused.cu). cuBLASLt picks the same
// algorithm for the same shape; under BackendOptions::deterministic we also
// forbid split-K reduction schemes so no result depends on reduction order.
//
// NOTE: written and compiled on a machine without a GPU; not run on a GPU yet.
#include <algorithm>

#include "engine/backend/cuda/cuda_internal.h"

namespace tb {

using cuda::check_f32;
using cuda::check_on;
using cuda::fptr;

namespace {

void check_linear_act(const CudaBackend& be, const char* op, const Tensor& x, const Tensor& w,
                      const Tensor& b, int64_t& N, int64_t& K, int64_t& M) {
  check_on(be, x, op, "x");
  check_on(be, w, op, "weight");
  check_f32(x, op, "x");
  check_f32(w, op, "weight");
  TB_CHECK(x.rank() == 2, op, ": input must be (N, K), got ", x.describe());
  TB_CHECK(w.rank() == 2 && w.dim(1) == x.dim(1), op, ": weight ", w.describe(),
           " does not fit input ", x.describe());
  N = x.dim(0), K = x.dim(1), M = w.dim(0);
  TB_CHECK(N <= INT32_MAX && K <= INT32_MAX && M <= INT32_MAX, op,
           ": dimensions exceed cuBLAS's 32-bit sizes");
  if (b.defined()) {
    check_on(be, b, op, "bias");
    check_f32(b, op, "bias");
    TB_CHECK(b.shape() == Shape{M}, op, ": bias ", b.describe(), " is not (", M, ")");
  }
}

void check_nm(const CudaBackend& be, const char* op, const char* what, const Tensor& t, int64_t N,
              int64_t M) {
  check_on(be, t, op, what);
  check_f32(t, op, what);
  TB_CHECK((t.shape() == Shape{N, M}), op, ": ", what, " ", t.describe(), " is not (", N, ", ", M,
           ")");
}

// Row-major t (N, M) = x (N, K) wᵀ, as column-major tᵀ (M, N) = w (M,K)·xᵀ (K,N).
void gemm_xwt(cublasHandle_t h, const float* x, const float* w, float* t, int64_t N, int64_t K,
              int64_t M) {
  const float alpha = 1.0f, beta = 0.0f;
  TB_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(M), int(N), int(K), &alpha, w,
                               CUDA_R_32F, int(K), x, CUDA_R_32F, int(K), &beta, t, CUDA_R_32F,
                               int(M), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
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

// y (N, M) = relu(x wᵀ + b) in one cuBLASLt call (RELU_BIAS, or RELU without
// bias). Returns false, having enqueued nothing, when cuBLASLt has no
// algorithm for it; throws on other cuBLASLt errors.
bool lt_linear_relu(const CudaBackend::Impl& m, bool deterministic, const float* x, const float* w,
                    const float* b, float* y, int64_t N, int64_t K, int64_t M) {
  LtDescs d;
  TB_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  TB_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  TB_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  const cublasLtEpilogue_t epi = b ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
  TB_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (b)  // length M = rows of the column-major output
    TB_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof(b)));
  // Column-major: A = w as (K, M) ld K, transposed; B = xᵀ (K, N) ld K; D = yᵀ (M, N) ld M.
  TB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.a, CUDA_R_32F, uint64_t(K), uint64_t(M), K));
  TB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.b, CUDA_R_32F, uint64_t(K), uint64_t(N), K));
  TB_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.d, CUDA_R_32F, uint64_t(M), uint64_t(N), M));
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

}  // namespace

// ---------------------------------------------------------------- linear + act

void CudaBackend::linear_act_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                     Activation act, Tensor& y, Tensor& pre) {
  const char* op = "linear_act_forward";
  check_linear_activation(act, op);
  int64_t N, K, M;
  check_linear_act(*this, op, x, w, b, N, K, M);
  check_nm(*this, op, "y", y, N, M);
  TB_CHECK(act != Activation::GELU || pre.defined(), op,
           ": GELU needs the pre-activation buffer `pre` (its backward reads it)");
  if (pre.defined()) {
    check_nm(*this, op, "pre", pre, N, M);
    TB_CHECK(pre.data() != y.data(), op, ": pre and y must be different buffers");
  }
  Impl& m = *impl_;
  m.activate();
  if (N == 0 || M == 0) return;
  const int act_id = act == Activation::ReLU ? 0 : 1;
  float* t = act == Activation::GELU ? fptr(pre) : fptr(y);
  if (K == 0) {  // empty sum: cuBLAS rejects k = 0; t = 0, then bias and activation
    cuda::launch_fill(t, N * M, 4, 0, m.stream);
    cuda::launch_bias_act(t, fptr(b), act_id, fptr(y), N, M, m.stream);
    return;
  }
  if (act == Activation::ReLU &&
      lt_linear_relu(m, options_.deterministic, fptr(x), fptr(w), fptr(b), fptr(y), N, K, M))
    return;
  gemm_xwt(m.cublas, fptr(x), fptr(w), t, N, K, M);
  cuda::launch_bias_act(t, fptr(b), act_id, fptr(y), N, M, m.stream);
}

void CudaBackend::linear_act_backward(const Tensor& x, const Tensor& w, const Tensor& y,
                                      const Tensor& pre, const Tensor& dy, Activation act,
                                      Tensor& dpre, Tensor& dx, Tensor& dw, Tensor& db,
                                      bool accumulate) {
  const char* op = "linear_act_backward";
  check_linear_activation(act, op);
  int64_t N, K, M;
  check_linear_act(*this, op, x, w, db, N, K, M);
  check_nm(*this, op, "dy", dy, N, M);
  check_nm(*this, op, "dpre", dpre, N, M);
  TB_CHECK(dpre.data() != dy.data(), op, ": dpre must be a work buffer of its own (not dy)");
  if (act == Activation::ReLU)
    check_nm(*this, op, "y", y, N, M);
  else
    check_nm(*this, op, "pre", pre, N, M);
  Impl& m = *impl_;
  m.activate();
  cuda::launch_act_backward_bgrad(fptr(y), fptr(pre), fptr(dy), act == Activation::ReLU ? 0 : 1,
                                  fptr(dpre), fptr(db), accumulate, N, M, m.stream);
  Tensor none;
  linear_backward(x, w, dpre, dx, dw, none, accumulate);
}

}  // namespace tb
