// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The mixed-precision op family's contract and entry points (amp::cast,
// amp::scale, amp::unscale_and_check, amp::update_scale): f32 <-> f16/bf16
// conversion and the dynamic loss scaler's device side, PyTorch GradScaler's
// semantics. engine/amp/loss_scaler.h drives the scaler; the optimizer family
// (engine/ops/optimizer/optimizer.h) skips a step on its found_inf.
//
// Scaler state  f32 [kScalerStateSize] on the backend's device, and it stays
//               there, so no training step waits for the host:
//                 [0] loss scale   [1] clean steps since the scale last changed
//                 [2] found_inf of the current step (0 or 1)
//                 [3] skipped steps so far
//               Order within one optimizer step: scale(dlogits) -> backward ->
//               unscale_and_check(every gradient block) -> optimizer::step with
//               the state -> update_scale (which clears found_inf).
// cast          dst = src converted elementwise: f32 -> f16/bf16 or back (a
//               pair of low-precision dtypes goes through f32); same shape and
//               layout, round to nearest even (overflow to f16 gives inf, NaN
//               stays NaN).
// scale         t *= state[0], the scale read on the device. t f32 (the CPU
//               also f64).
// unscale_and_check
//               found_inf |= any element of grads is inf or NaN (never cleared
//               here); grads *= 1/state[0] (1/scale in f32: a power of two,
//               exact). grads f32 (the CPU also f64).
// update_scale  found_inf -> scale *= backoff, tracker = 0, skipped += 1;
//               else tracker += 1 and, at growth_interval, scale *= growth
//               (only while the grown scale stays finite), tracker = 0.
//               Then found_inf = 0. growth_interval > 0.
// Devices       every operand on the backend's own device.
//
// Files: amp.cpp (the checks and entry points), amp_cpu.cpp (the reference:
// the scaler's decisions testable without a GPU), amp.cu + amp.cuh (CUDA
// kernels and launchers), amp_cuda.cpp (the CUDA backend's Kernels),
// test_op_amp.cpp. The low-precision linear and convolution ops are not here:
// they belong to the linear and conv families. How a family plugs into a
// backend: engine/ops/registry.h.
#include <cstdint>

#include "engine/core/tensor.h"
#include "engine/ops/registry.h"

namespace tb::amp {

constexpr int64_t kScalerStateSize = 4;

// Entry points: the contract's checks, then this backend's kernels.
void cast(Backend& be, const Tensor& src, Tensor& dst);
// cast into a new tensor of src's shape and layout on be's device: the
// low-precision references widen their f16/bf16 operands with it (exactly:
// every f16 and bf16 value is an f32 value).
Tensor cast_to(Backend& be, const Tensor& src, DType dtype);
void scale(Backend& be, Tensor& t, const Tensor& scaler_state);
void unscale_and_check(Backend& be, Tensor& grads, Tensor& scaler_state);
void update_scale(Backend& be, Tensor& scaler_state, float growth_factor, float backoff_factor,
                  int64_t growth_interval);

// Widen-compute-round, the CPU's f16/bf16 paths of the activation families
// (batch norm, pointwise, pooling): an f16/bf16 operand is computed on as its
// f32 widening (exact), an f16/bf16 output is computed into f32 and rounded
// into it once at the end (round to nearest even, as cast). Any other dtype,
// and an undefined tensor, passes through: widened(t) and f32_scratch(t) are
// t itself and round_into does nothing, so one body serves every dtype.
Tensor widened(Backend& be, const Tensor& t);      // f16/bf16: cast_to(t, f32)
Tensor f32_scratch(Backend& be, const Tensor& t);  // f16/bf16: an uninitialised f32 like t
void round_into(Backend& be, const Tensor& wide, Tensor& out);  // f16/bf16 out: cast
// The three for an op with one output: f(widened(in)..., w), w =
// f32_scratch(out), or widened(out) where f reads out too (`reads_out`:
// accumulate, scale), then round_into(w, out).
template <class F, class... In>
void widen_compute_round(Backend& be, Tensor& out, bool reads_out, F&& f, const In&... in) {
  Tensor w = reads_out ? widened(be, out) : f32_scratch(be, out);
  f(widened(be, in)..., w);
  round_into(be, w, out);
}

// What a backend implements, called with arguments that passed the
// contract's checks. Each checks what it adds (its dtypes) and names the op
// in its errors.
class Kernels : public OpKernels {
 public:
  static constexpr const char* kFamily = "mixed precision";
  virtual void cast(const Tensor& src, Tensor& dst) = 0;
  virtual void scale(Tensor& t, const Tensor& scaler_state) = 0;
  virtual void unscale_and_check(Tensor& grads, Tensor& scaler_state) = 0;
  virtual void update_scale(Tensor& scaler_state, float growth_factor, float backoff_factor,
                            int64_t growth_interval) = 0;
};

// The scaler state's check, shared with the optimizer family: defined, f32
// [kScalerStateSize], on be's device; tb::Error naming `op` otherwise.
void check_scaler_state(const Backend& be, const Tensor& state, const char* op);

bool is_low_precision(DType t);  // f16 or bf16

}  // namespace tb::amp
