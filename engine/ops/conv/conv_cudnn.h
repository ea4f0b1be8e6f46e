// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Convolutions through cuDNN 9's graph API (cudnn-frontend), behind a plain
// header: the frontend's headers are large and slow to compile, so only
// conv_cudnn_cuda.cpp includes them, and this header names no cuDNN or CUDA
// type (the CPU build's tests read the plan key and engine filter below).
//
// Built graphs (operation graph + chosen execution plan) are cached by
// ConvPlanKey: one entry per (op, shape, stride, padding, dtype, layouts,
// policy, pointer alignments). Plan choice:
//   default          heuristics mode A, first plan that builds (FALLBACK
//                    mode's list follows A's, so a fallback engine is tried
//                    when none of A's builds)
//   cudnn_benchmark  every candidate plan is built and timed once per key
//                    (cudnn-frontend's autotune); the fastest is kept
//   deterministic    engines with the NONDETERMINISTIC numerical note are
//                    filtered out before plans are built
// Engines are filtered by cuDNN's numerical and behaviour notes for every key
// (conv_engine_filter below): fp32 gets strict fp32 engines (no down-converted
// inputs, no TF32 while TF32 is off), f16/bf16 no reduced-precision
// reductions, and autotuning no runtime-compiled (NVRTC) engines and at most
// kAutotuneCandidates plans.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/backend/cuda/caching_allocator.h"  // address_alignment
#include "engine/core/dtype.h"
#include "engine/core/tensor.h"

namespace tb::cuda {

enum class ConvOp : uint8_t { Fprop, Dgrad, Wgrad };

struct ConvPlanKey {
  ConvOp op = ConvOp::Fprop;
  int64_t N = 0, C = 0, H = 0, W = 0;  // input (N, C, H, W)
  int64_t K = 0, R = 0, S = 0;         // filters (K, C, R, S)
  int64_t stride = 1, pad = 0;
  DType dtype = DType::F32;
  Layout x_layout = Layout::NCHW;  // activations (x, y, dx, dy)
  Layout w_layout = Layout::NCHW;  // filters (w, dw): NCHW = KCRS, NHWC = KRSC
  bool deterministic = false;
  bool benchmark = false;
  // Byte alignment of the pointers run() gets (a, b, out), at most
  // kConvMaxAlignment: the graph's tensors declare it, engines may rely on
  // it, and cuDNN refuses a pointer less aligned than declared
  // (BAD_PARAM_MISALIGNED_POINTER). Fresh tensors have 16; views into the
  // model's flat parameter and gradient blocks only their float offset's.
  int align_a = 16, align_b = 16, align_out = 16;

  bool operator==(const ConvPlanKey&) const = default;
  int64_t H_out() const { return (H + 2 * pad - R) / stride + 1; }
  int64_t W_out() const { return (W + 2 * pad - S) / stride + 1; }
  // "fprop N=8 C=3 H=32 W=32 K=16 R=3 S=3 stride=1 pad=1 f32 x=NCHW w=NCHW heuristic"
  std::string str() const;
};

// FNV-1a over every field, so keys that differ in any field rarely collide
// (and equality settles the rest).
struct ConvPlanKeyHash {
  size_t operator()(const ConvPlanKey& k) const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t v) {
      for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ull;
    };
    mix(uint64_t(k.op));
    for (int64_t v : {k.N, k.C, k.H, k.W, k.K, k.R, k.S, k.stride, k.pad}) mix(uint64_t(v));
    mix(uint64_t(k.dtype));
    mix(uint64_t(k.x_layout));
    mix(uint64_t(k.w_layout));
    mix(uint64_t(k.deterministic) | (uint64_t(k.benchmark) << 1));
    mix(uint64_t(k.align_a) | (uint64_t(k.align_b) << 16) | (uint64_t(k.align_out) << 32));
    return size_t(h);
  }
};

inline std::string ConvPlanKey::str() const {
  const char* ops[] = {"fprop", "dgrad", "wgrad"};
  return std::string(ops[int(op)]) + " N=" + std::to_string(N) + " C=" + std::to_string(C) +
         " H=" + std::to_string(H) + " W=" + std::to_string(W) + " K=" + std::to_string(K) +
         " R=" + std::to_string(R) + " S=" + std::to_string(S) +
         " stride=" + std::to_string(stride) + " pad=" + std::to_string(pad) + " " +
         dtype_name(dtype) + " x=" + layout_name(x_layout) + " w=" + layout_name(w_layout) +
         (deterministic ? " deterministic" : "") + (benchmark ? " autotuned" : " heuristic") +
         (align_a == 16 && align_b == 16 && align_out == 16
              ? ""
              : " align=" + std::to_string(align_a) + "/" + std::to_string(align_b) + "/" +
                    std::to_string(align_out));
}

// The largest alignment a convolution's tensors declare (the frontend's default).
constexpr uint32_t kConvMaxAlignment = 16;

// `k` with the alignments of the operands run() will get (ConvPlanCache::run
// applies it, so callers build keys from shapes alone).
inline ConvPlanKey with_alignments(ConvPlanKey k, const void* a, const void* b, const void* out) {
  k.align_a = int(address_alignment(a, kConvMaxAlignment));
  k.align_b = int(address_alignment(b, kConvMaxAlignment));
  k.align_out = int(address_alignment(out, kConvMaxAlignment));
  return k;
}

// Which cuDNN engines a convolution may use, decided from the key alone (so it
// is tested without a GPU); conv_cudnn_cuda.cpp turns each flag into the matching
// cudnn-frontend deselect_numeric_notes / deselect_behavior_notes call.
struct ConvEngineFilter {
  bool no_down_convert = false;  // DOWN_CONVERT_INPUTS: fp32/f64 inputs narrowed inside
  bool no_tensor_core = false;   // TENSOR_CORE on fp32 I/O = TF32 arithmetic
  bool no_reduced_precision_reduction = false;  // REDUCED_PRECISION_REDUCTION (f16/bf16)
  bool no_nondeterministic = false;             // NONDETERMINISTIC (deterministic runs)
  bool no_runtime_compiled = false;  // RUNTIME_COMPILATION: NVRTC, seconds per engine
  int max_candidates = 1;            // plans built (autotune times each); 1 = heuristics' choice
  int64_t max_workspace_bytes = 0;   // engines needing more are never built
  // "no DOWN_CONVERT_INPUTS, no TENSOR_CORE (TF32 off), ..., 10 candidates, workspace <= 1024 MiB"
  std::string str() const;
};
// Plans autotuning builds and times at most (PyTorch's cudnn benchmark_limit
// is 10 too): the heuristics' order is kept, the rest never built.
constexpr int kAutotuneCandidates = 10;
// A convolution's workspace at most: some engines (FFT) ask for gigabytes,
// which would end the run out of memory although an engine needing little
// (there always is one: the fallback list) does the same convolution.
constexpr int64_t kMaxConvWorkspaceBytes = int64_t(1) << 30;
// allow_tf32: TF32 tensor-core engines for fp32 I/O (no setting turns it on
// yet: fp32 means fp32, like the cuBLAS GEMMs).
inline ConvEngineFilter conv_engine_filter(const ConvPlanKey& k, bool allow_tf32 = false) {
  ConvEngineFilter f;
  const bool wide = k.dtype == DType::F32 || k.dtype == DType::F64;
  f.no_down_convert = wide;
  f.no_tensor_core = k.dtype == DType::F32 && !allow_tf32;
  f.no_reduced_precision_reduction = k.dtype == DType::F16 || k.dtype == DType::BF16;
  f.no_nondeterministic = k.deterministic;
  f.no_runtime_compiled = k.benchmark;
  f.max_candidates = k.benchmark ? kAutotuneCandidates : 1;
  f.max_workspace_bytes = kMaxConvWorkspaceBytes;
  return f;
}

inline std::string ConvEngineFilter::str() const {
  std::string s;
  auto add = [&s](const char* what) { s += (s.empty() ? "" : ", ") + std::string(what); };
  if (no_down_convert) add("no DOWN_CONVERT_INPUTS");
  if (no_tensor_core) add("no TENSOR_CORE (TF32 off)");
  if (no_reduced_precision_reduction) add("no REDUCED_PRECISION_REDUCTION");
  if (no_nondeterministic) add("no NONDETERMINISTIC");
  if (no_runtime_compiled) add("no RUNTIME_COMPILATION");
  add(max_candidates == 1 ? "heuristics' first choice"
                          : (std::to_string(max_candidates) + " candidates at most").c_str());
  if (max_workspace_bytes > 0)
    add(("workspace <= " + std::to_string(max_workspace_bytes >> 20) + " MiB").c_str());
  return s;
}

// Memory strides of a logical (N, C, H, W) tensor in the given layout.
inline void layout_strides(Layout l, int64_t N, int64_t C, int64_t H, int64_t W, int64_t out[4]) {
  (void)N;
  if (l == Layout::NCHW) {
    out[0] = C * H * W, out[1] = H * W, out[2] = W, out[3] = 1;
  } else {
    out[0] = H * W * C, out[1] = 1, out[2] = W * C, out[3] = C;
  }
}

// How a cached plan was chosen, as describe() says it: the heuristics' first
// choice (for a benchmark key, also when autotuning was given up, and why),
// or autotuned over `built` candidates.
inline std::string plan_chosen_by(bool benchmark, bool tuned, const std::string& untuned_why,
                                  int built) {
  if (!benchmark) return "heuristics' first choice";
  if (!untuned_why.empty()) return "heuristics' first choice (" + untuned_why + ")";
  if (tuned) return "autotune over " + std::to_string(built) + " plans";
  return "not yet autotuned";
}

// The cache of built graphs for one cuDNN handle: one per backend, owned by
// the convolution family's CudaKernels (conv_cuda.cpp).
class ConvPlanCache {
 public:
  // cudnn_handle is a cudnnHandle_t already bound to the backend's stream.
  explicit ConvPlanCache(void* cudnn_handle);
  ~ConvPlanCache();
  ConvPlanCache(const ConvPlanCache&) = delete;
  ConvPlanCache& operator=(const ConvPlanCache&) = delete;

  // Enqueues one convolution on the handle's stream, building (and, for
  // benchmark keys, timing) its plan on first use. Operands by op:
  //   Fprop: a = x, b = w, out = y         Dgrad: a = dy, b = w, out = dx
  //   Wgrad: a = x, b = dy, out = dw       (out is overwritten, never accumulated)
  // `workspace(bytes, autotuning)` returns device memory that stays valid
  // until the work is enqueued (stream order makes it safe to free right
  // after); autotuning: for timing every candidate, once per plan.
  void run(const ConvPlanKey& key, const void* a, const void* b, void* out,
           const std::function<void*(size_t bytes, bool autotuning)>& workspace);

  size_t size() const;  // cached plans
  // Every cached plan, keyed by ConvPlanKey::str(): {path: "cudnn", plan: the
  // engine's tag, workspace_bytes: what each execution asks for, chosen_by}.
  // The backend's kernel_paths.convolution: which engine ran each
  // convolution and the workspace it asked for.
  nlohmann::json describe() const;

 private:
  struct Entry;
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tb::cuda
