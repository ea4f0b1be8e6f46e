// SPDX-License-Identifier: GPL-3.0-or-later
// cuDNN 9 graph API convolutions through cudnn-frontend (header-only, Apache-2.0,
// installed into .deps/cudnn-frontend/include; see docs/gpu-check.md). The
// legacy cudnnConvolutionForward family is deprecated in cuDNN 9 and unused.
//
// One graph per ConvPlanKey, with one convolution node each:
//   Fprop  y (N,K,Ho,Wo)  = conv(x (N,C,H,W), w (K,C,R,S))
//   Dgrad  dx (N,C,H,W)   = conv_dgrad(dy (N,K,Ho,Wo), w)
//   Wgrad  dw (K,C,R,S)   = conv_wgrad(dy, x)
// Tensors carry their layout as strides (NCHW or NHWC for activations; KCRS
// or KRSC for filters); cuDNN picks engines for the strides it is given, and
// nothing is transposed behind the caller's back.
//
// This file includes no engine header that pulls in nlohmann/json: the
// frontend brings its own copy of that library.
#include "engine/ops/conv/conv_cudnn.h"

#include <cudnn.h>

// The frontend has unused static helpers; keep -Wall quiet about them only here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include <cudnn_frontend.h>
#pragma GCC diagnostic pop

#include <mutex>
#include <unordered_map>

#include "engine/core/error.h"

namespace fe = cudnn_frontend;

namespace tb::cuda {

namespace {

// Tensor uids in the variant pack.
constexpr int64_t kUidA = 1, kUidB = 2, kUidOut = 3;

fe::DataType_t fe_type(DType t) {
  switch (t) {
    case DType::F32:
      return fe::DataType_t::FLOAT;
    case DType::F16:
      return fe::DataType_t::HALF;
    case DType::BF16:
      return fe::DataType_t::BFLOAT16;
    case DType::F64:
      return fe::DataType_t::DOUBLE;
    default:
      TB_FAIL("convolution: unsupported dtype ", dtype_name(t));
  }
}

void fe_check(fe::error_t e, const std::string& what, const ConvPlanKey& k) {
  if (e.is_bad())
    TB_FAIL("cudnn: ", what, " failed for convolution ", k.str(), ": ", e.get_message());
}

std::shared_ptr<fe::graph::Tensor_attributes> tensor(fe::graph::Graph& g, const char* name,
                                                     int64_t uid, int alignment, Layout l,
                                                     int64_t n, int64_t c, int64_t h, int64_t w) {
  int64_t st[4];
  layout_strides(l, n, c, h, w, st);
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_alignment(alignment)
                      .set_dim({n, c, h, w})
                      .set_stride({st[0], st[1], st[2], st[3]}));
}

}  // namespace

struct ConvPlanCache::Entry {
  std::shared_ptr<fe::graph::Graph> graph;
  int built = 1;       // plans built: autotune's candidates
  int64_t workspace = -1;  // an execution's, once asked (after autotune chose)
  bool tuned = false;  // benchmark keys: autotune ran (or was given up, untuned_why)
  std::string untuned_why;  // why a benchmark key runs the heuristics' first choice
};

struct ConvPlanCache::State {
  cudnnHandle_t handle = nullptr;
  mutable std::mutex mutex;
  std::unordered_map<ConvPlanKey, Entry, ConvPlanKeyHash> plans;
};

ConvPlanCache::ConvPlanCache(void* cudnn_handle) : state_(std::make_unique<State>()) {
  state_->handle = static_cast<cudnnHandle_t>(cudnn_handle);
}

ConvPlanCache::~ConvPlanCache() = default;

size_t ConvPlanCache::size() const {
  std::lock_guard lock(state_->mutex);
  return state_->plans.size();
}

nlohmann::json ConvPlanCache::describe() const {
  nlohmann::json out = nlohmann::json::object();
  std::lock_guard lock(state_->mutex);
  for (const auto& [key, e] : state_->plans) {
    std::string name;
    const bool named = e.graph->get_plan_name(name).is_good();
    nlohmann::json r{{"path", "cudnn"}, {"plan", named ? name : std::string("?")}};
    if (e.workspace >= 0) r["workspace_bytes"] = e.workspace;
    r["chosen_by"] = plan_chosen_by(key.benchmark, e.tuned, e.untuned_why, e.built);
    out[key.str()] = std::move(r);
  }
  return out;
}

namespace {

// `built`: how many plans were built (autotune's candidates; 1 otherwise).
std::shared_ptr<fe::graph::Graph> build(cudnnHandle_t handle, const ConvPlanKey& k, int& built) {
  auto g = std::make_shared<fe::graph::Graph>();
  const fe::DataType_t io = fe_type(k.dtype);
  g->set_io_data_type(io)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(k.dtype == DType::F64 ? fe::DataType_t::DOUBLE
                                                   : fe::DataType_t::FLOAT);
  const int64_t Ho = k.H_out(), Wo = k.W_out();
  const std::vector<int64_t> pad{k.pad, k.pad}, stride{k.stride, k.stride}, dil{1, 1};
  switch (k.op) {
    case ConvOp::Fprop: {
      auto x = tensor(*g, "x", kUidA, k.align_a, k.x_layout, k.N, k.C, k.H, k.W);
      auto w = tensor(*g, "w", kUidB, k.align_b, k.w_layout, k.K, k.C, k.R, k.S);
      auto y = g->conv_fprop(
          x, w,
          fe::graph::Conv_fprop_attributes().set_padding(pad).set_stride(stride).set_dilation(dil));
      int64_t st[4];
      layout_strides(k.x_layout, k.N, k.K, Ho, Wo, st);
      y->set_output(true)
          .set_uid(kUidOut)
          .set_alignment(k.align_out)
          .set_dim({k.N, k.K, Ho, Wo})
          .set_stride({st[0], st[1], st[2], st[3]});
      break;
    }
    case ConvOp::Dgrad: {
      auto dy = tensor(*g, "dy", kUidA, k.align_a, k.x_layout, k.N, k.K, Ho, Wo);
      auto w = tensor(*g, "w", kUidB, k.align_b, k.w_layout, k.K, k.C, k.R, k.S);
      auto dx = g->conv_dgrad(
          dy, w,
          fe::graph::Conv_dgrad_attributes().set_padding(pad).set_stride(stride).set_dilation(dil));
      int64_t st[4];
      layout_strides(k.x_layout, k.N, k.C, k.H, k.W, st);
      dx->set_output(true)
          .set_uid(kUidOut)
          .set_alignment(k.align_out)
          .set_dim({k.N, k.C, k.H, k.W})
          .set_stride({st[0], st[1], st[2], st[3]});
      break;
    }
    case ConvOp::Wgrad: {
      auto x = tensor(*g, "x", kUidA, k.align_a, k.x_layout, k.N, k.C, k.H, k.W);
      auto dy = tensor(*g, "dy", kUidB, k.align_b, k.x_layout, k.N, k.K, Ho, Wo);
      auto dw = g->conv_wgrad(
          dy, x,
          fe::graph::Conv_wgrad_attributes().set_padding(pad).set_stride(stride).set_dilation(dil));
      int64_t st[4];
      layout_strides(k.w_layout, k.K, k.C, k.R, k.S, st);
      dw->set_output(true)
          .set_uid(kUidOut)
          .set_alignment(k.align_out)
          .set_dim({k.K, k.C, k.R, k.S})
          .set_stride({st[0], st[1], st[2], st[3]});
      break;
    }
  }
  fe_check(g->validate(), "graph validation", k);
  fe_check(g->build_operation_graph(handle), "building the operation graph", k);
  fe_check(g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}),
           "creating execution plans (heuristics A + fallback)", k);
  // The engines this key may use (conv_cudnn.h): filtered by their notes
  // before anything is built.
  const ConvEngineFilter f = conv_engine_filter(k);
  std::vector<fe::NumericalNote_t> numeric;
  if (f.no_down_convert) numeric.push_back(fe::NumericalNote_t::DOWN_CONVERT_INPUTS);
  if (f.no_tensor_core) numeric.push_back(fe::NumericalNote_t::TENSOR_CORE);
  if (f.no_reduced_precision_reduction)
    numeric.push_back(fe::NumericalNote_t::REDUCED_PRECISION_REDUCTION);
  if (f.no_nondeterministic) numeric.push_back(fe::NumericalNote_t::NONDETERMINISTIC);
  if (!numeric.empty()) g->deselect_numeric_notes(numeric);
  if (f.no_runtime_compiled) g->deselect_behavior_notes({fe::BehaviorNote_t::RUNTIME_COMPILATION});
  if (f.max_workspace_bytes > 0) g->deselect_workspace_greater_than(f.max_workspace_bytes);
  const std::string filters = " (engines: " + f.str() + ")";
  fe_check(g->check_support(handle), "finding a supported engine" + filters, k);
  if (f.max_candidates <= 1) {
    // The heuristics' first choice that builds.
    fe_check(g->build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "building plans" + filters,
             k);
    built = 1;
    return g;
  }
  // Autotune: the first max_candidates engines (heuristics' order) that build;
  // deselected ones fail at once and are skipped.
  built = 0;
  std::string failures;
  for (int64_t i = 0; i < g->get_execution_plan_count() && built < f.max_candidates; ++i) {
    fe::error_t e = g->build_plan_at_index(i);  // get_message() is not const
    if (e.is_good())
      ++built;
    else if (failures.size() < 2000)
      failures += "\n  plan " + std::to_string(i) + ": " + e.get_message();
  }
  if (built == 0)
    TB_FAIL("cudnn: no plan built for convolution ", k.str(), filters, ":", failures);
  return g;
}

// Autotuning synchronises the device (cudaDeviceSynchronize in the frontend):
// inside a CUDA graph capture that voids the capture, and end_capture's
// message would name nothing. The warm-up steps before a capture meet every
// shape the step has, so a plan still untuned here is a bug worth naming.
void refuse_while_capturing(cudnnHandle_t handle, const ConvPlanKey& k) {
  cudaStream_t stream = nullptr;
  if (cudnnGetStream(handle, &stream) != CUDNN_STATUS_SUCCESS) return;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) return;
  if (status != cudaStreamCaptureStatusNone)
    TB_FAIL("cudnn: convolution ", k.str(), " has no autotuned plan and a CUDA graph is being "
            "captured (autotuning synchronises the device, which would void the capture); the "
            "eager warm-up steps before a capture should have met this shape");
}

}  // namespace

void ConvPlanCache::run(const ConvPlanKey& shape_key, const void* a, const void* b, void* out,
                        const std::function<void*(size_t, bool)>& workspace) {
  const ConvPlanKey key = with_alignments(shape_key, a, b, out);
  std::unique_lock lock(state_->mutex);
  auto it = state_->plans.find(key);
  const bool tune = key.benchmark && (it == state_->plans.end() || !it->second.tuned);
  if (tune) refuse_while_capturing(state_->handle, key);
  if (it == state_->plans.end()) {
    Entry e;
    e.graph = build(state_->handle, key, e.built);
    it = state_->plans.emplace(key, std::move(e)).first;
  }
  Entry& e = it->second;
  std::unordered_map<int64_t, void*> pack{
      {kUidA, const_cast<void*>(a)}, {kUidB, const_cast<void*>(b)}, {kUidOut, out}};
  if (tune) {
    // Times every built plan on these very buffers (out is overwritten below).
    // Its workspace is the largest candidate's: where that does not fit next
    // to the run's memory, the heuristics' first choice runs (as PyTorch's
    // benchmark mode skips algorithms whose workspace it cannot allocate),
    // said in the record, once: not an out-of-memory failure of the run.
    const int64_t ws = e.graph->get_autotune_workspace_size();
    void* w = nullptr;
    try {
      if (ws > 0) w = workspace(size_t(ws), true);
    } catch (const OutOfMemory&) {
      e.untuned_why = "autotuning's workspace of " + std::to_string(ws) + " bytes did not fit";
    }
    if (e.untuned_why.empty()) fe_check(e.graph->autotune(state_->handle, pack, w), "autotuning", key);
    e.tuned = true;
  }
  int64_t ws = 0;
  fe_check(e.graph->get_workspace_size(ws), "querying the workspace size", key);
  e.workspace = ws;
  void* w = ws > 0 ? workspace(size_t(ws), false) : nullptr;
  fe_check(e.graph->execute(state_->handle, pack, w), "execution", key);
}

}  // namespace tb::cuda
