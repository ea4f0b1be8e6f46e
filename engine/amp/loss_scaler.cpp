// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/amp/loss_scaler.h"

#include <cmath>

#include "engine/core/error.h"
#include "engine/ops/amp/amp.h"
#include "engine/ops/optimizer/optimizer.h"

namespace tb {

LossScaler::LossScaler(Backend& backend, const LossScalerOptions& options)
    : backend_(backend), options_(options) {
  TB_CHECK(std::isfinite(options.init_scale) && options.init_scale > 0.0f,
           "loss scaler: init_scale must be finite and > 0, got ", options.init_scale);
  TB_CHECK(options.growth_factor > 1.0f, "loss scaler: growth_factor must be > 1, got ",
           options.growth_factor);
  TB_CHECK(options.backoff_factor > 0.0f && options.backoff_factor < 1.0f,
           "loss scaler: backoff_factor must be in (0, 1), got ", options.backoff_factor);
  TB_CHECK(options.growth_interval > 0, "loss scaler: growth_interval must be > 0, got ",
           options.growth_interval);
  // One upload at construction; afterwards the state never leaves the device
  // unless read_*() asks.
  Tensor host = Tensor::zeros({amp::kScalerStateSize}, DType::F32);
  host.data_as<float>()[0] = options.init_scale;
  state_ = backend_.empty({amp::kScalerStateSize}, DType::F32);
  backend_.copy(host, state_);
}

void LossScaler::scale_grad(Tensor& loss_grad) { amp::scale(backend_, loss_grad, state_); }

void LossScaler::unscale(Tensor& grads) { amp::unscale_and_check(backend_, grads, state_); }

void LossScaler::step(const OptimizerStep& step, const std::vector<ParamSlot>& slots,
                      bool multi_tensor) {
  optimizer::step(backend_, step, slots, multi_tensor, state_);
}

void LossScaler::update() {
  amp::update_scale(backend_, state_, options_.growth_factor, options_.backoff_factor,
                    options_.growth_interval);
}

float LossScaler::read(int i) const {
  Tensor host = Tensor::empty({amp::kScalerStateSize}, DType::F32);
  backend_.copy(state_, host);
  backend_.synchronize();
  return host.data_as<float>()[i];
}

float LossScaler::read_scale() const { return read(0); }
int64_t LossScaler::read_growth_tracker() const { return int64_t(read(1)); }
bool LossScaler::read_found_inf() const { return read(2) != 0.0f; }
int64_t LossScaler::read_skipped() const { return int64_t(read(3)); }

}  // namespace tb
