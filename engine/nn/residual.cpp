// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/nn/residual.h"

#include "engine/core/error.h"
#include "engine/nn/activations.h"
#include "engine/nn/batchnorm2d.h"
#include "engine/nn/conv2d.h"
#include "engine/ops/pointwise/pointwise.h"

namespace tb {

ResidualBlock::ResidualBlock(std::string name, LayerList main, LayerList shortcut, bool relu_after,
                             bool fuse_tail)
    : Layer(std::move(name)),
      main_(std::move(main)),
      shortcut_(std::move(shortcut)),
      relu_after_(relu_after) {
  if (fuse_tail) {
    tail_ = main_.empty() ? nullptr : dynamic_cast<BatchNorm2d*>(main_.back().get());
    const Activation act = relu_after ? Activation::ReLU : Activation::None;
    TB_CHECK(tail_ && tail_->act() == act, "residual block ", this->name(),
             ": a fused tail needs a BatchNorm2d as the main path's last layer, with the "
             "epilogue activation ", activation_name(act));
    tail_->mark_residual_tail();
  }
}

Shape ResidualBlock::setup(const Shape& in, ParamRegistry& reg) {
  reg.push_prefix(name() + ".");
  Shape a = in, s = in;
  for (auto& l : main_) a = l->configure(a, reg);
  for (auto& l : shortcut_) s = l->configure(s, reg);
  reg.pop_prefix();
  TB_CHECK(a == s, "residual block ", name(), ": main path gives ", shape_str(a),
           " but the shortcut gives ", shape_str(s));
  return a;
}

Tensor ResidualBlock::forward(Context& ctx, const Tensor& x) {
  if (tail_) {  // s first: the tail adds it
    Tensor s = x, a = x;
    for (auto& l : shortcut_) s = forward_layer(ctx, *l, s);
    for (size_t i = 0; i + 1 < main_.size(); ++i) a = forward_layer(ctx, *main_[i], a);
    LayerScope scope(ctx, *tail_, LayerPass::Forward, a.dim(0), true);
    return tail_->forward_residual(ctx, a, s);
  }
  Tensor a = x, s = x;
  for (auto& l : main_) a = forward_layer(ctx, *l, a);
  for (auto& l : shortcut_) s = forward_layer(ctx, *l, s);
  Tensor sum = transient_buffer(ctx, a.shape(), a.dtype(), a.layout());
  pointwise::add(ctx.backend, a, s, sum);
  // In place: the backward needs only y.
  if (relu_after_) pointwise::relu_forward(ctx.backend, sum, sum);
  sum_ = ctx.training && relu_after_ ? sum : Tensor{};
  return sum;
}

Tensor ResidualBlock::backward(Context& ctx, const Tensor& dy, bool need_dx) {
  if (tail_) {
    Tensor dres;  // masked dy, the gradient of the shortcut's output
    Tensor g_main;
    {
      const bool tail_dx = need_dx || main_.size() > 1;
      LayerScope scope(ctx, *tail_, LayerPass::Backward, dy.dim(0), tail_dx);
      g_main = tail_->backward_residual(ctx, dy, tail_dx, &dres);
      tail_->release_saved();
    }
    for (size_t i = main_.size() - 1; i-- > 0;)
      g_main = backward_layer(ctx, *main_[i], g_main, need_dx || i > 0);
    Tensor g_short = dres;
    for (size_t i = shortcut_.size(); i-- > 0;)
      g_short = backward_layer(ctx, *shortcut_[i], g_short, need_dx || i > 0);
    if (!need_dx) return Tensor{};
    Tensor dx = transient_buffer(ctx, g_main.shape(), g_main.dtype(), g_main.layout());
    pointwise::add(ctx.backend, g_main, g_short, dx);
    return dx;
  }
  TB_CHECK(!relu_after_ || sum_.defined(), "residual block ", name(),
           ": backward without a training forward");
  Tensor dz = dy;
  if (relu_after_) {
    dz = transient_buffer(ctx, dy.shape(), dy.dtype(), dy.layout());
    pointwise::relu_backward(ctx.backend, sum_, dy, dz);
  }
  Tensor g_main = dz;
  for (size_t i = main_.size(); i-- > 0;)
    g_main = backward_layer(ctx, *main_[i], g_main, need_dx || i > 0);
  Tensor g_short = dz;
  for (size_t i = shortcut_.size(); i-- > 0;)
    g_short = backward_layer(ctx, *shortcut_[i], g_short, need_dx || i > 0);
  if (!need_dx) return Tensor{};
  // dx = g_main + g_short, into a buffer of its own (g_short may be dz itself).
  Tensor dx = transient_buffer(ctx, g_main.shape(), g_main.dtype(), g_main.layout());
  pointwise::add(ctx.backend, g_main, g_short, dx);
  return dx;
}

void ResidualBlock::release_saved() {
  sum_ = {};
  for (auto& l : main_) l->release_saved();
  for (auto& l : shortcut_) l->release_saved();
}

std::vector<const Layer*> ResidualBlock::children() const {
  std::vector<const Layer*> out;
  for (const auto& l : main_) out.push_back(l.get());
  for (const auto& l : shortcut_) out.push_back(l.get());
  return out;
}

std::unique_ptr<Layer> make_basic_block(const std::string& name, int64_t in_channels,
                                        int64_t out_channels, int64_t stride, bool conv_bias,
                                        bool fuse_pointwise) {
  LayerList main, shortcut;
  main.push_back(std::make_unique<Conv2d>("conv1", out_channels, 3, stride, 1, conv_bias));
  if (fuse_pointwise) {
    main.push_back(std::make_unique<BatchNorm2d>("bn1", Activation::ReLU));
  } else {
    main.push_back(std::make_unique<BatchNorm2d>("bn1"));
    main.push_back(std::make_unique<ReLU>("relu1"));
  }
  main.push_back(std::make_unique<Conv2d>("conv2", out_channels, 3, 1, 1, conv_bias));
  if (fuse_pointwise)
    main.push_back(std::make_unique<BatchNorm2d>("bn2", Activation::ReLU));
  else
    main.push_back(std::make_unique<BatchNorm2d>("bn2"));
  if (stride != 1 || in_channels != out_channels) {
    shortcut.push_back(std::make_unique<Conv2d>("shortcut.conv", out_channels, 1, stride, 0, conv_bias));
    shortcut.push_back(std::make_unique<BatchNorm2d>("shortcut.bn"));
  }
  return std::make_unique<ResidualBlock>(name, std::move(main), std::move(shortcut), true,
                                         fuse_pointwise);
}

}  // namespace tb
