// SPDX-License-Identifier: GPL-3.0-or-later
// The tensor-layout contract's checks (layout.h), one copy for every backend,
// and the entry points.
#include "engine/ops/layout/layout.h"

#include "engine/backend/backend.h"
#include "engine/core/error.h"

namespace tb::layout {

namespace {

// narrow (C channels) and wide (Cp >= C) defined, rank 4, on the backend's
// device, of one dtype (f32, f64, f16 or bf16), layout, N, H and W.
PadDims check_pad(Device device, const char* op, const Tensor& narrow, const char* narrow_name,
                  const Tensor& wide, const char* wide_name) {
  for (const Tensor* t : {&narrow, &wide}) {
    const char* what = t == &narrow ? narrow_name : wide_name;
    TB_CHECK(t->defined(), op, ": ", what, " must be defined");
    TB_CHECK(t->device() == device, op, ": ", what, " ", t->describe(), " is not on ",
             device.str());
    TB_CHECK(t->rank() == 4, op, ": expected (N, C, H, W), got ", t->describe());
  }
  const DType t = narrow.dtype();
  TB_CHECK(t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16, op, ": ",
           narrow_name, " ", narrow.describe(), " must be f32, f64, f16 or bf16");
  TB_CHECK(wide.dtype() == t, op, ": ", wide_name, " ", wide.describe(), " must have ",
           narrow_name, "'s dtype ", dtype_name(t));
  TB_CHECK(narrow.layout() == wide.layout(), op, ": ", narrow_name, " ", narrow.describe(),
           " and ", wide_name, " ", wide.describe(), " must share one layout");
  TB_CHECK(narrow.layout() != Layout::NCHW16C, op, ": ", narrow_name, " ", narrow.describe(),
           ": channel padding takes NCHW or NHWC (a model's input, before its first "
           "convolution), not the blocked nChw16c");
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
