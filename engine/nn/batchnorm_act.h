// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Batch norm fused with what follows it (trick 11): y = act(BN(x) [+ residual]),
// act = ReLU or identity, through Backend::batchnorm_act_* (one sweep for
// apply + add + ReLU, the ReLU mask folded into BN's backward).
//   x, residual, y (N, C, H, W)
// Parameters and buffers are BatchNorm2d's, under the same names, shapes,
// order and init (weight = γ ones, bias = β zeros, running_mean zeros,
// running_var ones), so a model built with or without fusion from the same
// seed has the same weights. The layer takes BatchNorm2d's name ("block1.bn").
#include <string>

#include "engine/nn/layer.h"

namespace tb {

class BatchNormAct : public Layer {
 public:
  explicit BatchNormAct(std::string name, bool relu = true, float momentum = 0.1f,
                        float eps = 1e-5f);

  std::string kind() const override { return relu_ ? "batchnorm_relu" : "batchnorm_act"; }
  Shape setup(const Shape& in, ParamRegistry& reg) override;
  Tensor forward(Context& ctx, const Tensor& x) override { return forward_residual(ctx, x, {}); }
  Tensor backward(Context& ctx, const Tensor& dy, bool need_dx) override {
    return backward_residual(ctx, dy, need_dx, nullptr);
  }

  // y = act(BN(x) + residual); an undefined residual means none.
  Tensor forward_residual(Context& ctx, const Tensor& x, const Tensor& residual);
  // Returns dx (undefined unless need_dx); when dresidual is given it receives
  // dL/d(residual), a buffer owned by this layer (valid until its next backward).
  Tensor backward_residual(Context& ctx, const Tensor& dy, bool need_dx, Tensor* dresidual);

  bool relu() const { return relu_; }

 private:
  bool relu_;
  float momentum_, eps_;
  int64_t C_ = 0;
  Tensor gamma_, beta_, dgamma_, dbeta_;  // views into the parameter/gradient blocks
  Tensor running_mean_, running_var_;     // views into the buffer block
  Tensor x_;                              // input kept for backward
  bool forward_was_training_ = true;
  Tensor y_, dx_, dres_, save_mean_, save_invstd_;  // reused work buffers
  Tensor ones_, zeros_, eval_invstd_;               // eval-mode backward helpers
};

}  // namespace tb
