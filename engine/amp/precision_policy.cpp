// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/amp/precision_policy.h"

#include "engine/core/error.h"

namespace tb {

PrecisionPolicy PrecisionPolicy::from_config(const std::string& amp,
                                             const std::string& activations) {
  PrecisionPolicy p;
  if (amp == "off" || amp.empty())
    p.mode = AmpMode::Off;
  else if (amp == "fp16")
    p.mode = AmpMode::F16;
  else if (amp == "bf16")
    p.mode = AmpMode::BF16;
  else
    TB_FAIL("amp: expected off, fp16 or bf16, got '", amp, "'");
  TB_CHECK(activations == "low" || activations == "f32",
           "amp_activations: expected low or f32, got '", activations, "'");
  if (p.enabled() && activations == "low") p.activations = AmpActivations::LowPrecision;
  return p;
}

DType PrecisionPolicy::compute_dtype() const {
  switch (mode) {
    case AmpMode::F16: return DType::F16;
    case AmpMode::BF16: return DType::BF16;
    case AmpMode::Off: break;
  }
  return DType::F32;
}

DType PrecisionPolicy::dtype_for(AmpOp op) const {
  return (op == AmpOp::Conv || op == AmpOp::Linear) ? compute_dtype() : DType::F32;
}

DType PrecisionPolicy::activation_dtype() const {
  return activations == AmpActivations::LowPrecision ? compute_dtype() : DType::F32;
}

const char* PrecisionPolicy::name() const {
  switch (mode) {
    case AmpMode::F16: return "fp16";
    case AmpMode::BF16: return "bf16";
    case AmpMode::Off: break;
  }
  return "off";
}

}  // namespace tb
