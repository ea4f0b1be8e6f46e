// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/nn/batchnorm_act.h"

#include "engine/core/error.h"
#include "engine/nn/batchnorm2d.h"

namespace tb {

BatchNormAct::BatchNormAct(std::string name, bool relu, float momentum, float eps)
    : Layer(std::move(name)), relu_(relu), momentum_(momentum), eps_(eps) {
  TB_CHECK(momentum >= 0.0f && momentum <= 1.0f, "batchnorm_act ", this->name(),
           ": momentum must be in [0, 1], got ", momentum);
  TB_CHECK(eps > 0.0f, "batchnorm_act ", this->name(), ": eps must be positive, got ", eps);
}

// BatchNorm2d's registration itself: same names, shapes, order and init.
Shape BatchNormAct::setup(const Shape& in, ParamRegistry& reg) {
  TB_CHECK(in.size() == 4, "batchnorm_act ", name(), ": expects (N, C, H, W) input, got ",
           shape_str(in));
  C_ = in[1];
  register_batchnorm(reg, name(), C_, &gamma_, &dgamma_, &beta_, &dbeta_, &running_mean_,
                     &running_var_);
  return in;
}

// x, residual, y (N, C, H, W)
Tensor BatchNormAct::forward_residual(Context& ctx, const Tensor& x, const Tensor& residual) {
  TB_CHECK(x.rank() == 4 && x.c() == C_, "batchnorm_act ", name(), ": expected (N, ", C_,
           ", H, W) input, got ", x.describe());
  Backend& be = ctx.backend;
  Tensor& y = ensure_buffer(ctx, y_, x.shape(), x.dtype(), x.layout());
  if (ctx.training) {
    ensure_buffer(ctx, save_mean_, {C_}, x.dtype());
    ensure_buffer(ctx, save_invstd_, {C_}, x.dtype());
    be.batchnorm_act_forward_train(x, gamma_, beta_, residual, relu_, running_mean_, running_var_,
                                   momentum_, eps_, y, save_mean_, save_invstd_);
  } else {
    be.batchnorm_act_forward_eval(x, gamma_, beta_, residual, relu_, running_mean_, running_var_,
                                  eps_, y);
  }
  x_ = x;
  forward_was_training_ = ctx.training;
  return y;
}

Tensor BatchNormAct::backward_residual(Context& ctx, const Tensor& dy, bool need_dx,
                                       Tensor* dresidual) {
  TB_CHECK(x_.defined(), "batchnorm_act ", name(), ": backward before forward");
  Backend& be = ctx.backend;
  Tensor none;
  Tensor dres = dresidual ? ensure_buffer(ctx, dres_, x_.shape(), x_.dtype(), x_.layout()) : none;
  if (forward_was_training_) {
    Tensor dx = need_dx ? ensure_buffer(ctx, dx_, x_.shape(), x_.dtype(), x_.layout()) : none;
    be.batchnorm_act_backward(x_, y_, dy, gamma_, save_mean_, save_invstd_, relu_, dx, dres,
                              dgamma_, dbeta_, ctx.accumulate_grads);
    if (dresidual) *dresidual = dres;
    return dx;
  }
  // Eval mode, as BatchNorm2d: the parameter half is the train backward with
  // (μ_run, 1/sqrt(σ²_run + eps)) as the saved pair; it also hands back the
  // masked dz (as "dresidual"), and dx = γ·s·dz is the eval forward of dz with
  // zero mean and shift.
  const DType dt = x_.dtype();
  if (!ones_.defined() || ones_.dtype() != dt || ones_.device() != be.device()) {
    ones_ = be.empty({1, C_, 1, 1}, dt);
    zeros_ = be.empty({C_}, dt);
    eval_invstd_ = be.empty({1, C_, 1, 1}, dt);
    be.fill(ones_, 1.0);
    be.fill(zeros_, 0.0);
  }
  Tensor ones_c = ones_.reshaped({C_});
  be.batchnorm_forward_eval(ones_, ones_c, zeros_, zeros_, running_var_, eps_, eval_invstd_);
  Tensor invstd = eval_invstd_.reshaped({C_});
  Tensor dz = ensure_buffer(ctx, dres_, x_.shape(), x_.dtype(), x_.layout());
  be.batchnorm_act_backward(x_, y_, dy, gamma_, running_mean_, invstd, relu_, none, dz, dgamma_,
                            dbeta_, ctx.accumulate_grads);
  if (dresidual) *dresidual = dz;
  if (!need_dx) return none;
  Tensor& dx = ensure_buffer(ctx, dx_, x_.shape(), x_.dtype(), x_.layout());
  be.batchnorm_forward_eval(dz, gamma_, zeros_, zeros_, running_var_, eps_, dx);
  return dx;
}

}  // namespace tb
