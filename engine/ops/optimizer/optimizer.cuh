// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The optimizer family's CUDA launchers (optimizer.cu, sum_squares.cu) on raw
// device pointers and a stream: optimizer_cuda.cpp checks the Tensors, builds
// the chunk descriptors and calls these; the .cu files never see a Tensor.
// Each enqueues on `s` and returns at once; each checks its launches
// (tb::Error on failure).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/ops/optimizer/step_constants.h"

namespace tb::cuda {

// One piece of one parameter tensor: pointers already offset to the piece.
struct OptChunk {
  float* p;
  const float* g;
  float* s1;  // null when the optimizer does not use it
  float* s2;
  int64_t n;      // elements in this chunk (<= kOptChunk)
  int32_t slot;   // index of the parameter tensor
  int32_t decay;  // weight decay applies (0 for biases / BN affine)
};
constexpr int64_t kOptChunk = 1 << 16;  // elements per chunk (the CPU's fused pass uses the same)

// A step's descriptors: every slot cut into kOptChunk pieces, in slot order;
// slot_begin[i] is slot i's first chunk (one entry more: the end), decay[i]
// whether slot i takes weight decay.
struct OptChunks {
  std::vector<OptChunk> chunks;
  std::vector<int64_t> slot_begin;
  std::vector<int32_t> decay;
};
// The descriptors of `params` (ParamSlots: param, grad, state1, state2 of
// f32, weight_decay), the states given where the optimizer has them. Host
// code: optimizer_cuda.cpp, and the tests that run the kernels on the
// emulator. (Not `slots`: Qt makes that word a macro in the tests.)
template <class Slots>
OptChunks chunks_of(const Slots& params, bool with_state1, bool with_state2) {
  OptChunks d;
  d.slot_begin.reserve(params.size() + 1);
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& s = params[i];
    float* s1 = with_state1 ? s.state1.template data_as<float>() : nullptr;
    float* s2 = with_state2 ? s.state2.template data_as<float>() : nullptr;
    float* p = s.param.template data_as<float>();
    const float* g = s.grad.template data_as<float>();
    d.slot_begin.push_back(int64_t(d.chunks.size()));
    d.decay.push_back(s.weight_decay ? 1 : 0);
    for (int64_t off = 0; off < s.param.numel(); off += kOptChunk)
      d.chunks.push_back({p + off, g + off, s1 ? s1 + off : nullptr, s2 ? s2 + off : nullptr,
                          std::min(kOptChunk, s.param.numel() - off), int32_t(i),
                          s.weight_decay ? 1 : 0});
  }
  d.slot_begin.push_back(int64_t(d.chunks.size()));
  return d;
}

// Per-step constants: the CPU backend's (StepConstants, in double), rounded
// to float by the kernels where its f32 path rounds them.
struct OptConsts : StepConstants {
  int kind;  // OptimizerKind as int
  // AMP (optimizer::step with a scaler state): when set, a device flag; every
  // optimizer kernel returns at once while *found_inf != 0, so a skipped step
  // costs no host sync.
  const float* found_inf = nullptr;
  // cuda_graphs (trick 24): when set, a device buffer of kOptConstsBytes from
  // which the norm and elementwise kernels read every constant above but
  // found_inf (written per replay by launch_opt_set_consts). opt_trust reads
  // eta and wd by value: they are fixed for a run.
  const void* dev = nullptr;
};
constexpr size_t kOptConstsBytes = 256;
// The launchers' constants for a step of `kind` (OptimizerKind as int).
inline OptConsts launch_consts(int kind, const StepConstants& c) {
  OptConsts k{};
  static_cast<StepConstants&>(k) = c;
  k.kind = kind;
  return k;
}
// *dev := k's constants as the kernels use them (one thread, on stream s).
void launch_opt_set_consts(const OptConsts& k, void* dev, cudaStream_t s);

// Elementwise pass (SGD, AdamW, RMSProp; LARS/LAMB apply with trust[slot]) over
// chunks[first, first+count) of the device array `chunks`.
void launch_opt_elementwise(const OptConsts& k, const OptChunk* chunks, int64_t first,
                            int64_t count, const double* trust, cudaStream_t s);
// Norm pass (LARS: Σp², Σg²; LAMB: moments update + Σp², Σu²) writing
// partials[2·chunk + {0, 1}] for chunks[first, first+count).
void launch_opt_norms(const OptConsts& k, const OptChunk* chunks, int64_t first, int64_t count,
                      double* partials, cudaStream_t s);
// trust[slot] for slots [first_slot, first_slot+slot_count) from the partials
// of their chunks; slot_begin[i]..slot_begin[i+1] are slot i's chunk indices;
// decay[i] says whether slot i takes weight decay.
void launch_opt_trust(const OptConsts& k, const double* partials, const int64_t* slot_begin,
                      const int32_t* decay, int64_t first_slot, int64_t slot_count, double* trust,
                      cudaStream_t s);

// sum_squares.cu: out[0] := Σ x² in double, deterministic (fixed grid, fixed
// tree, no atomics). `partials` holds kReducePartials doubles of scratch.
constexpr int kReducePartials = 1024;
template <typename T>
void launch_sum_squares(const T* x, int64_t n, double* partials, double* out, cudaStream_t s);

}  // namespace tb::cuda
