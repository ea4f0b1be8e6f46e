// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The tensor-layout op family's contract and entry points: channel padding
// (trick 22, pad_channels_to), layout::pad_channels_forward / backward.
// (fill, copy and the NCHW <-> NHWC conversion are Backend's own.)
//
// Shapes    narrow x, dx (N, C, H, W); wide y, dy (N, Cp, H, W), Cp >= C.
// Dtypes    one for both operands: f32, f64, f16 or bf16 (every backend takes
//           all four: the values are moved, never computed on).
// Layouts   NCHW or NHWC (not nChw16c), the same for both operands (never a hidden
//           transpose).
// Devices   both operands on the backend's device.
//
// forward   y[n, c, h, w] = c < C ? x[n, c, h, w] : 0; every channel of y is
//           written, the zero ones too.
// backward  dx[n, c, h, w] = dy[n, c, h, w] for c < C (the slice: the zero
//           channels take no gradient); dx is written, not accumulated into.
// Pure data movement, so every backend gives the same bits.
// Aliasing  the two operands must not overlap (not checked).
//
// Files: layout.cpp (the checks and entry points), layout_cpu.cpp (the CPU
// copy, reference and fast path in one), layout.cu + layout.cuh (CUDA kernels
// and launchers), layout_cuda.cpp (the CUDA backend's Kernels),
// test_op_layout.cpp. How a family plugs into a backend:
// engine/ops/registry.h.
#include <cstdint>

#include "engine/core/tensor.h"
#include "engine/ops/registry.h"

namespace tb::layout {

// Entry points: the contract's checks (layout.cpp, once for every backend),
// then this backend's kernels.
void pad_channels_forward(Backend& be, const Tensor& x, Tensor& y);
void pad_channels_backward(Backend& be, const Tensor& dy, Tensor& dx);

// The narrow side's C, the wide side's Cp, and what both share.
struct PadDims {
  int64_t N, C, Cp, HW;
  bool nhwc;
};

// What a backend implements, called with arguments that passed the
// contract's checks (on this backend's device included) and their PadDims.
class Kernels : public OpKernels {
 public:
  static constexpr const char* kFamily = "tensor layout";
  virtual void pad_channels_forward(const PadDims& d, const Tensor& x, Tensor& y) = 0;
  virtual void pad_channels_backward(const PadDims& d, const Tensor& dy, Tensor& dx) = 0;
};

}  // namespace tb::layout
