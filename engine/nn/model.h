// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/nn/layer.h"

namespace tb {

struct ParamInfo {
  std::string name;
  Tensor value;  // view into the parameter block
  Tensor grad;   // view into the gradient block
  bool weight_decay = true;
};

struct BufferInfo {
  std::string name;
  Tensor value;
};

// A sequence of layers whose parameters live in one contiguous block and whose
// gradients live in another (multi-tensor optimizers, global norms and
// checkpoints then work on single blocks).
class Model {
 public:
  // input_shape is per sample: {C, H, W} or {features}.
  Model(std::string name, Shape input_shape, int64_t num_classes);

  void add(std::unique_ptr<Layer> layer);
  template <typename L, typename... Args>
  L& emplace(Args&&... args) {
    auto p = std::make_unique<L>(std::forward<Args>(args)...);
    L& ref = *p;
    add(std::move(p));
    return ref;
  }

  // Runs setup() on every layer, allocates the blocks on `backend` in `dtype`,
  // and initialises parameters from `seed` (same seed, same weights, any device).
  // weight_layout applies to rank-4 weights (NHWC for channels-last).
  void build(Backend& backend, uint64_t seed, DType dtype = DType::F32,
             Layout weight_layout = Layout::NCHW);

  // device_side_init (trick 15), before build(): constant parameters and
  // buffers (zeros, ones: BN affine, running statistics) are made with
  // Backend::fill on the device instead of host values plus a copy. Random
  // weights are still drawn on the host from one mt19937_64 in registration
  // order and uploaded: a sequential generator's draws cannot be split across
  // device threads without changing them, and the same seed must give the
  // same weights with the trick on or off. The values are identical either way.
  void set_device_side_init(bool on) { device_side_init_ = on; }
  int64_t init_upload_bytes() const { return init_upload_bytes_; }  // copied by build()
  int64_t init_device_bytes() const { return init_device_bytes_; }  // filled on the device

  // Logits (N, num_classes). Releases what the last pass's layers saved
  // first, so a new pass (or an evaluation) reuses their transient blocks.
  // `each`, when given, runs each layer in forward_layer's place (a trace's
  // spans, anomaly checks around it; it calls forward_layer itself), inside
  // the same pass (scratch, the parameters cast once under amp).
  using LayerForward = std::function<Tensor(Layer& layer, const Tensor& input)>;
  Tensor forward(Context& ctx, const Tensor& x, const LayerForward& each = {});
  void backward(Context& ctx, const Tensor& dlogits);
  // Every layer's release_saved (layer.h).
  void release_saved();

  const std::string& name() const { return name_; }
  const Shape& input_shape() const { return input_shape_; }
  int64_t num_classes() const { return num_classes_; }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  const std::vector<ParamInfo>& params() const { return params_; }
  const std::vector<BufferInfo>& buffers() const { return buffers_; }
  const Tensor& param_block() const { return param_block_; }
  const Tensor& grad_block() const { return grad_block_; }
  int64_t num_params() const { return param_block_.numel(); }
  // Where each layer's gradients start in the gradient block (elements), one
  // entry per layer plus the end: layer i owns [offsets[i], offsets[i+1]).
  // Backward writes them from the end of the block towards its start, which
  // is what ddp's gradient buckets follow.
  const std::vector<int64_t>& layer_grad_offsets() const { return layer_offsets_; }
  // Whether layer i's backward computes its input gradient: only when a layer
  // before it has parameters (a gradient to pass it on to). Not for the
  // first layer, nor for the first layer with parameters after a
  // parameter-free start (channel padding, a flatten): its input gradient
  // would be written and dropped.
  bool input_grad_needed(size_t i) const { return layer_offsets_.at(i) > 0; }
  bool built() const { return built_; }

 private:
  std::string name_;
  Shape input_shape_;
  int64_t num_classes_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<ParamInfo> params_;
  std::vector<BufferInfo> buffers_;
  Tensor param_block_, grad_block_, buffer_block_;
  Tensor lp_param_block_;  // under amp: param_block_ in the compute dtype (forward)
  std::vector<int64_t> layer_offsets_;
  bool built_ = false;
  bool device_side_init_ = false;
  int64_t init_upload_bytes_ = 0, init_device_bytes_ = 0;
};

}  // namespace tb
