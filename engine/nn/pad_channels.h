// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Trick 22 (pad_channels_to): zero channels appended to the input image so the
// first convolution's C_in is a multiple of `multiple` (1 -> 8 for
// Fashion-MNIST, 3 -> 8 for CIFAR), the channel counts Tensor Core kernels want.
// The zero channels add nothing to any output (their weights see only zeros and
// receive zero gradient), so the model computes the same function.
//
//   forward:  x (N, C, H, W) -> y (N, Cp, H, W), Cp = round_up(C, multiple)
//             y[:, :C] = x, y[:, C:] = 0                    (layout of x kept)
//   backward: dx = dy[:, :C]                                (only when asked)
#include <cstdint>
#include <string>

#include "engine/nn/layer.h"

namespace tb {

class PadChannels : public Layer {
 public:
  PadChannels(std::string name, int64_t multiple);
  std::string kind() const override { return "pad_channels"; }
  Shape setup(const Shape& in, ParamRegistry& reg) override;
  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy, bool need_dx) override;

  int64_t in_channels() const { return in_channels_; }    // after setup()
  int64_t out_channels() const { return out_channels_; }  // after setup()

 private:
  int64_t multiple_;
  int64_t in_channels_ = 0, out_channels_ = 0;
  Shape in_shape_;
  Layout in_layout_ = Layout::NCHW;
};

}  // namespace tb
