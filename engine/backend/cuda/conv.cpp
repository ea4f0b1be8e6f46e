// SPDX-License-Identifier: GPL-3.0-or-later
// CudaBackend convolutions: argument checks, then conv_cudnn's plan cache.
//
//   x (N, Cin, H, W)   w (Cout, Cin, KH, KW)   b (Cout)   y (N, Cout, Ho, Wo)
//   forward:   y = conv(x, w) (+ b, bias.cu's per-channel add)
//   backward:  dx = dgrad(dy, w) (written);  dw (+)= wgrad(dy, x);  db (+)= Σ dy
// Activations (x, y, dx, dy) share one layout, NCHW or NHWC; the filters have
// their own (NCHW = KCRS, NHWC = KRSC). cuDNN writes dw; accumulate=true runs
// wgrad into scratch and adds it (later: the graph's own scaling, which needs
// a pointwise node, or beta=1 where the engine supports it).
#include "engine/backend/cuda/conv_cudnn.h"
#include "engine/backend/cuda/cuda_internal.h"
#include "engine/ops/pointwise/pointwise.cuh"  // launch_accumulate

namespace tb {

using cuda::check_f32;
using cuda::check_on;
using cuda::fptr;

namespace {

void check_act(const CudaBackend& be, const char* op, const char* what, const Tensor& t,
               const Shape& shape, Layout layout) {
  check_on(be, t, op, what);
  check_f32(t, op, what);
  TB_CHECK(t.shape() == shape, op, ": ", what, " ", t.describe(), " does not match ",
           shape_str(shape));
  TB_CHECK(t.layout() == layout, op, ": ", what, " ", t.describe(), " is not ", layout_name(layout),
           " like x (layouts are converted only by copy)");
}

cuda::ConvPlanKey key_of(cuda::ConvOp op, const ConvGeometry& g, const Tensor& x, const Tensor& w,
                         const BackendOptions& o) {
  cuda::ConvPlanKey k;
  k.op = op;
  k.N = g.N, k.C = g.C_in, k.H = g.H, k.W = g.W;
  k.K = g.C_out, k.R = g.KH, k.S = g.KW;
  k.stride = g.stride, k.pad = g.pad;
  k.dtype = x.dtype();
  k.x_layout = x.layout();
  k.w_layout = w.layout();
  k.deterministic = o.deterministic;
  k.benchmark = o.cudnn_benchmark;
  return k;
}

cuda::ConvPlanCache& cache(CudaBackend::Impl& m) {
  if (!m.conv) m.conv.reset(new cuda::ConvPlanCache(m.cudnn));
  return *m.conv;
}

}  // namespace

size_t CudaBackend::conv_plan_count() const { return impl_->conv ? impl_->conv->size() : 0; }

void CudaBackend::conv2d_forward(const ConvGeometry& g, const Tensor& x, const Tensor& w,
                                 const Tensor& b, Tensor& y) {
  const char* op = "conv2d_forward";
  check_on(*this, x, op, "x");
  const Layout l = x.layout();
  check_act(*this, op, "x", x, g.input_shape(), l);
  check_on(*this, w, op, "weight");
  check_f32(w, op, "weight");
  expect_shape(w, g.weight_shape(), "conv2d_forward: weight");
  if (b.defined()) {
    check_on(*this, b, op, "bias");
    check_f32(b, op, "bias");
    expect_shape(b, {g.C_out}, "conv2d_forward: bias");
  }
  check_act(*this, op, "y", y, g.output_shape(), l);
  Impl& m = *impl_;
  m.activate();
  if (g.N == 0) return;
  Tensor ws;
  cache(m).run(key_of(cuda::ConvOp::Fprop, g, x, w, options_), x.data(), w.data(), y.data(),
               [&](size_t bytes) { return (ws = m.scratch(bytes)).data(); });
  if (b.defined())
    cuda::launch_bias_add(fptr(y), fptr(b), g.N, g.C_out, g.H_out * g.W_out, l == Layout::NHWC,
                          m.stream);
}

void CudaBackend::conv2d_backward(const ConvGeometry& g, const Tensor& x, const Tensor& w,
                                  const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& db,
                                  bool accumulate) {
  const char* op = "conv2d_backward";
  check_on(*this, x, op, "x");
  const Layout l = x.layout();
  check_act(*this, op, "x", x, g.input_shape(), l);
  check_on(*this, w, op, "weight");
  check_f32(w, op, "weight");
  expect_shape(w, g.weight_shape(), "conv2d_backward: weight");
  check_act(*this, op, "dy", dy, g.output_shape(), l);
  if (dx.defined()) check_act(*this, op, "dx", dx, g.input_shape(), l);
  if (dw.defined()) {
    check_on(*this, dw, op, "dw");
    check_f32(dw, op, "dw");
    expect_shape(dw, g.weight_shape(), "conv2d_backward: dw");
    TB_CHECK(dw.layout() == w.layout(), op, ": dw ", dw.describe(), " and w ", w.describe(),
             " differ in layout");
  }
  if (db.defined()) {
    check_on(*this, db, op, "db");
    check_f32(db, op, "db");
    expect_shape(db, {g.C_out}, "conv2d_backward: db");
  }
  Impl& m = *impl_;
  m.activate();
  const bool nhwc = l == Layout::NHWC;
  if (db.defined()) {
    const int64_t HW = g.H_out * g.W_out;
    Tensor work = m.scratch(cuda::bias_grad_scratch_bytes(g.N, g.C_out, HW, nhwc));
    cuda::launch_bias_grad(fptr(dy), fptr(db), g.N, g.C_out, HW, nhwc, accumulate,
                           work.data_as<double>(), m.stream);
  }
  if (g.N == 0) {  // an empty batch: zero weight gradients (as the CPU backend), no dx
    if (dw.defined() && !accumulate) cuda::launch_fill(dw.data(), dw.numel(), 4, 0, m.stream);
    return;
  }
  Tensor ws;
  auto workspace = [&](size_t bytes) { return (ws = m.scratch(bytes)).data(); };
  if (dx.defined())
    cache(m).run(key_of(cuda::ConvOp::Dgrad, g, x, w, options_), dy.data(), w.data(), dx.data(),
                 workspace);
  if (dw.defined()) {
    Tensor out = accumulate ? Tensor::empty(dw.shape(), DType::F32, device(), dw.layout()) : dw;
    cache(m).run(key_of(cuda::ConvOp::Wgrad, g, x, w, options_), x.data(), dy.data(), out.data(),
                 workspace);
    if (accumulate) cuda::launch_accumulate(fptr(out), fptr(dw), dw.numel(), m.stream);
  }
}

}  // namespace tb
