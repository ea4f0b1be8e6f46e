// SPDX-License-Identifier: GPL-3.0-or-later
// The convolution contract's checks (conv.h), one copy for every backend, and
// the entry points that dispatch on x's dtype.
#include "engine/ops/conv/conv.h"

#include "engine/backend/backend.h"
#include "engine/core/error.h"

namespace tb {

ConvGeometry ConvGeometry::make(int64_t N, int64_t C_in, int64_t H, int64_t W, int64_t C_out,
                                int64_t kernel, int64_t stride, int64_t pad) {
  TB_CHECK(kernel > 0 && stride > 0 && pad >= 0, "invalid convolution: kernel ", kernel,
           ", stride ", stride, ", padding ", pad);
  ConvGeometry g;
  g.N = N, g.C_in = C_in, g.H = H, g.W = W, g.C_out = C_out;
  g.KH = g.KW = kernel, g.stride = stride, g.pad = pad;
  // Tested before dividing: (H + 2·pad − kernel) / stride rounds toward zero,
  // so a kernel up to stride − 1 rows too big would still give one output row.
  TB_CHECK(H + 2 * pad >= kernel && W + 2 * pad >= kernel, "convolution with kernel ", kernel,
           " does not fit input ", H, "x", W, " (padding ", pad, ")");
  g.H_out = (H + 2 * pad - kernel) / stride + 1;
  g.W_out = (W + 2 * pad - kernel) / stride + 1;
  return g;
}

namespace conv {

bool low_precision(DType t) { return t == DType::F16 || t == DType::BF16; }

namespace {

// What x says about the others: the dtype of w, of the parameters' operands
// (b, dw, db: x's own, or f32 under mixed precision), and the activation
// dtypes y, dy and dx may have (x's own; under mixed precision f32 or x's).
struct Dtypes {
  DType w, params;
  bool mixed;

  bool activation_ok(DType t, DType x) const { return t == params || (mixed && t == x); }
};

Dtypes check_x(Device device, const ConvGeometry& g, const Tensor& x, const Tensor& w,
               const char* op) {
  TB_CHECK(x.defined(), op, ": input x is undefined");
  TB_CHECK(w.defined(), op, ": weight is undefined");
  const DType t = x.dtype();
  TB_CHECK(t == DType::F32 || t == DType::F64 || low_precision(t), op, ": input x ",
           x.describe(), " has dtype ", dtype_name(t),
           "; a convolution takes f32, f64, or f16/bf16 (mixed precision)");
  TB_CHECK(x.device() == device, op, ": input x ", x.describe(), " is not on the backend's ",
           device.str());
  TB_CHECK(x.shape() == g.input_shape(), op, ": input x ", x.describe(),
           " does not match the geometry's input shape ", shape_str(g.input_shape()));
  TB_CHECK(w.device() == device, op, ": weight ", w.describe(), " is not on the backend's ",
           device.str());
  TB_CHECK(w.dtype() == t, op, ": weight ", w.describe(), " and input x ", x.describe(),
           " must share one dtype");
  TB_CHECK(w.shape() == g.weight_shape(), op, ": weight ", w.describe(), " does not match ",
           shape_str(g.weight_shape()), " for input ", shape_str(g.input_shape()));
  return {t, low_precision(t) ? DType::F32 : t, low_precision(t)};
}

// An operand other than x and w: on the device, of `dtype` and `shape`, and a
// rank-4 one in the layout of `like` (x's for activations, w's for dw).
void check_operand(Device device, const ConvGeometry& g, const char* op, const char* what,
                   const Tensor& t, DType dtype, const Shape& shape, const Tensor& x,
                   const Tensor* like = nullptr, const char* like_name = nullptr) {
  TB_CHECK(t.defined(), op, ": ", what, " is undefined");
  TB_CHECK(t.device() == device, op, ": ", what, " ", t.describe(), " is not on the backend's ",
           device.str());
  TB_CHECK(t.dtype() == dtype, op, ": ", what, " ", t.describe(), " must be ", dtype_name(dtype),
           " for input x ", x.describe());
  TB_CHECK(t.shape() == shape, op, ": ", what, " ", t.describe(), " does not match ",
           shape_str(shape), " for input ", shape_str(g.input_shape()));
  if (like)
    TB_CHECK(t.layout() == like->layout(), op, ": ", what, " ", t.describe(), " and ", like_name,
             " ", like->describe(), " must share one layout (layouts are converted only by copy)");
}

// Whether the output side (y or dy) is the CPU's blocked activations starting
// at this convolution: x NCHW, out nChw16c (conv.h), where the two differ.
bool starts_blocked(const Tensor& x, const Tensor& out) {
  return x.layout() == Layout::NCHW && out.defined() && out.layout() == Layout::NCHW16C;
}

// The activations' dtype that `t` (y or dy) says: its own when the form
// allows it, else what x alone says (the check that follows names the
// mismatch).
DType activation_dtype(const Dtypes& d, const Tensor& t, const Tensor& x, const char* op,
                       const char* what) {
  TB_CHECK(t.defined(), op, ": ", what, " is undefined");
  return d.activation_ok(t.dtype(), x.dtype()) ? t.dtype() : d.params;
}

// This backend's kernels, after it said it takes x's dtype.
Kernels& kernels_for(Backend& be, DType t, const char* op) {
  Kernels& k = be.kernels<Kernels>();
  TB_CHECK(k.supports(t), op, ": ", dtype_name(t), " convolutions are not supported by the ",
           be.name(), " backend");
  return k;
}

}  // namespace

void check_forward(Device device, const ConvGeometry& g, const Tensor& x, const Tensor& w,
                   const Tensor& b, const Tensor& y) {
  const char* op = "conv2d_forward";
  const Dtypes d = check_x(device, g, x, w, op);
  if (b.defined()) check_operand(device, g, op, "bias", b, d.params, Shape{g.C_out}, x);
  check_operand(device, g, op, "output y", y, activation_dtype(d, y, x, op, "output y"),
                g.output_shape(), x, starts_blocked(x, y) ? &y : &x, "input x");
}

void check_backward(Device device, const ConvGeometry& g, const Tensor& x, const Tensor& w,
                    const Tensor& dy, const Tensor& dx, const Tensor& dw, const Tensor& db) {
  const char* op = "conv2d_backward";
  const Dtypes d = check_x(device, g, x, w, op);
  // dy picks the activations' form; dx follows it.
  const DType act = activation_dtype(d, dy, x, op, "gradient dy");
  check_operand(device, g, op, "gradient dy", dy, act, g.output_shape(), x,
                starts_blocked(x, dy) ? &dy : &x, "input x");
  if (dx.defined()) check_operand(device, g, op, "dx", dx, act, g.input_shape(), x, &x, "input x");
  if (dw.defined()) check_operand(device, g, op, "dw", dw, d.params, g.weight_shape(), x, &w, "weight");
  if (db.defined()) check_operand(device, g, op, "db", db, d.params, Shape{g.C_out}, x);
}

void forward(Backend& be, const ConvGeometry& g, const Tensor& x, const Tensor& w,
             const Tensor& b, Tensor& y) {
  check_forward(be.device(), g, x, w, b, y);
  Kernels& k = kernels_for(be, x.dtype(), "conv2d_forward");
  if (low_precision(x.dtype()))
    k.forward_lp(g, x, w, b, y);
  else
    k.forward(g, x, w, b, y);
}

void backward(Backend& be, const ConvGeometry& g, const Tensor& x, const Tensor& w,
              const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db, bool accumulate) {
  check_backward(be.device(), g, x, w, dy, dx, dw, db);
  Kernels& k = kernels_for(be, x.dtype(), "conv2d_backward");
  if (low_precision(x.dtype()))
    k.backward_lp(g, x, w, dy, dx, dw, db, accumulate);
  else
    k.backward(g, x, w, dy, dx, dw, db, accumulate);
}

}  // namespace conv

}  // namespace tb
