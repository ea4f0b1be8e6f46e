// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The convolution op family's contract and entry points (conv::forward,
// conv::backward): 2-D convolution, square kernel, one stride and one zero
// padding for both axes, optional bias, PyTorch's Conv2d semantics.
//
//   y[n,co,oh,ow] = b[co] + Σ_{ci,kh,kw} w[co,ci,kh,kw] · x[n,ci,oh·s−p+kh,ow·s−p+kw]
//   (x read as 0 outside the image)
//
// Shapes    x, dx (N, Cin, H, W)   w, dw (Cout, Cin, KH, KW)   b, db (Cout)
//           y, dy (N, Cout, Ho, Wo), all as ConvGeometry says; N may be 0.
// Dtypes    dtype as data, read from x:
//           f32, f64  every operand has x's dtype;
//           f16, bf16 (mixed precision) w has x's dtype; b, dw and db are
//                     f32; the products of the low-precision inputs are
//                     summed in f32. The activations' form is read from y
//                     (forward) and dy (backward), dx has dy's dtype:
//             f32 activations   y, dy, dx f32. In backward dy is rounded to
//                     x's dtype for dgrad and wgrad; db is summed from the
//                     unrounded dy (as the f32 op's, bit for bit on the CPU).
//             low-precision activations (amp keeping activations in
//                     f16/bf16 between layers, as PyTorch's autocast)
//                     y, dy, dx in x's dtype: y = round(Σ + b) and dx =
//                     round(Σ), each rounded once from its f32 sum; dw and db
//                     summed in f32 from dy as it is.
//           So with f16/bf16 x there are two combinations, (x, w lp; y, dy,
//           dx f32) and (x, w, y, dy, dx lp), with b, dw, db f32 in both.
//           A backend that lacks x's dtype says so (Kernels::supports) and the
//           entry point refuses it naming the op, the dtype and the backend:
//           the cpu takes all four, cuda f32, f16 and bf16.
// Layouts   activations (x, y, dx, dy) share one layout, NCHW or NHWC, or on
//           the CPU nChw16c (its blocked activations), except that y and dy
//           may be nChw16c where x and dx are NCHW (where the blocked layout
//           starts: a model's first convolution, C_in not a multiple of 16);
//           the filters (w, dw) have their own (NCHW = KCRS, NHWC = KRSC as
//           cuDNN's channels-last filters). Any pairing is accepted and
//           nothing is transposed behind the caller's back.
// Devices   every operand on the backend's device.
//
// forward   writes y.
// backward  dx is written; dw and db are written, or added to when
//           `accumulate` (accumulate=true adds what accumulate=false writes).
//           Each of dx, dw, db may be undefined (not wanted: dx of the first
//           layer, db of a convolution without bias). An empty batch writes
//           zero weight gradients.
//
// Files: conv.cpp (the checks, the entry points, ConvGeometry::make),
// conv_cpu.cpp (reference, blas f32 path, low-precision reference; asks
// conv_cpu_paths.h which f32 path a shape takes), conv_onednn.h +
// conv_onednn.cpp (the oneDNN f32 paths, builds with oneDNN),
// conv_cuda.cpp (the CUDA backend's Kernels: cuDNN graphs, bias.cu's kernels
// in engine/backend/cuda, shared with linear), conv_cudnn.h +
// conv_cudnn_cuda.cpp (the cuDNN plan cache; `_cuda.cpp` is compiled in CUDA
// builds only), test_op_conv.cpp. How a family plugs into a backend:
// engine/ops/registry.h.
#include <cstdint>

#include "engine/core/tensor.h"
#include "engine/ops/registry.h"

namespace tb {

struct ConvGeometry {
  int64_t N = 0, C_in = 0, H = 0, W = 0;
  int64_t C_out = 0, KH = 0, KW = 0;
  int64_t stride = 1, pad = 0;
  int64_t H_out = 0, W_out = 0;

  // Throws tb::Error for a kernel, stride or padding out of range, or a
  // kernel that does not fit the padded input.
  static ConvGeometry make(int64_t N, int64_t C_in, int64_t H, int64_t W, int64_t C_out,
                           int64_t kernel, int64_t stride, int64_t pad);
  Shape input_shape() const { return {N, C_in, H, W}; }
  Shape weight_shape() const { return {C_out, C_in, KH, KW}; }
  Shape output_shape() const { return {N, C_out, H_out, W_out}; }
};

}  // namespace tb

namespace tb::conv {

// Entry points: the contract's checks (below), then this backend's kernels
// for x's dtype.
void forward(Backend& be, const ConvGeometry& g, const Tensor& x, const Tensor& w,
             const Tensor& b, Tensor& y);
void backward(Backend& be, const ConvGeometry& g, const Tensor& x, const Tensor& w,
              const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db, bool accumulate);

// f16 or bf16: the mixed-precision form of the contract.
bool low_precision(DType t);

// What a backend implements, called with arguments that passed the contract's
// checks and with an x dtype it supports: forward/backward for f32 and f64,
// forward_lp/backward_lp for f16 and bf16, with f32 or low-precision
// activations as y's (forward) and dy's (backward) dtype says. Each checks
// what it adds and names the op in its errors.
class Kernels : public OpKernels {
 public:
  static constexpr const char* kFamily = "convolution";
  // Whether this backend convolves inputs of dtype t (one of the four above).
  virtual bool supports(DType t) const = 0;
  virtual void forward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
                       Tensor& y) = 0;
  virtual void backward(const ConvGeometry& g, const Tensor& x, const Tensor& w,
                        const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db,
                        bool accumulate) = 0;
  virtual void forward_lp(const ConvGeometry& g, const Tensor& x, const Tensor& w,
                          const Tensor& b, Tensor& y) = 0;
  virtual void backward_lp(const ConvGeometry& g, const Tensor& x, const Tensor& w,
                           const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db,
                           bool accumulate) = 0;
};

// The contract's checks, shared by every backend: defined operands on
// `device` with the shapes, dtypes and layouts above. Throw tb::Error naming
// the op and the operand.
void check_forward(Device device, const ConvGeometry& g, const Tensor& x, const Tensor& w,
                   const Tensor& b, const Tensor& y);
void check_backward(Device device, const ConvGeometry& g, const Tensor& x, const Tensor& w,
                    const Tensor& dy, const Tensor& dx, const Tensor& dw, const Tensor& db);

}  // namespace tb::conv
