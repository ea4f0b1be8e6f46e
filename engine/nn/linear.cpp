// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/nn/linear.h"

#include "engine/core/error.h"
#include "engine/ops/linear/linear.h"
#include "engine/ops/pointwise/pointwise.h"

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

// Under AMP, lp = amp.dtype_for(Linear) (amp_operands.h): x as it is when
// lp, else cast once; weight_ (M,K) f32 -> lp at every forward (the master
// changes after each step); y (N,M) = x wᵀ + bias_ in output_dtype(ctx): lp
// with low-precision activations, f32 otherwise and for the logits. The
// activation epilogue is the f32 op's (the contract has none on lp inputs):
// writing f32 (f32 activations) the fused layer runs in f32 as before;
// writing lp it runs the lp GEMM into pre_, then the activation as its own op.
Tensor Linear::forward(Context& ctx, const Tensor& x) {
  TB_CHECK(x.rank() == 2 && x.dim(1) == in_features_, "linear ", name(), ": expected input (N, ",
           in_features_, "), got ", x.describe());
  const Shape out{x.dim(0), out_features_};
  const DType out_dtype = output_dtype(ctx);
  Tensor y = transient_buffer(ctx, out, out_dtype);
  const bool amp = ctx.amp.enabled() && (act_ == Activation::None || out_dtype != DType::F32);
  Tensor pre;  // the pre-activation, when there is an activation
  if (act_ != Activation::None && !amp) {
    if (act_ == Activation::GELU) pre = transient_buffer(ctx, out, ctx.dtype);
    linear::forward(ctx.backend, x, weight_, bias_, y, Epilogue{act_, {}, pre});
  } else if (amp) {
    TB_CHECK(ctx.dtype == DType::F32, "linear ", name(), ": mixed precision (amp ", ctx.amp.name(),
             ") needs f32 activations, got ", dtype_name(ctx.dtype));
    lp_.prepare(ctx, x, weight_, ctx.amp.dtype_for(AmpOp::Linear));
    if (act_ == Activation::None) {
      linear::forward(ctx.backend, lp_.x(), lp_.weight(), bias_, y);
    } else {
      pre = transient_buffer(ctx, out, out_dtype);
      linear::forward(ctx.backend, lp_.x(), lp_.weight(), bias_, pre);
      if (act_ == Activation::ReLU)
        pointwise::relu_forward(ctx.backend, pre, y);
      else
        pointwise::gelu_forward(ctx.backend, pre, y);
    }
  } else {
    linear::forward(ctx.backend, x, weight_, bias_, y);
  }
  // Kept for backward: x without AMP (with it, lp_.x()), y for the
  // activation's mask, the pre-activation for GELU's.
  x_ = ctx.training && !amp ? x : Tensor{};
  if (!amp || !ctx.training) lp_.release();
  y_ = ctx.training && act_ != Activation::None ? y : Tensor{};
  pre_ = ctx.training && act_ == Activation::GELU ? pre : Tensor{};
  return y;
}

// dx in the input's dtype; weight and bias gradients f32 (the masters').
Tensor Linear::backward(Context& ctx, const Tensor& dy, bool need_dx) {
  TB_CHECK(x_.defined() || lp_.x().defined(), "linear ", name(),
           ": backward without a training forward");
  const bool amp = lp_.x().defined();  // the form the forward ran: it kept the f16/bf16 x
  if (act_ != Activation::None && !amp) {
    Tensor dx;
    if (need_dx) dx = transient_buffer(ctx, x_.shape(), x_.dtype());
    Tensor dz = transient_buffer(ctx, y_.shape(), ctx.dtype);
    const Tensor pre = act_ == Activation::GELU ? pre_ : Tensor{};
    linear::backward(ctx.backend, x_, weight_, dy, dx, weight_grad_, bias_grad_,
                     ctx.accumulate_grads, EpilogueGrad{act_, y_, {}, pre, dz});
    return dx;
  }
  if (!amp) {
    Tensor dx;
    if (need_dx) dx = transient_buffer(ctx, x_.shape(), x_.dtype());
    linear::backward(ctx.backend, x_, weight_, dy, dx, weight_grad_, bias_grad_,
                     ctx.accumulate_grads);
    return dx;
  }
  lp_.check_backward(ctx, ctx.amp.dtype_for(AmpOp::Linear), "linear " + name());
  Tensor dz = dy;
  if (act_ != Activation::None) {  // the activation's gradient, then the GEMMs from it
    dz = transient_buffer(ctx, dy.shape(), dy.dtype());
    if (act_ == Activation::ReLU)
      pointwise::relu_backward(ctx.backend, y_, dy, dz);
    else
      pointwise::gelu_backward(ctx.backend, pre_, dy, dz);
  }
  Tensor dx = need_dx ? lp_.op_dx(ctx, dz) : Tensor{};
  linear::backward(ctx.backend, lp_.x(), lp_.weight(), dz, dx, weight_grad_, bias_grad_,
                   ctx.accumulate_grads);
  return need_dx ? lp_.input_grad(ctx, dx) : Tensor{};
}

}  // namespace tb
