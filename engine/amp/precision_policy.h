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
// Status. What this stage gives: with Context::amp enabled, Conv2d and Linear
// cast their f32 input and their f32 master weight to f16/bf16 at every
// forward (the weight copy is refreshed after each optimizer step that way,
// eval included) and call conv::forward/backward (engine/ops/conv) with those
// f16/bf16 operands, or linear::forward/backward (engine/ops/linear) likewise:
// f16/bf16 inputs,
// products summed in fp32, f32 outputs and f32 master gradients. On the GPU
// that is Tensor Core math (cuDNN graphs with f16/bf16 IO, cublasGemmEx with
// CUBLAS_COMPUTE_32F). The trainer drives the loss scaler for fp16 as
// loss_scaler.h describes. The CPU backend has the same ops as a slow
// reference (inputs widened, f32 kernels), so `amp` stays a cuda-only trick.
// What it does not give yet: activations between layers stay f32 (each
// conv/linear keeps an extra low-precision copy of its input for backward), so
// there is no activation-memory or bandwidth saving yet. The families those
// activations flow through take f16/bf16 tensors already (batch norm with f32
// parameters and statistics, pointwise, pooling, channel padding: each value
// read into f32, each output rounded once; their contracts say so); the
// model path that keeps activations in f16/bf16 is the next stage. The CUDA side ran on
// an H200 (2026-11-26, commit b0014f2): AMP training reached its accuracy.
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
