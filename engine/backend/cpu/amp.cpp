// SPDX-License-Identifier: GPL-3.0-or-later
// The low-precision convolution reference on the CPU (inputs rounded to
// f16/bf16, fp32 sums). The casts and the loss scaler are the amp op family's
// (engine/ops/amp/); the low-precision linear is its op family's
// (engine/ops/linear/linear_cpu.cpp).
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/ops/amp/amp.h"

namespace tb {

// lp (f16/bf16) widened to f32, for the convolution reference below.
namespace {
Tensor widened(CpuBackend& be, const Tensor& lp, const char* op, const char* what) {
  TB_CHECK(lp.defined() && amp::is_low_precision(lp.dtype()), op, ": ", what,
           " must be f16 or bf16, got ", lp.defined() ? lp.describe() : std::string("undefined"));
  Tensor f = Tensor::empty(lp.shape(), DType::F32, Device::cpu(), lp.layout());
  amp::cast(be, lp, f);
  return f;
}
}  // namespace

// The reference of the low-precision convolution: the f16/bf16 inputs widened
// to f32 (exactly: every f16 and bf16 value is an f32 value), then the f32
// convolution. The products of the low-precision values are thus summed in
// fp32; the GPU's Tensor Core convolution differs only in summation order
// (and, on the CUDA backend, the rounding of its low-precision output, see
// cuda/conv_lp.cpp).
//   x (N,Cin,H,W) lp   w (Cout,Cin,KH,KW) lp   b (Cout) f32   y (N,Cout,Ho,Wo) f32
void CpuBackend::conv2d_forward_lp(const ConvGeometry& g, const Tensor& x, const Tensor& w,
                                   const Tensor& b, Tensor& y) {
  const char* op = "conv2d_forward_lp";
  TB_CHECK(x.defined() && w.defined() && x.dtype() == w.dtype(), op,
           ": x and weight must share one low-precision dtype, got ",
           x.defined() ? x.describe() : std::string("undefined"), " and ",
           w.defined() ? w.describe() : std::string("undefined"));
  TB_CHECK(y.defined() && y.dtype() == DType::F32, op, ": output y must be f32, got ",
           y.defined() ? y.describe() : std::string("undefined"));
  const Tensor xf = widened(*this, x, op, "x");
  const Tensor wf = widened(*this, w, op, "weight");
  conv2d_forward(g, xf, wf, b, y);
}

//   dy (N,Cout,Ho,Wo) f32 -> rounded to x's dtype for dgrad and wgrad;
//   dx (N,Cin,H,W) f32 written; dw (Cout,Cin,KH,KW) f32 and db (Cout) f32 (+)=,
//   db from the unrounded dy (as the fp32 layer's, bit for bit).
void CpuBackend::conv2d_backward_lp(const ConvGeometry& g, const Tensor& x, const Tensor& w,
                                    const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db,
                                    bool accumulate) {
  const char* op = "conv2d_backward_lp";
  TB_CHECK(x.defined() && w.defined() && x.dtype() == w.dtype(), op,
           ": x and weight must share one low-precision dtype, got ",
           x.defined() ? x.describe() : std::string("undefined"), " and ",
           w.defined() ? w.describe() : std::string("undefined"));
  TB_CHECK(dy.defined() && dy.dtype() == DType::F32, op, ": dy must be f32, got ",
           dy.defined() ? dy.describe() : std::string("undefined"));
  const Tensor xf = widened(*this, x, op, "x");
  const Tensor wf = widened(*this, w, op, "weight");
  Tensor dy_lp = Tensor::empty(dy.shape(), x.dtype(), Device::cpu(), dy.layout());
  amp::cast(*this, dy, dy_lp);
  const Tensor dyr = widened(*this, dy_lp, op, "dy");
  Tensor none;
  if (dx.defined() || dw.defined()) conv2d_backward(g, xf, wf, dyr, dx, dw, none, accumulate);
  if (db.defined()) {
    Tensor no_dx, no_dw;
    conv2d_backward(g, xf, wf, dy, no_dx, no_dw, db, accumulate);
  }
}

}  // namespace tb
