// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Which ops run in low precision under mixed precision (trick 1, `amp`).
//
//   amp   compute  low precision              always fp32
//   off   f32      nothing                    everything
//   fp16  f16      conv, linear (IO in f16,   master weights, gradients seen by
//   bf16  bf16     accumulation in fp32)      the optimizer, optimizer state, BN
//                                             statistics, loss, reductions
//
// Only conv and linear gain from Tensor Cores; everything else is bandwidth
// bound or numerically delicate (variances, log-softmax, norms), so it stays
// fp32. fp16's 5-bit exponent underflows small gradients, hence the dynamic
// loss scaler (loss_scaler.h); bf16 has fp32's exponent range and needs none.
//
// Status (see the report in the commit history): the scaler, the casts and the
// low-precision linear (Backend::linear_forward_lp / linear_backward_lp: f16 or
// bf16 inputs, fp32 outputs and sums) exist on the CPU (reference) and CUDA
// backends; the CUDA side is compiled but NOT yet run on a GPU. Not done yet:
// convolutions with f16/bf16 IO through cuDNN graphs (conv_cudnn.cpp), the
// layers' low-precision weight copies (refreshed by Backend::cast after each
// optimizer step) and activation casts, and the trainer's calls.
#include <string>

#include "engine/core/dtype.h"

namespace tb {

enum class AmpMode { Off, F16, BF16 };

// Op families a layer asks about.
enum class AmpOp { Conv, Linear, BatchNorm, Loss, Reduction, Optimizer, Pointwise };

struct PrecisionPolicy {
  AmpMode mode = AmpMode::Off;

  // From the config's amp value: "off", "fp16" or "bf16" (throws tb::Error otherwise).
  static PrecisionPolicy from_config(const std::string& amp);

  bool enabled() const { return mode != AmpMode::Off; }
  // The low-precision storage dtype (F32 when off).
  DType compute_dtype() const;
  // Dtype of the inputs, weights and outputs of `op` (accumulation is fp32 either way).
  DType dtype_for(AmpOp op) const;
  // Dynamic loss scaling is needed for fp16 only.
  bool needs_loss_scaling() const { return mode == AmpMode::F16; }
  const char* name() const;  // "off", "fp16", "bf16"
};

}  // namespace tb
