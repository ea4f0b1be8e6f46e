// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/nn/linear_act.h"

#include "engine/core/error.h"

namespace tb {

LinearAct::LinearAct(std::string name, int64_t out_features, Backend::Activation act, bool bias)
    : Layer(std::move(name)), out_features_(out_features), act_(act), has_bias_(bias) {
  TB_CHECK(out_features > 0, "linear_act ", this->name(), ": out_features must be positive, got ",
           out_features);
  TB_CHECK(act == Activation::ReLU || act == Activation::GELU, "linear_act ", this->name(),
           ": activation ", activation_name(act), " is not supported (relu or gelu; none is Linear)");
}

// Exactly Linear::setup.
Shape LinearAct::setup(const Shape& in, ParamRegistry& reg) {
  TB_CHECK(in.size() == 2 && in[1] > 0, "linear_act ", name(),
           ": input must be (N, features), got ", shape_str(in),
           in.size() == 4 ? " (add a Flatten before it)" : "");
  in_features_ = in[1];
  reg.add_param({name() + ".weight",
                 {out_features_, in_features_},
                 Init::KaimingUniform,
                 in_features_,
                 true,
                 Layout::NCHW},
                &weight_, &weight_grad_);
  if (has_bias_)
    reg.add_param(
        {name() + ".bias", {out_features_}, Init::FanInUniform, in_features_, false, Layout::NCHW},
        &bias_, &bias_grad_);
  return {in[0], out_features_};
}

Tensor LinearAct::forward(Context& ctx, const Tensor& x) {
  TB_CHECK(x.rank() == 2 && x.dim(1) == in_features_, "linear_act ", name(),
           ": expected input (N, ", in_features_, "), got ", x.describe());
  const Shape out{x.dim(0), out_features_};
  Tensor& y = ensure_buffer(ctx, y_, out, ctx.dtype);
  Tensor pre;
  if (act_ == Backend::Activation::GELU) pre = ensure_buffer(ctx, pre_, out, ctx.dtype);
  ctx.backend.linear_act_forward(x, weight_, bias_, act_, y, pre);
  x_ = ctx.training ? x : Tensor{};
  return y;
}

Tensor LinearAct::backward(Context& ctx, const Tensor& dy, bool need_dx) {
  TB_CHECK(x_.defined(), "linear_act ", name(), ": backward without a training forward");
  Tensor dx;
  if (need_dx) dx = ensure_buffer(ctx, dx_, x_.shape(), ctx.dtype);
  Tensor& dpre = ensure_buffer(ctx, dpre_, y_.shape(), ctx.dtype);
  Tensor pre = act_ == Backend::Activation::GELU ? pre_ : Tensor{};
  ctx.backend.linear_act_backward(x_, weight_, y_, pre, dy, act_, dpre, dx, weight_grad_,
                                  bias_grad_, ctx.accumulate_grads);
  return dx;
}

}  // namespace tb
