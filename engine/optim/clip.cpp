// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/optim/clip.h"

#include <algorithm>
#include <cmath>

#include "engine/ops/optimizer/optimizer.h"

namespace tb {

namespace {
ClipResult finish(double sum_squares, double max_norm, double grad_scale) {
  ClipResult r;
  r.norm = std::sqrt(sum_squares) * std::abs(grad_scale);
  if (max_norm > 0.0 && std::isfinite(r.norm))
    r.factor = float(std::min(1.0, max_norm / (r.norm + 1e-6)));
  return r;
}
}  // namespace

ClipResult clip_grad_norm(Backend& backend, const Tensor& grad_block, double max_norm,
                          double grad_scale) {
  return finish(optimizer::sum_squares(backend, grad_block), max_norm, grad_scale);
}

ClipResult clip_grad_norm(Backend& backend, const std::vector<ParamInfo>& params, double max_norm,
                          double grad_scale) {
  double ss = 0.0;
  for (const auto& p : params) ss += optimizer::sum_squares(backend, p.grad);
  return finish(ss, max_norm, grad_scale);
}

}  // namespace tb
