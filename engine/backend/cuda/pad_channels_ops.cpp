// SPDX-License-Identifier: GPL-3.0-or-later
// CudaBackend channel padding (trick 22): argument checks, then the kernels of
// pad_channels.cu on the backend's stream (no host sync).
// Ran on an H200 (2026-11-26, commit b0014f2): test_op_tensor's GPU rows passed.
#include "engine/backend/cuda/cuda_internal.h"

namespace tb {

namespace {

// narrow (N, C, H, W) and wide (N, Cp, H, W), Cp >= C, one dtype (f32/f64) and layout.
void check_pad(const CudaBackend& be, const char* op, const Tensor& narrow, const char* nname,
               const Tensor& wide, const char* wname) {
  cuda::check_on(be, narrow, op, nname);
  cuda::check_on(be, wide, op, wname);
  TB_CHECK(narrow.rank() == 4 && wide.rank() == 4, op, ": expected (N, C, H, W), got ",
           narrow.describe(), " and ", wide.describe());
  TB_CHECK(narrow.dtype() == DType::F32 || narrow.dtype() == DType::F64, op,
           ": expected f32 or f64, got ", narrow.describe());
  expect_dtype(wide, narrow.dtype(), op);
  TB_CHECK(narrow.layout() == wide.layout(), op, ": ", nname, " ", narrow.describe(), " and ",
           wname, " ", wide.describe(), " must share one layout");
  TB_CHECK(narrow.n() == wide.n() && narrow.h() == wide.h() && narrow.w() == wide.w() &&
               wide.c() >= narrow.c(),
           op, ": ", wname, " ", wide.describe(), " must be ", nname, " ", narrow.describe(),
           " with at least as many channels");
}

}  // namespace

void CudaBackend::pad_channels_forward(const Tensor& x, Tensor& y) {
  check_pad(*this, "pad_channels_forward", x, "input x", y, "output y");
  impl_->activate();
  cuda::launch_pad_channels_forward(x.data(), y.data(), x.n(), x.c(), y.c(), x.h() * x.w(),
                                    int(dtype_size(x.dtype())), x.layout() == Layout::NHWC,
                                    impl_->stream);
}

void CudaBackend::pad_channels_backward(const Tensor& dy, Tensor& dx) {
  check_pad(*this, "pad_channels_backward", dx, "dx", dy, "gradient dy");
  impl_->activate();
  cuda::launch_pad_channels_backward(dy.data(), dx.data(), dx.n(), dx.c(), dy.c(), dx.h() * dx.w(),
                                     int(dtype_size(dy.dtype())), dx.layout() == Layout::NHWC,
                                     impl_->stream);
}

}  // namespace tb
