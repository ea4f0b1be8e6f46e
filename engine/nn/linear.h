// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <cstdint>
#include <string>

#include "engine/nn/amp_operands.h"
#include "engine/nn/layer.h"
#include "engine/ops/epilogue.h"

namespace tb {

// Fully connected layer (PyTorch's Linear): x (N, K) -> y (N, M) = act(x w^T + b),
// act none, or ReLU / exact GELU as the linear ops' epilogue (fuse_pointwise:
// bias and activation in the GEMM's epilogue or one sweep after it).
//   weight (M, K): Kaiming-uniform, fan_in = K; bias (M): U(±1/sqrt(K)), no weight decay.
// The same names, shapes, order and init with or without an activation, so a
// model built fused or not from the same seed has the same weights.
// K is taken from the input shape in setup(); rank-4 inputs need a Flatten first.
// Under amp the plain layer multiplies f16/bf16 copies of x and the weight;
// with an activation it stays f32 (no backend fuses an activation into the
// low-precision GEMM).
class Linear : public Layer {
 public:
  Linear(std::string name, int64_t out_features, bool bias = true);
  // The fused layer of fuse_pointwise: Linear then `act` (ReLU or GELU) in one op.
  Linear(std::string name, int64_t out_features, Activation act, bool bias = true);

  // "linear_relu" / "linear_gelu" with an activation (the fused layer), else "linear".
  std::string kind() const override {
    switch (act_) {
      case Activation::ReLU: return "linear_relu";
      case Activation::GELU: return "linear_gelu";
      case Activation::None: break;
    }
    return "linear";
  }
  Shape setup(const Shape& in, ParamRegistry& reg) override;
  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy, bool need_dx) override;
  void release_saved() override {
    x_ = {}, y_ = {}, pre_ = {};
    lp_.release();
  }

  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }
  bool has_bias() const { return has_bias_; }
  Activation act() const { return act_; }

 private:
  int64_t in_features_ = 0, out_features_;
  bool has_bias_;
  Activation act_ = Activation::None;
  Tensor weight_, weight_grad_, bias_, bias_grad_;
  Tensor x_;    // input kept for backward (training without AMP)
  Tensor y_;    // output: the activation's mask (with an activation only)
  Tensor pre_;  // the epilogue's pre-activation, for GELU
  AmpOperands lp_;  // under AMP: the f16/bf16 x (kept for backward instead) and weight
};

}  // namespace tb
