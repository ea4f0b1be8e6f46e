// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The pointwise op family's contract and entry points: ReLU and exact (erf)
// GELU forward and backward, add, accumulate, scale.
//
// Shapes    any rank; every operand of one op has the same shape.
// Dtypes    every operand has the first one's dtype: f32, f64, f16 or bf16
//           (every backend takes all four). f16/bf16 (low-precision
//           activations): each value is read into f32, the op is the f32
//           op's arithmetic, and each output is rounded once to the dtype.
// Layouts   elementwise, so any layout, as long as every rank-4 operand has
//           the same one (never a hidden transpose).
// Devices   every operand on the backend's device.
//
// relu_forward   y = x > 0 ? x : 0 (a NaN gives 0)
// relu_backward  dx = y > 0 ? dy : 0, y the forward's output (the layer may
//                drop x)
// gelu_forward   y = x·Φ(x) = x/2·(1 + erf(x/√2))
// gelu_backward  dx = dy·(Φ(x) + x·φ(x)), φ(x) = exp(−x²/2)/√(2π)
// add            y = a + b
// accumulate     dst += src
// scale          t *= alpha (alpha rounded to the dtype; to f32 for f16/bf16)
// Every output is written, never accumulated into, except accumulate's and
// scale's, which update in place.
// Aliasing  y may alias x (or a, b) and dx may alias dy: each element is read
//           before it is written and nothing else is touched.
//
// Files: pointwise.cpp (the checks and entry points), pointwise_cpu.cpp
// (reference, fast f32 path, f16/bf16 by widen-compute-round), pointwise.cu + pointwise.cuh (CUDA kernels
// and launchers), pointwise_cuda.cpp (the CUDA backend's Kernels),
// test_op_activations.cpp. How a family plugs into a backend:
// engine/ops/registry.h.
#include "engine/core/tensor.h"
#include "engine/ops/registry.h"

namespace tb::pointwise {

// Entry points: the contract's checks (pointwise.cpp, once for every
// backend), then this backend's kernels.
void relu_forward(Backend& be, const Tensor& x, Tensor& y);
void relu_backward(Backend& be, const Tensor& y, const Tensor& dy, Tensor& dx);
void gelu_forward(Backend& be, const Tensor& x, Tensor& y);
void gelu_backward(Backend& be, const Tensor& x, const Tensor& dy, Tensor& dx);
void add(Backend& be, const Tensor& a, const Tensor& b, Tensor& y);
void accumulate(Backend& be, const Tensor& src, Tensor& dst);
void scale(Backend& be, Tensor& t, double alpha);

// What a backend implements, called with arguments that passed the
// contract's checks (on this backend's device included).
class Kernels : public OpKernels {
 public:
  static constexpr const char* kFamily = "pointwise";
  virtual void relu_forward(const Tensor& x, Tensor& y) = 0;
  virtual void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) = 0;
  virtual void gelu_forward(const Tensor& x, Tensor& y) = 0;
  virtual void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) = 0;
  virtual void add(const Tensor& a, const Tensor& b, Tensor& y) = 0;
  virtual void accumulate(const Tensor& src, Tensor& dst) = 0;
  virtual void scale(Tensor& t, double alpha) = 0;
};

}  // namespace tb::pointwise
