// SPDX-License-Identifier: GPL-3.0-or-later
// PoolGeometry and the pooling contract's checks (pooling.h), one copy for
// every backend.
#include "engine/ops/pooling/pooling.h"

#include <string>

#include "engine/backend/backend.h"
#include "engine/core/error.h"

namespace tb {

PoolGeometry PoolGeometry::make(int64_t N, int64_t C, int64_t H, int64_t W, int64_t kernel,
                                int64_t stride, int64_t pad) {
  TB_CHECK(kernel > 0 && stride > 0 && pad >= 0 && 2 * pad <= kernel, "invalid pooling: kernel ",
           kernel, ", stride ", stride, ", padding ", pad);
  PoolGeometry g;
  g.N = N, g.C = C, g.H = H, g.W = W;
  g.kernel = kernel, g.stride = stride, g.pad = pad;
  g.H_out = (H + 2 * pad - kernel) / stride + 1;
  g.W_out = (W + 2 * pad - kernel) / stride + 1;
  TB_CHECK(g.H_out > 0 && g.W_out > 0, "pooling with kernel ", kernel, " does not fit input ", H,
           "x", W);
  return g;
}

namespace pooling {

namespace {

// t is defined, on `lead`'s device, of `shape` and `dtype`, and (rank 4) in
// `lead`'s layout. `lead` is the op's first operand, checked against itself.
void check_operand(const char* op, const char* what, const Tensor& t, const Shape& shape,
                   DType dtype, const Tensor& lead) {
  TB_CHECK(t.defined(), op, ": ", what, " must be defined");
  TB_CHECK(t.device() == lead.device(), op, ": ", what, " ", t.describe(),
           " is not on the device of the op's first operand (", lead.describe(), ")");
  TB_CHECK(t.rank() != 4 || t.layout() == lead.layout(), op, ": ", what, " ", t.describe(),
           " must be ", layout_name(lead.layout()), " like the op's other operands");
  TB_CHECK(t.dtype() == dtype, op, ": ", what, " ", t.describe(), " is not ", dtype_name(dtype));
  TB_CHECK(t.shape() == shape, op, ": ", what, " ", t.describe(), " does not match ",
           shape_str(shape));
}

// The global ops' (N, C, H, W) operand.
GlobalDims check_planes(const char* op, const char* what, const Tensor& t) {
  TB_CHECK(t.defined() && t.rank() == 4, op, ": ", what, " must be (N, C, H, W), got ",
           t.defined() ? t.describe() : std::string("undefined"));
  return {t.n(), t.c(), t.h() * t.w(), t.layout() == Layout::NHWC,
          t.layout() == Layout::NCHW16C};
}

// This backend's kernels, after they said they take dtype t.
Kernels& kernels_for(Backend& be, DType t, const char* op) {
  Kernels& k = be.kernels<Kernels>();
  require_dtype(k.supports(t), be, Kernels::kFamily, t, op);
  return k;
}

}  // namespace

void check_max_forward(const PoolGeometry& g, const Tensor& x, const Tensor& y,
                       const Tensor& argmax) {
  const char* op = "maxpool2d_forward";
  check_operand(op, "input x", x, g.input_shape(), x.dtype(), x);
  check_operand(op, "output y", y, g.output_shape(), x.dtype(), x);
  check_operand(op, "argmax", argmax, g.output_shape(), DType::I32, x);
}

void check_max_backward(const PoolGeometry& g, const Tensor& dy, const Tensor& argmax,
                        const Tensor& dx) {
  const char* op = "maxpool2d_backward";
  check_operand(op, "gradient dy", dy, g.output_shape(), dy.dtype(), dy);
  check_operand(op, "argmax", argmax, g.output_shape(), DType::I32, dy);
  check_operand(op, "dx", dx, g.input_shape(), dy.dtype(), dy);
}

void check_avg_forward(const PoolGeometry& g, const Tensor& x, const Tensor& y) {
  const char* op = "avgpool2d_forward";
  check_operand(op, "input x", x, g.input_shape(), x.dtype(), x);
  check_operand(op, "output y", y, g.output_shape(), x.dtype(), x);
}

void check_avg_backward(const PoolGeometry& g, const Tensor& dy, const Tensor& dx) {
  const char* op = "avgpool2d_backward";
  check_operand(op, "gradient dy", dy, g.output_shape(), dy.dtype(), dy);
  check_operand(op, "dx", dx, g.input_shape(), dy.dtype(), dy);
}

GlobalDims check_global_avg_forward(const Tensor& x, const Tensor& y) {
  const char* op = "global_avgpool_forward";
  const GlobalDims d = check_planes(op, "input x", x);
  check_operand(op, "output y", y, {d.N, d.C}, x.dtype(), x);
  return d;
}

GlobalDims check_global_avg_backward(const Tensor& dy, const Tensor& dx) {
  const char* op = "global_avgpool_backward";
  const GlobalDims d = check_planes(op, "dx", dx);
  check_operand(op, "gradient dy", dy, {d.N, d.C}, dx.dtype(), dx);
  return d;
}

void max_forward(Backend& be, const PoolGeometry& g, const Tensor& x, Tensor& y, Tensor& argmax) {
  check_max_forward(g, x, y, argmax);
  kernels_for(be, x.dtype(), "maxpool2d_forward").max_forward(g, x, y, argmax);
}

void max_backward(Backend& be, const PoolGeometry& g, const Tensor& dy, const Tensor& argmax,
                  Tensor& dx) {
  check_max_backward(g, dy, argmax, dx);
  kernels_for(be, dy.dtype(), "maxpool2d_backward").max_backward(g, dy, argmax, dx);
}

void avg_forward(Backend& be, const PoolGeometry& g, const Tensor& x, Tensor& y) {
  check_avg_forward(g, x, y);
  kernels_for(be, x.dtype(), "avgpool2d_forward").avg_forward(g, x, y);
}

void avg_backward(Backend& be, const PoolGeometry& g, const Tensor& dy, Tensor& dx) {
  check_avg_backward(g, dy, dx);
  kernels_for(be, dy.dtype(), "avgpool2d_backward").avg_backward(g, dy, dx);
}

void global_avg_forward(Backend& be, const Tensor& x, Tensor& y) {
  const GlobalDims d = check_global_avg_forward(x, y);
  kernels_for(be, x.dtype(), "global_avgpool_forward").global_avg_forward(d, x, y);
}

void global_avg_backward(Backend& be, const Tensor& dy, Tensor& dx) {
  const GlobalDims d = check_global_avg_backward(dy, dx);
  kernels_for(be, dx.dtype(), "global_avgpool_backward").global_avg_backward(d, dy, dx);
}

}  // namespace pooling

}  // namespace tb
