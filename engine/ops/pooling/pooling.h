// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The pooling op family's contract and entry points: max pooling with its
// argmax, average pooling, global average pooling (pooling::max_forward, ...),
// PyTorch's semantics.
//
// Shapes    window ops: x, dx (N, C, H, W); y, dy, argmax (N, C, H_out, W_out)
//           from a PoolGeometry (kernel × kernel windows, stride, padding,
//           2·pad ≤ kernel). Global: x, dx (N, C, H, W); y, dy (N, C).
// Dtypes    dtype as data: x, y, dx, dy share one, f32, f64, f16 or bf16;
//           argmax is i32. f16/bf16 (low-precision activations): each value
//           is read into f32, the sums are the f32 op's (float windows, the
//           global mean's double), each output is rounded once to the dtype.
//           A backend that lacks the dtype says so (Kernels::supports) and the
//           entry point refuses it naming the op, the dtype and the backend:
//           the cpu takes all four, cuda f32, f16 and bf16.
// Layouts   NCHW or NHWC, one for every rank-4 operand (never a hidden
//           transpose); argmax too. The CPU also nChw16c (its blocked
//           activations).
// Devices   every operand on the first operand's device, the backend's own.
//
// max       y = the maximum of the window's cells inside the image (padding
//           never wins); a NaN wins (the window's first NaN). argmax = ih·W + iw
//           of the first maximum in window order (kh, then kw): the index into
//           the logical (H, W) plane in either layout, so the backends' argmax
//           tensors compare element by element.
//           backward: dx written (not accumulated), dx[n, c, argmax] += dy over
//           the windows in increasing (oh, ow) order (windows may overlap).
// avg       y = (Σ of the window's cells inside the image) / kernel²: padded
//           cells count as zeros (count_include_pad, PyTorch's default).
//           backward: dx written, each cell the Σ of dy/kernel² over the
//           windows that hold it.
// global    y[n, c] = mean over the H·W plane (sums in double);
//           backward: dx = dy / (H·W), written.
// Aliasing  the outputs are written whole and must not overlap an input.
//
// Files: pooling.cpp (PoolGeometry, the checks and entry points),
// pooling_cpu.cpp (reference, fast f32 paths, f16/bf16 by
// widen-compute-round; pooling_cpu.h: the average pooling's path choice),
// pooling_onednn.h/.cpp (oneDNN's average pooling, builds with oneDNN),
// pooling.cu + pooling.cuh
// (CUDA kernels and launchers), pooling_cuda.cpp (the CUDA backend's
// Kernels), test_op_pooling.cpp. How a family plugs into a backend:
// engine/ops/registry.h.
#include <cstdint>

#include "engine/core/tensor.h"
#include "engine/ops/registry.h"

namespace tb {

// A window pooling's sizes: the input (N, C, H, W), the square window, and
// the output (N, C, H_out, W_out) they give.
struct PoolGeometry {
  int64_t N = 0, C = 0, H = 0, W = 0;
  int64_t kernel = 2, stride = 2, pad = 0;
  int64_t H_out = 0, W_out = 0;

  // Throws tb::Error naming the numbers when they make no pooling.
  static PoolGeometry make(int64_t N, int64_t C, int64_t H, int64_t W, int64_t kernel,
                           int64_t stride, int64_t pad);
  Shape input_shape() const { return {N, C, H, W}; }
  Shape output_shape() const { return {N, C, H_out, W_out}; }
};

namespace pooling {

// Entry points: the contract's checks (below), then this backend's kernels
// for the operands' dtype.
void max_forward(Backend& be, const PoolGeometry& g, const Tensor& x, Tensor& y, Tensor& argmax);
void max_backward(Backend& be, const PoolGeometry& g, const Tensor& dy, const Tensor& argmax,
                  Tensor& dx);
void avg_forward(Backend& be, const PoolGeometry& g, const Tensor& x, Tensor& y);
void avg_backward(Backend& be, const PoolGeometry& g, const Tensor& dy, Tensor& dx);
void global_avg_forward(Backend& be, const Tensor& x, Tensor& y);
void global_avg_backward(Backend& be, const Tensor& dy, Tensor& dx);

// Global pooling's sizes: (N, C) planes of HW values.
struct GlobalDims {
  int64_t N, C, HW;
  bool nhwc;
  bool blocked = false;  // nChw16c (tensor.h)
};

// What a backend implements, called with arguments that passed the
// contract's checks and with a dtype it supports. Each checks what it adds
// (its device) and names the op in its errors.
class Kernels : public OpKernels {
 public:
  static constexpr const char* kFamily = "pooling";
  // Whether this backend pools x, y, dx, dy of dtype t.
  virtual bool supports(DType t) const = 0;
  virtual void max_forward(const PoolGeometry& g, const Tensor& x, Tensor& y,
                           Tensor& argmax) = 0;
  virtual void max_backward(const PoolGeometry& g, const Tensor& dy, const Tensor& argmax,
                            Tensor& dx) = 0;
  virtual void avg_forward(const PoolGeometry& g, const Tensor& x, Tensor& y) = 0;
  virtual void avg_backward(const PoolGeometry& g, const Tensor& dy, Tensor& dx) = 0;
  virtual void global_avg_forward(const GlobalDims& d, const Tensor& x, Tensor& y) = 0;
  virtual void global_avg_backward(const GlobalDims& d, const Tensor& dy, Tensor& dx) = 0;
};

// The contract's checks, shared by every backend: defined operands on one
// device, with the shapes, dtype and layout above. Throw tb::Error naming the
// op and the operand.
void check_max_forward(const PoolGeometry& g, const Tensor& x, const Tensor& y,
                       const Tensor& argmax);
void check_max_backward(const PoolGeometry& g, const Tensor& dy, const Tensor& argmax,
                        const Tensor& dx);
void check_avg_forward(const PoolGeometry& g, const Tensor& x, const Tensor& y);
void check_avg_backward(const PoolGeometry& g, const Tensor& dy, const Tensor& dx);
GlobalDims check_global_avg_forward(const Tensor& x, const Tensor& y);
GlobalDims check_global_avg_backward(const Tensor& dy, const Tensor& dx);

}  // namespace pooling

}  // namespace tb
