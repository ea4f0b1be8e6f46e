// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/nn/batchnorm2d.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/core/error.h"
#include "engine/ops/batchnorm/batchnorm.h"
#include "engine/ops/pointwise/pointwise.h"

namespace tb {

BatchNorm2d::BatchNorm2d(std::string name, float momentum, float eps, Activation act)
    : Layer(std::move(name)), momentum_(momentum), eps_(eps), act_(act) {
  TB_CHECK(momentum >= 0.0f && momentum <= 1.0f, "batchnorm2d ", this->name(),
           ": momentum must be in [0, 1], got ", momentum);
  TB_CHECK(eps > 0.0f, "batchnorm2d ", this->name(), ": eps must be positive, got ", eps);
  TB_CHECK(act == Activation::None || act == Activation::ReLU, "batchnorm2d ", this->name(),
           ": epilogue activation ", activation_name(act), " is not supported (none or relu)");
}

Shape BatchNorm2d::setup(const Shape& in, ParamRegistry& reg) {
  TB_CHECK(in.size() == 4, "batchnorm2d ", name(), ": expects (N, C, H, W) input, got ",
           shape_str(in));
  C_ = in[1];
  ParamSpec w{name() + ".weight", {C_}, Init::Ones};
  w.weight_decay = false;
  ParamSpec b{name() + ".bias", {C_}, Init::Zeros};
  b.weight_decay = false;
  reg.add_param(w, &gamma_, &dgamma_);
  reg.add_param(b, &beta_, &dbeta_);
  reg.add_buffer({name() + ".running_mean", {C_}, Init::Zeros}, &running_mean_);
  reg.add_buffer({name() + ".running_var", {C_}, Init::Ones}, &running_var_);
  return in;
}

// x, residual, y (N, C, H, W)
Tensor BatchNorm2d::forward_residual(Context& ctx, const Tensor& x, const Tensor& residual) {
  TB_CHECK(x.rank() == 4 && x.c() == C_, "batchnorm2d ", name(), ": expected (N, ", C_,
           ", H, W) input, got ", x.describe());
  Backend& be = ctx.backend;
  const Epilogue epilogue{act_, residual};
  Tensor y = transient_buffer(ctx, x.shape(), x.dtype(), x.layout());
  if (ctx.training && ctx.sync_batchnorm) {
    TB_CHECK(!epilogue.active(), "batchnorm2d ", name(),
             ": sync_batchnorm synchronises the layer without an epilogue; this one has ",
             activation_name(act_), residual.defined() ? " and a residual" : "",
             " (the run plan does not fuse under sync_batchnorm)");
    forward_synced(ctx, x, y);
  } else if (ctx.training) {
    // The statistics in the parameters' dtype (f32 under f16/bf16 activations).
    ensure_buffer(ctx, save_mean_, {C_}, gamma_.dtype());
    ensure_buffer(ctx, save_invstd_, {C_}, gamma_.dtype());
    batchnorm::forward_train(be, x, gamma_, beta_, running_mean_, running_var_, momentum_, eps_, y,
                               save_mean_, save_invstd_, epilogue);
  } else {
    batchnorm::forward_eval(be, x, gamma_, beta_, running_mean_, running_var_, eps_, y, epilogue);
  }
  x_ = x;  // eval too: a backward in eval mode reads it (backward_plain)
  y_ = epilogue.active() ? y : Tensor{};
  forward_was_training_ = ctx.training;
  forward_had_epilogue_ = epilogue.active();
  forward_had_residual_ = residual.defined();
  return y;
}

Tensor BatchNorm2d::backward_residual(Context& ctx, const Tensor& dy, bool need_dx,
                                      Tensor* dresidual) {
  TB_CHECK(x_.defined(), "batchnorm2d ", name(), ": backward before forward");
  if (forward_had_epilogue_ || dresidual) return backward_epilogue(ctx, dy, need_dx, dresidual);
  if (forward_was_training_ && ctx.sync_batchnorm) return backward_synced(ctx, dy, need_dx);
  return backward_plain(ctx, dy, need_dx);
}

// Eval mode is an affine map y = γ·(x − μ_run)·s + β with s = 1/sqrt(σ²_run + eps):
//   dγ = Σ dy·x̂ and dβ = Σ dy: the train backward's parameter half with (μ_run, s)
//   as the saved pair;  dx = γ·s·dy: the eval forward applied to dy with zero
//   mean and shift. s itself is the eval forward of a ones tensor, into eval_invstd_.
void BatchNorm2d::ensure_eval_helpers(Context& ctx) {
  Backend& be = ctx.backend;
  const DType dt = gamma_.dtype();  // s is a statistic: the parameters' dtype
  if (!ones_.defined() || ones_.dtype() != dt || ones_.device() != be.device()) {
    ones_ = be.empty({1, C_, 1, 1}, dt);
    zeros_ = be.empty({C_}, dt);
    eval_invstd_ = be.empty({1, C_, 1, 1}, dt);
    be.fill(ones_, 1.0);
    be.fill(zeros_, 0.0);
  }
  Tensor ones_c = ones_.reshaped({C_});
  batchnorm::forward_eval(be, ones_, ones_c, zeros_, zeros_, running_var_, eps_, eval_invstd_);
}

Tensor BatchNorm2d::backward_plain(Context& ctx, const Tensor& dy, bool need_dx) {
  Backend& be = ctx.backend;
  Tensor none;
  if (forward_was_training_) {
    Tensor dx = need_dx ? transient_buffer(ctx, x_.shape(), x_.dtype(), x_.layout()) : none;
    batchnorm::backward(be, x_, dy, gamma_, save_mean_, save_invstd_, dx, dgamma_, dbeta_,
                          ctx.accumulate_grads);
    return dx;
  }
  ensure_eval_helpers(ctx);
  Tensor invstd = eval_invstd_.reshaped({C_});
  batchnorm::backward(be, x_, dy, gamma_, running_mean_, invstd, none, dgamma_, dbeta_,
                        ctx.accumulate_grads);
  if (!need_dx) return none;
  Tensor dx = transient_buffer(ctx, x_.shape(), x_.dtype(), x_.layout());
  batchnorm::forward_eval(be, dy, gamma_, zeros_, zeros_, running_var_, eps_, dx);
  return dx;
}

// With the epilogue: dz = dy·[y > 0] (or dy) inside the batch-norm backward,
// handed back as dresidual. Eval mode as backward_plain, the epilogue's dz
// taking dy's place: the parameter half also returns dz, and dx = γ·s·dz.
Tensor BatchNorm2d::backward_epilogue(Context& ctx, const Tensor& dy, bool need_dx,
                                      Tensor* dresidual) {
  Backend& be = ctx.backend;
  Tensor none;
  if (forward_was_training_) {
    Tensor dres =
        dresidual ? transient_buffer(ctx, x_.shape(), x_.dtype(), x_.layout()) : none;
    Tensor dx = need_dx ? transient_buffer(ctx, x_.shape(), x_.dtype(), x_.layout()) : none;
    // Without a residual y is γ·x̂ + β through the ReLU: the backend may take
    // the mask from x and β (no read of y).
    const Tensor mask_beta =
        act_ == Activation::ReLU && !forward_had_residual_ ? beta_ : Tensor{};
    batchnorm::backward(be, x_, dy, gamma_, save_mean_, save_invstd_, dx, dgamma_, dbeta_,
                          ctx.accumulate_grads, EpilogueGrad{act_, y_, dres, {}, {}, mask_beta});
    if (dresidual) *dresidual = dres;
    return dx;
  }
  ensure_eval_helpers(ctx);
  Tensor invstd = eval_invstd_.reshaped({C_});
  Tensor dz = transient_buffer(ctx, x_.shape(), x_.dtype(), x_.layout());
  batchnorm::backward(be, x_, dy, gamma_, running_mean_, invstd, none, dgamma_, dbeta_,
                        ctx.accumulate_grads, EpilogueGrad{act_, y_, dz});
  if (dresidual) *dresidual = dz;
  if (!need_dx) return none;
  Tensor dx = transient_buffer(ctx, x_.shape(), x_.dtype(), x_.layout());
  batchnorm::forward_eval(be, dz, gamma_, zeros_, zeros_, running_var_, eps_, dx);
  return dx;
}

// --- synchronised statistics (sync_batchnorm), from the same backend ops.

namespace {
// A per-channel tensor (C, on the device) to and from host doubles, through
// `host` (C, on the host, the tensor's dtype).
void channels_to_host(Backend& be, const Tensor& t, Tensor& host, double* out) {
  be.copy(t, host);
  for (int64_t c = 0; c < host.numel(); ++c)
    out[c] = host.dtype() == DType::F64 ? host.data_as<double>()[c] : host.data_as<float>()[c];
}
void channels_to_device(Backend& be, const double* v, Tensor& host, Tensor& t) {
  for (int64_t c = 0; c < host.numel(); ++c) {
    if (host.dtype() == DType::F64) host.data_as<double>()[c] = v[c];
    else host.data_as<float>()[c] = static_cast<float>(v[c]);
  }
  be.copy(host, t);
}
}  // namespace
//
// Forward: batchnorm_backward(x, dy = x, mean 0, invstd 1) yields per channel
// Σx (as dβ) and Σx² (as dγ); summed over the ranks with the element count M,
// they give the batch mean and biased variance exactly as the one-process
// kernel computes them (E[x²] − μ², in double). y is then the eval-mode
// forward with those statistics; the running statistics update as in
// batchnorm_forward_train, with the unbiased variance of all M elements.
Tensor BatchNorm2d::forward_synced(Context& ctx, const Tensor& x, Tensor& y) {
  Backend& be = ctx.backend;
  const DType dt = gamma_.dtype();  // every buffer here is per channel: the parameters' dtype
  ensure_buffer(ctx, save_mean_, {C_}, dt);
  ensure_buffer(ctx, save_invstd_, {C_}, dt);
  ensure_buffer(ctx, sync_mean_, {C_}, dt);
  ensure_buffer(ctx, sync_var_, {C_}, dt);
  ensure_buffer(ctx, sync_a_, {C_}, dt);
  ensure_buffer(ctx, sync_b_, {C_}, dt);
  Tensor none;
  be.fill(sync_mean_, 0.0);  // mean 0 and invstd 1: dγ = Σ x·x, dβ = Σ x
  be.fill(sync_var_, 1.0);
  batchnorm::backward(be, x, x, gamma_, sync_mean_, sync_var_, none, sync_a_, sync_b_, false);

  const int64_t C = C_;
  std::vector<double> sums(static_cast<size_t>(2 * C + 1));
  Tensor host = Tensor::empty({C}, dt);
  auto to_host = [&](const Tensor& t, double* out) { channels_to_host(be, t, host, out); };
  auto to_device = [&](const std::vector<double>& v, Tensor& t) {
    channels_to_device(be, v.data(), host, t);
  };
  to_host(sync_b_, sums.data());      // Σx
  to_host(sync_a_, sums.data() + C);  // Σx²
  sums[static_cast<size_t>(2 * C)] = double(x.n() * x.h() * x.w());
  ctx.sync_batchnorm(sums.data(), 2 * C + 1);
  const double M = sums[static_cast<size_t>(2 * C)];
  sync_count_ = M;

  std::vector<double> mean(static_cast<size_t>(C)), var(mean.size()), invstd(mean.size()),
      rmean(mean.size()), rvar(mean.size());
  to_host(running_mean_, rmean.data());
  to_host(running_var_, rvar.data());
  for (size_t c = 0; c < mean.size(); ++c) {
    mean[c] = sums[c] / M;
    var[c] = std::max(sums[c + size_t(C)] / M - mean[c] * mean[c], 0.0);
    invstd[c] = 1.0 / std::sqrt(var[c] + double(eps_));
    const double unbiased = M > 1 ? var[c] * M / (M - 1.0) : var[c];
    rmean[c] = (1.0 - momentum_) * rmean[c] + momentum_ * mean[c];
    rvar[c] = (1.0 - momentum_) * rvar[c] + momentum_ * unbiased;
  }
  to_device(mean, sync_mean_);
  to_device(var, sync_var_);
  to_device(mean, save_mean_);
  to_device(invstd, save_invstd_);
  to_device(rmean, running_mean_);
  to_device(rvar, running_var_);
  batchnorm::forward_eval(be, x, gamma_, beta_, sync_mean_, sync_var_, eps_, y);
  return y;
}

// Backward: the local Σdy and Σdy·x̂ (batchnorm_backward's dβ and dγ) are
// this rank's share of the parameter gradients (the gradient all-reduce sums
// them) and, summed over the ranks here, the two sums of
//   dx = γ·s·dy − γ·s/M·(Σdy + x̂·Σdy·x̂),  s = 1/sqrt(σ² + eps), x̂ = (x − μ)·s,
// which is built from two eval-mode forwards and an add:
//   γ·s·dy                    = bn_eval(dy; γ, β = 0, μ = 0, σ²)
//   −γ·s/M·(Σdy + x̂·Σdy·x̂)   = bn_eval(x; γ₂ = −γ·s/M·Σdy·x̂, β₂ = −γ·s/M·Σdy, μ, σ²)
Tensor BatchNorm2d::backward_synced(Context& ctx, const Tensor& dy, bool need_dx) {
  Backend& be = ctx.backend;
  const DType dt = gamma_.dtype();  // the per-channel sums' dtype; dx and term have x's
  const int64_t C = C_;
  Tensor none;
  batchnorm::backward(be, x_, dy, gamma_, save_mean_, save_invstd_, none, sync_a_, sync_b_, false);
  if (ctx.accumulate_grads) {
    pointwise::accumulate(be, sync_a_, dgamma_);
    pointwise::accumulate(be, sync_b_, dbeta_);
  } else {
    be.copy(sync_a_, dgamma_);
    be.copy(sync_b_, dbeta_);
  }
  std::vector<double> sums(static_cast<size_t>(2 * C));
  Tensor host = Tensor::empty({C}, dt);
  auto to_host = [&](const Tensor& t, double* out) { channels_to_host(be, t, host, out); };
  to_host(sync_b_, sums.data());      // Σdy
  to_host(sync_a_, sums.data() + C);  // Σdy·x̂
  ctx.sync_batchnorm(sums.data(), 2 * C);  // every rank joins, whether or not it needs dx
  if (!need_dx) return none;

  std::vector<double> gamma(static_cast<size_t>(C)), invstd(gamma.size()), g2(gamma.size()),
      b2(gamma.size());
  to_host(gamma_, gamma.data());
  to_host(save_invstd_, invstd.data());
  for (size_t c = 0; c < gamma.size(); ++c) {
    const double k = -gamma[c] * invstd[c] / sync_count_;
    g2[c] = k * sums[c + size_t(C)];
    b2[c] = k * sums[c];
  }
  channels_to_device(be, g2.data(), host, sync_a_);  // γ₂
  channels_to_device(be, b2.data(), host, sync_b_);  // β₂
  Tensor dx = transient_buffer(ctx, x_.shape(), x_.dtype(), x_.layout());
  Tensor term = transient_buffer(ctx, x_.shape(), x_.dtype(), x_.layout());
  batchnorm::forward_eval(be, x_, sync_a_, sync_b_, sync_mean_, sync_var_, eps_, term);
  be.fill(sync_b_, 0.0);
  Tensor zero_mean = sync_b_;
  batchnorm::forward_eval(be, dy, gamma_, zero_mean, zero_mean, sync_var_, eps_, dx);
  pointwise::add(be, dx, term, dx);
  return dx;
}

}  // namespace tb
