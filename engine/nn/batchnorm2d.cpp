// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/nn/batchnorm2d.h"

#include "engine/core/error.h"

namespace tb {

void register_batchnorm(ParamRegistry& reg, const std::string& name, int64_t C, Tensor* gamma,
                        Tensor* dgamma, Tensor* beta, Tensor* dbeta, Tensor* running_mean,
                        Tensor* running_var) {
  ParamSpec w{name + ".weight", {C}, Init::Ones};
  w.weight_decay = false;
  ParamSpec b{name + ".bias", {C}, Init::Zeros};
  b.weight_decay = false;
  reg.add_param(w, gamma, dgamma);
  reg.add_param(b, beta, dbeta);
  reg.add_buffer({name + ".running_mean", {C}, Init::Zeros}, running_mean);
  reg.add_buffer({name + ".running_var", {C}, Init::Ones}, running_var);
}

BatchNorm2d::BatchNorm2d(std::string name, float momentum, float eps)
    : Layer(std::move(name)), momentum_(momentum), eps_(eps) {
  TB_CHECK(momentum >= 0.0f && momentum <= 1.0f, "batchnorm2d ", this->name(),
           ": momentum must be in [0, 1], got ", momentum);
  TB_CHECK(eps > 0.0f, "batchnorm2d ", this->name(), ": eps must be positive, got ", eps);
}

Shape BatchNorm2d::setup(const Shape& in, ParamRegistry& reg) {
  TB_CHECK(in.size() == 4, "batchnorm2d ", name(), ": expects (N, C, H, W) input, got ",
           shape_str(in));
  C_ = in[1];
  register_batchnorm(reg, name(), C_, &gamma_, &dgamma_, &beta_, &dbeta_, &running_mean_,
                     &running_var_);
  return in;
}

// x, y (N, C, H, W)
Tensor BatchNorm2d::forward(Context& ctx, const Tensor& x) {
  TB_CHECK(x.rank() == 4 && x.c() == C_, "batchnorm2d ", name(), ": expected (N, ", C_,
           ", H, W) input, got ", x.describe());
  Backend& be = ctx.backend;
  Tensor& y = ensure_buffer(ctx, y_, x.shape(), x.dtype(), x.layout());
  if (ctx.training) {
    ensure_buffer(ctx, save_mean_, {C_}, x.dtype());
    ensure_buffer(ctx, save_invstd_, {C_}, x.dtype());
    be.batchnorm_forward_train(x, gamma_, beta_, running_mean_, running_var_, momentum_, eps_, y,
                               save_mean_, save_invstd_);
  } else {
    be.batchnorm_forward_eval(x, gamma_, beta_, running_mean_, running_var_, eps_, y);
  }
  x_ = x;
  forward_was_training_ = ctx.training;
  return y;
}

Tensor BatchNorm2d::backward(Context& ctx, const Tensor& dy, bool need_dx) {
  TB_CHECK(x_.defined(), "batchnorm2d ", name(), ": backward before forward");
  Backend& be = ctx.backend;
  Tensor none;
  if (forward_was_training_) {
    Tensor dx = need_dx ? ensure_buffer(ctx, dx_, x_.shape(), x_.dtype(), x_.layout()) : none;
    be.batchnorm_backward(x_, dy, gamma_, save_mean_, save_invstd_, dx, dgamma_, dbeta_,
                          ctx.accumulate_grads);
    return dx;
  }
  // Eval mode is an affine map y = γ·(x − μ_run)·s + β with s = 1/sqrt(σ²_run + eps):
  //   dγ = Σ dy·x̂ and dβ = Σ dy: the train backward's parameter half with (μ_run, s)
  //   as the saved pair;  dx = γ·s·dy: the eval forward applied to dy with zero
  //   mean and shift. s itself is the eval forward of a ones tensor.
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
  be.batchnorm_backward(x_, dy, gamma_, running_mean_, invstd, none, dgamma_, dbeta_,
                        ctx.accumulate_grads);
  if (!need_dx) return none;
  Tensor& dx = ensure_buffer(ctx, dx_, x_.shape(), x_.dtype(), x_.layout());
  be.batchnorm_forward_eval(dy, gamma_, zeros_, zeros_, running_var_, eps_, dx);
  return dx;
}

}  // namespace tb
