// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <cstdint>
#include <string>

#include "engine/nn/amp_operands.h"
#include "engine/nn/layer.h"
#include "engine/ops/conv/conv.h"

namespace tb {

// 2-D convolution, square kernel, zero padding, optional bias (PyTorch's Conv2d).
//   x (N, Cin, H, W) -> y (N, Cout, Ho, Wo), Ho = (H + 2*pad - kernel)/stride + 1
//   weight (Cout, Cin, kernel, kernel): Kaiming-uniform, fan_in = Cin*kernel*kernel
//   bias (Cout): U(-1/sqrt(fan_in), 1/sqrt(fan_in)), no weight decay
// Cin is taken from the input shape in setup().
class Conv2d : public Layer {
 public:
  Conv2d(std::string name, int64_t out_channels, int64_t kernel, int64_t stride = 1,
         int64_t pad = 0, bool bias = true);

  std::string kind() const override { return "conv2d"; }
  Shape setup(const Shape& in, ParamRegistry& reg) override;
  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy, bool need_dx) override;
  void release_saved() override {
    x_ = {};
    lp_.release();
  }

  int64_t in_channels() const { return in_channels_; }
  int64_t out_channels() const { return out_channels_; }
  int64_t kernel() const { return kernel_; }
  int64_t stride() const { return stride_; }
  int64_t pad() const { return pad_; }
  bool has_bias() const { return has_bias_; }

 private:
  ConvGeometry geometry(const Tensor& x) const;

  int64_t in_channels_ = 0, out_channels_, kernel_, stride_, pad_;
  bool has_bias_;
  Tensor weight_, weight_grad_, bias_, bias_grad_;
  Tensor x_;       // input kept for backward (training without AMP)
  AmpOperands lp_;  // under AMP: the f16/bf16 x (kept for backward instead) and weight
};

}  // namespace tb
