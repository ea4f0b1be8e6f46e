// SPDX-License-Identifier: GPL-3.0-or-later
// The optimizer contract's checks (optimizer.h), one copy for every backend.
#include "engine/ops/optimizer/optimizer.h"

#include <cmath>

#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/ops/amp/amp.h"

namespace tb {

const char* optimizer_name(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::SGD: return "sgd";
    case OptimizerKind::AdamW: return "adamw";
    case OptimizerKind::RMSProp: return "rmsprop";
    case OptimizerKind::LARS: return "lars";
    case OptimizerKind::LAMB: return "lamb";
  }
  return "?";
}

OptimizerKind optimizer_from_name(const std::string& s) {
  for (auto k : {OptimizerKind::SGD, OptimizerKind::AdamW, OptimizerKind::RMSProp,
                 OptimizerKind::LARS, OptimizerKind::LAMB})
    if (s == optimizer_name(k)) return k;
  TB_FAIL("unknown optimizer '", s, "' (expected sgd, adamw, rmsprop, lars or lamb)");
}

namespace optimizer {

namespace {

constexpr const char* kStepOp = "optimizer_step";

void check_on(const Backend& be, const Tensor& t, const char* op, const char* what) {
  TB_CHECK(t.device() == be.device(), op, ": ", what, " ", t.describe(), " is not on ",
           be.device().str());
}

void check_slots(const Backend& be, const OptimizerStep& step,
                 const std::vector<ParamSlot>& slots, const States& states) {
  const char* op = kStepOp;
  const DType dtype = slots.front().param.defined() ? slots.front().param.dtype() : DType::F32;
  for (size_t i = 0; i < slots.size(); ++i) {
    const ParamSlot& s = slots[i];
    TB_CHECK(s.param.defined() && s.grad.defined(), op, ": slot ", i,
             " has no parameter or gradient");
    check_on(be, s.param, op, "parameter");
    check_on(be, s.grad, op, "gradient");
    TB_CHECK(s.param.dtype() == dtype, op, ": parameters must share one dtype, slot ", i, " is ",
             s.param.describe(), ", slot 0 ", slots.front().param.describe());
    TB_CHECK(s.grad.numel() == s.param.numel() && s.grad.dtype() == s.param.dtype(), op,
             ": gradient ", s.grad.describe(), " does not match parameter ", s.param.describe());
    auto check_state = [&](const Tensor& t, bool needed, const char* which) {
      if (!needed) return;
      TB_CHECK(t.defined(), op, ": ", optimizer_name(step.kind), " needs ", which, " for slot ", i,
               " (", s.param.describe(), ")");
      check_on(be, t, op, which);
      TB_CHECK(t.numel() == s.param.numel() && t.dtype() == s.param.dtype(), op, ": ", which, " ",
               t.describe(), " does not match parameter ", s.param.describe());
    };
    check_state(s.state1, states.state1, "state1");
    check_state(s.state2, states.state2, "state2");
  }
}

}  // namespace

StepConstants step_constants(const OptimizerStep& s) {
  StepConstants k{};
  k.lr = s.lr, k.mu = s.momentum, k.wd = s.weight_decay, k.gs = s.grad_scale;
  k.b1 = s.beta1, k.b2 = s.beta2, k.eps = s.eps, k.alpha = s.alpha, k.eta = s.trust_coefficient;
  k.nesterov = s.nesterov;
  const double t = double(s.step);
  const double bc1 = 1.0 - std::pow(double(s.beta1), t);
  const double bc2 = 1.0 - std::pow(double(s.beta2), t);
  k.step_size = s.lr / bc1;
  k.inv_sqrt_bc2 = 1.0 / std::sqrt(bc2);
  k.inv_bc1 = 1.0 / bc1;
  k.inv_bc2 = 1.0 / bc2;
  return k;
}

States needed_states(const OptimizerStep& s) {
  switch (s.kind) {
    case OptimizerKind::SGD:
    case OptimizerKind::LARS: return {s.momentum != 0.0f, false};
    case OptimizerKind::AdamW:
    case OptimizerKind::LAMB: return {true, true};
    case OptimizerKind::RMSProp: return {true, s.momentum != 0.0f};
  }
  return {};
}

void step(Backend& be, const OptimizerStep& step, const std::vector<ParamSlot>& slots,
          bool multi_tensor, const Tensor& scaler_state) {
  if (scaler_state.defined()) amp::check_scaler_state(be, scaler_state, kStepOp);
  if (slots.empty()) return;
  TB_CHECK(step.step >= 1, kStepOp, ": step count must start at 1, got ", step.step);
  const States states = needed_states(step);
  check_slots(be, step, slots, states);
  be.kernels<Kernels>().step(step, slots, states, multi_tensor, scaler_state);
}

double sum_squares(Backend& be, const Tensor& t) {
  const char* op = "sum_squares";
  TB_CHECK(t.defined(), op, ": tensor must be defined");
  check_on(be, t, op, "tensor");
  TB_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::F64, op, ": expected f32 or f64, got ",
           t.describe());
  return be.kernels<Kernels>().sum_squares(t);
}

}  // namespace optimizer

}  // namespace tb
