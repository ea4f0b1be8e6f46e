// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The element-type dispatch of ops that take f32 or f64.
#include "engine/core/tensor.h"

namespace tb {

// Calls f(T{}) with T = double for an f64 tensor and float otherwise (the
// caller has checked that t is one of the two).
template <typename F>
void by_dtype(const Tensor& t, F&& f) {
  if (t.dtype() == DType::F64)
    f(double{});
  else
    f(float{});
}

}  // namespace tb
