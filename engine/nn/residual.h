// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <memory>
#include <vector>

#include "engine/nn/layer.h"

namespace tb {

using LayerList = std::vector<std::unique_ptr<Layer>>;

// y = act(main(x) + shortcut(x)), where an empty shortcut is the identity and
// act is ReLU when relu_after is set (ResNet's basic block) or nothing (ResNet-9's
// residual, whose main path already ends in ReLU).
//   forward:  a = main(x); s = shortcut(x) or x; z = a + s; y = relu(z) or z
//   backward: dz = dy·[z>0]; dx = main'(dz) + shortcut'(dz)
// fuse_tail (trick 11): main's last layer is a BatchNorm2d whose epilogue
// activation is ReLU when relu_after (none otherwise) and that computes
// act(BN(a) + s) itself, so the shortcut runs first and the add and ReLU cost
// no sweeps of their own.
class BatchNorm2d;
class ResidualBlock final : public Layer {
 public:
  ResidualBlock(std::string name, LayerList main, LayerList shortcut, bool relu_after,
                bool fuse_tail = false);
  std::string kind() const override { return "residual"; }
  Shape setup(const Shape& in, ParamRegistry& reg) override;
  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy, bool need_dx) override;
  std::vector<const Layer*> children() const override;  // main path, then shortcut
  void release_saved() override;
  bool relu_after() const { return relu_after_; }
  bool fused_tail() const { return tail_ != nullptr; }
  bool has_shortcut() const { return !shortcut_.empty(); }

 private:
  LayerList main_, shortcut_;
  bool relu_after_;
  BatchNorm2d* tail_ = nullptr;  // main_.back() when fused
  Tensor sum_;  // z = a + s (rectified in place): backward's mask
};

// The usual CIFAR ResNet basic block: conv3x3(stride)-BN-ReLU-conv3x3-BN, plus a
// 1x1 conv-BN shortcut when the shape changes, then ReLU.
// fuse_pointwise: bn1+ReLU and bn2+add+ReLU as BatchNorm2d with the ReLU
// epilogue (same parameters).
std::unique_ptr<Layer> make_basic_block(const std::string& name, int64_t in_channels,
                                        int64_t out_channels, int64_t stride, bool conv_bias,
                                        bool fuse_pointwise = false);

}  // namespace tb
