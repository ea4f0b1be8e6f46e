// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// 2-d batch normalization: per channel over (N, H, W), PyTorch semantics
// (biased batch variance for normalising, unbiased for running_var).
//   x, y (N, C, H, W);  weight = γ (C, ones), bias = β (C, zeros), neither decayed;
//   buffers running_mean (C, zeros), running_var (C, ones).
// ctx.training picks batch statistics (and updates the running ones) or the
// running statistics; backward follows whichever mode the last forward used.
// With ctx.sync_batchnorm (ddp, sync_batchnorm) the batch statistics and the
// backward's two channel sums are those of every rank's batch together, so
// W ranks normalise exactly as one process with their concatenated batch.
#include <string>

#include "engine/nn/layer.h"

namespace tb {

// Declares a batch norm's parameters and buffers under `name`: weight γ (C,
// ones) and bias β (C, zeros), neither decayed, then running_mean (C, zeros)
// and running_var (C, ones). BatchNorm2d and the fused BatchNormAct share it,
// so fused or not, a model has the same names, order and initial values.
void register_batchnorm(ParamRegistry& reg, const std::string& name, int64_t C, Tensor* gamma,
                        Tensor* dgamma, Tensor* beta, Tensor* dbeta, Tensor* running_mean,
                        Tensor* running_var);

class BatchNorm2d : public Layer {
 public:
  explicit BatchNorm2d(std::string name, float momentum = 0.1f, float eps = 1e-5f);

  std::string kind() const override { return "batchnorm2d"; }
  Shape setup(const Shape& in, ParamRegistry& reg) override;
  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy, bool need_dx) override;

  float momentum() const { return momentum_; }
  float eps() const { return eps_; }
  int64_t channels() const { return C_; }
  const Tensor& running_mean() const { return running_mean_; }
  const Tensor& running_var() const { return running_var_; }

 private:
  Tensor forward_synced(Context& ctx, const Tensor& x, Tensor& y);
  Tensor backward_synced(Context& ctx, const Tensor& dy, bool need_dx);

  float momentum_, eps_;
  int64_t C_ = 0;
  Tensor gamma_, beta_, dgamma_, dbeta_;  // views into the parameter/gradient blocks
  Tensor running_mean_, running_var_;     // views into the buffer block
  Tensor x_;                              // input kept for backward
  bool forward_was_training_ = true;
  Tensor y_, dx_, save_mean_, save_invstd_;  // reused work buffers
  Tensor ones_, zeros_, eval_invstd_;        // eval-mode backward helpers
  // sync_batchnorm: the global mean and biased variance (C), the global
  // element count, and the work tensors of the synced backward
  Tensor sync_mean_, sync_var_, sync_a_, sync_b_, sync_term_;
  double sync_count_ = 0;
};

}  // namespace tb
