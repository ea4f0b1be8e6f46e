// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Dynamic loss scaling for fp16 training, with PyTorch GradScaler's semantics:
// the loss gradient is multiplied by `scale` so small gradients survive fp16;
// before the optimizer the gradients are divided by it again and checked for
// inf/NaN; a step with a non-finite gradient is skipped and the scale halves;
// after `growth_interval` clean steps in a row the scale doubles.
//
// All of the state (scale, growth tracker, found_inf, skipped count) lives in a
// small f32 tensor on the backend's device (amp::kScalerStateSize), and every
// decision is made there by the amp op family's kernels (engine/ops/amp/), so
// a training step never waits for the host. The host reads the scale only
// when it asks (read_scale(), e.g. every log_every steps for the "loss_scale"
// series).
//
// How the trainer drives it (engine/train/trainer.cpp, the code under
// `if (scaler)`), once per optimizer step of K micro-batches:
//
//   const PrecisionPolicy policy = PrecisionPolicy::from_config(c.amp);
//   std::optional<LossScaler> scaler;
//   if (policy.needs_loss_scaling()) scaler.emplace(be);     // once, before training
//   ...
//   for each micro-batch k:
//     logits = forward(x)                                     // fp32 logits
//     loss::softmax_cross_entropy(be, logits, y, ls, 1.0f / K, dlogits, stats);  // in fp32
//     if (scaler) scaler->scale_grad(dlogits);               // dlogits *= scale, on the device
//     model->backward(ctx, dlogits);
//   if (scaler) scaler->unscale(model->grad_block());        // /= scale, found_inf on the device
//   clipping (if any) as now, on the unscaled gradients: a non-finite norm
//     gives a non-finite factor, harmless since that step is skipped anyway
//   anomaly_check: skip it under fp16 (overflows are expected and handled)
//   if (scaler) optimizer.step(lr, grad_scale, scaler->state());  // skipped on the device
//   else        optimizer.step(lr, grad_scale);
//   if (scaler) scaler->update();                            // backoff/growth, clears found_inf
//   when the train stats are read (log_every / sync_every_step):
//     metrics["loss_scale"] = scaler->read_scale();          // the only host read
//     (optionally metrics["amp_skipped_steps"] = scaler->read_skipped())
//
// grad_scale passed to the optimizer must NOT include 1/scale: unscale() has
// already divided. bf16 needs no scaler (fp32's exponent range).
// Known difference from PyTorch: the host's step count (Adam bias correction)
// advances on a skipped step too; the host cannot know without a sync.
#include <cstdint>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/ops/optimizer/optimizer.h"

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
