// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// oneDNN's convolutions, one of the CPU backend's f32 paths (conv_cpu.cpp
// picks among the reference, im2col + OpenBLAS and these per shape). Built
// when oneDNN was found (TRAINBENCH_ONEDNN; conv_onednn.cpp joins the library
// only then): check TRAINBENCH_HAVE_ONEDNN before calling.
//
// Same contract as conv.h's f32 op: activations NCHW, NHWC or nChw16c as given,
// filters KCRS or KRSC, dx written, dw and db written or added (oneDNN
// writes: `accumulate` goes through a scratch copy and one add, so it adds
// exactly what accumulate=false writes).
//
// Two forms of the activations:
// - AsGiven: oneDNN convolves the caller's layout (NHWC reaches its direct
//   AVX2/AVX-512 kernels; NCHW its own im2col + GEMM);
// - Blocked: oneDNN picks its layout (nChw16c on AVX-512) and the activations
//   are reordered into scratch and back on every call, as PyTorch's CPU
//   convolutions do (but dy once per backward, shared by its data and
//   weights parts); the caller's tensors keep their layout. Given nChw16c
//   activations (the CPU's blocked layout) and picking the same, no reorder
//   runs at all.
// The filters are always reordered into the layout oneDNN picks (small).
//
// Two input dtypes (`in`, x's and w's): f32 (every operand f32), or bf16 with
// y, dy, dx, dw and db f32 (conv.h's mixed-precision form with f32
// activations): oneDNN's bf16 kernels (AMX tiles or AVX512_BF16 dot products,
// f32 sums), dy rounded to bf16 by the reorder into the kernels' layout
// (round to nearest even, as amp::cast) for both backward parts, db summed
// by oneDNN from that rounded dy: callers wanting conv.h's db (from the
// unrounded dy) pass db null and sum it themselves. Direct only (oneDNN has
// no bf16 Winograd); takes() says whether this CPU has bf16 kernels that are
// not oneDNN's reference loops.
//
// Two algorithms: Direct (oneDNN's direct kernels, or its GEMM) and Winograd
// (F(4x4, 3x3), oneDNN's jit_wino_4x3: 3x3 filters, stride 1, channel counts
// in whole 16-blocks, AVX-512 only; about twice as fast as direct on the
// resnet18 and fmnist-cnn 3x3 convolutions, forward, data and weights:
// docs/cpu-conv-paths.md). Its transforms round more than a direct sum
// (test_op_conv's onednn-winograd rows bound it); takes() says which
// problems it has kernels for.
//
// Scratch: those reordered copies, the primitives' own scratchpads
// (scratchpad_mode::user) and accumulate's parts are pieces of one area per
// object, grown to the largest single call's need and shared by every shape
// (the calls run one at a time): resnet18-cifar at batch 64 holds 32 MiB
// where one buffer per shape and operand held 520 MiB.
//
// Threads: oneDNN here runs on OpenMP (Debian's libdnnl2 links libgomp, the
// runtime our own kernels use), with omp_get_max_threads() threads; every
// call sets it to `threads` for its duration, so oneDNN uses the backend's
// count and no second pool exists.
#include <cstdint>
#include <memory>
#include <string>

#include "engine/core/tensor.h"
#include "engine/ops/conv/conv.h"

namespace tb::conv::onednn {

enum class Activations { AsGiven, Blocked };
enum class Algorithm { Direct, Winograd };

// The layouts of one problem: the input side (x, dx), the filters (w, dw) and
// the output side (y, dy; act's unless blocked activations start here).
struct Layouts {
  Layout act = Layout::NCHW, filt = Layout::NCHW, out = Layout::NCHW;
};

// Whether oneDNN's direct (JIT) convolution kernels run on this CPU (AVX2 or
// better); without them it falls back to its own GEMM or reference loops.
bool has_direct_kernels();

// The primitives of one backend, made on the first call of each (op, shape,
// layouts, form, threads) and kept; their scratch area is shared.
class Convolutions {
 public:
  Convolutions();
  ~Convolutions();
  Convolutions(const Convolutions&) = delete;
  Convolutions& operator=(const Convolutions&) = delete;

  // Whether oneDNN has kernels of `alg` for this problem in the form `a` and
  // input dtype `in`: forward (with and without bias), data and weights
  // backward. f32 direct takes any problem with g.N > 0; Winograd needs both
  // channel counts in whole 16-blocks (oneDNN would pad the rest and
  // transform the padding), and then, as for bf16 (direct only; its
  // reference loops do not count), the answer is oneDNN's, asked once per
  // problem and kept.
  bool takes(const ConvGeometry& g, Layouts l, Activations a, Algorithm alg,
             DType in = DType::F32);

  // y = conv(x, w) + b; b may be null. g.N > 0. Returns oneDNN's name of the
  // implementation that ran ("jit:avx512_core", "gemm:jit", ...).
  const std::string& forward(const ConvGeometry& g, Layouts l, Activations a, Algorithm alg,
                             int threads, DType in, const void* x, const void* w,
                             const float* b, float* y);
  // dx written; dw, db written or added (accumulate); each may be null. g.N > 0.
  // Returns the implementations that ran ("data gemm:jit, weights gemm:jit").
  const std::string& backward(const ConvGeometry& g, Layouts l, Activations a, Algorithm alg,
                              int threads, DType in, const void* x, const void* w,
                              const float* dy, float* dx, float* dw, float* db, bool accumulate);

  // The bytes of scratch this object holds between calls: the area, the
  // largest need of one call so far.
  size_t scratch_bytes() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace tb::conv::onednn
