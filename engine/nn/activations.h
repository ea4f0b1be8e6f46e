// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Parameter-free activations, any input shape (output shape = input shape).
//   ReLU: y = max(x, 0); backward keeps y (dx = dy·[y > 0]).
//   GELU: exact y = x·Φ(x); backward keeps x.
#include <string>

#include "engine/nn/layer.h"

namespace tb {

class ReLU : public Layer {
 public:
  explicit ReLU(std::string name) : Layer(std::move(name)) {}
  std::string kind() const override { return "relu"; }
  Shape setup(const Shape& in, ParamRegistry&) override { return in; }
  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy, bool need_dx) override;
  void release_saved() override { y_ = {}; }

 private:
  Tensor y_;  // the output: backward's mask
};

class GELU : public Layer {
 public:
  explicit GELU(std::string name) : Layer(std::move(name)) {}
  std::string kind() const override { return "gelu"; }
  Shape setup(const Shape& in, ParamRegistry&) override { return in; }
  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy, bool need_dx) override;
  void release_saved() override { x_ = {}; }

 private:
  Tensor x_;
};

}  // namespace tb
