// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/optim/optimizer.h"

#include <algorithm>
#include <cmath>

#include "engine/core/error.h"
#include "engine/train/config.h"

namespace tb {

OptimizerConfig OptimizerConfig::from_run(const RunConfig& c) {
  OptimizerConfig oc;
  oc.kind = optimizer_from_name(c.optimizer);
  oc.lr = static_cast<float>(c.lr);
  oc.momentum = static_cast<float>(c.momentum);
  oc.nesterov = c.nesterov;
  oc.weight_decay = static_cast<float>(c.weight_decay);
  oc.beta1 = static_cast<float>(c.beta1);
  oc.beta2 = static_cast<float>(c.beta2);
  oc.eps = static_cast<float>(c.eps);
  oc.alpha = static_cast<float>(c.alpha);
  oc.multi_tensor = c.optimizer_foreach;
  return oc;
}

int Optimizer::num_state_blocks(const OptimizerConfig& c) {
  switch (c.kind) {
    case OptimizerKind::SGD:
    case OptimizerKind::LARS: return c.momentum != 0.0f ? 1 : 0;     // momentum buffer
    case OptimizerKind::RMSProp: return c.momentum != 0.0f ? 2 : 1;  // square avg (, momentum)
    case OptimizerKind::AdamW:
    case OptimizerKind::LAMB: return 2;  // first and second moments
  }
  return 0;
}

Optimizer::Optimizer(const OptimizerConfig& config, const std::vector<ParamInfo>& params,
                     Backend& backend)
    : config_(config), backend_(backend) {
  const char* name = optimizer_name(config.kind);
  TB_CHECK(std::isfinite(config.lr) && config.lr >= 0.0f, name, ": lr must be >= 0, got ",
           config.lr);
  TB_CHECK(config.momentum >= 0.0f && config.momentum < 1.0f, name,
           ": momentum must be in [0, 1), got ", config.momentum);
  TB_CHECK(!config.nesterov || (config.kind == OptimizerKind::SGD && config.momentum > 0.0f), name,
           ": nesterov needs sgd with momentum > 0");
  TB_CHECK(config.weight_decay >= 0.0f, name, ": weight_decay must be >= 0, got ",
           config.weight_decay);
  TB_CHECK(
      config.beta1 >= 0.0f && config.beta1 < 1.0f && config.beta2 >= 0.0f && config.beta2 < 1.0f,
      name, ": betas must be in [0, 1), got (", config.beta1, ", ", config.beta2, ")");
  TB_CHECK(config.eps > 0.0f, name, ": eps must be positive, got ", config.eps);
  TB_CHECK(config.alpha >= 0.0f && config.alpha < 1.0f, name, ": alpha must be in [0, 1), got ",
           config.alpha);
  TB_CHECK(config.trust_coefficient > 0.0f, name, ": trust_coefficient must be positive, got ",
           config.trust_coefficient);

  int64_t total = 0;
  for (const auto& p : params) total += p.value.numel();
  const int nstates = num_state_blocks(config);
  if (!params.empty()) {
    const DType dt = params.front().value.dtype();
    for (int s = 0; s < nstates; ++s) {
      Tensor block = backend.empty({std::max<int64_t>(total, 1)}, dt);
      backend.fill(block, 0.0);
      state_blocks_.push_back(block);
    }
  }
  // Slot i's state views sit at the same offset in every state block.
  int64_t offset = 0;
  for (const auto& p : params) {
    ParamSlot slot;
    slot.param = p.value;
    slot.grad = p.grad;
    slot.weight_decay = p.weight_decay;
    const Shape flat{p.value.numel()};
    if (nstates >= 1) slot.state1 = Tensor::view_of(state_blocks_[0], offset, flat);
    if (nstates >= 2) slot.state2 = Tensor::view_of(state_blocks_[1], offset, flat);
    slots_.push_back(slot);
    offset += p.value.numel();
  }
}

void Optimizer::step(float lr, float grad_scale) {
  backend_.optimizer_step(make_step(lr, grad_scale), slots_, config_.multi_tensor);
  ++steps_;
}

void Optimizer::step(float lr, float grad_scale, const Tensor& amp_scaler_state) {
  backend_.optimizer_step_amp(make_step(lr, grad_scale), slots_, config_.multi_tensor,
                              amp_scaler_state);
  ++steps_;
}

void Optimizer::write_constants(float lr, float grad_scale) {
  GraphCapture* graphs = backend_.graphs();
  TB_CHECK(graphs, "optimizer constants for a graph replay (cuda_graphs): the ", backend_.name(),
           " backend captures no graphs");
  graphs->set_optimizer_constants(make_step(lr, grad_scale));
}

OptimizerStep Optimizer::make_step(float lr, float grad_scale) const {
  OptimizerStep s;
  s.kind = config_.kind;
  s.lr = lr;
  s.momentum = config_.momentum;
  s.nesterov = config_.nesterov;
  s.weight_decay = config_.weight_decay;
  s.beta1 = config_.beta1;
  s.beta2 = config_.beta2;
  s.alpha = config_.alpha;
  s.eps = config_.eps;
  s.trust_coefficient = config_.trust_coefficient;
  s.step = steps_ + 1;
  s.grad_scale = grad_scale;
  return s;
}

void Optimizer::reset() {
  for (auto& b : state_blocks_) backend_.fill(b, 0.0);
  steps_ = 0;
}

}  // namespace tb
