// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// oneDNN's average pooling (count_include_pad, as pooling.h's avg), one of
// the CPU backend's f32 NCHW paths: pooling_cpu.cpp picks it where oneDNN
// runs a JIT kernel for the shape, and our fast loops elsewhere. Built when
// oneDNN was found (TRAINBENCH_ONEDNN; pooling_onednn.cpp joins the library
// only then): check TRAINBENCH_HAVE_ONEDNN before calling.
//
// On the AMD EPYC (Zen 4) development machine, 2 threads, it took a fraction
// of our loops' time at every measured shape, forward and backward
// (bench/cpu_norm_pool_onednn.cpp; the figures: bench/NOTES.md, issue 28).
// Its window sum runs in our
// order (kh, then kw) but it divides by kernel² where we multiply by
// 1/kernel², and its backward adds the overlapping windows' shares in its
// own order: bit-identical for power-of-two kernels without overlap, within
// a rounding per term otherwise (test_op_pooling derives the bound).
// oneDNN's max pooling and batch normalization took more time than our
// loops at every measured shape and are not used.
#include <memory>
#include <string>

#include "engine/ops/pooling/pooling.h"

namespace tb::pooling::onednn {

// The primitives of one backend, made on the first call of each (shape,
// threads) and kept; calls run one at a time.
class AvgPools {
 public:
  AvgPools();
  ~AvgPools();
  AvgPools(const AvgPools&) = delete;
  AvgPools& operator=(const AvgPools&) = delete;

  // oneDNN's implementations of g's forward and backward ("jit:avx512_core",
  // "simple_nchw:any", ...), or why it takes no such shape ("refused: ..."
  // in both). Makes the primitives when new.
  struct Implementations {
    std::string forward, backward;
  };
  const Implementations& implementations(const PoolGeometry& g, int threads);
  // y = avg(x) and dx = avg'(dy), f32 NCHW, g.N > 0; implementations() must
  // not have been refused.
  void forward(const PoolGeometry& g, int threads, const float* x, float* y);
  void backward(const PoolGeometry& g, int threads, const float* dy, float* dx);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Whether an implementation is one of oneDNN's JIT kernels.
bool is_jit(const std::string& implementation);
// Whether oneDNN refused the shape (implementations() said why).
bool is_refused(const std::string& implementation);

}  // namespace tb::pooling::onednn
