// SPDX-License-Identifier: GPL-3.0-or-later
// The CUDA backend's convolutions (contract: conv.h): cuDNN graphs from the
// plan cache (conv_cudnn.h), which this family's Kernels own, one per backend;
// the bias kernels of engine/backend/cuda/bias.cu (shared with linear). Every
// op enqueues on the backend's stream and returns at once. Dtypes: f32, and
// f16/bf16 under mixed precision; f64 is refused (Kernels::supports).
//
// f32:
//   forward:   y = conv(x, w) (+ b, bias.cu's per-channel add)
//   backward:  dx = dgrad(dy, w) (written);  dw (+)= wgrad(dy, x);  db (+)= Σ dy
// cuDNN writes dw; accumulate=true runs wgrad into scratch and adds it (later:
// the graph's own scaling, which needs a pointwise node, or beta=1 where the
// engine supports it).
//
// f16/bf16 (the reference: the low-precision part of conv_cpu.cpp): the same
// cuDNN graphs keyed with dtype f16/bf16, so every tensor of the graph is low
// precision and the compute type is FLOAT (Tensor Core engines, products
// summed in fp32):
//   forward:   y_lp = fprop(x, w)          -> y = f32(y_lp) (+ b)
//   backward:  dy_lp = lp(dy)
//              dx_lp = dgrad(dy_lp, w)     -> dx = f32(dx_lp)
//              dw_lp = wgrad(dy_lp, x)     -> dw (+)= f32(dw_lp)
//              db (+)= Σ dy (the unrounded f32 dy, bias.cu)
// Low-precision activations (y, dy, dx in x's dtype): the same graphs, whose
// lp output is then the op's own: fprop writes y and dgrad dx (no cast, no
// scratch); the bias is added to the lp y in f32 and rounded again
// (bias.cu), db summed from the lp dy; wgrad's lp dw is widened into the f32
// dw as above. So these graphs' input and output tensors are f16/bf16 with
// compute type FLOAT: exactly the graphs the f32-activation form already ran.
// Why an lp output and an extra cast, instead of a graph whose output tensor
// is FLOAT: "same IO type" graphs are the configuration every cuDNN 9 conv
// engine supports; mixed IO was not tried (there was no GPU to try it on). The
// cost is one rounding of each output to f16/bf16 (as PyTorch's autocast
// convolutions have: their outputs are f16/bf16 too) and one cast pass; the
// scratch comes from the stream-ordered caching allocator and goes back to it
// when the op returns. Layouts pass through: NCHW or NHWC activations, KCRS or
// KRSC filters; nothing is transposed.
//
// Ran on an H200 (2026-11-26, commit b0014f2, before the move into this
// folder): AMP training passed; the output rounding above is what
// test_op_conv's conv_lp_matches_cpu measured (its bound now takes it into
// account).
#include <memory>

#include "engine/backend/cuda/cuda_internal.h"
#include "engine/ops/amp/amp.h"
#include "engine/ops/conv/conv.h"
#include "engine/ops/conv/conv_cudnn.h"
#include "engine/ops/pointwise/pointwise.cuh"  // launch_accumulate

namespace tb {

using cuda::fptr;

namespace conv {

namespace {

cuda::ConvPlanKey key_of(cuda::ConvOp op, const ConvGeometry& g, const Tensor& x, const Tensor& w,
                         const BackendOptions& o) {
  cuda::ConvPlanKey k;
  k.op = op;
  k.N = g.N, k.C = g.C_in, k.H = g.H, k.W = g.W;
  k.K = g.C_out, k.R = g.KH, k.S = g.KW;
  k.stride = g.stride, k.pad = g.pad;
  k.dtype = x.dtype();  // f16 or bf16: their own plans, never the f32 ones
  k.x_layout = x.layout();
  k.w_layout = w.layout();
  k.deterministic = o.deterministic;
  k.benchmark = o.cudnn_benchmark;
  return k;
}

class CudaKernels final : public Kernels {
 public:
  explicit CudaKernels(CudaBackend& be)
      : be_(be), m_(be.impl()), plans_(std::make_unique<cuda::ConvPlanCache>(m_.cudnn)) {
    be_.report_kernel_paths(kFamily, [this] { return plans_->describe(); });
  }
  // The plans go before the backend's cuDNN handle (release_kernels runs
  // first in ~CudaBackend); work still queued may use them, so wait for it.
  ~CudaKernels() override {
    if (m_.stream) (void)cudaStreamSynchronize(m_.stream);
  }

  size_t plan_count() const { return plans_->size(); }

  bool supports(DType t) const override { return t == DType::F32 || low_precision(t); }

  void forward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
               Tensor& y) override {
    m_.activate();
    if (g.N == 0) return;
    run(cuda::ConvOp::Fprop, g, x, w, x.data(), w.data(), y.data());
    add_bias(g, b, y);
  }

  void backward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                Tensor& dx, Tensor& dw, Tensor& db, bool accumulate) override {
    if (!begin_backward(g, dy, dw, db, accumulate)) return;
    if (dx.defined()) run(cuda::ConvOp::Dgrad, g, x, w, dy.data(), w.data(), dx.data());
    if (dw.defined()) {
      Tensor out = accumulate ? be_.scratch(dw.shape(), DType::F32, dw.layout()) : dw;
      run(cuda::ConvOp::Wgrad, g, x, w, x.data(), dy.data(), out.data());
      if (accumulate) cuda::launch_accumulate(fptr(out), fptr(dw), dw.numel(), m_.stream);
    }
  }

  void forward_lp(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
                  Tensor& y) override {
    m_.activate();
    if (g.N == 0) return;
    if (y.dtype() == x.dtype()) {  // low-precision activations: the graph writes y
      run(cuda::ConvOp::Fprop, g, x, w, x.data(), w.data(), y.data());
      add_bias(g, b, y);
      return;
    }
    // y_lp (N,Cout,Ho,Wo) in x's dtype and layout: the graph's output.
    Tensor y_lp = be_.scratch(g.output_shape(), x.dtype(), x.layout());
    run(cuda::ConvOp::Fprop, g, x, w, x.data(), w.data(), y_lp.data());
    amp::cast(be_, y_lp, y);
    add_bias(g, b, y);
  }

  void backward_lp(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                   Tensor& dx, Tensor& dw, Tensor& db, bool accumulate) override {
    // db from dy as given: the unrounded f32 dy (as the fp32 layer's), or
    // the low-precision activations' own.
    if (!begin_backward(g, dy, dw, db, accumulate)) return;
    if (!dx.defined() && !dw.defined()) return;
    const DType lp = x.dtype();
    const Layout l = x.layout();
    // f32 dy rounded once (N,Cout,Ho,Wo), shared by dgrad and wgrad; an lp
    // dy is used as it is, and dgrad writes the lp dx itself.
    const bool lp_acts = dy.dtype() == lp;
    Tensor dy_lp = lp_acts ? dy : be_.scratch(dy.shape(), lp, l);
    if (!lp_acts) amp::cast(be_, dy, dy_lp);
    if (dx.defined() && lp_acts) {
      run(cuda::ConvOp::Dgrad, g, x, w, dy_lp.data(), w.data(), dx.data());
    } else if (dx.defined()) {
      Tensor dx_lp = be_.scratch(g.input_shape(), lp, l);  // (N,Cin,H,W)
      run(cuda::ConvOp::Dgrad, g, x, w, dy_lp.data(), w.data(), dx_lp.data());
      amp::cast(be_, dx_lp, dx);
    }
    if (dw.defined()) {
      Tensor dw_lp = be_.scratch(g.weight_shape(), lp, w.layout());  // (Cout,Cin,KH,KW)
      run(cuda::ConvOp::Wgrad, g, x, w, x.data(), dy_lp.data(), dw_lp.data());
      if (accumulate) {
        Tensor dw32 = be_.scratch(dw.shape(), DType::F32, dw.layout());
        amp::cast(be_, dw_lp, dw32);
        cuda::launch_accumulate(fptr(dw32), fptr(dw), dw.numel(), m_.stream);
      } else {
        amp::cast(be_, dw_lp, dw);
      }
    }
  }

 private:
  // Enqueues one cuDNN convolution of x's dtype (operands as
  // ConvPlanCache::run), its workspace the backend's scratch (the pass's
  // memory plan); autotuning's, the largest of all candidates, once, from
  // the caching allocator.
  // An output not 16-byte aligned (a weight gradient at an odd offset of the
  // model's gradient block) is written to scratch and copied: cuDNN 9.19's
  // f32 wgrad engine sm80_xmma_wgrad_implicit_gemm_indexed_f32f32_..._nhwc
  // stored 16 bytes at a time into a dw declared 4-byte aligned, and the
  // device stopped on a misaligned address (H200, 2026-11-28,
  // test_op_conv's conv_bias_grad_of_zero_mean_dy, compute-sanitizer).
  void run(cuda::ConvOp op, const ConvGeometry& g, const Tensor& x, const Tensor& w,
           const void* a, const void* b, void* out) {
    if (cuda::address_alignment(out, kOutputAlignment) < kOutputAlignment) {
      const Shape shape = op == cuda::ConvOp::Fprop   ? g.output_shape()
                          : op == cuda::ConvOp::Dgrad ? g.input_shape()
                                                      : g.weight_shape();
      const size_t bytes = size_t(shape_numel(shape)) * dtype_size(x.dtype());
      Tensor staged = m_.scratch(bytes);
      run(op, g, x, w, a, b, staged.data());
      TB_CUDA_CHECK(cudaMemcpyAsync(out, staged.data(), bytes, cudaMemcpyDeviceToDevice, m_.stream));
      return;
    }
    Tensor ws;
    plans_->run(key_of(op, g, x, w, be_.options()), a, b, out,
                [&](size_t bytes, bool autotuning) {
                  return (ws = autotuning ? m_.allocator_scratch(bytes) : m_.scratch(bytes)).data();
                });
  }
  static constexpr uint32_t kOutputAlignment = 16;

  // y (f32, or f16/bf16 rounded once) += b per output channel (bias.cu),
  // when there is a bias.
  void add_bias(const ConvGeometry& g, const Tensor& b, Tensor& y) {
    if (!b.defined()) return;
    const bool nhwc = y.layout() == Layout::NHWC;
    if (y.dtype() == DType::F32)
      cuda::launch_bias_add(fptr(y), fptr(b), g.N, g.C_out, g.H_out * g.W_out, nhwc, m_.stream);
    else
      cuda::launch_bias_add_lp(y.data_as<uint16_t>(), y.dtype() == DType::BF16, fptr(b), g.N,
                               g.C_out, g.H_out * g.W_out, nhwc, m_.stream);
  }

  // What both backward forms do first: db (+)= Σ dy per channel (bias.cu);
  // for an empty batch, zero weight gradients (as the CPU backend) and no dx,
  // returning false: nothing left to do.
  bool begin_backward(const ConvGeometry& g, const Tensor& dy, Tensor& dw, Tensor& db,
                      bool accumulate) {
    m_.activate();
    if (db.defined()) {
      const int64_t HW = g.H_out * g.W_out;
      const bool nhwc = dy.layout() == Layout::NHWC;
      Tensor work = m_.scratch(cuda::bias_grad_scratch_bytes(g.N, g.C_out, HW, nhwc));
      if (dy.dtype() == DType::F32)
        cuda::launch_bias_grad(fptr(dy), fptr(db), g.N, g.C_out, HW, nhwc, accumulate,
                               work.data_as<double>(), m_.stream);
      else
        cuda::launch_bias_grad_lp(dy.data_as<uint16_t>(), dy.dtype() == DType::BF16, fptr(db),
                                  g.N, g.C_out, HW, nhwc, accumulate, work.data_as<double>(),
                                  m_.stream);
    }
    if (g.N > 0) return true;
    if (dw.defined() && !accumulate) cuda::launch_fill(dw.data(), dw.numel(), 4, 0, m_.stream);
    return false;
  }

  CudaBackend& be_;
  const CudaBackend::Impl& m_;
  std::unique_ptr<cuda::ConvPlanCache> plans_;
};

}  // namespace

void register_cuda_kernels() {
  register_kernels<Kernels, CudaKernels, CudaBackend>(DeviceKind::CUDA);
}

}  // namespace conv

// The plan cache is this family's (CudaKernels above): asking for the count
// makes the family's kernels on a backend that has run no convolution yet.
size_t CudaBackend::conv_plan_count() {
  return static_cast<conv::CudaKernels&>(kernels<conv::Kernels>()).plan_count();
}

}  // namespace tb
