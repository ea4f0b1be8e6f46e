// SPDX-License-Identifier: GPL-3.0-or-later
// The CPU backend's channel padding (trick 22, pad_channels_to; contract:
// layout.h), NCHW and NHWC.
//
//   forward:  x (N, C, H, W) -> y (N, Cp, H, W), Cp >= C
//             y[n,c,h,w] = x[n,c,h,w] for c < C, 0 for C <= c < Cp
//   backward: dy (N, Cp, H, W) -> dx (N, C, H, W),  dx[n,c,h,w] = dy[n,c,h,w]
//
// Pure data movement, so one implementation serves as reference and fast path:
// NCHW copies each image's C planes (one block) and zeroes the Cp-C planes
// after them; NHWC copies C values and zeroes Cp-C per pixel.
#include <cstring>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/ops/layout/layout.h"

namespace tb {

namespace {

using layout::PadDims;

class CpuKernels final : public layout::Kernels {
 public:
  explicit CpuKernels(CpuBackend&) {}

  void pad_channels_forward(const PadDims& d, const Tensor& x, Tensor& y) override;
  void pad_channels_backward(const PadDims& d, const Tensor& dy, Tensor& dx) override;
};

}  // namespace

void CpuKernels::pad_channels_forward(const PadDims& d, const Tensor& x, Tensor& y) {
  const size_t es = dtype_size(x.dtype());
  const int64_t N = d.N, C = d.C, Cp = d.Cp, HW = d.HW;
  const char* src = static_cast<const char*>(x.data());
  char* dst = static_cast<char*>(y.data());
  if (!d.nhwc) {
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

void CpuKernels::pad_channels_backward(const PadDims& d, const Tensor& dy, Tensor& dx) {
  const size_t es = dtype_size(dy.dtype());
  const int64_t N = d.N, C = d.C, Cp = d.Cp, HW = d.HW;
  const char* src = static_cast<const char*>(dy.data());
  char* dst = static_cast<char*>(dx.data());
  if (!d.nhwc) {
    for (int64_t n = 0; n < N; ++n)
      std::memcpy(dst + n * C * HW * es, src + n * Cp * HW * es, C * HW * es);
  } else {
    for (int64_t p = 0; p < N * HW; ++p) std::memcpy(dst + p * C * es, src + p * Cp * es, C * es);
  }
}

namespace layout {
void register_cpu_kernels() { register_kernels<Kernels, CpuKernels, CpuBackend>(DeviceKind::CPU); }
}  // namespace layout

}  // namespace tb
