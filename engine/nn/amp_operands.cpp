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
  if (Tensor view = lp_params_view(ctx, master_weight, lp); view.defined()) {
    weight_ = std::move(view);
    return;
  }
  amp::cast(ctx.backend, master_weight,
            ensure_buffer(ctx, weight_, master_weight.shape(), lp, master_weight.layout()));
}

Tensor lp_params_view(const Context& ctx, const Tensor& master_weight, DType lp) {
  const Tensor& block = ctx.lp_params_master;
  if (!ctx.lp_params.defined() || ctx.lp_params.dtype() != lp || !block.defined() ||
      master_weight.dtype() != block.dtype())
    return {};
  const auto* begin = static_cast<const char*>(block.data());
  const auto* at = static_cast<const char*>(master_weight.data());
  const size_t elem = dtype_size(block.dtype());
  if (at < begin || at + master_weight.nbytes() > begin + block.nbytes() ||
      size_t(at - begin) % elem != 0)
    return {};
  return Tensor::view_of(ctx.lp_params, int64_t(size_t(at - begin) / elem), master_weight.shape(),
                         master_weight.layout());
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
