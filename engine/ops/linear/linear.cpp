// SPDX-License-Identifier: GPL-3.0-or-later
// The linear contract's checks (linear.h), one copy for every backend.
#include "engine/ops/linear/linear.h"

#include "engine/backend/backend.h"
#include "engine/core/error.h"

namespace tb::linear {

namespace {

// x (N, K) and w (M, K), defined, of one dtype, on one device.
Dims check_xw(const Tensor& x, const Tensor& w, const char* op) {
  TB_CHECK(x.defined() && w.defined(), op, ": x and w must be defined");
  TB_CHECK(x.rank() == 2, op, ": input must be (N, K), got ", x.describe(),
           " (flatten rank-4 activations first)");
  TB_CHECK(w.rank() == 2, op, ": weight must be (M, K), got ", w.describe());
  const int64_t N = x.dim(0), K = x.dim(1), M = w.dim(0);
  TB_CHECK(w.dim(1) == K, op, ": input ", x.describe(), " has ", K, " features but weight ",
           w.describe(), " expects ", w.dim(1));
  TB_CHECK(w.dtype() == x.dtype(), op, ": x ", x.describe(), " and weight ", w.describe(),
           " must share one dtype");
  TB_CHECK(w.device() == x.device(), op, ": weight ", w.describe(), " is not on x's device (",
           x.describe(), ")");
  const DType t = x.dtype();
  return {N, K, M, t == DType::F16 || t == DType::BF16, false};
}

// The dtype of the parameters' operands (b, dw, db): x's, or f32 on the
// mixed-precision path.
DType operand_dtype(const Dims& d, const Tensor& x) {
  return d.low_precision ? DType::F32 : x.dtype();
}

// The activations' dtype (y forward; dy, dx backward) that `act` picks: on
// the mixed-precision path x's dtype when act has it (low-precision
// activations), else the parameters'; the check that follows names a mismatch.
DType activation_dtype(Dims& d, const Tensor& act, const Tensor& x) {
  d.lp_activations = d.low_precision && act.defined() && act.dtype() == x.dtype();
  return d.lp_activations ? x.dtype() : operand_dtype(d, x);
}

// Defined, on x's device, `shape` and `dtype`.
void check_operand(const Tensor& t, const Tensor& x, const Shape& shape, DType dtype,
                   const char* op, const char* what) {
  TB_CHECK(t.defined(), op, ": ", what, " must be defined");
  TB_CHECK(t.device() == x.device(), op, ": ", what, " ", t.describe(),
           " is not on x's device (", x.describe(), ")");
  TB_CHECK(t.dtype() == dtype, op, ": ", what, " ", t.describe(), " must be ", dtype_name(dtype),
           " (x is ", x.describe(), ")");
  TB_CHECK(t.shape() == shape, op, ": ", what, " ", t.describe(), " does not match ",
           shape_str(shape));
}

// The mixed-precision path has no epilogue on any backend (the contract).
void check_no_lp_epilogue(const Dims& d, bool active, Activation act, const Tensor& x,
                          const char* op) {
  TB_CHECK(!d.low_precision || !active, op, ": the ", activation_name(act),
           " epilogue is not supported on ", dtype_name(x.dtype()),
           " inputs (mixed precision takes the plain op)");
}

}  // namespace

Dims check_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                   const Epilogue& epilogue) {
  const char* op = "linear_forward";
  Dims d = check_xw(x, w, op);
  const DType dt = operand_dtype(d, x);
  if (b.defined()) check_operand(b, x, {d.M}, dt, op, "bias");
  check_operand(y, x, {d.N, d.M}, activation_dtype(d, y, x), op, "output y");
  TB_CHECK(!epilogue.residual.defined(), op, ": a residual epilogue is not supported (",
           epilogue.residual.describe(), "; linear takes an activation only)");
  check_no_lp_epilogue(d, epilogue.active(), epilogue.act, x, op);
  const Tensor& pre = epilogue.pre;
  TB_CHECK(epilogue.act != Activation::GELU || pre.defined(), op,
           ": GELU needs the pre-activation buffer `pre` (its backward reads it)");
  if (pre.defined()) {
    TB_CHECK(epilogue.act != Activation::None, op, ": pre ", pre.describe(),
             " given without an activation (nothing would be written to it)");
    check_operand(pre, x, {d.N, d.M}, dt, op, "pre");
    TB_CHECK(pre.data() != y.data(), op, ": pre must be a separate buffer from y ",
             y.describe());
  }
  return d;
}

Dims check_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx,
                    const Tensor& dw, const Tensor& db, const EpilogueGrad& epilogue) {
  const char* op = "linear_backward";
  Dims d = check_xw(x, w, op);
  const DType dt = operand_dtype(d, x);
  const DType act = activation_dtype(d, dy, x);  // dy picks the form; dx follows it
  check_operand(dy, x, {d.N, d.M}, act, op, "gradient dy");
  if (dx.defined()) check_operand(dx, x, {d.N, d.K}, act, op, "dx");
  if (dw.defined()) check_operand(dw, x, {d.M, d.K}, dt, op, "dw");
  if (db.defined()) check_operand(db, x, {d.M}, dt, op, "db");
  TB_CHECK(!epilogue.dresidual.defined(), op, ": dresidual ", epilogue.dresidual.describe(),
           " given, but linear takes no residual");
  check_no_lp_epilogue(d, epilogue.active(), epilogue.act, x, op);
  if (epilogue.act == Activation::None) return d;
  const Tensor& dz = epilogue.dz;
  TB_CHECK(dz.defined(), op, ": the ", activation_name(epilogue.act),
           " epilogue needs a work buffer dz (N, M) of its own");
  check_operand(dz, x, {d.N, d.M}, dt, op, "dz");
  if (epilogue.act == Activation::ReLU)
    check_operand(epilogue.y, x, {d.N, d.M}, dt, op, "y (the ReLU epilogue's mask)");
  else
    check_operand(epilogue.pre, x, {d.N, d.M}, dt, op, "pre (the GELU epilogue's input)");
  for (const Tensor* in : {&dy, &x, &epilogue.y, &epilogue.pre})
    TB_CHECK(!in->defined() || dz.data() != in->data(), op,
             ": dz must be a work buffer of its own (not dy, x, y or pre), got ", dz.describe());
  return d;
}

void forward(Backend& be, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
             const Epilogue& epilogue) {
  const Dims d = check_forward(x, w, b, y, epilogue);
  be.kernels<Kernels>().forward(d, x, w, b, y, epilogue);
}

void backward(Backend& be, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx,
              Tensor& dw, Tensor& db, bool accumulate, const EpilogueGrad& epilogue) {
  const Dims d = check_backward(x, w, dy, dx, dw, db, epilogue);
  be.kernels<Kernels>().backward(d, x, w, dy, dx, dw, db, accumulate, epilogue);
}

}  // namespace tb::linear
