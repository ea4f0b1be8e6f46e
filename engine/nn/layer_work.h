// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The counted work of a layer: FLOPs and bytes moved by one forward or
// backward of its own ops (a residual block's own add and ReLU; its inner
// layers count for themselves), from its shapes and dtypes alone. The one
// place the engine counts work: the per-layer profile's achieved FLOP/s and
// GB/s, `trainbench-engine work` and through it bench/bench_models.py's FLOPs
// per sample read it. What each op family counts is in docs/layers.md.
//
// FLOPs: matrix FLOPs (2 per multiply-add of a convolution's or a linear
// layer's forward, input gradient and weight gradient) apart from the rest
// (bias adds, normalisation, activations, pooling), so that the MFU
// convention (matrix FLOPs only) and the roofline (all FLOPs) read the same
// count. Bytes: every tensor an op reads or writes, counted once per op (the
// compulsory traffic; an op that sweeps a tensor twice, a cache that misses,
// are not counted), at its dtype.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/nn/layer.h"

namespace tb {

struct Work {
  double matrix_flops = 0, other_flops = 0, bytes = 0;
  double flops() const { return matrix_flops + other_flops; }
  Work& operator+=(const Work& o) {
    matrix_flops += o.matrix_flops, other_flops += o.other_flops, bytes += o.bytes;
    return *this;
  }
};

struct WorkQuery {
  LayerPass pass = LayerPass::Forward;
  int64_t batch = 1;             // the input's leading dimension
  bool need_dx = true;           // backward: the input gradient is computed
  bool training = true;          // batch norm: batch statistics (else running ones)
  DType dtype = DType::F32;      // activations (Context::dtype)
  DType matmul = DType::F32;     // convolution and linear operands (amp: f16/bf16)
  Layout layout = Layout::NCHW;  // flatten copies under channels-last
};

// The layer's own work for one pass, from the shapes configure() kept.
// Throws tb::Error for a layer kind it does not know (a new kind must say
// what it counts) or a layer that was not configured.
Work layer_work(const Layer& layer, const WorkQuery& q);

// One row per layer, nested layers included (parent before its children), in
// forward order: name ("layer1.0.conv1"), kind and the work of one forward
// and one backward at `q`'s batch and dtypes. need_dx follows the model's
// walk (Model::input_grad_needed). The model must be built.
struct LayerWorkRow {
  std::string name, kind;
  Work forward, backward;
};
class Model;
std::vector<LayerWorkRow> model_work(const Model& model, WorkQuery q);

}  // namespace tb
