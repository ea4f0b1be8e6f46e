// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// 2-d batch normalization: per channel over (N, H, W), PyTorch semantics
// (biased batch variance for normalising, unbiased for running_var), with an
// optional epilogue (fuse_pointwise): y = act(BN(x) [+ residual]), act = ReLU
// or none, through the batch-norm ops' epilogue argument (one sweep for apply +
// add + ReLU, the ReLU mask folded into the backward).
//   x, residual, y (N, C, H, W);  weight = γ (C, ones), bias = β (C, zeros),
//   neither decayed; buffers running_mean (C, zeros), running_var (C, ones).
// The same names, order and initial values with or without an epilogue, so a
// model built fused or not from the same seed has the same weights.
// ctx.training picks batch statistics (and updates the running ones) or the
// running statistics; backward follows whichever mode the last forward used.
// With ctx.sync_batchnorm (ddp, sync_batchnorm) the batch statistics and the
// backward's two channel sums are those of every rank's batch together, so
// W ranks normalise exactly as one process with their concatenated batch;
// that path has no epilogue (the run plan does not fuse under sync_batchnorm).
#include <string>

#include "engine/nn/layer.h"
#include "engine/ops/epilogue.h"

namespace tb {

class BatchNorm2d : public Layer {
 public:
  static constexpr float kMomentum = 0.1f, kEps = 1e-5f;  // PyTorch's defaults

  explicit BatchNorm2d(std::string name, float momentum = kMomentum, float eps = kEps,
                       Activation act = Activation::None);
  // The fused layer of fuse_pointwise: BN then `act` (ReLU) in one op.
  BatchNorm2d(std::string name, Activation act) : BatchNorm2d(std::move(name), kMomentum, kEps, act) {}

  // "batchnorm_relu" with the ReLU epilogue (the fused layer), else "batchnorm2d".
  std::string kind() const override {
    return act_ == Activation::ReLU ? "batchnorm_relu" : "batchnorm2d";
  }
  Shape setup(const Shape& in, ParamRegistry& reg) override;
  Tensor forward(Context& ctx, const Tensor& x) override { return forward_residual(ctx, x, {}); }
  Tensor backward(Context& ctx, const Tensor& dy, bool need_dx) override {
    return backward_residual(ctx, dy, need_dx, nullptr);
  }
  void release_saved() override { x_ = {}, y_ = {}; }

  // y = act(BN(x) + residual); an undefined residual means none.
  Tensor forward_residual(Context& ctx, const Tensor& x, const Tensor& residual);
  // Returns dx (undefined unless need_dx); when dresidual is given it receives
  // dL/d(residual), a transient buffer (layer.h).
  Tensor backward_residual(Context& ctx, const Tensor& dy, bool need_dx, Tensor* dresidual);

  // A residual block's fused tail (trick 11) adds the shortcut in its epilogue.
  void mark_residual_tail() { residual_tail_ = true; }
  bool residual_tail() const { return residual_tail_; }
  float momentum() const { return momentum_; }
  float eps() const { return eps_; }
  Activation act() const { return act_; }
  int64_t channels() const { return C_; }
  const Tensor& running_mean() const { return running_mean_; }
  const Tensor& running_var() const { return running_var_; }

 private:
  Tensor backward_plain(Context& ctx, const Tensor& dy, bool need_dx);
  Tensor backward_epilogue(Context& ctx, const Tensor& dy, bool need_dx, Tensor* dresidual);
  void ensure_eval_helpers(Context& ctx);
  Tensor forward_synced(Context& ctx, const Tensor& x, Tensor& y);
  Tensor backward_synced(Context& ctx, const Tensor& dy, bool need_dx);

  float momentum_, eps_;
  Activation act_;
  bool residual_tail_ = false;
  int64_t C_ = 0;
  Tensor gamma_, beta_, dgamma_, dbeta_;  // views into the parameter/gradient blocks
  Tensor running_mean_, running_var_;     // views into the buffer block
  Tensor x_;                              // input kept for backward
  Tensor y_;                              // output kept for the epilogue's mask
  bool forward_was_training_ = true;
  bool forward_had_epilogue_ = false;
  bool forward_had_residual_ = false;  // its y is not β's affine map of x alone
  Tensor save_mean_, save_invstd_;  // reused work buffers
  Tensor ones_, zeros_, eval_invstd_;        // eval-mode backward helpers
  // sync_batchnorm: the global mean and biased variance (C), the global
  // element count, and the work tensors of the synced backward
  Tensor sync_mean_, sync_var_, sync_a_, sync_b_;
  double sync_count_ = 0;
};

}  // namespace tb
