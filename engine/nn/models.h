// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/nn/model.h"

namespace tb {

struct ModelOptions {
  bool conv_bias_before_bn = true;  // trick 10: false drops the bias BN cancels anyway
  // trick 22: > 0 puts a PadChannels layer in front of the image models, so the
  // input's channels (1 or 3) become a multiple of this (conv widths already are;
  // the class count is never padded, that would change the softmax).
  int64_t pad_channels_to = 0;
  // trick 11: BN+ReLU(+residual add) and Linear+ReLU/GELU as fused layers, with
  // the same parameter names, shapes, order and init as the unfused ones.
  bool fuse_pointwise = false;
};

// Models by name: fmnist-cnn, resnet18-cifar, resnet9, mlp. Input channels and
// size follow the data set (input = {C, H, W}). Throws tb::Error for an unknown
// name or an input the model cannot take.
std::unique_ptr<Model> make_model(const std::string& name, const Shape& input, int64_t classes,
                                  const ModelOptions& options = {});
std::vector<std::string> model_names();

}  // namespace tb
