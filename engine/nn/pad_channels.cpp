// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/nn/pad_channels.h"

#include "engine/core/error.h"
#include "engine/ops/layout/layout.h"

namespace tb {

PadChannels::PadChannels(std::string name, int64_t multiple)
    : Layer(std::move(name)), multiple_(multiple) {
  TB_CHECK(multiple > 0, "pad_channels ", this->name(), ": multiple must be positive, got ",
           multiple);
}

// (N, C, H, W) -> (N, Cp, H, W)
Shape PadChannels::setup(const Shape& in, ParamRegistry&) {
  TB_CHECK(in.size() == 4, "pad_channels ", name(), ": input must be (N, C, H, W), got ",
           shape_str(in));
  in_channels_ = in[1];
  out_channels_ = (in[1] + multiple_ - 1) / multiple_ * multiple_;
  return {in[0], out_channels_, in[2], in[3]};
}

Tensor PadChannels::forward(Context& ctx, const Tensor& x) {
  TB_CHECK(x.rank() == 4 && x.c() == in_channels_, "pad_channels ", name(), ": expected input (N, ",
           in_channels_, ", H, W), got ", x.describe());
  Tensor y = transient_buffer(ctx, {x.n(), out_channels_, x.h(), x.w()}, x.dtype(), x.layout());
  layout::pad_channels_forward(ctx.backend, x, y);
  in_shape_ = x.shape();
  in_layout_ = x.layout();
  return y;
}

Tensor PadChannels::backward(Context& ctx, const Tensor& dy, bool need_dx) {
  TB_CHECK(!in_shape_.empty(), "pad_channels ", name(), ": backward without a forward");
  if (!need_dx) return {};  // the usual case: the first layer, no parameters
  Tensor dx = transient_buffer(ctx, in_shape_, dy.dtype(), in_layout_);
  layout::pad_channels_backward(ctx.backend, dy, dx);
  return dx;
}

}  // namespace tb
