// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// What the op-family suites share to test f16/bf16 activations (the
// families' widen-compute-round paths and their CUDA kernels):
//
// - lp_of: an f32 tensor rounded to f16/bf16 on a backend (amp::cast), the
//   rounded inputs both sides of a comparison start from;
// - as_f64: a host tensor's values in f64, same shape and layout (every f16,
//   bf16 and f32 value is an f64 value: exact), so a reference can run in
//   f64 on exactly the inputs the low-precision path saw;
// - compare_rounded: an f16/bf16 output against what it approximates, with
//   the bound derived from the rounding below.
//
// Rounding to nearest into f16/bf16 moves a value v by at most u·|v| in the
// normal range, u the unit roundoff: 2^-11 for f16 (11 significand bits),
// 2^-8 for bf16 (8 bits). Below the normal range the step is absolute: half
// the smallest subnormal, 2^-25 for f16 and 2^-134 for bf16 (bf16 has f32's
// exponent range). So an output rounded once from a value v within e of the
// reference r (|v − r| <= e: the f32 arithmetic's own error) lies within
//   u·|v| + e <= u·|r| + (1 + u)·e               (+ the subnormal step);
// and two outputs each rounded once from values within e of each other (the
// CUDA kernel and the CPU path) lie within
//   u·|v1| + u·|v2| + e <= 2u/(1 − u)·|r| + (1 + 2u)·e   (+ two steps),
// r one of the two rounded outputs (|v| <= |r|/(1 − u)).
#include <cmath>
#include <string>

#include "engine/backend/backend.h"
#include "engine/core/tensor.h"
#include "engine/ops/amp/amp.h"
#include "tests/engine/tensor_helpers.h"

namespace tb::test {

// u of f16 or bf16 (gpu_slot.h's roundoff_of).
inline double unit_roundoff(DType t) { return roundoff_of(precision_of(t)); }

// Half the smallest subnormal of f16 or bf16: the absolute rounding step
// below the normal range.
inline double subnormal_step(DType t) {
  return t == DType::F16 ? std::ldexp(1.0, -25) : std::ldexp(1.0, -134);
}

// f32 tensor -> f16/bf16 tensor on the same backend and layout.
inline Tensor lp_of(Backend& b, const Tensor& f32, DType lp) {
  if (!f32.defined()) return f32;
  Tensor t = b.empty(f32.shape(), lp, f32.layout());
  amp::cast(b, f32, t);
  return t;
}

// A host tensor's values as f64, same shape and layout.
inline Tensor as_f64(const Tensor& t) {
  if (!t.defined()) return t;
  Tensor d = Tensor::empty(t.shape(), DType::F64, Device::cpu(), t.layout());
  for (int64_t i = 0; i < t.numel(); ++i) d.data_as<double>()[i] = value_at(t, i);
  return d;
}

// got (f16/bf16, host) against ref (any float dtype, host, any layout) when
// each of `roundings` sides (1: got against an unrounded reference; 2: two
// rounded outputs) rounded once to `lp` a value within e of the other's
// (header comment). With `report`, one tb-tolerance line.
inline Comparison compare_rounded(const Tensor& ref, const Tensor& got, DType lp, int roundings,
                                  double e, const std::string& what,
                                  const char* report = nullptr) {
  const double u = unit_roundoff(lp);
  const double rtol = roundings == 1 ? u : 2.0 * u / (1.0 - u);
  const double atol = (1.0 + roundings * u) * e + roundings * subnormal_step(lp);
  return compare(as_f64(ref), as_f64(got), rtol, atol, what, false, report);
}

}  // namespace tb::test
