// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Epilogues: what an op applies to its own result in the same pass over
// memory, given as an argument instead of a separate fused method
// (fuse_pointwise). An op family's contract says which epilogues it honours;
// one it does not is refused with tb::Error, never ignored.
//
//   forward:  z = op(x) + residual, y = act(z)      residual undefined: none
//   backward: dz = dy·act'(·) (ReLU: dy·[y > 0], from the forward's y;
//             GELU: from z, kept by the forward in `pre`);
//             dresidual = dz when wanted; the op's own backward takes dz.
// The default epilogue ({}) is the plain op.
#include "engine/core/tensor.h"

namespace tb {

enum class Activation { None, ReLU, GELU };  // GELU: exact (erf), not the tanh form

inline const char* activation_name(Activation a) {
  switch (a) {
    case Activation::None: return "none";
    case Activation::ReLU: return "relu";
    case Activation::GELU: return "gelu";
  }
  return "?";
}

struct Epilogue {
  Activation act = Activation::None;
  Tensor residual{};  // shaped and laid out like the op's output
  // Receives z, the pre-activation, for a backward that reads it (GELU's);
  // shaped like the output. Which ops need it: their family's contract.
  Tensor pre{};

  bool active() const { return act != Activation::None || residual.defined(); }
};

// The backward of an Epilogue: `y` is the forward's output (ReLU's mask reads
// it, so no mask tensor is kept); `dresidual` receives dz (the gradient of the
// residual input), undefined when not wanted; `pre` is the forward's `pre`
// (GELU); `dz` is a work buffer the caller owns, for an op whose own backward
// reads dz from memory (linear's GEMMs), undefined where the op needs none;
// `mask_beta` (batch norm in training, ReLU, a forward without residual):
// the forward's β, with which a backend may take ReLU's mask from x, as its
// forward made y from x, instead of reading y (the same mask bit for bit;
// batchnorm.h).
struct EpilogueGrad {
  Activation act = Activation::None;
  Tensor y{};  // ({}: aggregate initialisation may leave any of these out)
  Tensor dresidual{};
  Tensor pre{};
  Tensor dz{};
  Tensor mask_beta{};

  bool active() const { return act != Activation::None || dresidual.defined(); }
};

}  // namespace tb
