// SPDX-License-Identifier: GPL-3.0-or-later
// The loss contract's checks (loss.h), one copy for every backend.
#include "engine/ops/loss/loss.h"

#include "engine/backend/backend.h"
#include "engine/core/error.h"

namespace tb::loss {

namespace {

void check_defined_on(const Tensor& t, const Tensor& logits, const char* op, const char* what) {
  TB_CHECK(t.defined(), op, ": ", what, " must be defined");
  TB_CHECK(t.device() == logits.device(), op, ": ", what, " ", t.describe(),
           " is not on the device of logits (", logits.describe(), ")");
}

}  // namespace

Dims check_softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                                 float label_smoothing, const Tensor& dlogits,
                                 const Tensor& stats) {
  const char* op = "softmax_cross_entropy";
  TB_CHECK(logits.defined(), op, ": logits must be defined");
  TB_CHECK(logits.rank() == 2, op, ": logits must be (N, K), got ", logits.describe());
  const Dims d{logits.dim(0), logits.dim(1)};
  TB_CHECK(d.K > 0, op, ": no classes in ", logits.describe());
  TB_CHECK(labels.defined(), op, ": labels must be defined");
  TB_CHECK(labels.device() == logits.device() || labels.device().is_cpu(), op, ": labels ",
           labels.describe(), " are neither on the device of logits (", logits.describe(),
           ") nor on the host");
  expect_shape(labels, {d.N}, "softmax_cross_entropy: labels");
  expect_dtype(labels, DType::I32, "softmax_cross_entropy: labels");
  check_defined_on(stats, logits, op, "stats");
  expect_shape(stats, {2}, "softmax_cross_entropy: stats");
  expect_dtype(stats, DType::F64, "softmax_cross_entropy: stats");
  if (dlogits.defined()) {
    check_defined_on(dlogits, logits, op, "dlogits");
    expect_shape(dlogits, logits.shape(), "softmax_cross_entropy: dlogits");
    expect_dtype(dlogits, logits.dtype(), "softmax_cross_entropy: dlogits");
    TB_CHECK(dlogits.data() != logits.data(), op, ": dlogits must not alias logits");
  }
  TB_CHECK(label_smoothing >= 0.0f && label_smoothing <= 1.0f, op,
           ": label smoothing must be in [0, 1], got ", label_smoothing);
  if (labels.device().is_cpu()) {
    const int32_t* y = labels.data_as<int32_t>();
    for (int64_t n = 0; n < d.N; ++n)
      TB_CHECK(y[n] >= 0 && y[n] < d.K, op, ": label ", y[n], " of sample ", n,
               " is outside [0, ", d.K, ")");
  }
  return d;
}

void softmax_cross_entropy(Backend& be, const Tensor& logits, const Tensor& labels,
                           float label_smoothing, float grad_scale, Tensor& dlogits,
                           Tensor& stats) {
  const Dims d = check_softmax_cross_entropy(logits, labels, label_smoothing, dlogits, stats);
  be.kernels<Kernels>().softmax_cross_entropy(d, logits, labels, label_smoothing, grad_scale,
                                              dlogits, stats);
}

}  // namespace tb::loss
