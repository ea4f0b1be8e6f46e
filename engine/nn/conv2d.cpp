// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/nn/conv2d.h"

#include "engine/core/error.h"

namespace tb {

Conv2d::Conv2d(std::string name, int64_t out_channels, int64_t kernel, int64_t stride,
               int64_t pad, bool bias)
    : Layer(std::move(name)),
      out_channels_(out_channels),
      kernel_(kernel),
      stride_(stride),
      pad_(pad),
      has_bias_(bias) {
  TB_CHECK(out_channels > 0, "conv2d ", this->name(), ": out_channels must be positive, got ",
           out_channels);
  TB_CHECK(kernel > 0 && stride > 0 && pad >= 0, "conv2d ", this->name(), ": invalid kernel ",
           kernel, ", stride ", stride, ", padding ", pad);
}

Shape Conv2d::setup(const Shape& in, ParamRegistry& reg) {
  TB_CHECK(in.size() == 4, "conv2d ", name(), ": input must be (N, C, H, W), got ",
           shape_str(in));
  in_channels_ = in[1];
  // Validates that the kernel fits; the leading N is a placeholder.
  const ConvGeometry g =
      ConvGeometry::make(1, in[1], in[2], in[3], out_channels_, kernel_, stride_, pad_);
  const int64_t fan_in = in_channels_ * kernel_ * kernel_;
  reg.add_param({name() + ".weight", g.weight_shape(), Init::KaimingUniform, fan_in, true,
                reg.weight_layout()},
                &weight_, &weight_grad_);
  if (has_bias_)
    reg.add_param({name() + ".bias", {out_channels_}, Init::FanInUniform, fan_in, false,
                  Layout::NCHW}, &bias_,
                  &bias_grad_);
  return {in[0], out_channels_, g.H_out, g.W_out};
}

ConvGeometry Conv2d::geometry(const Tensor& x) const {
  TB_CHECK(x.rank() == 4 && x.c() == in_channels_, "conv2d ", name(), ": expected input (N, ",
           in_channels_, ", H, W), got ", x.describe());
  return ConvGeometry::make(x.n(), x.c(), x.h(), x.w(), out_channels_, kernel_, stride_, pad_);
}

// Under AMP (ctx.amp enabled), lp = amp.dtype_for(Conv) (amp_operands.h):
//   x (N,Cin,H,W): as it is when lp, else cast once to lp
//   weight_ (Cout,Cin,K,K) f32 -> lp at every forward (the master changes
//   after every optimizer step; eval too)
//   y (N,Cout,Ho,Wo) = conv::forward(x lp, weight lp, bias_ f32) in
//   output_dtype(ctx): lp with low-precision activations, else f32 (the
//   op's two f16/bf16 forms).
Tensor Conv2d::forward(Context& ctx, const Tensor& x) {
  const ConvGeometry g = geometry(x);
  Tensor y = transient_buffer(ctx, g.output_shape(), output_dtype(ctx),
                              output_layout(ctx, g.C_out));
  if (ctx.amp.enabled()) {
    TB_CHECK(ctx.dtype == DType::F32, "conv2d ", name(), ": mixed precision (amp ", ctx.amp.name(),
             ") needs f32 activations, got ", dtype_name(ctx.dtype));
    lp_.prepare(ctx, x, weight_, ctx.amp.dtype_for(AmpOp::Conv));
    conv::forward(ctx.backend, g, lp_.x(), lp_.weight(), bias_, y);
    if (!ctx.training) lp_.release();  // the backward reads lp_.x(), not x
    x_ = {};
  } else {
    conv::forward(ctx.backend, g, x, weight_, bias_, y);
    x_ = ctx.training ? x : Tensor{};
    lp_.release();
  }
  return y;
}

// dx in the input's dtype; weight and bias gradients f32 (the masters').
Tensor Conv2d::backward(Context& ctx, const Tensor& dy, bool need_dx) {
  TB_CHECK(x_.defined() || lp_.x().defined(), "conv2d ", name(),
           ": backward without a training forward");
  if (!ctx.amp.enabled()) {
    TB_CHECK(x_.defined(), "conv2d ", name(), ": backward without amp after a forward under amp ",
             ctx.amp.name());
    const ConvGeometry g = geometry(x_);
    Tensor dx;
    if (need_dx) dx = transient_buffer(ctx, g.input_shape(), x_.dtype(), x_.layout());
    conv::backward(ctx.backend, g, x_, weight_, dy, dx, weight_grad_, bias_grad_,
                   ctx.accumulate_grads);
    return dx;
  }
  lp_.check_backward(ctx, ctx.amp.dtype_for(AmpOp::Conv), "conv2d " + name());
  const ConvGeometry g = geometry(lp_.x());
  Tensor dx = need_dx ? lp_.op_dx(ctx, dy) : Tensor{};
  conv::backward(ctx.backend, g, lp_.x(), lp_.weight(), dy, dx, weight_grad_, bias_grad_,
                 ctx.accumulate_grads);
  return need_dx ? lp_.input_grad(ctx, dx) : Tensor{};
}

}  // namespace tb
