// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <functional>
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

using ModelBuilder =
    std::function<std::unique_ptr<Model>(const Shape& input, int64_t classes, const ModelOptions&)>;

// A model, registered once (model_registry): the settings table's `model`
// choices and their labels, `config --schema`'s "models" (the GUI, bench/)
// and make_model all read this. Adding a model: its builder and one row.
struct ModelDef {
  std::string name;   // the `model` setting's value
  std::string label;  // what front ends show
  Shape input_shape;  // the data it is made for ({C, H, W}; bench/ trains it on this)
  // Image models: the smallest height and width they take. 0: any input
  // shape (the model flattens it).
  int64_t min_image_size = 0;
  ModelBuilder build;
};

const std::vector<ModelDef>& model_registry();
const ModelDef* find_model(const std::string& name);  // nullptr when unknown
std::vector<std::string> model_names();               // in registry order

// The registered model `name`. Input channels and size follow the data set
// (input = {C, H, W}). Throws tb::Error for an unknown name or an input the
// model cannot take.
std::unique_ptr<Model> make_model(const std::string& name, const Shape& input, int64_t classes,
                                  const ModelOptions& options = {});

}  // namespace tb
