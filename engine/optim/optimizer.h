// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The optimizer front end: owns the optimizer state (one contiguous block per
// state kind on the backend's device, zero-filled), builds the ParamSlots that
// point into it, and runs optimizer::step (engine/ops/optimizer/) with the
// current LR.
#include <cstdint>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/nn/model.h"
#include "engine/ops/optimizer/optimizer.h"

namespace tb {

struct RunConfig;

// Defaults follow PyTorch's (torch.optim) where it has one.
struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::SGD;
  float lr = 0.1f;                     // base LR (informational: step() takes the current LR)
  float momentum = 0.0f;               // SGD, RMSProp, LARS
  bool nesterov = false;               // SGD (requires momentum > 0)
  float weight_decay = 0.0f;           // L2 (SGD, RMSProp, LARS) or decoupled (AdamW, LAMB)
  float beta1 = 0.9f, beta2 = 0.999f;  // AdamW, LAMB
  float eps = 1e-8f;
  float alpha = 0.99f;               // RMSProp smoothing
  float trust_coefficient = 0.001f;  // LARS η
  bool multi_tensor = true;  // fused multi-tensor step ("foreach") instead of one pass per tensor

  // A run's optimizer: its optimizer, lr, momentum, ... keys, and
  // optimizer_foreach for multi_tensor.
  static OptimizerConfig from_run(const RunConfig& run);
};

class Optimizer {
 public:
  // params: views into the model's parameter and gradient blocks (Model::params()).
  // The backend must outlive the optimizer. Throws tb::Error on a bad config.
  Optimizer(const OptimizerConfig& config, const std::vector<ParamInfo>& params, Backend& backend);
  Optimizer(const OptimizerConfig& config, const Model& model, Backend& backend)
      : Optimizer(config, model.params(), backend) {}

  // One update of every parameter with learning rate `lr`; gradients are used
  // multiplied by grad_scale (1/loss_scale, times the clipping factor).
  void step(float lr, float grad_scale = 1.0f);
  // The same under fp16 AMP: skipped on the device when the loss scaler's
  // found_inf flag (in amp_scaler_state, see engine/amp/loss_scaler.h) is set.
  // The step count still advances (the host cannot know without a sync).
  void step(float lr, float grad_scale, const Tensor& amp_scaler_state);

  // cuda_graphs: a captured step() bakes its constants into the
  // graph, so its kernels read them from the backend's device copy instead.
  // write_constants puts step steps()+1's there (Backend::set_optimizer_constants,
  // enqueued before the replay); count_replayed_step counts a replay like
  // step() counts itself, so Adam's bias correction advances per replay.
  void write_constants(float lr, float grad_scale = 1.0f);
  void count_replayed_step() { ++steps_; }

  int64_t steps() const { return steps_; }   // completed steps
  void set_steps(int64_t n) { steps_ = n; }  // on resume from a checkpoint
  void reset();                              // zero the state and the step count

  const OptimizerConfig& config() const { return config_; }
  const std::vector<ParamSlot>& param_slots() const { return slots_; }
  // The state blocks (0, 1 or 2 of them, each as long as the parameter block),
  // for checkpoints: SGD/LARS momentum; AdamW/LAMB m, v; RMSProp v (, momentum).
  const std::vector<Tensor>& state_blocks() const { return state_blocks_; }
  static int num_state_blocks(const OptimizerConfig& config);

 private:
  OptimizerConfig config_;
  Backend& backend_;
  std::vector<ParamSlot> slots_;
  std::vector<Tensor> state_blocks_;
  int64_t steps_ = 0;

  OptimizerStep make_step(float lr, float grad_scale) const;
};

}  // namespace tb
