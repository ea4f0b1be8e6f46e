// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Host-side launchers of the backend's own kernels, one block per .cu file.
// The op families already moved keep theirs beside their kernels
// (engine/ops/<family>/<family>.cuh); the rest follow.
// Plain declarations on raw device pointers and a stream: the .cpp files that
// check Tensors call these; the .cu files never see a Tensor or JSON.
// Every launcher enqueues on `s` and returns at once (no host sync) unless it
// says otherwise; every launcher checks the launch (tb::Error on failure).
// Shapes are in the comments: (N, C, H, W) logical; `nhwc` picks the memory order.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tb::cuda {

// ---------------------------------------------------------------- memory.cu
// p[0, n) := pattern, an element of elem_size bytes (1, 2, 4 or 8).
void launch_fill(void* p, int64_t n, int elem_size, uint64_t pattern, cudaStream_t s);
uint16_t half_bits(float v);      // IEEE binary16, round to nearest even
uint16_t bfloat16_bits(float v);  // bfloat16, round to nearest even
void launch_cast_f32_f64(const float* src, double* dst, int64_t n, cudaStream_t s);
void launch_cast_f64_f32(const double* src, float* dst, int64_t n, cudaStream_t s);
// (N,C,H,W) in NCHW -> NHWC (to_nhwc) or back, elements of elem_size bytes.
void launch_convert_layout(const void* src, void* dst, int64_t N, int64_t C, int64_t H, int64_t W,
                           int elem_size, bool to_nhwc, cudaStream_t s);

// ---------------------------------------------------------------- reduce.cu
// out[0] := Σ x² in double, deterministic (fixed grid, fixed tree, no atomics).
// `partials` holds kReducePartials doubles of scratch.
constexpr int kReducePartials = 1024;
template <typename T>
void launch_sum_squares(const T* x, int64_t n, double* partials, double* out, cudaStream_t s);

// ---------------------------------------------------------------- bias.cu
// Per-channel bias of y (N, C, HW): y[n,c,i] += b[c]. A linear layer's y (N, M)
// is (N, M, 1) in either order.
void launch_bias_add(float* y, const float* b, int64_t N, int64_t C, int64_t HW, bool nhwc,
                     cudaStream_t s);
// db[c] (+)= Σ_{n,i} dy[n,c,i], sums in double in a fixed order. Rows-by-channels
// input (NHWC, or a linear layer's HW == 1) sums row slices into `scratch` of
// bias_grad_scratch_bytes() first (0 bytes, scratch unused, for NCHW).
size_t bias_grad_scratch_bytes(int64_t N, int64_t C, int64_t HW, bool nhwc);
void launch_bias_grad(const float* dy, float* db, int64_t N, int64_t C, int64_t HW, bool nhwc,
                      bool accumulate, double* scratch, cudaStream_t s);

// ---------------------------------------------------------------- optimizer.cu
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

// Per-step constants, computed once on the host in double exactly as the CPU
// backend does, then rounded to float where its f32 path rounds them.
struct OptConsts {
  int kind;  // OptimizerKind as int
  double lr, mu, wd, gs, b1, b2, eps, alpha, eta;
  double step_size, inv_sqrt_bc2, inv_bc1, inv_bc2;
  bool nesterov;
  // AMP (amp_ops.cpp): when set, a device flag; every optimizer kernel returns
  // at once while *found_inf != 0, so a skipped step costs no host sync.
  const float* found_inf = nullptr;
  // cuda_graphs (trick 24): when set, a device buffer of kOptConstsBytes from
  // which the norm and elementwise kernels read every constant above but
  // found_inf (written per replay by launch_opt_set_consts). opt_trust reads
  // eta and wd by value: they are fixed for a run.
  const void* dev = nullptr;
};
constexpr size_t kOptConstsBytes = 256;
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

// ---------------------------------------------------------------- amp.cu
// Mixed precision. `state` is the loss scaler's f32 [4] device array
// (scale, growth tracker, found_inf, skipped), see Backend::kAmpStateSize.
// f32 <-> f16/bf16, round to nearest even; n elements.
void launch_cast_f32_f16(const float* src, uint16_t* dst, int64_t n, cudaStream_t s);
void launch_cast_f16_f32(const uint16_t* src, float* dst, int64_t n, cudaStream_t s);
void launch_cast_f32_bf16(const float* src, uint16_t* dst, int64_t n, cudaStream_t s);
void launch_cast_bf16_f32(const uint16_t* src, float* dst, int64_t n, cudaStream_t s);
// t *= state[0]
void launch_amp_scale(float* t, int64_t n, const float* state, cudaStream_t s);
// state[2] := 1 when any g is inf/NaN (never cleared here); g *= 1/state[0].
void launch_amp_unscale_check(float* g, int64_t n, float* state, cudaStream_t s);
// One thread: backoff or growth from state[2], then state[2] := 0.
void launch_amp_update_scale(float* state, float growth, float backoff, int64_t interval,
                             cudaStream_t s);

}  // namespace tb::cuda
