// SPDX-License-Identifier: GPL-3.0-or-later
// The batch-norm contract's checks (batchnorm.h), one copy for every backend.
#include "engine/ops/batchnorm/batchnorm.h"

#include <initializer_list>

#include "engine/backend/backend.h"
#include "engine/core/error.h"

namespace tb::batchnorm {

namespace {

bool low_precision(DType t) { return t == DType::F16 || t == DType::BF16; }

Dims check_x(const Tensor& x, const char* op) {
  TB_CHECK(x.defined(), op, ": x is undefined");
  TB_CHECK(x.rank() == 4, op, ": expected a rank-4 (N, C, H, W) input, got ", x.describe());
  TB_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::F64 || low_precision(x.dtype()), op,
           ": x ", x.describe(), " must be f32, f64, f16 or bf16");
  return {x.n(), x.c(), x.h() * x.w(), x.layout() == Layout::NHWC,
          x.layout() == Layout::NCHW16C};
}

// The dtype of the per-channel vectors for x: x's own, f32 for f16/bf16 x.
DType channel_dtype(const Tensor& x) {
  return low_precision(x.dtype()) ? DType::F32 : x.dtype();
}

void check_device(const Tensor& t, const Tensor& x, const char* op, const char* what) {
  TB_CHECK(t.device() == x.device(), op, ": ", what, " ", t.describe(), " is not on x's device (",
           x.describe(), ")");
}

// (C), channel_dtype(x), x's device.
void check_channel(const Tensor& t, const Tensor& x, const char* op, const char* what) {
  TB_CHECK(t.defined(), op, ": ", what, " is undefined");
  check_device(t, x, op, what);
  const DType want = channel_dtype(x);
  TB_CHECK(t.shape() == Shape{x.c()} && t.dtype() == want, op, ": ", what, " ", t.describe(),
           " does not match (", x.c(), ") ", dtype_name(want), " for x ", x.describe());
}

// x's shape, dtype, layout and device.
void check_like(const Tensor& t, const Tensor& x, const char* op, const char* what) {
  TB_CHECK(t.defined(), op, ": ", what, " is undefined");
  check_device(t, x, op, what);
  TB_CHECK(t.shape() == x.shape() && t.dtype() == x.dtype(), op, ": ", what, " ", t.describe(),
           " does not match x ", x.describe());
  TB_CHECK(t.layout() == x.layout(), op, ": ", what, " ", t.describe(), " is not ",
           layout_name(x.layout()), " like x");
}

void check_act(Activation act, const char* op) {
  TB_CHECK(act == Activation::None || act == Activation::ReLU, op, ": epilogue activation ",
           activation_name(act), " is not supported (none or relu)");
}

// What train and eval share: x, the affine and running vectors, y, the epilogue.
Dims check_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                   const Tensor& running_mean, const Tensor& running_var, const Tensor& y,
                   const Epilogue& ep, const char* op) {
  const Dims d = check_x(x, op);
  check_channel(gamma, x, op, "gamma");
  check_channel(beta, x, op, "beta");
  check_channel(running_mean, x, op, "running_mean");
  check_channel(running_var, x, op, "running_var");
  check_like(y, x, op, "y");
  check_act(ep.act, op);
  if (ep.residual.defined()) check_like(ep.residual, x, op, "residual");
  TB_CHECK(!ep.active() || y.data() != x.data(), op, ": with an epilogue y must not alias x (",
           x.describe(), ")");
  return d;
}

// This backend's kernels, after they said they take x's dtype.
Kernels& kernels_for(Backend& be, const Tensor& x, const char* op) {
  Kernels& k = be.kernels<Kernels>();
  require_dtype(k.supports(x.dtype()), be, Kernels::kFamily, x.dtype(), op);
  return k;
}

}  // namespace

Dims check_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                         const Tensor& running_mean, const Tensor& running_var, const Tensor& y,
                         const Tensor& save_mean, const Tensor& save_invstd,
                         const Epilogue& epilogue) {
  const char* op = "batchnorm_forward_train";
  const Dims d = check_forward(x, gamma, beta, running_mean, running_var, y, epilogue, op);
  check_channel(save_mean, x, op, "save_mean");
  check_channel(save_invstd, x, op, "save_invstd");
  TB_CHECK(d.M() > 0, op, ": empty batch ", x.describe());
  return d;
}

Dims check_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                        const Tensor& running_mean, const Tensor& running_var, const Tensor& y,
                        const Epilogue& epilogue) {
  return check_forward(x, gamma, beta, running_mean, running_var, y, epilogue,
                       "batchnorm_forward_eval");
}

Dims check_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                    const Tensor& save_mean, const Tensor& save_invstd, const Tensor& dx,
                    const Tensor& dgamma, const Tensor& dbeta, const EpilogueGrad& epilogue) {
  const char* op = "batchnorm_backward";
  const Dims d = check_x(x, op);
  check_like(dy, x, op, "dy");
  check_channel(gamma, x, op, "gamma");
  check_channel(save_mean, x, op, "save_mean");
  check_channel(save_invstd, x, op, "save_invstd");
  if (dx.defined()) check_like(dx, x, op, "dx");
  if (dgamma.defined()) check_channel(dgamma, x, op, "dgamma");
  if (dbeta.defined()) check_channel(dbeta, x, op, "dbeta");
  check_act(epilogue.act, op);
  const Tensor& y = epilogue.y;
  const Tensor& dres = epilogue.dresidual;
  if (epilogue.act == Activation::ReLU) check_like(y, x, op, "y (the ReLU epilogue's mask)");
  if (epilogue.mask_beta.defined()) {
    TB_CHECK(epilogue.act == Activation::ReLU, op,
             ": mask_beta is given but the epilogue has no ReLU to mask");
    check_channel(epilogue.mask_beta, x, op, "mask_beta");
  }
  if (dres.defined()) check_like(dres, x, op, "dresidual");
  for (const Tensor* out : {&dx, &dres})
    TB_CHECK(!out->defined() || (out->data() != x.data() && out->data() != dy.data() &&
                                 (!y.defined() || out->data() != y.data())),
             op, ": dx and dresidual must not alias x, y or dy");
  TB_CHECK(!dx.defined() || !dres.defined() || dx.data() != dres.data(), op,
           ": dx and dresidual must be different buffers");
  return d;
}

void forward_train(Backend& be, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                   Tensor& running_mean, Tensor& running_var, float momentum, float eps,
                   Tensor& y, Tensor& save_mean, Tensor& save_invstd, const Epilogue& epilogue) {
  const char* op = "batchnorm_forward_train";
  const Dims d = check_forward_train(x, gamma, beta, running_mean, running_var, y, save_mean,
                                     save_invstd, epilogue);
  kernels_for(be, x, op).forward_train(d, x, gamma, beta, running_mean, running_var, momentum,
                                       eps, y, save_mean, save_invstd, epilogue);
}

void forward_eval(Backend& be, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                  const Tensor& running_mean, const Tensor& running_var, float eps, Tensor& y,
                  const Epilogue& epilogue) {
  const char* op = "batchnorm_forward_eval";
  const Dims d = check_forward_eval(x, gamma, beta, running_mean, running_var, y, epilogue);
  kernels_for(be, x, op).forward_eval(d, x, gamma, beta, running_mean, running_var, eps, y,
                                      epilogue);
}

void backward(Backend& be, const Tensor& x, const Tensor& dy, const Tensor& gamma,
              const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx, Tensor& dgamma,
              Tensor& dbeta, bool accumulate, const EpilogueGrad& epilogue) {
  const Dims d = check_backward(x, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta, epilogue);
  kernels_for(be, x, "batchnorm_backward")
      .backward(d, x, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta, accumulate, epilogue);
}

}  // namespace tb::batchnorm
