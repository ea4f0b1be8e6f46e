// SPDX-License-Identifier: GPL-3.0-or-later
// Out of place on purpose: the input may be another layer's saved tensor.
#include "engine/nn/activations.h"

#include "engine/core/error.h"

namespace tb {

Tensor ReLU::forward(Context& ctx, const Tensor& x) {
  Tensor& y = ensure_buffer(ctx, y_, x.shape(), x.dtype(), x.layout());
  ctx.backend.relu_forward(x, y);
  return y;
}

Tensor ReLU::backward(Context& ctx, const Tensor& dy, bool need_dx) {
  TB_CHECK(y_.defined(), "relu ", name(), ": backward before forward");
  if (!need_dx) return {};
  Tensor& dx = ensure_buffer(ctx, dx_, y_.shape(), y_.dtype(), y_.layout());
  ctx.backend.relu_backward(y_, dy, dx);
  return dx;
}

Tensor GELU::forward(Context& ctx, const Tensor& x) {
  Tensor& y = ensure_buffer(ctx, y_, x.shape(), x.dtype(), x.layout());
  ctx.backend.gelu_forward(x, y);
  x_ = x;
  return y;
}

Tensor GELU::backward(Context& ctx, const Tensor& dy, bool need_dx) {
  TB_CHECK(x_.defined(), "gelu ", name(), ": backward before forward");
  if (!need_dx) return {};
  Tensor& dx = ensure_buffer(ctx, dx_, x_.shape(), x_.dtype(), x_.layout());
  ctx.backend.gelu_backward(x_, dy, dx);
  return dx;
}

}  // namespace tb
