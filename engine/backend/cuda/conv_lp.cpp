// SPDX-License-Identifier: GPL-3.0-or-later
// Convolution under AMP on the CUDA backend (the reference: conv2d_*_lp in
// cpu/amp.cpp). The same cuDNN graphs as conv.cpp, keyed with dtype f16/bf16,
// so every tensor of the graph is low precision and the compute type is FLOAT
// (Tensor Core engines, products summed in fp32):
//
//   x (N,Cin,H,W) lp   w (Cout,Cin,KH,KW) lp   b (Cout) f32   y (N,Cout,Ho,Wo)
//   f32 forward:   y_lp = fprop(x, w)          -> y = f32(y_lp) (+ b) backward:
//   dy_lp = lp(dy)
//              dx_lp = dgrad(dy_lp, w)     -> dx = f32(dx_lp)
//              dw_lp = wgrad(dy_lp, x)     -> dw (+)= f32(dw_lp)
//              db (+)= Σ dy (the unrounded f32 dy, bias.cu)
//
// Why an lp output and an extra cast, instead of a graph whose output tensor
// is FLOAT: "same IO type" graphs are the configuration every cuDNN 9 conv
// engine supports; mixed IO was not tried (there was no GPU to try it on). The
// cost is one rounding of each output to f16/bf16 (as PyTorch's autocast
// convolutions have: their outputs are f16/bf16 too) and one cast pass; the
// scratch comes from the stream-ordered caching allocator and goes back to it
// when the op returns. Layouts pass through: NCHW or NHWC activations, KCRS or
// KRSC filters; nothing is transposed.
//
// Ran on an H200 (2026-11-26, commit b0014f2): AMP training passed; the
// output rounding above is what test_op_conv's conv_lp_matches_cpu measured
// (its bound now takes it into account).
#include "engine/backend/cuda/conv_cudnn.h"
#include "engine/backend/cuda/cuda_internal.h"
#include "engine/ops/pointwise/pointwise.cuh"  // launch_accumulate

namespace tb {

using cuda::check_f32;
using cuda::check_on;
using cuda::fptr;

namespace {

bool low_precision(DType t) { return t == DType::F16 || t == DType::BF16; }

void check_lp_inputs(const CudaBackend &be, const char *op,
                     const ConvGeometry &g, const Tensor &x, const Tensor &w) {
  check_on(be, x, op, "x");
  check_on(be, w, op, "weight");
  TB_CHECK(low_precision(x.dtype()) && x.dtype() == w.dtype(), op,
           ": x and weight must share one dtype, f16 or bf16; got ",
           x.describe(), " and ", w.describe());
  TB_CHECK(x.shape() == g.input_shape(), op, ": x ", x.describe(),
           " does not match ", shape_str(g.input_shape()));
  TB_CHECK(w.shape() == g.weight_shape(), op, ": weight ", w.describe(),
           " does not match ", shape_str(g.weight_shape()));
}

// f32 activation-shaped tensor in x's layout.
void check_act_f32(const CudaBackend &be, const char *op, const char *what,
                   const Tensor &t, const Shape &shape, Layout layout) {
  check_on(be, t, op, what);
  check_f32(t, op, what);
  TB_CHECK(t.shape() == shape, op, ": ", what, " ", t.describe(),
           " does not match ", shape_str(shape));
  TB_CHECK(t.layout() == layout, op, ": ", what, " ", t.describe(), " is not ",
           layout_name(layout), " like x (layouts are converted only by copy)");
}

cuda::ConvPlanKey lp_key(cuda::ConvOp op, const ConvGeometry &g,
                         const Tensor &x, const Tensor &w,
                         const BackendOptions &o) {
  cuda::ConvPlanKey k;
  k.op = op;
  k.N = g.N, k.C = g.C_in, k.H = g.H, k.W = g.W;
  k.K = g.C_out, k.R = g.KH, k.S = g.KW;
  k.stride = g.stride, k.pad = g.pad;
  k.dtype = x.dtype(); // f16 or bf16: its own plans, never the f32 ones
  k.x_layout = x.layout();
  k.w_layout = w.layout();
  k.deterministic = o.deterministic;
  k.benchmark = o.cudnn_benchmark;
  return k;
}

cuda::ConvPlanCache &plan_cache(CudaBackend::Impl &m) {
  if (!m.conv)
    m.conv.reset(new cuda::ConvPlanCache(m.cudnn));
  return *m.conv;
}

} // namespace

void CudaBackend::conv2d_forward_lp(const ConvGeometry &g, const Tensor &x,
                                    const Tensor &w, const Tensor &b,
                                    Tensor &y) {
  const char *op = "conv2d_forward_lp";
  check_lp_inputs(*this, op, g, x, w);
  const Layout l = x.layout();
  if (b.defined()) {
    check_on(*this, b, op, "bias");
    check_f32(b, op, "bias");
    expect_shape(b, {g.C_out}, "conv2d_forward_lp: bias");
  }
  check_act_f32(*this, op, "y", y, g.output_shape(), l);
  Impl &m = *impl_;
  m.activate();
  if (g.N == 0)
    return;
  // y_lp (N,Cout,Ho,Wo) in x's dtype and layout: the graph's output.
  Tensor y_lp = empty(g.output_shape(), x.dtype(), l);
  Tensor ws;
  plan_cache(m).run(lp_key(cuda::ConvOp::Fprop, g, x, w, options_), x.data(),
                    w.data(), y_lp.data(), [&](size_t bytes) {
                      return (ws = m.scratch(bytes)).data();
                    });
  cast(y_lp, y);
  if (b.defined())
    cuda::launch_bias_add(fptr(y), fptr(b), g.N, g.C_out, g.H_out * g.W_out,
                          l == Layout::NHWC, m.stream);
}

void CudaBackend::conv2d_backward_lp(const ConvGeometry &g, const Tensor &x,
                                     const Tensor &w, const Tensor &dy,
                                     Tensor &dx, Tensor &dw, Tensor &db,
                                     bool accumulate) {
  const char *op = "conv2d_backward_lp";
  check_lp_inputs(*this, op, g, x, w);
  const Layout l = x.layout();
  check_act_f32(*this, op, "dy", dy, g.output_shape(), l);
  if (dx.defined())
    check_act_f32(*this, op, "dx", dx, g.input_shape(), l);
  if (dw.defined()) {
    check_on(*this, dw, op, "dw");
    check_f32(dw, op, "dw");
    expect_shape(dw, g.weight_shape(), "conv2d_backward_lp: dw");
    TB_CHECK(dw.layout() == w.layout(), op, ": dw ", dw.describe(), " and w ",
             w.describe(), " differ in layout");
  }
  if (db.defined()) {
    check_on(*this, db, op, "db");
    check_f32(db, op, "db");
    expect_shape(db, {g.C_out}, "conv2d_backward_lp: db");
  }
  Impl &m = *impl_;
  m.activate();
  // db from the unrounded dy, as the fp32 layer's.
  if (db.defined()) {
    const int64_t HW = g.H_out * g.W_out;
    const bool nhwc = l == Layout::NHWC;
    Tensor work = m.scratch(cuda::bias_grad_scratch_bytes(g.N, g.C_out, HW, nhwc));
    cuda::launch_bias_grad(fptr(dy), fptr(db), g.N, g.C_out, HW, nhwc, accumulate,
                           work.data_as<double>(), m.stream);
  }
  if (g.N ==
      0) { // an empty batch: zero weight gradients (as the f32 path), no dx
    if (dw.defined() && !accumulate)
      cuda::launch_fill(dw.data(), dw.numel(), 4, 0, m.stream);
    return;
  }
  if (!dx.defined() && !dw.defined())
    return;
  const DType lp = x.dtype();
  // dy rounded once (N,Cout,Ho,Wo), shared by dgrad and wgrad.
  Tensor dy_lp = empty(dy.shape(), lp, l);
  cast(dy, dy_lp);
  Tensor ws;
  auto workspace = [&](size_t bytes) { return (ws = m.scratch(bytes)).data(); };
  if (dx.defined()) {
    Tensor dx_lp = empty(g.input_shape(), lp, l); // (N,Cin,H,W)
    plan_cache(m).run(lp_key(cuda::ConvOp::Dgrad, g, x, w, options_),
                      dy_lp.data(), w.data(), dx_lp.data(), workspace);
    cast(dx_lp, dx);
  }
  if (dw.defined()) {
    Tensor dw_lp = empty(g.weight_shape(), lp, w.layout()); // (Cout,Cin,KH,KW)
    plan_cache(m).run(lp_key(cuda::ConvOp::Wgrad, g, x, w, options_), x.data(),
                      dy_lp.data(), dw_lp.data(), workspace);
    if (accumulate) {
      Tensor dw32 = empty(dw.shape(), DType::F32, dw.layout());
      cast(dw_lp, dw32);
      cuda::launch_accumulate(fptr(dw32), fptr(dw), dw.numel(), m.stream);
    } else {
      cast(dw_lp, dw);
    }
  }
}

} // namespace tb
