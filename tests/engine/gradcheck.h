// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Finite-difference gradient check of one layer, in double precision on the
// CPU reference backend. With a random upstream gradient g, the scalar
// L(x, θ) = Σ g·layer(x) has dL/dx = layer.backward(g); each analytic partial is
// compared with the central difference (L(+h) − L(−h)) / 2h.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/nn/model.h"

namespace tb::test {

struct GradCheckResult {
  double max_rel_error_dx = 0.0;     // over every input element
  double max_rel_error_params = 0.0;  // over every parameter element
  std::string worst;                  // where the largest error was, for messages
};

// Relative error with a floor of 1e-2 on the denominator: the central difference
// of an O(10) loss carries ~1e-9 of rounding noise, which must not count as a
// large relative error where the true partial is zero (e.g. padded cells).
inline double rel_error(double analytic, double numeric) {
  return std::abs(analytic - numeric) / std::max({1e-2, std::abs(analytic), std::abs(numeric)});
}

// `training` selects train/eval behaviour (e.g. BatchNorm2d batch vs running statistics).
// `layout`: memory order of rank-4 activations and weights (NHWC: channels-last);
// NCHW16C (the CPU's blocked activations) is for activations only: the weights
// stay NCHW, and an input whose channels are not whole blocks stays NCHW (as a
// model's input does).
inline GradCheckResult gradcheck_layer(std::unique_ptr<Layer> layer, const Shape& input_shape,
                                       uint64_t seed, bool training = true, double h = 1e-6,
                                       Layout layout = Layout::NCHW) {
  CpuBackend be(BackendOptions{.reference = true});
  Shape per_sample(input_shape.begin() + 1, input_shape.end());
  Model model("gradcheck", per_sample, 0);
  const std::string layer_name = layer->name();
  model.add(std::move(layer));
  model.build(be, seed, DType::F64, layout == Layout::NCHW16C ? Layout::NCHW : layout);
  Context ctx{be};
  ctx.training = training;
  ctx.dtype = DType::F64;
  ctx.layout = layout;

  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  Layout in_layout = input_shape.size() == 4 ? layout : Layout::NCHW;
  if (in_layout == Layout::NCHW16C && input_shape[1] % kLayoutBlock != 0) in_layout = Layout::NCHW;
  Tensor x = Tensor::empty(input_shape, DType::F64, Device::cpu(), in_layout);
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<double>()[i] = dist(rng);

  Tensor y0 = model.forward(ctx, x);
  Tensor g = Tensor::empty(y0.shape(), DType::F64, Device::cpu(), y0.layout());
  for (int64_t i = 0; i < g.numel(); ++i) g.data_as<double>()[i] = dist(rng);

  auto loss = [&]() {
    Tensor y = model.forward(ctx, x);
    double s = 0.0;
    for (int64_t i = 0; i < y.numel(); ++i) s += y.data_as<double>()[i] * g.data_as<double>()[i];
    return s;
  };

  // Analytic gradients: forward then backward with need_dx (layer 0 of a one-layer
  // model is asked for dx through the layer itself, not Model::backward).
  model.forward(ctx, x);
  ctx.accumulate_grads = false;
  Tensor dx = model.layers()[0]->backward(ctx, g, /*need_dx=*/true);
  Tensor dx_copy = Tensor::empty(dx.shape(), DType::F64);
  std::copy_n(dx.data_as<double>(), dx.numel(), dx_copy.data_as<double>());
  Tensor grad_copy = Tensor::empty(model.grad_block().shape(), DType::F64);
  std::copy_n(model.grad_block().data_as<double>(), grad_copy.numel(),
              grad_copy.data_as<double>());

  GradCheckResult r;
  for (int64_t i = 0; i < x.numel(); ++i) {
    double& xi = x.data_as<double>()[i];
    const double saved = xi;
    xi = saved + h;
    const double lp = loss();
    xi = saved - h;
    const double lm = loss();
    xi = saved;
    const double e = rel_error(dx_copy.data_as<double>()[i], (lp - lm) / (2 * h));
    if (e > r.max_rel_error_dx) {
      r.max_rel_error_dx = e;
      r.worst = layer_name + " dx[" + std::to_string(i) + "]";
    }
  }
  for (const auto& p : model.params()) {
    double* v = p.value.data_as<double>();
    const int64_t base = v - model.param_block().data_as<double>();
    for (int64_t i = 0; i < p.value.numel(); ++i) {
      const double saved = v[i];
      v[i] = saved + h;
      const double lp = loss();
      v[i] = saved - h;
      const double lm = loss();
      v[i] = saved;
      const double e = rel_error(grad_copy.data_as<double>()[base + i], (lp - lm) / (2 * h));
      if (e > r.max_rel_error_params) {
        r.max_rel_error_params = e;
        r.worst = p.name + "[" + std::to_string(i) + "]";
      }
    }
  }
  return r;
}

}  // namespace tb::test
