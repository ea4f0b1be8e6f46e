// SPDX-License-Identifier: GPL-3.0-or-later
// CpuBackend channel padding (trick 22, pad_channels_to), NCHW and NHWC.
//
//   forward:  x (N, C, H, W) -> y (N, Cp, H, W), Cp >= C
//             y[n,c,h,w] = x[n,c,h,w] for c < C, 0 for C <= c < Cp
//   backward: dy (N, Cp, H, W) -> dx (N, C, H, W),  dx[n,c,h,w] = dy[n,c,h,w]
//
// Pure data movement, so one implementation serves as reference and fast path:
// NCHW copies each image's C planes (one block) and zeroes the Cp-C planes
// after them; NHWC copies C values and zeroes Cp-C per pixel.
#include <algorithm>
#include <cstring>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"

namespace tb {

namespace {

// x is the narrow tensor (C channels), y the wide one (Cp); same N, H, W, dtype, layout.
void check_pad(const char* op, const Tensor& narrow, const char* nname, const Tensor& wide,
               const char* wname) {
  for (const Tensor* t : {&narrow, &wide}) {
    TB_CHECK(t->defined(), op, ": ", t == &narrow ? nname : wname, " must be defined");
    TB_CHECK(t->device().is_cpu(), op, ": ", t->describe(), " given to the cpu backend");
    TB_CHECK(t->rank() == 4, op, ": expected (N, C, H, W), got ", t->describe());
  }
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

void CpuBackend::pad_channels_forward(const Tensor& x, Tensor& y) {
  check_pad("pad_channels_forward", x, "input x", y, "output y");
  const size_t es = dtype_size(x.dtype());
  const int64_t N = x.n(), C = x.c(), Cp = y.c(), HW = x.h() * x.w();
  const char* src = static_cast<const char*>(x.data());
  char* dst = static_cast<char*>(y.data());
  if (x.layout() == Layout::NCHW) {
    for (int64_t n = 0; n < N; ++n) {  // (C, HW) block, then (Cp-C, HW) zeros
      std::memcpy(dst + n * Cp * HW * es, src + n * C * HW * es, C * HW * es);
      std::memset(dst + (n * Cp + C) * HW * es, 0, (Cp - C) * HW * es);
    }
  } else {
    for (int64_t p = 0; p < N * HW; ++p) {  // per pixel: C values, then Cp-C zeros
      std::memcpy(dst + p * Cp * es, src + p * C * es, C * es);
      std::memset(dst + (p * Cp + C) * es, 0, (Cp - C) * es);
    }
  }
}

void CpuBackend::pad_channels_backward(const Tensor& dy, Tensor& dx) {
  check_pad("pad_channels_backward", dx, "dx", dy, "gradient dy");
  const size_t es = dtype_size(dy.dtype());
  const int64_t N = dx.n(), C = dx.c(), Cp = dy.c(), HW = dx.h() * dx.w();
  const char* src = static_cast<const char*>(dy.data());
  char* dst = static_cast<char*>(dx.data());
  if (dx.layout() == Layout::NCHW) {
    for (int64_t n = 0; n < N; ++n)
      std::memcpy(dst + n * C * HW * es, src + n * Cp * HW * es, C * HW * es);
  } else {
    for (int64_t p = 0; p < N * HW; ++p) std::memcpy(dst + p * C * es, src + p * Cp * es, C * es);
  }
}

}  // namespace tb
