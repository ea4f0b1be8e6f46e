// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The one interface every compute backend implements (cpu now, cuda next).
// Layers in engine/nn are written against it and never see a device API.
//
// Conventions for every op:
// - Rank-4 tensors have logical shape (N, C, H, W); their Layout says the memory
//   order. A backend either supports the layout it is given or throws tb::Error;
//   it never transposes silently.
// - "accumulate" on parameter gradients: false writes (the first backward after
//   gradients were set to none), true adds into what is there.
// - An undefined Tensor (Tensor{}) means "not wanted" (e.g. dx of the first layer,
//   db of a convolution without bias).
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <typeindex>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend/capabilities.h"
#include "engine/core/error.h"
#include "engine/core/tensor.h"
#include "engine/data/augment_draw.h"
#include "engine/ops/epilogue.h"
#include "engine/ops/registry.h"

namespace tb {

struct ConvGeometry {
  int64_t N = 0, C_in = 0, H = 0, W = 0;
  int64_t C_out = 0, KH = 0, KW = 0;
  int64_t stride = 1, pad = 0;
  int64_t H_out = 0, W_out = 0;

  static ConvGeometry make(int64_t N, int64_t C_in, int64_t H, int64_t W, int64_t C_out,
                           int64_t kernel, int64_t stride, int64_t pad);
  Shape input_shape() const { return {N, C_in, H, W}; }
  Shape weight_shape() const { return {C_out, C_in, KH, KW}; }
  Shape output_shape() const { return {N, C_out, H_out, W_out}; }
};

enum class OptimizerKind { SGD, AdamW, RMSProp, LARS, LAMB };
const char* optimizer_name(OptimizerKind k);
OptimizerKind optimizer_from_name(const std::string& s);  // throws tb::Error

// Hyper-parameters of one optimizer step. Gradients are multiplied by
// grad_scale before use (1/loss_scale under AMP, times the clipping factor).
struct OptimizerStep {
  OptimizerKind kind = OptimizerKind::SGD;
  float lr = 0.01f;
  float momentum = 0.0f;      // SGD, RMSProp, LARS
  bool nesterov = false;      // SGD
  float weight_decay = 0.0f;  // L2 for SGD/RMSProp/LARS, decoupled for AdamW/LAMB
  float beta1 = 0.9f, beta2 = 0.999f;  // AdamW, LAMB
  float alpha = 0.99f;        // RMSProp smoothing
  float eps = 1e-8f;
  float trust_coefficient = 0.001f;  // LARS
  int64_t step = 1;           // 1-based count, for Adam bias correction
  float grad_scale = 1.0f;
};

// One parameter tensor with its gradient and optimizer state (views into the
// contiguous blocks). state1/state2 are undefined when the optimizer needs none.
struct ParamSlot {
  Tensor param, grad, state1, state2;
  bool weight_decay = true;  // false for biases and BN affine parameters
};

// Device memory as the caching allocator and the driver see it (the GPU memory
// plots, empty_cache_between_phases). Host backends have none (Backend::memory_stats is empty).
struct DeviceMemoryStats {
  int64_t allocated_bytes = 0;       // in live tensors (allocator block sizes)
  int64_t reserved_bytes = 0;        // held by the caching allocator: live + cached
  int64_t peak_allocated_bytes = 0;  // since the start or the last reset_peak_memory()
  int64_t peak_reserved_bytes = 0;
  int64_t malloc_count = 0;          // cudaMalloc calls so far
  int64_t device_used_bytes = -1;    // the driver's view (cudaMemGetInfo), all processes;
  int64_t device_total_bytes = -1;   //   -1 when not asked for
};

class Backend {
 public:
  virtual ~Backend() = default;
  Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  // Op family K's kernels on this backend (engine/ops/registry.h), made on
  // first use and kept. Throws tb::Error naming the family and this backend
  // when it has none; has_kernels<K>() asks without throwing.
  template <class K>
  K& kernels() {
    return static_cast<K&>(kernels_of(typeid(K), K::kFamily));
  }
  template <class K>
  bool has_kernels() const {
    return find_op_kernels(typeid(K), device().kind) != nullptr;
  }

  virtual Device device() const = 0;
  virtual std::string name() const = 0;          // "cpu (openblas 0.3.21, 2 threads)"
  virtual nlohmann::json describe() const = 0;   // device and library versions, for the run record
  // What the trainer may use here beyond the portable ops (capabilities.h).
  // The default: nothing beyond them.
  virtual BackendCapabilities capabilities() const { return {}; }
  virtual void synchronize() {}

  Tensor empty(const Shape& s, DType t, Layout l = Layout::NCHW) const {
    return Tensor::empty(s, t, device(), l);
  }

  // --- memory
  virtual void fill(Tensor& t, double value) = 0;
  // Same logical shape and dtype; either side may be on the host; layouts may
  // differ (the only place a layout conversion happens, and it is explicit).
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  // parallel: dp (one process driving several devices). Copies `src`, on
  // `src_backend`'s device, into `dst` on this backend's device (same shape,
  // dtype and layout), after the work both backends have queued so far; ops
  // either backend queues afterwards see the copy done. The default copies
  // within one device (two CPU backends share the host's memory, which lets
  // the CPU tests drive parallel: dp's replicas) and refuses across devices.
  virtual void copy_from_peer(Backend& src_backend, const Tensor& src, Tensor& dst) {
    TB_CHECK(src_backend.device() == device(), "copy_from_peer: the ", name(),
             " backend drives one device; copying from ", src_backend.name(),
             " (parallel: dp) needs the cuda backend");
    copy(src, dst);
  }

  // --- convolution: x (N,Cin,H,W), w (Cout,Cin,KH,KW), b (Cout) or undefined
  virtual void conv2d_forward(const ConvGeometry& g, const Tensor& x, const Tensor& w,
                              const Tensor& b, Tensor& y) = 0;
  virtual void conv2d_backward(const ConvGeometry& g, const Tensor& x, const Tensor& w,
                               const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db,
                               bool accumulate) = 0;

  // --- linear: x (N,K), w (M,K), b (M) or undefined, y (N,M)
  virtual void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) = 0;
  virtual void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx,
                               Tensor& dw, Tensor& db, bool accumulate) = 0;

  // --- pointwise (any rank; y/dx may alias x/dy)
  virtual void relu_forward(const Tensor& x, Tensor& y) = 0;
  virtual void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) = 0;  // dx = dy*(y>0)
  virtual void gelu_forward(const Tensor& x, Tensor& y) = 0;  // exact (erf) GELU
  virtual void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) = 0;
  virtual void add(const Tensor& a, const Tensor& b, Tensor& y) = 0;   // y = a + b
  virtual void accumulate(const Tensor& src, Tensor& dst) = 0;         // dst += src
  virtual void scale(Tensor& t, double alpha) = 0;                     // t *= alpha

  // --- fused pointwise (fuse_pointwise): linear + activation, in one pass
  // over memory what the unfused ops compute in several, with the same
  // meaning. A backend opts in by overriding; the defaults throw. (Batch
  // norm's takes an epilogue instead; linear's moves to one with its family.)
  // Linear layer with its activation: pre (N,M) = x wᵀ + b, y (N,M) = act(pre).
  // `pre` is written when act is GELU (its backward needs it) and may be
  // undefined for ReLU (whose backward reads y). act: ReLU or GELU.
  using Activation = tb::Activation;
  virtual void linear_act_forward(const Tensor& x, const Tensor& w, const Tensor& b, Activation act,
                                  Tensor& y, Tensor& pre) {
    fused_unsupported("linear_act_forward");
  }
  // dpre (N,M) := dy·act'(pre) (work buffer the caller owns, never aliasing dy),
  // then linear_backward(x, w, dpre, dx, dw, db, accumulate).
  virtual void linear_act_backward(const Tensor& x, const Tensor& w, const Tensor& y,
                                   const Tensor& pre, const Tensor& dy, Activation act,
                                   Tensor& dpre, Tensor& dx, Tensor& dw, Tensor& db,
                                   bool accumulate) {
    fused_unsupported("linear_act_backward");
  }

  // --- channel padding (pad_channels_to): x (N,C,H,W) -> y (N,Cp,H,W),
  // Cp >= C, x and y in one layout (NCHW or NHWC): y[:, :C] = x, y[:, C:] = 0.
  // Backward is the slice dx = dy[:, :C] (the zero channels take no gradient).
  virtual void pad_channels_forward(const Tensor& x, Tensor& y) = 0;
  virtual void pad_channels_backward(const Tensor& dy /*N,Cp,H,W*/, Tensor& dx /*N,C,H,W*/) = 0;

  // --- reductions and optimizers
  virtual double sum_squares(const Tensor& t) = 0;  // host value of sum(t^2), in double
  // Updates every slot. multi_tensor=false: one pass (launch) per parameter
  // tensor; true: all tensors in one (or a few) passes. Both give the same values.
  virtual void optimizer_step(const OptimizerStep& step, const std::vector<ParamSlot>& slots,
                              bool multi_tensor) = 0;

  // --- mixed precision (engine/amp, amp). A backend opts in by overriding;
  // the defaults throw. `scaler_state` is f32 [kAmpStateSize] on this device and
  // stays there, so no training step waits for the host:
  //   [0] loss scale   [1] clean steps since the scale last changed
  //   [2] found_inf of the current step (0 or 1)   [3] skipped steps so far
  // Order within one optimizer step: amp_scale(dlogits) -> backward ->
  // amp_unscale_and_check(every gradient block) -> optimizer_step_amp ->
  // amp_update_scale (which clears found_inf for the next step).
  static constexpr int64_t kAmpStateSize = 4;
  // dst = src converted elementwise, same shape and layout: f32 <-> f16/bf16,
  // round to nearest even (overflow to f16 gives inf, NaN stays NaN).
  virtual void cast(const Tensor& src, Tensor& dst) { amp_unsupported("cast"); }
  // t *= scale (the loss gradient before backward), the scale read on the device.
  virtual void amp_scale(Tensor& t, const Tensor& scaler_state) { amp_unsupported("amp_scale"); }
  // found_inf |= any element of grads is inf or NaN; grads *= 1/scale.
  virtual void amp_unscale_and_check(Tensor& grads, Tensor& scaler_state) {
    amp_unsupported("amp_unscale_and_check");
  }
  // optimizer_step, except when found_inf is set: then parameters and optimizer
  // state stay bit-unchanged (the step is skipped on the device).
  virtual void optimizer_step_amp(const OptimizerStep& step, const std::vector<ParamSlot>& slots,
                                  bool multi_tensor, const Tensor& scaler_state) {
    amp_unsupported("optimizer_step_amp");
  }
  // GradScaler.update(): found_inf -> scale *= backoff, tracker = 0, skipped += 1;
  // else tracker += 1 and, at growth_interval, scale *= growth, tracker = 0.
  // Then found_inf = 0.
  virtual void amp_update_scale(Tensor& scaler_state, float growth_factor, float backoff_factor,
                                int64_t growth_interval) {
    amp_unsupported("amp_update_scale");
  }
  // Linear layer under AMP: x (N,K) and w (M,K) in f16 or bf16 (the same), b (M)
  // and y (N,M) in f32; the products of the low-precision inputs are summed in
  // fp32 (Tensor Cores on the GPU). Keeping y in f32 leaves what follows (BN,
  // loss, activations) in fp32, as the precision policy wants.
  virtual void linear_forward_lp(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
    amp_unsupported("linear_forward_lp");
  }
  // dy f32 is rounded to x's dtype for the two GEMMs (dx = dy w, dw (+)= dyᵀ x);
  // db (+)= the column sums of the unrounded dy; dx, dw, db f32 (master gradients).
  virtual void linear_backward_lp(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx,
                                  Tensor& dw, Tensor& db, bool accumulate) {
    amp_unsupported("linear_backward_lp");
  }
  // Convolution under AMP, the same contract as the linear pair: x (N,Cin,H,W)
  // and w (Cout,Cin,KH,KW) in f16 or bf16 (the same), b (Cout) and y f32; the
  // products of the low-precision inputs are summed in fp32. Layouts as
  // conv2d_forward (activations share x's layout, w has its own).
  virtual void conv2d_forward_lp(const ConvGeometry& g, const Tensor& x, const Tensor& w,
                                 const Tensor& b, Tensor& y) {
    amp_unsupported("conv2d_forward_lp");
  }
  // dy f32 is rounded to x's dtype for dgrad and wgrad (dx = dgrad(dy, w),
  // dw (+)= wgrad(dy, x)); db (+)= Σ of the unrounded dy; dx, dw, db f32.
  virtual void conv2d_backward_lp(const ConvGeometry& g, const Tensor& x, const Tensor& w,
                                  const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db,
                                  bool accumulate) {
    amp_unsupported("conv2d_backward_lp");
  }

  // --- device memory and the input path (pin_memory, non_blocking, h2d_uint8,
  // empty_cache_between_phases). The defaults suit a host backend: no device
  // memory, pageable buffers, copies that are done when they return.
  //
  // Allocator and device figures; empty on a host backend. query_device also
  // asks the driver for used/total (a cheap call, but not free: not every step).
  virtual std::optional<DeviceMemoryStats> memory_stats(bool query_device) { return std::nullopt; }
  virtual void empty_cache() {}        // give cached free blocks back to the driver
  virtual void reset_peak_memory() {}  // peaks := current values
  // A host buffer the loader fills with a batch: page-locked (cudaHostAlloc) on
  // a device backend, so a copy from it can run asynchronously (pin_memory).
  virtual Tensor pinned_host_empty(const Shape& shape, DType dtype) {
    return Tensor::empty(shape, dtype);
  }
  // Non-blocking upload (non_blocking): enqueues host src -> device dst on a
  // copy stream and makes the compute stream wait for it through an event, so
  // the copy overlaps whatever the compute stream is still doing. Returns a
  // ticket; src must stay untouched until wait_upload(ticket) returns. dst must
  // not be one that work already enqueued still reads: the caller double-buffers
  // and passes the previous use's fence (see fence()).
  virtual uint64_t upload_async(const Tensor& src, Tensor& dst, uint64_t after_fence) {
    copy(src, dst);
    return 0;
  }
  virtual void wait_upload(uint64_t ticket) {}
  // A marker after everything enqueued on the compute stream so far, for
  // upload_async's after_fence (0 = nothing to wait for).
  virtual uint64_t fence() { return 0; }
  // h2d_uint8: dst f32 (N,C,H,W) = src u8 (N,C,H,W) * scale[c] + shift[c], with
  // the loader's arithmetic exactly (one multiply, one add, no fused
  // multiply-add), so the images are bit-identical to normalising on the host.
  virtual void normalize_u8(const Tensor& src, const std::vector<float>& scale,
                            const std::vector<float>& shift, Tensor& dst) = 0;
  // gpu_augment: the loader's whole per-sample pipeline in one pass.
  //   src     u8 (N, C, H, W) NCHW: the data set's bytes, not transformed
  //   indices i32 (N): each row's data set index (seeds its SampleRng draws)
  //   dst     f32 (N, C, spec.out_h, spec.out_w), NCHW or NHWC
  // dst[n] = normalize(SampleTransform::apply(src[n], spec.seed, spec.epoch,
  // indices[n])) bit for bit: pad_to placement, crop with zero padding, flip,
  // then * scale[c] + shift[c] without fused multiply-add. All on this device.
  // The default throws (a backend without it cannot run gpu_augment).
  virtual void augment_normalize_u8(const Tensor& src, const Tensor& indices,
                                    const AugmentSpec& spec, const std::vector<float>& scale,
                                    const std::vector<float>& shift, Tensor& dst) {
    TB_FAIL("augment_normalize_u8 (gpu_augment) is not supported by the ", name(), " backend");
  }

  // --- whole-step capture (cuda_graphs). Everything this backend
  // enqueues between begin_capture() and end_capture() is recorded, not run;
  // end_capture() returns the id of a graph that launch_graph(id) replays on
  // the compute stream with the same device pointers. So every tensor the
  // captured work touches must stay alive (and at its address) while the graph
  // is used; drop_graphs() forgets every graph (the caller recaptures after it
  // reallocated buffers). Host reads (sum_squares, read-backs) cannot be
  // captured. The defaults throw: a backend that reports graph_capture in its
  // capabilities overrides all of them.
  bool supports_graphs() const { return capabilities().graph_capture; }
  virtual void begin_capture() { graphs_unsupported("begin_capture"); }
  virtual int end_capture() { graphs_unsupported("end_capture"); }
  virtual void launch_graph(int id) { graphs_unsupported("launch_graph"); }
  virtual void drop_graphs() { graphs_unsupported("drop_graphs"); }
  // Per-step optimizer constants (lr, bias corrections, ...) are values baked
  // into a captured launch. While capturing, optimizer_step reads them from a
  // device buffer instead; this writes `step`'s constants into that buffer,
  // enqueued on the compute stream (call it before each launch_graph).
  virtual void set_optimizer_constants(const OptimizerStep& step) {
    graphs_unsupported("set_optimizer_constants");
  }

 protected:
  // Destroys the family kernels made so far. A backend whose kernels use its
  // private state calls it first in its destructor, before that state goes.
  void release_kernels();

 private:
  OpKernels& kernels_of(std::type_index family, const char* family_name);
  std::mutex kernels_mutex_;
  std::unordered_map<std::type_index, std::unique_ptr<OpKernels>> kernels_;

  [[noreturn]] void amp_unsupported(const char* op) const {
    TB_FAIL(op, " (mixed precision) is not supported by the ", name(), " backend");
  }
  [[noreturn]] void fused_unsupported(const char* op) const {
    TB_FAIL(op, " (fused pointwise, trick 11) is not supported by the ", name(), " backend");
  }
  [[noreturn]] void graphs_unsupported(const char* op) const {
    TB_FAIL(op, " (cuda_graphs, trick 24) is not supported by the ", name(), " backend");
  }
};

// linear_act_*'s activation: ReLU or GELU (None has nothing to fuse: linear_*).
void check_linear_activation(Activation act, const char* op);
// normalize_u8's argument checks, shared by the backends: src u8 and dst f32
// of one rank-4 shape and layout, one scale and shift per channel.
void check_normalize_u8_args(const Tensor& src, const std::vector<float>& scale,
                             const std::vector<float>& shift, const Tensor& dst);
// augment_normalize_u8's argument checks (shapes, dtypes, spec ranges).
void check_augment_normalize_u8_args(const Tensor& src, const Tensor& indices,
                                     const AugmentSpec& spec, const std::vector<float>& scale,
                                     const std::vector<float>& shift, const Tensor& dst);

struct BackendOptions {
  bool reference = false;      // cpu: the plain reference kernels (the test oracle)
  int threads = 0;             // cpu: 0 = all cores
  bool deterministic = false;  // cuda: deterministic algorithms only
  bool cudnn_benchmark = false;
};

// "cpu", "cuda", "cuda:N" or "auto" (a GPU when one works, else the CPU with one
// log line in *note). Throws tb::Error when the device cannot be used.
std::unique_ptr<Backend> make_backend(const std::string& device, const BackendOptions& options,
                                      std::string* note = nullptr);
// Devices this build can use, e.g. {"cpu"} or {"cuda:0", "cpu"}, with names.
std::vector<std::pair<std::string, std::string>> available_devices();

}  // namespace tb
