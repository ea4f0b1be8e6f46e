// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/nn/pooling.h"

#include "engine/core/error.h"
#include "engine/ops/pooling/pooling.h"

namespace tb {

namespace {

PoolGeometry pool_geometry(const char* kind, const std::string& name, const Shape& s,
                           int64_t kernel, int64_t stride, int64_t pad) {
  TB_CHECK(s.size() == 4, kind, " ", name, ": input must be (N, C, H, W), got ", shape_str(s));
  return PoolGeometry::make(s[0], s[1], s[2], s[3], kernel, stride, pad);
}

}  // namespace

// ---------------------------------------------------------------- MaxPool2d

MaxPool2d::MaxPool2d(std::string name, int64_t kernel, int64_t stride, int64_t pad)
    : Layer(std::move(name)), kernel_(kernel), stride_(stride), pad_(pad) {
  PoolGeometry::make(1, 1, kernel, kernel, kernel, stride, pad);  // validates the arguments
}

Shape MaxPool2d::setup(const Shape& in, ParamRegistry&) {
  return pool_geometry("maxpool2d", name(), in, kernel_, stride_, pad_).output_shape();
}

Tensor MaxPool2d::forward(Context& ctx, const Tensor& x) {
  const PoolGeometry g = pool_geometry("maxpool2d", name(), x.shape(), kernel_, stride_, pad_);
  Tensor y = transient_buffer(ctx, g.output_shape(), output_dtype(ctx), x.layout());
  Tensor argmax = transient_buffer(ctx, g.output_shape(), DType::I32, x.layout());
  pooling::max_forward(ctx.backend, g, x, y, argmax);
  g_ = g;
  have_forward_ = ctx.training;
  argmax_ = ctx.training ? argmax : Tensor{};
  return y;
}

Tensor MaxPool2d::backward(Context& ctx, const Tensor& dy, bool need_dx) {
  TB_CHECK(have_forward_, "maxpool2d ", name(), ": backward without a training forward");
  if (!need_dx) return {};
  Tensor dx = transient_buffer(ctx, g_.input_shape(), ctx.activation_dtype(), dy.layout());
  pooling::max_backward(ctx.backend, g_, dy, argmax_, dx);
  return dx;
}

// ---------------------------------------------------------------- AvgPool2d

AvgPool2d::AvgPool2d(std::string name, int64_t kernel, int64_t stride, int64_t pad)
    : Layer(std::move(name)), kernel_(kernel), stride_(stride), pad_(pad) {
  PoolGeometry::make(1, 1, kernel, kernel, kernel, stride, pad);  // validates the arguments
}

Shape AvgPool2d::setup(const Shape& in, ParamRegistry&) {
  return pool_geometry("avgpool2d", name(), in, kernel_, stride_, pad_).output_shape();
}

Tensor AvgPool2d::forward(Context& ctx, const Tensor& x) {
  const PoolGeometry g = pool_geometry("avgpool2d", name(), x.shape(), kernel_, stride_, pad_);
  Tensor y = transient_buffer(ctx, g.output_shape(), output_dtype(ctx), x.layout());
  pooling::avg_forward(ctx.backend, g, x, y);
  g_ = g;
  have_forward_ = ctx.training;
  return y;
}

Tensor AvgPool2d::backward(Context& ctx, const Tensor& dy, bool need_dx) {
  TB_CHECK(have_forward_, "avgpool2d ", name(), ": backward without a training forward");
  if (!need_dx) return {};
  Tensor dx = transient_buffer(ctx, g_.input_shape(), ctx.activation_dtype(), dy.layout());
  pooling::avg_backward(ctx.backend, g_, dy, dx);
  return dx;
}

// ---------------------------------------------------------------- GlobalAvgPool

GlobalAvgPool::GlobalAvgPool(std::string name) : Layer(std::move(name)) {}

Shape GlobalAvgPool::setup(const Shape& in, ParamRegistry&) {
  TB_CHECK(in.size() == 4, "global_avgpool ", name(), ": input must be (N, C, H, W), got ",
           shape_str(in));
  return {in[0], in[1]};
}

Tensor GlobalAvgPool::forward(Context& ctx, const Tensor& x) {
  TB_CHECK(x.rank() == 4, "global_avgpool ", name(), ": input must be (N, C, H, W), got ",
           x.describe());
  Tensor y = transient_buffer(ctx, {x.n(), x.c()}, output_dtype(ctx));
  pooling::global_avg_forward(ctx.backend, x, y);
  in_shape_ = ctx.training ? x.shape() : Shape{};
  in_layout_ = x.layout();
  return y;
}

Tensor GlobalAvgPool::backward(Context& ctx, const Tensor& dy, bool need_dx) {
  TB_CHECK(!in_shape_.empty(), "global_avgpool ", name(), ": backward without a training forward");
  if (!need_dx) return {};
  Tensor dx = transient_buffer(ctx, in_shape_, ctx.activation_dtype(), in_layout_);
  pooling::global_avg_backward(ctx.backend, dy, dx);
  return dx;
}

// ---------------------------------------------------------------- Flatten

Flatten::Flatten(std::string name) : Layer(std::move(name)) {}

Shape Flatten::setup(const Shape& in, ParamRegistry&) {
  TB_CHECK(in.size() >= 2, "flatten ", name(), ": input must have a batch dimension and features, got ",
           shape_str(in));
  int64_t f = 1;
  for (size_t i = 1; i < in.size(); ++i) f *= in[i];
  return {in[0], f};
}

// x (N, C, H, W) or (N, d1, ...) -> (N, F)
Tensor Flatten::forward(Context& ctx, const Tensor& x) {
  TB_CHECK(x.rank() >= 2, "flatten ", name(), ": input must have a batch dimension, got ",
           x.describe());
  in_shape_ = x.shape();
  in_layout_ = x.rank() == 4 ? x.layout() : Layout::NCHW;
  int64_t f = 1;
  for (int i = 1; i < x.rank(); ++i) f *= x.dim(i);
  if (in_layout_ != Layout::NCHW) {
    // channels-last or blocked -> NCHW, explicitly (see pooling.h): logical (C, H, W) features.
    Tensor nchw = transient_buffer(ctx, x.shape(), x.dtype(), Layout::NCHW);
    ctx.backend.copy(x, nchw);
    return nchw.reshaped({x.dim(0), f});
  }
  return x.reshaped({x.dim(0), f});
}

// dy (N, F) -> dx in the input's shape and layout
Tensor Flatten::backward(Context& ctx, const Tensor& dy, bool need_dx) {
  TB_CHECK(!in_shape_.empty(), "flatten ", name(), ": backward without a forward");
  if (!need_dx) return {};
  TB_CHECK(dy.numel() == shape_numel(in_shape_), "flatten ", name(), ": gradient ", dy.describe(),
           " does not match the input ", shape_str(in_shape_));
  if (in_layout_ != Layout::NCHW) {
    // NCHW view of dy -> dx in the input's layout: the inverse of the forward's conversion.
    Tensor dx = transient_buffer(ctx, in_shape_, dy.dtype(), in_layout_);
    ctx.backend.copy(Tensor::view_of(dy, 0, in_shape_, Layout::NCHW), dx);
    return dx;
  }
  return Tensor::view_of(dy, 0, in_shape_, in_layout_);
}

}  // namespace tb
