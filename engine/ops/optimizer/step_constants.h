// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// One optimizer step's constants (OptimizerStep, optimizer.h), formed once in
// double by optimizer::step_constants, the same for every backend: the CPU's
// kernels read them as they are, the CUDA launchers get them inside OptConsts
// (optimizer.cuh), which rounds them to float where the f32 path does. Plain
// data, so the .cu files include it too.
namespace tb {

struct StepConstants {
  double lr, mu, wd, gs, b1, b2, eps, alpha, eta;
  double step_size;         // AdamW: lr / (1 − β1^t)
  double inv_sqrt_bc2;      // AdamW: 1 / sqrt(1 − β2^t)
  double inv_bc1, inv_bc2;  // LAMB
  bool nesterov;
};

}  // namespace tb
