// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/nn/amp_operands.h"

#include "engine/core/error.h"
#include "engine/ops/amp/amp.h"

namespace tb {

void AmpOperands::prepare(Context& ctx, const Tensor& x, const Tensor& master_weight, DType lp) {
  in_dtype_ = x.dtype();
  if (x.dtype() == lp) {
    x_ = x;
  } else {
    amp::cast(ctx.backend, x, ensure_buffer(ctx, cast_x_, x.shape(), lp, x.layout()));
    x_ = cast_x_;
  }
  amp::cast(ctx.backend, master_weight,
            ensure_buffer(ctx, weight_, master_weight.shape(), lp, master_weight.layout()));
}

void AmpOperands::check_backward(const Context& ctx, DType lp, const std::string& layer) const {
  TB_CHECK(x_.defined() && x_.dtype() == lp, layer, ": backward under amp ", ctx.amp.name(),
           " without a forward under the same policy");
}

Tensor AmpOperands::op_dx(Context& ctx, const Tensor& dy) {
  return transient_buffer(ctx, x_.shape(), dy.dtype(), x_.layout());
}

Tensor AmpOperands::input_grad(Context& ctx, const Tensor& written) {
  if (written.dtype() == in_dtype_) return written;
  Tensor dx = transient_buffer(ctx, x_.shape(), in_dtype_, x_.layout());
  amp::cast(ctx.backend, written, dx);
  return dx;
}

}  // namespace tb
