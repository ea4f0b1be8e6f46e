// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The optimizer op family's contract and entry points (optimizer::step,
// optimizer::sum_squares): one update of every parameter tensor by SGD,
// AdamW, RMSProp, LARS or LAMB with PyTorch's semantics, optionally skipped
// on the device under AMP; and the sum of squares gradient clipping reads.
// engine/optim/optimizer.h owns the parameters' state blocks and calls step.
//
// step      every slot is a parameter p with gradient g and optimizer state
//           s1/s2 (state1/state2); g is multiplied by grad_scale before
//           anything else. Slots with weight_decay = false (biases, BN
//           affine) get no decay. t = OptimizerStep::step (1-based).
//   SGD     g += wd·p;  b = μ·b + g;  g = nesterov ? g + μ·b : b;  p −= lr·g
//           (b starts at zero, so the first step gives b = g exactly)
//   AdamW   p −= lr·wd·p;  m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²
//           p −= lr/(1−β1^t) · m / (sqrt(v)/sqrt(1−β2^t) + eps)
//   RMSProp g += wd·p;  v = α·v + (1−α)·g²;  a = sqrt(v) + eps
//           momentum: b = μ·b + g/a, p −= lr·b;  else p −= lr·g/a
//   LARS    trust = η·‖p‖/(‖g‖ + wd·‖p‖) (1 when a norm is zero, and for
//           no-decay slots); b = μ·b + trust·(g + wd·p);  p −= lr·b
//   LAMB    m, v as AdamW;  u = m̂/(sqrt(v̂) + eps) + wd·p
//           trust = ‖p‖/‖u‖ (1 when a norm is zero);  p −= lr·trust·u
//           Norms are per parameter tensor (slot).
// States    which of state1/state2 a slot must carry (needed_states):
//           SGD, LARS: state1 (momentum buffer) when momentum ≠ 0;
//           AdamW, LAMB: both (m, v); RMSProp: state1 (v), state2 (b) when
//           momentum ≠ 0. A state not needed is ignored (may be undefined).
// multi_tensor  false: one pass (launch) per parameter tensor; true: all
//           tensors in one (or a few) passes. Both give the same bits.
// AMP       with scaler_state defined (f32 [amp::kScalerStateSize], see
//           engine/ops/amp/amp.h) the step is skipped when its found_inf
//           ([2]) is set: parameters and state stay bit-unchanged, decided on
//           the device (no host sync).
// sum_squares  Σ t², accumulated in double, returned on the host (waits for
//           the device); deterministic (the same bits every run).
// Shapes    grad and states have param's element count and dtype; layouts
//           are irrelevant (elementwise over the storage).
// Dtypes    every slot's param has the first's dtype: f32 or f64 on the CPU,
//           f32 on CUDA. sum_squares: f32 or f64.
// Devices   every operand on the backend's own device.
// Aliasing  slots must not share parameters, gradients or states (not
//           checked: the fused pass may run their chunks on several threads).
//
// Files: optimizer.cpp (the checks and entry points), optimizer_cpu.cpp
// (reference and fast f32 path), optimizer.cu + sum_squares.cu +
// optimizer.cuh (CUDA kernels and launchers), optimizer_cuda.cpp (the CUDA
// backend's Kernels and its set_optimizer_constants for graph replays),
// test_op_optim.cpp. How a family plugs into a backend: engine/ops/registry.h.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/ops/optimizer/step_constants.h"
#include "engine/ops/registry.h"

namespace tb {

enum class OptimizerKind { SGD, AdamW, RMSProp, LARS, LAMB };
const char* optimizer_name(OptimizerKind k);
OptimizerKind optimizer_from_name(const std::string& s);  // throws tb::Error

// Hyper-parameters of one optimizer step. Gradients are multiplied by
// grad_scale before use (1/loss_scale under AMP, times the clipping factor).
struct OptimizerStep {
  OptimizerKind kind = OptimizerKind::SGD;
  float lr = 0.01f;
  float momentum = 0.0f;      // SGD, RMSProp, LARS
  bool nesterov = false;      // SGD
  float weight_decay = 0.0f;  // L2 for SGD/RMSProp/LARS, decoupled for AdamW/LAMB
  float beta1 = 0.9f, beta2 = 0.999f;  // AdamW, LAMB
  float alpha = 0.99f;        // RMSProp smoothing
  float eps = 1e-8f;
  float trust_coefficient = 0.001f;  // LARS
  int64_t step = 1;           // 1-based count, for Adam bias correction
  float grad_scale = 1.0f;
};

// One parameter tensor with its gradient and optimizer state (views into the
// contiguous blocks). state1/state2 are undefined when the optimizer needs none.
struct ParamSlot {
  Tensor param, grad, state1, state2;
  bool weight_decay = true;  // false for biases and BN affine parameters
};

}  // namespace tb

namespace tb::optimizer {

// Entry points: the contract's checks, then this backend's kernels.
// scaler_state undefined: a plain step; defined: skipped on found_inf (AMP).
void step(Backend& be, const OptimizerStep& step, const std::vector<ParamSlot>& slots,
          bool multi_tensor, const Tensor& scaler_state = {});
double sum_squares(Backend& be, const Tensor& t);

// Which optimizer states every slot carries for `step`'s kind (States above).
struct States {
  bool state1 = false, state2 = false;
};
States needed_states(const OptimizerStep& step);

// The step's constants in double (step_constants.h), as every backend uses them.
StepConstants step_constants(const OptimizerStep& step);

// What a backend implements, called with arguments that passed the
// contract's checks (slots non-empty, states as `states` says, one dtype).
// Each checks what it adds (its dtypes) and names the op in its errors.
class Kernels : public OpKernels {
 public:
  static constexpr const char* kFamily = "optimizer";
  virtual void step(const OptimizerStep& step, const std::vector<ParamSlot>& slots,
                    const States& states, bool multi_tensor, const Tensor& scaler_state) = 0;
  virtual double sum_squares(const Tensor& t) = 0;
};

}  // namespace tb::optimizer
