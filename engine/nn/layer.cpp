// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/nn/layer.h"

namespace tb {

std::string ParamRegistry::full_name(const std::string& n) const {
  std::string s;
  for (const auto& p : prefix_) s += p;
  return s + n;
}

void ParamRegistry::add_param(ParamSpec spec, Tensor* value, Tensor* grad) {
  spec.name = full_name(spec.name);
  if (spec.shape.size() == 4) spec.layout = weight_layout_;
  params_.push_back({std::move(spec), value, grad});
}

void ParamRegistry::add_buffer(ParamSpec spec, Tensor* value) {
  spec.name = full_name(spec.name);
  buffers_.push_back({std::move(spec), value, nullptr});
}

Shape Layer::configure(const Shape& in, ParamRegistry& reg) {
  input_shape_ = in;
  output_shape_ = setup(in, reg);
  return output_shape_;
}

Tensor forward_layer(Context& ctx, Layer& layer, const Tensor& x) {
  LayerScope scope(ctx, layer, LayerPass::Forward, x.rank() > 0 ? x.dim(0) : 1, true);
  return layer.forward(ctx, x);
}

Tensor backward_layer(Context& ctx, Layer& layer, const Tensor& dy, bool need_dx) {
  LayerScope scope(ctx, layer, LayerPass::Backward, dy.rank() > 0 ? dy.dim(0) : 1, need_dx);
  Tensor dx = layer.backward(ctx, dy, need_dx);
  layer.release_saved();
  return dx;
}

Layout output_layout(const Context& ctx, int64_t channels) {
  if (ctx.layout == Layout::NCHW16C && channels % kLayoutBlock != 0) return Layout::NCHW;
  return ctx.layout;
}

Tensor& ensure_buffer(Context& ctx, Tensor& buf, const Shape& shape, DType dtype, Layout layout) {
  const Layout want = shape.size() == 4 ? layout : Layout::NCHW;
  if (!buf.defined() || buf.shape() != shape || buf.dtype() != dtype || buf.layout() != want ||
      buf.device() != ctx.backend.device()) {
    buf = ctx.backend.empty(shape, dtype, want);
  }
  if (ctx.census) ctx.census->buffers[&buf] = buf;
  return buf;
}

Tensor transient_buffer(Context& ctx, const Shape& shape, DType dtype, Layout layout) {
  Tensor t = ctx.transients->take(ctx.backend, shape, dtype, layout);
  if (ctx.census) ctx.census->transients[dtype] += int64_t(t.nbytes());
  return t;
}

}  // namespace tb
