// SPDX-License-Identifier: GPL-3.0-or-later
// The pointwise contract's checks (pointwise.h), one copy for every backend,
// and the entry points.
#include "engine/ops/pointwise/pointwise.h"

#include "engine/backend/backend.h"
#include "engine/core/error.h"

namespace tb::pointwise {

namespace {

void check_operand(Device device, const Tensor& t, const char* op, const char* what) {
  TB_CHECK(t.defined(), op, ": ", what, " must be defined");
  TB_CHECK(t.device() == device, op, ": ", what, " ", t.describe(), " is not on ", device.str());
  TB_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::F64 || t.dtype() == DType::F16 ||
               t.dtype() == DType::BF16,
           op, ": ", what, " ", t.describe(), " must be f32, f64, f16 or bf16");
}

// a and b defined, on the backend's device, of one shape, dtype and rank-4
// layout.
void check_pair(Device device, const Tensor& a, const Tensor& b, const char* op) {
  check_operand(device, a, op, "first operand");
  check_operand(device, b, op, "second operand");
  TB_CHECK(a.shape() == b.shape() && a.dtype() == b.dtype(), op, ": operands differ: ",
           a.describe(), " vs ", b.describe(), " (one shape and dtype)");
  TB_CHECK(a.rank() != 4 || a.layout() == b.layout(), op, ": layouts differ: ", a.describe(),
           " vs ", b.describe());
}

}  // namespace

void relu_forward(Backend& be, const Tensor& x, Tensor& y) {
  check_pair(be.device(), x, y, "relu_forward");
  be.kernels<Kernels>().relu_forward(x, y);
}

void relu_backward(Backend& be, const Tensor& y, const Tensor& dy, Tensor& dx) {
  check_pair(be.device(), y, dy, "relu_backward");
  check_pair(be.device(), y, dx, "relu_backward");
  be.kernels<Kernels>().relu_backward(y, dy, dx);
}

void gelu_forward(Backend& be, const Tensor& x, Tensor& y) {
  check_pair(be.device(), x, y, "gelu_forward");
  be.kernels<Kernels>().gelu_forward(x, y);
}

void gelu_backward(Backend& be, const Tensor& x, const Tensor& dy, Tensor& dx) {
  check_pair(be.device(), x, dy, "gelu_backward");
  check_pair(be.device(), x, dx, "gelu_backward");
  be.kernels<Kernels>().gelu_backward(x, dy, dx);
}

void add(Backend& be, const Tensor& a, const Tensor& b, Tensor& y) {
  check_pair(be.device(), a, b, "add");
  check_pair(be.device(), a, y, "add");
  be.kernels<Kernels>().add(a, b, y);
}

void accumulate(Backend& be, const Tensor& src, Tensor& dst) {
  check_pair(be.device(), src, dst, "accumulate");
  be.kernels<Kernels>().accumulate(src, dst);
}

void scale(Backend& be, Tensor& t, double alpha) {
  check_operand(be.device(), t, "scale", "tensor");
  be.kernels<Kernels>().scale(t, alpha);
}

}  // namespace tb::pointwise
