// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The low-precision operands of a layer that computes in f16/bf16 under
// mixed precision (Conv2d, Linear): what it casts, and where the casts stop.
//
//   forward   x as the op reads it: the layer's input itself when it is
//             already lp (low-precision activations), else cast once into
//             cast_x (the model's f32 batch at the first such layer; every
//             input with AmpActivations::F32); the f32 master weight in the
//             compute dtype at every forward (it changes after each optimizer
//             step; eval too): inside Model::forward a view of the model's
//             parameters cast in one launch (Context::lp_params), else cast
//             here.
//   backward  the op writes dx in dy's dtype; the layer's input gradient has
//             the input's dtype. They differ at the first layer (an f32
//             batch, whose dx is rarely wanted) and at the model's output
//             layer (f32 dlogits, lp input): there the op writes into op_dx
//             and input_grad casts it over.
// The layer keeps x() for its backward and not its input: where they
// differ, the f32 input is read by nothing after the cast (the stem's padded
// batch, 4 bytes a value, freed at once).
#include "engine/nn/layer.h"

namespace tb {

// The view of ctx.lp_params that holds master_weight's values in dtype lp,
// where master_weight lies in ctx.lp_params_master; undefined otherwise.
Tensor lp_params_view(const Context& ctx, const Tensor& master_weight, DType lp);

class AmpOperands {
 public:
  // Casts what the op needs for this forward; x() and weight() are then its
  // operands, until the next prepare().
  void prepare(Context& ctx, const Tensor& x, const Tensor& master_weight, DType lp);
  const Tensor& x() const { return x_; }
  const Tensor& weight() const { return weight_; }
  // Drops x (the layer's input itself, or the view of cast_x): the layer's
  // release_saved, and its forward in eval mode. The casts' buffers stay for
  // the next pass.
  void release() { x_ = {}; }
  // Throws naming `layer` unless the last forward ran under ctx's policy.
  void check_backward(const Context& ctx, DType lp, const std::string& layer) const;
  // The buffer the op writes dx into, for dy: a transient buffer of the
  // input's shape and layout in dy's dtype.
  Tensor op_dx(Context& ctx, const Tensor& dy);
  // After the op wrote `written` (what op_dx returned): the layer's input
  // gradient in the input's dtype (written itself, or cast from it into a
  // transient buffer).
  Tensor input_grad(Context& ctx, const Tensor& written);

 private:
  Tensor x_, cast_x_, weight_;
  DType in_dtype_ = DType::F32;  // the layer's input's (x_ has its shape and layout)
};

}  // namespace tb
