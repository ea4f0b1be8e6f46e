// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Linear fused with its activation (trick 11): y = act(x wᵀ + b), act = ReLU
// or exact GELU, through Backend::linear_act_* (bias and activation in the
// GEMM's epilogue or one sweep after it).
//   x (N, K)   weight (M, K)   bias (M)   y (N, M)
// Parameters are Linear's, under the same names, shapes, order and init, so
// the same seed gives the same weights fused or not. Takes Linear's name ("fc1").
#include <cstdint>
#include <string>

#include "engine/nn/layer.h"

namespace tb {

class LinearAct : public Layer {
 public:
  LinearAct(std::string name, int64_t out_features, Backend::Activation act, bool bias = true);

  std::string kind() const override {
    return act_ == Backend::Activation::ReLU ? "linear_relu" : "linear_gelu";
  }
  Shape setup(const Shape& in, ParamRegistry& reg) override;
  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy, bool need_dx) override;
  bool has_bias() const { return has_bias_; }

 private:
  int64_t in_features_ = 0, out_features_;
  Backend::Activation act_;
  bool has_bias_;
  Tensor weight_, weight_grad_, bias_, bias_grad_;
  Tensor x_;                    // input kept for backward (training only)
  Tensor y_, pre_, dpre_, dx_;  // reused buffers; pre_ only for GELU
};

}  // namespace tb
