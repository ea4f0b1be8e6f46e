// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <cstdint>
#include <string>

#include "engine/nn/layer.h"

namespace tb {

// Fully connected layer (PyTorch's Linear): x (N, K) -> y (N, M) = x w^T + b.
//   weight (M, K): Kaiming-uniform, fan_in = K; bias (M): U(±1/sqrt(K)), no weight decay.
// K is taken from the input shape in setup(); rank-4 inputs need a Flatten first.
class Linear : public Layer {
 public:
  Linear(std::string name, int64_t out_features, bool bias = true);

  std::string kind() const override { return "linear"; }
  Shape setup(const Shape& in, ParamRegistry& reg) override;
  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy, bool need_dx) override;

  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }
  bool has_bias() const { return has_bias_; }

 private:
  int64_t in_features_ = 0, out_features_;
  bool has_bias_;
  Tensor weight_, weight_grad_, bias_, bias_grad_;
  Tensor x_;       // input kept for backward (training only)
  Tensor y_, dx_;  // reused output buffers
  // Under AMP: x and the weight rounded to f16/bf16 (x kept for backward; the
  // weight copy refreshed from the f32 master at every forward).
  Tensor x_lp_, weight_lp_;
};

}  // namespace tb
