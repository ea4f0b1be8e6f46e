// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Parameter-free spatial layers: max/average pooling, global average pooling
// and the flatten that joins the convolutional trunk to a Linear head.
#include <cstdint>
#include <string>

#include "engine/nn/layer.h"
#include "engine/ops/pooling/pooling.h"

namespace tb {

// Max pooling: (N, C, H, W) -> (N, C, Ho, Wo); padded cells never win. Keeps the
// argmax (i32, index into the H*W plane) for backward.
class MaxPool2d : public Layer {
 public:
  MaxPool2d(std::string name, int64_t kernel, int64_t stride, int64_t pad = 0);
  std::string kind() const override { return "maxpool2d"; }
  Shape setup(const Shape& in, ParamRegistry& reg) override;
  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy, bool need_dx) override;
  void release_saved() override {
    argmax_ = {};
    have_forward_ = false;
  }
  int64_t kernel() const { return kernel_; }

 private:
  int64_t kernel_, stride_, pad_;
  PoolGeometry g_{};  // of the last training forward
  bool have_forward_ = false;
  Tensor argmax_;  // of the last training forward
};

// Average pooling, padded cells counted as zeros (count_include_pad=true).
class AvgPool2d : public Layer {
 public:
  AvgPool2d(std::string name, int64_t kernel, int64_t stride, int64_t pad = 0);
  std::string kind() const override { return "avgpool2d"; }
  Shape setup(const Shape& in, ParamRegistry& reg) override;
  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy, bool need_dx) override;
  int64_t kernel() const { return kernel_; }

 private:
  int64_t kernel_, stride_, pad_;
  PoolGeometry g_{};
  bool have_forward_ = false;
};

// Mean over H*W: (N, C, H, W) -> (N, C).
class GlobalAvgPool : public Layer {
 public:
  explicit GlobalAvgPool(std::string name);
  std::string kind() const override { return "global_avgpool"; }
  Shape setup(const Shape& in, ParamRegistry& reg) override;
  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy, bool need_dx) override;

 private:
  Shape in_shape_;
  Layout in_layout_ = Layout::NCHW;
};

// (N, d1, d2, ...) -> (N, d1*d2*...): features in logical (C, H, W) order.
// NCHW or rank != 4: a view of the same memory, no copy; dx is the view of dy
// back in the input's shape.
// NHWC: the one place channels-last meets a dense layer. The input is copied
// into an NCHW buffer (be.copy, an explicit conversion) so the classifier sees
// the same features in the same order as in an NCHW model (PyTorch's flatten of
// a channels_last tensor copies too); backward copies dy back to NHWC. The
// CPU's blocked activations (nChw16c) are converted the same way.
// Models whose head is global pooling never get here.
class Flatten : public Layer {
 public:
  explicit Flatten(std::string name);
  std::string kind() const override { return "flatten"; }
  Shape setup(const Shape& in, ParamRegistry& reg) override;
  Tensor forward(Context& ctx, const Tensor& x) override;
  Tensor backward(Context& ctx, const Tensor& dy, bool need_dx) override;

 private:
  Shape in_shape_;
  Layout in_layout_ = Layout::NCHW;
};

}  // namespace tb
