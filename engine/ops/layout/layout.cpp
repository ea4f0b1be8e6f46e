// SPDX-License-Identifier: GPL-3.0-or-later
// The tensor-layout contract's checks (layout.h), one copy for every backend,
// and the entry points.
#include "engine/ops/layout/layout.h"

#include "engine/backend/backend.h"
#include "engine/core/error.h"

namespace tb::layout {

namespace {

// narrow (C channels) and wide (Cp >= C) defined, rank 4, on the backend's
// device, of one dtype (f32 or f64), layout, N, H and W.
PadDims check_pad(Device device, const char* op, const Tensor& narrow, const char* narrow_name,
                  const Tensor& wide, const char* wide_name) {
  for (const Tensor* t : {&narrow, &wide}) {
    const char* what = t == &narrow ? narrow_name : wide_name;
    TB_CHECK(t->defined(), op, ": ", what, " must be defined");
    TB_CHECK(t->device() == device, op, ": ", what, " ", t->describe(), " is not on ",
             device.str());
    TB_CHECK(t->rank() == 4, op, ": expected (N, C, H, W), got ", t->describe());
  }
  TB_CHECK(narrow.dtype() == DType::F32 || narrow.dtype() == DType::F64, op,
           ": expected f32 or f64, got ", narrow.describe());
  expect_dtype(wide, narrow.dtype(), op);
  TB_CHECK(narrow.layout() == wide.layout(), op, ": ", narrow_name, " ", narrow.describe(),
           " and ", wide_name, " ", wide.describe(), " must share one layout");
  TB_CHECK(narrow.n() == wide.n() && narrow.h() == wide.h() && narrow.w() == wide.w() &&
               wide.c() >= narrow.c(),
           op, ": ", wide_name, " ", wide.describe(), " must be ", narrow_name, " ",
           narrow.describe(), " with at least as many channels");
  return {narrow.n(), narrow.c(), wide.c(), narrow.h() * narrow.w(),
          narrow.layout() == Layout::NHWC};
}

}  // namespace

void pad_channels_forward(Backend& be, const Tensor& x, Tensor& y) {
  const PadDims d = check_pad(be.device(), "pad_channels_forward", x, "input x", y, "output y");
  be.kernels<Kernels>().pad_channels_forward(d, x, y);
}

void pad_channels_backward(Backend& be, const Tensor& dy, Tensor& dx) {
  const PadDims d = check_pad(be.device(), "pad_channels_backward", dx, "dx", dy, "gradient dy");
  be.kernels<Kernels>().pad_channels_backward(d, dy, dx);
}

}  // namespace tb::layout
