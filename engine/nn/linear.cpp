// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/nn/linear.h"

#include "engine/core/error.h"
#include "engine/ops/linear/linear.h"

namespace tb {

Linear::Linear(std::string name, int64_t out_features, bool bias)
    : Layer(std::move(name)), out_features_(out_features), has_bias_(bias) {
  TB_CHECK(out_features > 0, "linear ", this->name(), ": out_features must be positive, got ",
           out_features);
}

Linear::Linear(std::string name, int64_t out_features, Activation act, bool bias)
    : Linear(std::move(name), out_features, bias) {
  act_ = act;
}

Shape Linear::setup(const Shape& in, ParamRegistry& reg) {
  TB_CHECK(in.size() == 2 && in[1] > 0, "linear ", name(), ": input must be (N, features), got ",
           shape_str(in), in.size() == 4 ? " (add a Flatten before it)" : "");
  in_features_ = in[1];
  reg.add_param({name() + ".weight", {out_features_, in_features_}, Init::KaimingUniform,
                 in_features_, true, Layout::NCHW},
                &weight_, &weight_grad_);
  if (has_bias_)
    reg.add_param({name() + ".bias", {out_features_}, Init::FanInUniform, in_features_, false,
                  Layout::NCHW},
                  &bias_, &bias_grad_);
  return {in[0], out_features_};
}

Tensor Linear::forward(Context& ctx, const Tensor& x) {
  TB_CHECK(x.rank() == 2 && x.dim(1) == in_features_, "linear ", name(), ": expected input (N, ",
           in_features_, "), got ", x.describe());
  const Shape out{x.dim(0), out_features_};
  Tensor& y = ensure_buffer(ctx, y_, out, ctx.dtype);
  if (act_ != Activation::None) {
    Tensor pre;
    if (act_ == Activation::GELU) pre = ensure_buffer(ctx, pre_, out, ctx.dtype);
    linear::forward(ctx.backend, x, weight_, bias_, y, Epilogue{act_, {}, pre});
  } else if (ctx.amp.enabled()) {
    // x (N,K) f32 -> x_lp_, weight_ (M,K) f32 -> weight_lp_ (every forward: the
    // master changes after each step); y (N,M) f32 = x_lp_ weight_lpᵀ + bias_.
    TB_CHECK(ctx.dtype == DType::F32, "linear ", name(), ": mixed precision (amp ", ctx.amp.name(),
             ") needs f32 activations, got ", dtype_name(ctx.dtype));
    const DType lp = ctx.amp.dtype_for(AmpOp::Linear);
    ctx.backend.cast(x, ensure_buffer(ctx, x_lp_, x.shape(), lp));
    ctx.backend.cast(weight_, ensure_buffer(ctx, weight_lp_, weight_.shape(), lp));
    linear::forward(ctx.backend, x_lp_, weight_lp_, bias_, y);
  } else {
    linear::forward(ctx.backend, x, weight_, bias_, y);
  }
  x_ = ctx.training ? x : Tensor{};
  return y;
}

Tensor Linear::backward(Context& ctx, const Tensor& dy, bool need_dx) {
  TB_CHECK(x_.defined(), "linear ", name(), ": backward without a training forward");
  Tensor dx;
  if (need_dx) dx = ensure_buffer(ctx, dx_, x_.shape(), ctx.dtype);
  if (act_ != Activation::None) {
    Tensor& dz = ensure_buffer(ctx, dz_, y_.shape(), ctx.dtype);
    const Tensor pre = act_ == Activation::GELU ? pre_ : Tensor{};
    linear::backward(ctx.backend, x_, weight_, dy, dx, weight_grad_, bias_grad_,
                     ctx.accumulate_grads, EpilogueGrad{act_, y_, {}, pre, dz});
  } else if (ctx.amp.enabled()) {
    TB_CHECK(x_lp_.defined() && x_lp_.shape() == x_.shape() &&
                 x_lp_.dtype() == ctx.amp.dtype_for(AmpOp::Linear),
             "linear ", name(), ": backward under amp ", ctx.amp.name(),
             " without a forward under the same policy");
    linear::backward(ctx.backend, x_lp_, weight_lp_, dy, dx, weight_grad_, bias_grad_,
                     ctx.accumulate_grads);
  } else {
    linear::backward(ctx.backend, x_, weight_, dy, dx, weight_grad_, bias_grad_,
                     ctx.accumulate_grads);
  }
  return dx;
}

}  // namespace tb
