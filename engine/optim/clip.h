// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Gradient clipping by global L2 norm, as a factor to fold into the optimizer's
// grad_scale (no pass over the gradients is spent on rescaling them).
#include <vector>

#include "engine/backend/backend.h"
#include "engine/nn/model.h"

namespace tb {

struct ClipResult {
  double norm = 0.0;    // global L2 norm of the true gradients (raw norm × grad_scale)
  float factor = 1.0f;  // min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0
};

// grad_scale: what the stored gradients must be multiplied by to be the true ones
// (1/loss_scale under AMP). A non-finite norm gives factor 1 (the overflow check
// of mixed precision skips that step anyway).
// One reduction over the contiguous gradient block (Model::grad_block()):
ClipResult clip_grad_norm(Backend& backend, const Tensor& grad_block, double max_norm,
                          double grad_scale = 1.0);
// Or tensor by tensor (for gradients that are not one block):
ClipResult clip_grad_norm(Backend& backend, const std::vector<ParamInfo>& params, double max_norm,
                          double grad_scale = 1.0);

}  // namespace tb
