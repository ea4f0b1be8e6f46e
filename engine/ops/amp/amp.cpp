// SPDX-License-Identifier: GPL-3.0-or-later
// The mixed-precision contract's checks (amp.h), one copy for every backend.
#include "engine/ops/amp/amp.h"

#include <string>

#include "engine/backend/backend.h"
#include "engine/core/error.h"

namespace tb::amp {

namespace {

std::string describe_or_undefined(const Tensor& t) {
  return t.defined() ? t.describe() : std::string("undefined");
}

void check_on(const Backend& be, const Tensor& t, const char* op, const char* what) {
  TB_CHECK(t.defined(), op, ": ", what, " must be defined");
  TB_CHECK(t.device() == be.device(), op, ": ", what, " ", t.describe(), " is not on ",
           be.device().str());
}

}  // namespace

bool is_low_precision(DType t) { return t == DType::F16 || t == DType::BF16; }

void check_scaler_state(const Backend& be, const Tensor& state, const char* op) {
  TB_CHECK(state.defined() && state.device() == be.device() && state.dtype() == DType::F32 &&
               state.numel() == kScalerStateSize,
           op, ": scaler state must be f32[", kScalerStateSize, "] on ", be.device().str(),
           ", got ", describe_or_undefined(state));
}

void cast(Backend& be, const Tensor& src, Tensor& dst) {
  const char* op = "cast";
  check_on(be, src, op, "source");
  check_on(be, dst, op, "destination");
  TB_CHECK(src.shape() == dst.shape() && src.layout() == dst.layout(), op, ": ", src.describe(),
           " -> ", dst.describe(), " (same shape and layout)");
  const bool narrow = src.dtype() == DType::F32 && is_low_precision(dst.dtype());
  const bool widen = is_low_precision(src.dtype()) && dst.dtype() == DType::F32;
  TB_CHECK(narrow || widen, op, ": only f32 <-> f16/bf16, got ", src.describe(), " -> ",
           dst.describe(),
           is_low_precision(src.dtype()) && is_low_precision(dst.dtype()) ? " (go through f32)"
                                                                           : "");
  be.kernels<Kernels>().cast(src, dst);
}

Tensor cast_to(Backend& be, const Tensor& src, DType dtype) {
  TB_CHECK(src.defined(), "cast: source is undefined");
  Tensor dst = be.empty(src.shape(), dtype, src.layout());
  cast(be, src, dst);
  return dst;
}

Tensor widened(Backend& be, const Tensor& t) {
  return t.defined() && is_low_precision(t.dtype()) ? cast_to(be, t, DType::F32) : t;
}

Tensor f32_scratch(Backend& be, const Tensor& t) {
  return t.defined() && is_low_precision(t.dtype()) ? be.empty(t.shape(), DType::F32, t.layout())
                                                     : t;
}

void round_into(Backend& be, const Tensor& wide, Tensor& out) {
  if (out.defined() && is_low_precision(out.dtype())) cast(be, wide, out);
}

void scale(Backend& be, Tensor& t, const Tensor& scaler_state) {
  check_scaler_state(be, scaler_state, "amp_scale");
  check_on(be, t, "amp_scale", "tensor");
  be.kernels<Kernels>().scale(t, scaler_state);
}

void unscale_and_check(Backend& be, Tensor& grads, Tensor& scaler_state) {
  check_scaler_state(be, scaler_state, "amp_unscale_and_check");
  check_on(be, grads, "amp_unscale_and_check", "gradients");
  be.kernels<Kernels>().unscale_and_check(grads, scaler_state);
}

void update_scale(Backend& be, Tensor& scaler_state, float growth_factor, float backoff_factor,
                  int64_t growth_interval) {
  check_scaler_state(be, scaler_state, "amp_update_scale");
  TB_CHECK(growth_interval > 0, "amp_update_scale: growth_interval must be > 0, got ",
           growth_interval);
  be.kernels<Kernels>().update_scale(scaler_state, growth_factor, backoff_factor,
                                     growth_interval);
}

}  // namespace tb::amp
