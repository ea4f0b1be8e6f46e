// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/nn/models.h"

#include "engine/core/error.h"
#include "engine/nn/activations.h"
#include "engine/nn/batchnorm2d.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/linear.h"
#include "engine/nn/pad_channels.h"
#include "engine/nn/pooling.h"
#include "engine/nn/residual.h"

namespace tb {

namespace {

// conv3x3-BN-ReLU, the unit every model here is made of; BN+ReLU one fused
// layer under fuse_pointwise (same parameters).
void conv_bn_relu(LayerList& out, const std::string& name, int64_t channels, bool bias,
                  bool fuse = false) {
  out.push_back(std::make_unique<Conv2d>(name + ".conv", channels, 3, 1, 1, bias));
  if (fuse) {
    out.push_back(std::make_unique<BatchNorm2d>(name + ".bn", Activation::ReLU));
    return;
  }
  out.push_back(std::make_unique<BatchNorm2d>(name + ".bn"));
  out.push_back(std::make_unique<ReLU>(name + ".relu"));
}

// Trick 22: zero channels up to a multiple of pad_channels_to, when the input's
// channel count is not one already (then there is nothing to pad).
void maybe_pad_input(LayerList& out, const Shape& in, const ModelOptions& o) {
  if (o.pad_channels_to > 0 && in[0] % o.pad_channels_to != 0)
    out.push_back(std::make_unique<PadChannels>("pad_channels", o.pad_channels_to));
}

// Linear followed by an activation; one fused layer under fuse_pointwise.
void linear_act(LayerList& out, const std::string& name, int64_t features, Activation act,
                bool fuse) {
  if (fuse) {
    out.push_back(std::make_unique<Linear>(name, features, act));
    return;
  }
  out.push_back(std::make_unique<Linear>(name, features));
  if (act == Activation::ReLU)
    out.push_back(std::make_unique<ReLU>(name + ".relu"));
  else
    out.push_back(std::make_unique<GELU>(name + ".gelu"));
}

void add_all(Model& m, LayerList layers) {
  for (auto& l : layers) m.add(std::move(l));
}

// Two conv blocks and a small classifier: 28x28 -> 14x14 -> 7x7 -> 128 -> classes.
std::unique_ptr<Model> fmnist_cnn(const Shape& in, int64_t classes, const ModelOptions& o) {
  auto m = std::make_unique<Model>("fmnist-cnn", in, classes);
  LayerList l;
  maybe_pad_input(l, in, o);
  conv_bn_relu(l, "block1", 32, o.conv_bias_before_bn, o.fuse_pointwise);
  l.push_back(std::make_unique<MaxPool2d>("block1.pool", 2, 2));
  conv_bn_relu(l, "block2", 64, o.conv_bias_before_bn, o.fuse_pointwise);
  l.push_back(std::make_unique<MaxPool2d>("block2.pool", 2, 2));
  l.push_back(std::make_unique<Flatten>("flatten"));
  linear_act(l, "fc1", 128, Activation::ReLU, o.fuse_pointwise);
  l.push_back(std::make_unique<Linear>("fc2", classes));
  add_all(*m, std::move(l));
  return m;
}

// ResNet-18 as usually adapted to 32x32 inputs: a 3x3 stem without max-pool,
// four stages of two basic blocks (64, 128, 256, 512 channels), global pooling.
std::unique_ptr<Model> resnet18_cifar(const Shape& in, int64_t classes, const ModelOptions& o) {
  auto m = std::make_unique<Model>("resnet18-cifar", in, classes);
  LayerList l;
  maybe_pad_input(l, in, o);
  conv_bn_relu(l, "stem", 64, o.conv_bias_before_bn, o.fuse_pointwise);
  int64_t channels = 64;
  const int64_t widths[4] = {64, 128, 256, 512};
  for (int stage = 0; stage < 4; ++stage) {
    for (int block = 0; block < 2; ++block) {
      const int64_t stride = (stage > 0 && block == 0) ? 2 : 1;
      const std::string name = "layer" + std::to_string(stage + 1) + "." + std::to_string(block);
      l.push_back(make_basic_block(name, channels, widths[stage], stride, o.conv_bias_before_bn,
                                   o.fuse_pointwise));
      channels = widths[stage];
    }
  }
  l.push_back(std::make_unique<GlobalAvgPool>("pool"));
  l.push_back(std::make_unique<Linear>("fc", classes));
  add_all(*m, std::move(l));
  return m;
}

// The small fast CIFAR network (ResNet-9 of the DAWNBench entries): prep 64,
// 128 + pool + residual(128, 128), 256 + pool, 512 + pool + residual(512, 512),
// global pooling, classifier.
std::unique_ptr<Model> resnet9(const Shape& in, int64_t classes, const ModelOptions& o) {
  auto m = std::make_unique<Model>("resnet9", in, classes);
  const bool bias = o.conv_bias_before_bn, fuse = o.fuse_pointwise;
  LayerList l;
  maybe_pad_input(l, in, o);
  conv_bn_relu(l, "prep", 64, bias, fuse);
  auto stage = [&](const std::string& name, int64_t channels, bool residual) {
    conv_bn_relu(l, name, channels, bias, fuse);
    l.push_back(std::make_unique<MaxPool2d>(name + ".pool", 2, 2));
    if (residual) {
      LayerList inner;
      // The add follows res2's ReLU here, so only BN+ReLU fuses.
      conv_bn_relu(inner, "res1", channels, bias, fuse);
      conv_bn_relu(inner, "res2", channels, bias, fuse);
      l.push_back(std::make_unique<ResidualBlock>(name + ".residual", std::move(inner),
                                                  LayerList{}, false));
    }
  };
  stage("layer1", 128, true);
  stage("layer2", 256, false);
  stage("layer3", 512, true);
  l.push_back(std::make_unique<GlobalAvgPool>("pool"));
  l.push_back(std::make_unique<Linear>("fc", classes));
  add_all(*m, std::move(l));
  return m;
}

// A multilayer perceptron on the flattened image, with GELU activations.
std::unique_ptr<Model> mlp(const Shape& in, int64_t classes, const ModelOptions& o) {
  auto m = std::make_unique<Model>("mlp", in, classes);
  LayerList l;
  if (in.size() > 1) l.push_back(std::make_unique<Flatten>("flatten"));
  linear_act(l, "fc1", 256, Activation::GELU, o.fuse_pointwise);
  linear_act(l, "fc2", 128, Activation::GELU, o.fuse_pointwise);
  l.push_back(std::make_unique<Linear>("fc3", classes));
  add_all(*m, std::move(l));
  return m;
}

}  // namespace

const std::vector<ModelDef>& model_registry() {
  static const std::vector<ModelDef> registry = {
      {"fmnist-cnn", "Small CNN for Fashion-MNIST", {1, 28, 28}, 4, fmnist_cnn},
      {"resnet18-cifar", "ResNet-18 (CIFAR variant)", {3, 32, 32}, 8, resnet18_cifar},
      {"resnet9", "ResNet-9", {3, 32, 32}, 8, resnet9},
      {"mlp", "Multi-layer perceptron", {1, 28, 28}, 0, mlp},
  };
  return registry;
}

const ModelDef* find_model(const std::string& name) {
  for (const ModelDef& m : model_registry())
    if (m.name == name) return &m;
  return nullptr;
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const ModelDef& m : model_registry()) names.push_back(m.name);
  return names;
}

std::unique_ptr<Model> make_model(const std::string& name, const Shape& input, int64_t classes,
                                  const ModelOptions& options) {
  TB_CHECK(classes >= 2, "model ", name, ": needs at least 2 classes, got ", classes);
  const ModelDef* def = find_model(name);
  if (!def) {
    const std::vector<std::string> names = model_names();
    std::string expected;
    for (size_t i = 0; i < names.size(); ++i)
      expected += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
    TB_FAIL("unknown model '", name, "' (expected ", expected, ")");
  }
  if (def->min_image_size > 0) {
    TB_CHECK(input.size() == 3, "model ", name, " needs image input {C, H, W}, got ", shape_str(input));
    const int64_t H = input[1], W = input[2], n = def->min_image_size;
    TB_CHECK(H >= n && W >= n, "model ", name, " needs images of at least ", n, "x", n, ", got ", H,
             "x", W);
  }
  return def->build(input, classes, options);
}

}  // namespace tb
