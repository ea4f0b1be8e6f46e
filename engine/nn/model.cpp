// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/nn/model.h"

#include <cmath>
#include <algorithm>
#include <random>

#include "engine/core/error.h"
#include "engine/ops/amp/amp.h"

namespace tb {

Model::Model(std::string name, Shape input_shape, int64_t num_classes)
    : name_(std::move(name)), input_shape_(std::move(input_shape)), num_classes_(num_classes) {}

void Model::add(std::unique_ptr<Layer> layer) {
  TB_CHECK(!built_, "model ", name_, ": cannot add layer ", layer->name(), " after build()");
  layers_.push_back(std::move(layer));
}

namespace {

// Host-side initial values, drawn in registration order from one generator so the
// same seed gives the same weights on every device and in every precision.
std::vector<double> initial_values(const ParamSpec& spec, std::mt19937_64& rng) {
  const int64_t n = shape_numel(spec.shape);
  std::vector<double> v(static_cast<size_t>(n), 0.0);
  switch (spec.init) {
    case Init::Zeros: break;
    case Init::Ones: std::fill(v.begin(), v.end(), 1.0); break;
    case Init::KaimingUniform:
    case Init::FanInUniform: {
      const double bound = 1.0 / std::sqrt(double(std::max<int64_t>(spec.fan_in, 1)));
      std::uniform_real_distribution<double> dist(-bound, bound);
      for (auto& x : v) x = dist(rng);
      break;
    }
  }
  return v;
}

// Writes logical-NCHW host values into t (f32 or f64, any layout, any device);
// the backend's copy does the explicit layout conversion and the upload.
void upload(Backend& be, const std::vector<double>& values, Tensor& t) {
  Tensor host = Tensor::empty(t.shape(), t.dtype(), Device::cpu(), Layout::NCHW);
  if (t.dtype() == DType::F32) {
    std::copy(values.begin(), values.end(), host.data_as<float>());
  } else {
    TB_CHECK(t.dtype() == DType::F64, "parameters must be f32 or f64, got ", t.describe());
    std::copy(values.begin(), values.end(), host.data_as<double>());
  }
  be.copy(host, t);
}

}  // namespace

void Model::build(Backend& backend, uint64_t seed, DType dtype, Layout weight_layout) {
  TB_CHECK(!built_, "model ", name_, " is already built");
  TB_CHECK(dtype == DType::F32 || dtype == DType::F64, "model parameters must be f32 or f64");
  ParamRegistry reg(weight_layout);
  Shape shape = input_shape_;
  shape.insert(shape.begin(), 1);  // placeholder batch
  std::vector<size_t> first_param;  // per layer: its first entry in reg.params()
  for (auto& layer : layers_) {
    first_param.push_back(reg.params().size());
    shape = layer->configure(shape, reg);
    layer->set_model_output(false);
  }
  if (!layers_.empty()) layers_.back()->set_model_output(true);  // writes the logits
  first_param.push_back(reg.params().size());

  int64_t total = 0, total_buffers = 0;
  for (const auto& e : reg.params()) total += shape_numel(e.spec.shape);
  for (const auto& e : reg.buffers()) total_buffers += shape_numel(e.spec.shape);
  param_block_ = backend.empty({std::max<int64_t>(total, 1)}, dtype);
  grad_block_ = backend.empty({std::max<int64_t>(total, 1)}, dtype);
  buffer_block_ = backend.empty({std::max<int64_t>(total_buffers, 1)}, dtype);
  backend.fill(grad_block_, 0.0);

  std::mt19937_64 rng(seed);
  // Zeros/Ones draw nothing from rng, so filling them on the device
  // (device_side_init) leaves every random weight's draws where they were.
  auto init = [&](const ParamSpec& spec, Tensor& t) {
    if (device_side_init_ && (spec.init == Init::Zeros || spec.init == Init::Ones)) {
      backend.fill(t, spec.init == Init::Ones ? 1.0 : 0.0);
      init_device_bytes_ += int64_t(t.nbytes());
    } else {
      upload(backend, initial_values(spec, rng), t);
      init_upload_bytes_ += int64_t(t.nbytes());
    }
  };
  init_upload_bytes_ = init_device_bytes_ = 0;
  int64_t offset = 0;
  layer_offsets_.clear();
  for (size_t p = 0, layer = 0; p <= reg.params().size(); ++p) {
    while (layer < first_param.size() && first_param[layer] == p) {
      layer_offsets_.push_back(offset);
      ++layer;
    }
    if (p == reg.params().size()) break;
    offset += shape_numel(reg.params()[p].spec.shape);
  }
  layer_offsets_.resize(layers_.size() + 1, offset);
  offset = 0;
  for (const auto& e : reg.params()) {
    const Layout l = e.spec.shape.size() == 4 ? e.spec.layout : Layout::NCHW;
    *e.value = Tensor::view_of(param_block_, offset, e.spec.shape, l);
    *e.grad = Tensor::view_of(grad_block_, offset, e.spec.shape, l);
    init(e.spec, *e.value);
    params_.push_back({e.spec.name, *e.value, *e.grad, e.spec.weight_decay});
    offset += shape_numel(e.spec.shape);
  }
  offset = 0;
  for (const auto& e : reg.buffers()) {
    *e.value = Tensor::view_of(buffer_block_, offset, e.spec.shape);
    init(e.spec, *e.value);
    buffers_.push_back({e.spec.name, *e.value});
    offset += shape_numel(e.spec.shape);
  }
  built_ = true;
}

namespace {

// Context::lp_params for one pass, given back as it was when the pass ends.
class LowPrecisionParamsScope {
 public:
  LowPrecisionParamsScope(Context& ctx, const Tensor& master, const Tensor& lp)
      : ctx_(ctx), master_(ctx.lp_params_master), lp_(ctx.lp_params) {
    ctx.lp_params_master = master;
    ctx.lp_params = lp;
  }
  ~LowPrecisionParamsScope() {
    ctx_.lp_params_master = master_;
    ctx_.lp_params = lp_;
  }
  LowPrecisionParamsScope(const LowPrecisionParamsScope&) = delete;
  LowPrecisionParamsScope& operator=(const LowPrecisionParamsScope&) = delete;

 private:
  Context& ctx_;
  Tensor master_, lp_;
};

}  // namespace

// Under amp the whole parameter block is cast to the compute dtype in one
// launch (batch norm's few parameters with it), instead of one cast per
// convolution and linear weight: 21 launches of resnet18-cifar's step become 1.
// Where Conv2d and Linear compute in different dtypes, each casts its own.
Tensor Model::forward(Context& ctx, const Tensor& x, const LayerForward& each) {
  TB_CHECK(built_, "model ", name_, ": forward before build()");
  release_saved();
  const ScratchScope scratch = pass_scratch(ctx);
  const DType lp = ctx.amp.dtype_for(AmpOp::Conv);
  const bool batched = ctx.amp.enabled() && lp == ctx.amp.dtype_for(AmpOp::Linear) &&
                       lp != param_block_.dtype() && param_block_.numel() > 0;
  if (batched) amp::cast(ctx.backend, param_block_, ensure_buffer(ctx, lp_param_block_,
                                                                  param_block_.shape(), lp));
  const LowPrecisionParamsScope lp_params(ctx, batched ? param_block_ : Tensor{},
                                          batched ? lp_param_block_ : Tensor{});
  Tensor h = x;
  for (auto& layer : layers_) h = each ? each(*layer, h) : forward_layer(ctx, *layer, h);
  return h;
}

void Model::release_saved() {
  for (auto& layer : layers_) layer->release_saved();
}

void Model::backward(Context& ctx, const Tensor& dlogits) {
  const ScratchScope scratch = pass_scratch(ctx);
  Tensor g = dlogits;
  for (size_t i = layers_.size(); i-- > 0;)
    g = backward_layer(ctx, *layers_[i], g, input_grad_needed(i));
}

}  // namespace tb
