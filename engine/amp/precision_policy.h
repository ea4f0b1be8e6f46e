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
// bound or numerically delicate (variances, log-softmax, norms), so it
// computes in fp32.
//
// Activations (what flows between layers, forward and backward): f32 when amp
// is off; under amp the policy's activation_dtype(), declared here once:
//   AmpActivations::LowPrecision  f16/bf16 from the first convolution to the
//     logits layer's input, as PyTorch's autocast keeps them: conv and linear
//     read them as they are and write their outputs and input gradients in
//     them (rounded once from f32 sums); batch norm, ReLU, add and pooling
//     read and write them (f32 statistics and parameters inside). The first
//     layer that computes in low precision casts the f32 batch once; the
//     model's output layer writes the logits in f32 for the loss (as
//     autocast runs cross-entropy in f32), and turns the f32 dlogits' input
//     gradient back into the activations' dtype.
//   AmpActivations::F32  the earlier form: f32 between layers, every conv
//     and linear casting its input to f16/bf16 and writing f32. Kept
//     selectable (the `amp_activations` setting, "f32") until a GPU run has
//     measured and confirmed the other form against it in one call.
// fp16's 5-bit exponent underflows small gradients, hence the dynamic loss
// scaler (loss_scaler.h); bf16 has fp32's exponent range and needs none.
//
// Conv2d and Linear cast their f32 master weight to f16/bf16 at every forward
// (so the copy follows each optimizer step, eval included) and call
// conv::/linear::forward/backward (engine/ops/conv, engine/ops/linear) with
// f16/bf16 operands: products summed in f32, f32 master gradients. On the GPU
// that is Tensor Core math (cuDNN graphs with f16/bf16 IO, cuBLAS(Lt) with
// CUBLAS_COMPUTE_32F). The CPU backend has the same ops as a reference
// (inputs widened, f32 kernels) and runs bf16 convolutions on oneDNN's bf16
// kernels where it has them (AVX512_BF16, AMX), but `amp` stays a cuda-only
// trick: with the rest of the step f32 and nChw16c, the casts and reorders
// around each convolution cost more than AMX saves (resnet18-cifar's step
// 1.19x and fmnist-cnn's 1.25-1.33x longer on an AMX Xeon, bench/NOTES.md,
// "Intel at last"); only the test hook runs it on the CPU. The CUDA
// side of the f32-activation form ran on an H200 (2026-11-26, commit
// b0014f2: AMP training reached its accuracy); the low-precision form has not
// run on a GPU.
#include <string>

#include "engine/core/dtype.h"

namespace tb {

enum class AmpMode { Off, F16, BF16 };
enum class AmpActivations { F32, LowPrecision };

// Op families a layer asks about.
enum class AmpOp { Conv, Linear, BatchNorm, Loss, Reduction, Optimizer, Pointwise };

struct PrecisionPolicy {
  AmpMode mode = AmpMode::Off;
  AmpActivations activations = AmpActivations::F32;

  // From the config's amp value ("off", "fp16" or "bf16") and its
  // amp_activations ("low": f16/bf16 between layers, or "f32"); throws
  // tb::Error naming the setting on any other value.
  static PrecisionPolicy from_config(const std::string& amp,
                                     const std::string& activations = "low");

  bool enabled() const { return mode != AmpMode::Off; }
  // The low-precision storage dtype (F32 when off).
  DType compute_dtype() const;
  // Dtype of the inputs, weights and outputs of `op` (accumulation is fp32 either way).
  DType dtype_for(AmpOp op) const;
  // Dtype of the activations and their gradients between layers: f32 when off
  // or with AmpActivations::F32, else the compute dtype.
  DType activation_dtype() const;
  // Dynamic loss scaling is needed for fp16 only.
  bool needs_loss_scaling() const { return mode == AmpMode::F16; }
  const char* name() const;  // "off", "fp16", "bf16"
};

}  // namespace tb
