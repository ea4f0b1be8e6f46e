// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Dynamic loss scaling for fp16 training, with PyTorch GradScaler's semantics:
// the loss gradient is multiplied by `scale` so small gradients survive fp16;
// before the optimizer the gradients are divided by it again and checked for
// inf/NaN; a step with a non-finite gradient is skipped and the scale halves;
// after `growth_interval` clean steps in a row the scale doubles.
//
// All of the state (scale, growth tracker, found_inf, skipped count) lives in a
// small f32 tensor on the backend's device (Backend::kAmpStateSize), and every
// decision is made there by the backend's amp_* kernels, so a training step
// never waits for the host. The host reads the scale only when it asks
// (read_scale(), e.g. every log_every steps for the "loss_scale" series).
//
// How the trainer drives it, once per optimizer step (K micro-batches):
//
//   LossScaler scaler(backend);                  // when policy.needs_loss_scaling()
//   for each micro-batch:
//     forward (conv/linear in the policy's dtype, loss in fp32)
//     backend.softmax_cross_entropy(logits, labels, ls, 1.0f / K, dlogits, stats);
//     scaler.scale_grad(dlogits);                // dlogits *= scale (on the device)
//     backward
//   scaler.unscale(grad_block);                  // every contiguous gradient block
//   [clipping: sum_squares on the UNSCALED gradients; a non-finite norm is fine,
//    the step is skipped anyway]
//   scaler.step(opt_step, slots, multi_tensor);  // skipped on the device if found_inf
//   scaler.update();                             // backoff or growth, clears found_inf
//   refresh the low-precision weight copies (cast) from the fp32 masters
//   every log_every steps: metric "loss_scale" = scaler.read_scale()
//
// opt_step.grad_scale must NOT include 1/scale (unscale already divided).
// Known difference from PyTorch: the host's Adam step count advances on a
// skipped step too (the host does not know it was skipped); the bias
// correction is then off by the number of skipped steps (read_skipped()).
#include <cstdint>
#include <vector>

#include "engine/backend/backend.h"

namespace tb {

struct LossScalerOptions {
  float init_scale = 65536.0f;  // 2^16
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  int64_t growth_interval = 2000;
};

class LossScaler {
 public:
  explicit LossScaler(Backend& backend, const LossScalerOptions& options = {});

  const LossScalerOptions& options() const { return options_; }
  // The device state (f32 [4]: scale, tracker, found_inf, skipped).
  const Tensor& state() const { return state_; }
  Tensor& state() { return state_; }

  void scale_grad(Tensor& loss_grad);  // loss_grad *= scale
  void unscale(Tensor& grads);         // grads /= scale, found_inf |= non-finite
  void step(const OptimizerStep& step, const std::vector<ParamSlot>& slots, bool multi_tensor);
  void update();                       // growth / backoff, found_inf := 0

  // Host reads: these wait for the device (use them every log_every steps, not every step).
  float read_scale() const;
  int64_t read_skipped() const;
  int64_t read_growth_tracker() const;
  bool read_found_inf() const;

 private:
  float read(int i) const;

  Backend& backend_;
  LossScalerOptions options_;
  Tensor state_;
};

}  // namespace tb
