// SPDX-License-Identifier: GPL-3.0-or-later
// Out of place on purpose: the input may be another layer's saved tensor.
#include "engine/nn/activations.h"

#include "engine/core/error.h"
#include "engine/ops/pointwise/pointwise.h"

namespace tb {

Tensor ReLU::forward(Context& ctx, const Tensor& x) {
  Tensor y = transient_buffer(ctx, x.shape(), x.dtype(), x.layout());
  pointwise::relu_forward(ctx.backend, x, y);
  y_ = ctx.training ? y : Tensor{};
  return y;
}

Tensor ReLU::backward(Context& ctx, const Tensor& dy, bool need_dx) {
  TB_CHECK(y_.defined(), "relu ", name(), ": backward without a training forward");
  if (!need_dx) return {};
  Tensor dx = transient_buffer(ctx, y_.shape(), y_.dtype(), y_.layout());
  pointwise::relu_backward(ctx.backend, y_, dy, dx);
  return dx;
}

Tensor GELU::forward(Context& ctx, const Tensor& x) {
  Tensor y = transient_buffer(ctx, x.shape(), x.dtype(), x.layout());
  pointwise::gelu_forward(ctx.backend, x, y);
  x_ = ctx.training ? x : Tensor{};
  return y;
}

Tensor GELU::backward(Context& ctx, const Tensor& dy, bool need_dx) {
  TB_CHECK(x_.defined(), "gelu ", name(), ": backward without a training forward");
  if (!need_dx) return {};
  Tensor dx = transient_buffer(ctx, x_.shape(), x_.dtype(), x_.layout());
  pointwise::gelu_backward(ctx.backend, x_, dy, dx);
  return dx;
}

}  // namespace tb
