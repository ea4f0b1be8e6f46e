// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/nn/layer_work.h"

#include "engine/core/error.h"
#include "engine/nn/activations.h"
#include "engine/nn/batchnorm2d.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/linear.h"
#include "engine/nn/model.h"
#include "engine/nn/pad_channels.h"
#include "engine/nn/pooling.h"
#include "engine/nn/residual.h"

namespace tb {

namespace {

// GELU is exact (erf) here: flops per element by convention, as profilers count
// a transcendental (docs/layers.md).
constexpr double kGeluForwardFlops = 8, kGeluBackwardFlops = 12;

// Elements of a configured shape at the query's batch.
double elements(Shape s, int64_t batch) {
  if (s.empty()) return 0;
  s[0] = batch;
  return double(shape_numel(s));
}

double size_of(DType t) { return double(dtype_size(t)); }

// A matrix layer: y (M outputs) = x (X elements) * w (W elements, `k` per
// output's dot product) + bias (B); x and w are cast to the matmul dtype first
// when it differs from the activations' (amp).
struct MatrixShape {
  double outputs, x, w, bias, k;
};

Work matrix_work(const MatrixShape& m, const WorkQuery& q) {
  const double e = size_of(q.dtype), em = size_of(q.matmul);
  const bool cast = q.matmul != q.dtype;
  Work w;
  if (q.pass == LayerPass::Forward) {
    w.matrix_flops = 2 * m.outputs * m.k;
    w.other_flops = m.bias > 0 ? m.outputs : 0;
    if (cast) w.bytes += (m.x + m.w) * (e + em);  // the two casts: read f32, write lp
    w.bytes += (m.x + m.w) * em + m.bias * e + m.outputs * e;
    return w;
  }
  // weight gradient always; input gradient when asked (reads w, writes dx)
  w.matrix_flops = 2 * m.outputs * m.k * (q.need_dx ? 2 : 1);
  w.other_flops = m.bias > 0 ? m.outputs : 0;
  w.bytes = m.outputs * e + m.x * em + m.w * e + m.bias * e;  // dy, x, dw, db
  if (q.need_dx) w.bytes += m.w * em + m.x * e;               // w, dx
  return w;
}

Work conv_work(const Conv2d& c, const WorkQuery& q) {
  const Shape& in = c.input_shape();
  const double k = double(in[1] * c.kernel() * c.kernel());
  const double out = elements(c.output_shape(), q.batch);
  return matrix_work({out, elements(in, q.batch), double(c.out_channels()) * k,
                      c.has_bias() ? double(c.out_channels()) : 0, k},
                     q);
}

Work linear_work(const Layer& l, bool bias, const WorkQuery& q) {
  const double f = double(l.input_shape()[1]), o = double(l.output_shape()[1]);
  return matrix_work({q.batch * o, q.batch * f, o * f, bias ? o : 0, f}, q);
}

// An elementwise op over n elements: `reads` tensors read and one written.
Work pointwise(double n, double reads, double flops_per_element, DType t) {
  return {0, n * flops_per_element, n * (reads + 1) * size_of(t)};
}

Work batchnorm_work(const BatchNorm2d& bn, const WorkQuery& q) {
  const double n = elements(bn.input_shape(), q.batch), C = double(bn.input_shape()[1]);
  const double e = size_of(q.dtype);
  const bool relu = bn.act() == Activation::ReLU, residual = bn.residual_tail();
  Work w;
  if (q.pass == LayerPass::Forward) {
    // x read, y written (residual read); statistics: 3 flops an element when
    // training (sum, square, add), apply: 2 (a multiply-add), +1 add, +1 max.
    w.other_flops = n * ((q.training ? 3 : 0) + 2 + (residual ? 1 : 0) + (relu ? 1 : 0));
    w.bytes = n * e * (2 + (residual ? 1 : 0));
    // per channel: gamma, beta read; training: running mean and variance read
    // and written, the saved mean and inverse std written; eval: running read
    w.bytes += C * e * (q.training ? 8 : 4);
    return w;
  }
  // dy and x read (y too for the ReLU mask); the two channel sums (sum dy,
  // sum dy*xhat: 5 flops an element), dx = a*dy + b*x + c (4), the mask (1);
  // dx and the shortcut's gradient written.
  w.other_flops = n * (5 + (q.need_dx ? 4 : 0) + (relu ? 1 : 0));
  w.bytes = n * e * (2 + (relu ? 1 : 0) + (q.need_dx ? 1 : 0) + (residual ? 1 : 0));
  w.bytes += C * e * 5;  // gamma, saved mean and inverse std read; dgamma, dbeta written
  return w;
}

// Max pooling keeps an i32 argmax per output for its backward.
Work maxpool_work(const MaxPool2d& p, const WorkQuery& q) {
  const double in = elements(p.input_shape(), q.batch), out = elements(p.output_shape(), q.batch);
  const double e = size_of(q.dtype), k2 = double(p.kernel() * p.kernel());
  if (q.pass == LayerPass::Forward) return {0, out * (k2 - 1), in * e + out * (e + 4)};
  if (!q.need_dx) return {};
  return {0, out, out * (e + 4) + in * e};  // dy, argmax read; dx written
}

Work avgpool_work(const AvgPool2d& p, const WorkQuery& q) {
  const double in = elements(p.input_shape(), q.batch), out = elements(p.output_shape(), q.batch);
  const double e = size_of(q.dtype), k2 = double(p.kernel() * p.kernel());
  if (q.pass == LayerPass::Backward && !q.need_dx) return {};
  return {0, out * k2, (in + out) * e};
}

// A layer that reads one tensor and writes one of another size, no FLOPs to speak of.
Work copy_work(double in, double out, DType t) { return {0, 0, (in + out) * size_of(t)}; }

Work residual_work(const ResidualBlock& r, const WorkQuery& q) {
  const double n = elements(r.output_shape(), q.batch);
  Work w;
  if (q.pass == LayerPass::Forward) {
    if (r.fused_tail()) return w;  // the tail's epilogue adds and rectifies
    w += pointwise(n, 2, 1, q.dtype);                       // z = a + s
    if (r.relu_after()) w += pointwise(n, 1, 1, q.dtype);   // relu in place
    return w;
  }
  if (r.relu_after() && !r.fused_tail()) w += pointwise(n, 2, 1, q.dtype);  // dz = dy [z > 0]
  if (q.need_dx) w += pointwise(n, 2, 1, q.dtype);  // dx = main' + shortcut'
  return w;
}

}  // namespace

Work layer_work(const Layer& l, const WorkQuery& q) {
  TB_CHECK(!l.input_shape().empty(), "layer ", l.name(), " (", l.kind(),
           "): no shapes to count its work from (not configured through a model)");
  const bool fwd = q.pass == LayerPass::Forward;
  const double in = elements(l.input_shape(), q.batch), out = elements(l.output_shape(), q.batch);
  if (const auto* c = dynamic_cast<const Conv2d*>(&l)) return conv_work(*c, q);
  if (const auto* lin = dynamic_cast<const Linear*>(&l)) {
    if (lin->act() == Activation::None) return linear_work(l, lin->has_bias(), q);
    // With an activation epilogue (fuse_pointwise): the linear layer in f32
    // with the activation fused; GELU keeps the pre-activation (written
    // forward, read backward), ReLU masks with y; backward writes the masked
    // gradient dz.
    WorkQuery f32 = q;
    f32.matmul = q.dtype;
    Work w = linear_work(l, lin->has_bias(), f32);
    const bool gelu = lin->act() == Activation::GELU;
    const double e = size_of(q.dtype);
    if (fwd) {
      w.other_flops += out * (gelu ? kGeluForwardFlops : 1);
      if (gelu) w.bytes += out * e;
    } else {
      w.other_flops += out * (gelu ? kGeluBackwardFlops : 1);
      w.bytes += 2 * out * e;
    }
    return w;
  }
  if (const auto* bn = dynamic_cast<const BatchNorm2d*>(&l)) return batchnorm_work(*bn, q);
  if (dynamic_cast<const ReLU*>(&l)) {
    if (!fwd && !q.need_dx) return {};
    return pointwise(in, fwd ? 1 : 2, 1, q.dtype);  // backward reads y and dy
  }
  if (dynamic_cast<const GELU*>(&l)) {
    if (!fwd && !q.need_dx) return {};
    return pointwise(in, fwd ? 1 : 2, fwd ? kGeluForwardFlops : kGeluBackwardFlops, q.dtype);
  }
  if (const auto* mp = dynamic_cast<const MaxPool2d*>(&l)) return maxpool_work(*mp, q);
  if (const auto* ap = dynamic_cast<const AvgPool2d*>(&l)) return avgpool_work(*ap, q);
  if (dynamic_cast<const GlobalAvgPool*>(&l)) {
    if (!fwd && !q.need_dx) return {};
    return {0, in, (in + out) * size_of(q.dtype)};  // a sum (forward) or a spread (backward)
  }
  if (dynamic_cast<const Flatten*>(&l)) {
    // a view in NCHW; channels-last and blocked copy to NCHW and back
    if (q.layout == Layout::NCHW || l.input_shape().size() != 4 || (!fwd && !q.need_dx)) return {};
    return copy_work(in, in, q.dtype);
  }
  if (dynamic_cast<const PadChannels*>(&l)) {
    if (fwd) return copy_work(in, out, q.dtype);        // x read, padded y written
    return q.need_dx ? copy_work(in, in, q.dtype) : Work{};  // dy's first channels into dx
  }
  if (const auto* r = dynamic_cast<const ResidualBlock*>(&l)) return residual_work(*r, q);
  TB_FAIL("layer ", l.name(), ": no work count for layer kind '", l.kind(),
          "' (engine/nn/layer_work.cpp)");
}

namespace {

void add_rows(const Layer& l, const std::string& prefix, WorkQuery q, bool need_dx,
              std::vector<LayerWorkRow>& rows) {
  LayerWorkRow row{prefix + l.name(), l.kind(), {}, {}};
  q.pass = LayerPass::Forward;
  q.need_dx = true;
  row.forward = layer_work(l, q);
  q.pass = LayerPass::Backward;
  q.need_dx = need_dx;
  row.backward = layer_work(l, q);
  rows.push_back(row);
  for (const Layer* child : l.children()) add_rows(*child, row.name + ".", q, need_dx, rows);
}

}  // namespace

std::vector<LayerWorkRow> model_work(const Model& model, WorkQuery q) {
  std::vector<LayerWorkRow> rows;
  const auto& layers = model.layers();
  for (size_t i = 0; i < layers.size(); ++i)
    add_rows(*layers[i], "", q, model.input_grad_needed(i), rows);
  return rows;
}

}  // namespace tb
