// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A layer: explicit shapes, forward and backward side by side, written against
// the Backend interface only (so the same layer runs on every device).
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/amp/precision_policy.h"
#include "engine/backend/backend.h"
#include "engine/core/tensor.h"
#include "engine/nn/buffers.h"

namespace tb {

class Layer;
enum class LayerPass { Forward, Backward };

// What times the layers of a step (engine/metrics/layer_profiler.h): the
// model's walk enters a scope around every layer's forward() and backward(),
// nested for composite layers, so whatever runs inside is that layer's.
class LayerScopes {
 public:
  virtual ~LayerScopes() = default;
  // batch: the input's leading dimension; need_dx: the backward's argument
  // (true for forward), both for the layer's counted work (layer_work.h).
  virtual void enter(const Layer& layer, LayerPass pass, int64_t batch, bool need_dx) = 0;
  virtual void exit() = 0;
};

// What one forward/backward pass runs with.
struct Context {
  Backend& backend;
  bool training = true;
  // false: parameter gradients are "none" (grad_set_to_none) and this backward
  // writes them; true: it adds into them (gradient accumulation, or after memset).
  bool accumulate_grads = false;
  DType dtype = DType::F32;      // activation dtype without amp (f64 in the gradient checks)
  Layout layout = Layout::NCHW;  // memory order of rank-4 activations
  // Mixed precision (trick 1): when enabled, Conv2d and Linear compute in
  // amp.dtype_for(...) through conv:: and linear::'s f16/bf16 path, and the
  // activations between layers are amp.activation_dtype() (f32, or f16/bf16
  // with AmpActivations::LowPrecision: precision_policy.h).
  PrecisionPolicy amp{};
  // Where the pass's short-lived buffers come from (buffers.h); copies of a
  // Context share it.
  std::shared_ptr<TransientBuffers> transients = std::make_shared<TransientBuffers>();
  // Where the layers' buffers are counted (null: nowhere).
  BufferCensus* census = nullptr;

  // The dtype layers allocate their outputs and input gradients in.
  DType activation_dtype() const { return amp.enabled() ? amp.activation_dtype() : dtype; }
  // Synchronised batch norm (ddp with sync_batchnorm): sums n host values
  // over every rank, in place. Empty: each process normalises with its own
  // batch's statistics.
  std::function<void(double* values, int64_t n)> sync_batchnorm = nullptr;
  // Per-layer timing (null: none); forward_layer/backward_layer open its scopes.
  LayerScopes* scopes = nullptr;
  // Inside Model::forward under amp: the model's parameter block (f32) and
  // its copy in the low-precision compute dtype, cast in one launch at the
  // pass's start; Conv2d and Linear take their weights as views of it
  // (amp_operands.h). Undefined elsewhere: a layer then casts its own.
  Tensor lp_params_master{}, lp_params{};
};

// How a parameter or buffer starts. KaimingUniform follows PyTorch's default for
// conv/linear weights: U(-b, b) with b = 1/sqrt(fan_in); FanInUniform is the same
// bound, used for biases.
enum class Init { Zeros, Ones, KaimingUniform, FanInUniform };

struct ParamSpec {
  std::string name;  // "conv1.weight"
  Shape shape;
  Init init = Init::Zeros;
  int64_t fan_in = 1;
  bool weight_decay = true;  // false for biases and BN affine parameters
  Layout layout = Layout::NCHW;  // memory order of rank-4 weights
};

// Collects the parameters (trained, with gradients) and buffers (e.g. BN running
// statistics) that layers declare in setup(); Model::build then places every
// parameter in one contiguous block (and every gradient in another) and points
// the layer's Tensor members at their views.
class ParamRegistry {
 public:
  explicit ParamRegistry(Layout weight_layout = Layout::NCHW) : weight_layout_(weight_layout) {}
  // `value` and `grad` are members of the layer; they are filled in by Model::build.
  void add_param(ParamSpec spec, Tensor* value, Tensor* grad);
  void add_buffer(ParamSpec spec, Tensor* value);
  // Prefix for nested layers ("layer1.0." while a residual block registers its parts).
  void push_prefix(const std::string& p) { prefix_.push_back(p); }
  void pop_prefix() { prefix_.pop_back(); }
  Layout weight_layout() const { return weight_layout_; }

  struct Entry {
    ParamSpec spec;
    Tensor* value = nullptr;
    Tensor* grad = nullptr;  // null for buffers
  };
  const std::vector<Entry>& params() const { return params_; }
  const std::vector<Entry>& buffers() const { return buffers_; }

 private:
  std::string full_name(const std::string& n) const;
  Layout weight_layout_;
  std::vector<std::string> prefix_;
  std::vector<Entry> params_, buffers_;
};

class Layer {
 public:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }
  virtual std::string kind() const = 0;  // "conv2d", "batchnorm2d", ...

  // Declares parameters/buffers and returns the output shape for input shape
  // `in` (the leading N is a placeholder: any batch size may follow).
  virtual Shape setup(const Shape& in, ParamRegistry& reg) = 0;
  // setup() as a model or a composite layer calls it: it also keeps both
  // shapes (batch placeholder 1), which the counted work (layer_work.h) reads.
  Shape configure(const Shape& in, ParamRegistry& reg);
  const Shape& input_shape() const { return input_shape_; }
  const Shape& output_shape() const { return output_shape_; }
  // The model's last layer writes the logits: in ctx.dtype (f32) whatever the
  // activations' dtype, since the loss reads f32 (Model::build marks it).
  void set_model_output(bool on) { model_output_ = on; }
  bool model_output() const { return model_output_; }
  // The dtype of this layer's output: the activations', or ctx.dtype for the
  // model's output.
  DType output_dtype(const Context& ctx) const {
    return model_output_ ? ctx.dtype : ctx.activation_dtype();
  }
  // The layers inside this one, in the order forward runs them (a residual
  // block's paths); none for a plain layer.
  virtual std::vector<const Layer*> children() const { return {}; }
  // Computes the output; when ctx.training it keeps what backward needs.
  virtual Tensor forward(Context& ctx, const Tensor& x) = 0;
  // Given dL/dy, writes or accumulates parameter gradients (ctx.accumulate_grads)
  // and returns dL/dx, or an undefined Tensor when need_dx is false.
  virtual Tensor backward(Context& ctx, const Tensor& dy, bool need_dx) = 0;
  // Drops what the last forward kept for backward (its input, its output for
  // a mask, max-pool's argmax), so their transient blocks (buffers.h) serve
  // the rest of the pass: backward_layer calls it once the layer's backward
  // is done, Model::forward before a new pass. A composite layer releases
  // its children too. Backward without a forward since is then an error.
  virtual void release_saved() {}

 private:
  std::string name_;
  Shape input_shape_, output_shape_;
  bool model_output_ = false;
};

// A layer's scope for the length of a block (nothing without ctx.scopes);
// closed however the block ends.
class LayerScope {
 public:
  LayerScope(Context& ctx, const Layer& layer, LayerPass pass, int64_t batch, bool need_dx)
      : scopes_(ctx.scopes) {
    if (scopes_) scopes_->enter(layer, pass, batch, need_dx);
  }
  ~LayerScope() {
    if (scopes_) scopes_->exit();
  }
  LayerScope(const LayerScope&) = delete;
  LayerScope& operator=(const LayerScope&) = delete;

 private:
  LayerScopes* scopes_;
};

// layer.forward / layer.backward inside ctx.scopes' scope for that layer (the
// only way a walk over layers calls them, so every layer is timed where it
// runs); backward_layer then releases what the layer saved (release_saved).
Tensor forward_layer(Context& ctx, Layer& layer, const Tensor& x);
Tensor backward_layer(Context& ctx, Layer& layer, const Tensor& dy, bool need_dx);
// For the length of a pass over a model's layers (Model::forward and
// backward, and the step runner's walks that trace or check each layer):
// the ops' scratch comes from ctx.transients, the pass's memory plan
// (backend.h's ScratchSource).
inline ScratchScope pass_scratch(Context& ctx) { return {ctx.backend, ctx.transients.get()}; }

// The layout of a rank-4 activation of `channels` channels that a layer makes
// from scratch (a convolution's output): ctx.layout, except that the CPU's
// blocked activations (NCHW16C) need whole channel blocks, so other counts
// stay NCHW. Layers that keep their input's shape keep its layout.
Layout output_layout(const Context& ctx, int64_t channels);

// A buffer the layer keeps from pass to pass (per-channel statistics, the
// low-precision copy of a weight): (re)allocates buf on ctx's device when
// its shape, dtype or layout differ, so steady-state steps allocate nothing.
Tensor& ensure_buffer(Context& ctx, Tensor& buf, const Shape& shape, DType dtype,
                      Layout layout = Layout::NCHW);
// A buffer for part of one pass (an activation until the backward that reads
// it, an input gradient, a block's inner gradient), from ctx.transients: free
// again once the last Tensor viewing it is gone, so hold it no longer than
// its reader needs it.
Tensor transient_buffer(Context& ctx, const Shape& shape, DType dtype,
                        Layout layout = Layout::NCHW);

}  // namespace tb
