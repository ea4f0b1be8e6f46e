// SPDX-License-Identifier: GPL-3.0-or-later
// Mixed precision on the CUDA backend: argument checks and dispatch for amp.cu
// and the optimizer step that skips itself on the device (found_inf is handed
// to the optimizer kernels through OptConsts; see optimizer.cu).
// Semantics are the CPU reference's (engine/backend/cpu/amp.cpp).
//
// Ran on an H200 (2026-11-26, commit b0014f2): test_op_amp and
// test_amp_training's GPU slots passed.
#include "engine/backend/cuda/cuda_internal.h"

namespace tb {

namespace {

bool low_precision(DType t) { return t == DType::F16 || t == DType::BF16; }

float* state_ptr(const CudaBackend& be, const Tensor& s, const char* op) {
  cuda::check_on(be, s, op, "scaler state");
  TB_CHECK(s.dtype() == DType::F32 && s.numel() == Backend::kAmpStateSize, op,
           ": scaler state must be f32[", Backend::kAmpStateSize, "], got ", s.describe());
  return s.data_as<float>();
}

// Restores Impl::opt_found_inf even when optimizer_step throws.
struct FoundInfScope {
  const float*& slot;
  FoundInfScope(const float*& s, const float* v) : slot(s) { slot = v; }
  ~FoundInfScope() { slot = nullptr; }
};

}  // namespace

void CudaBackend::cast(const Tensor& src, Tensor& dst) {
  cuda::check_on(*this, src, "cast", "source");
  cuda::check_on(*this, dst, "cast", "destination");
  TB_CHECK(src.shape() == dst.shape() && src.layout() == dst.layout(), "cast: ", src.describe(),
           " -> ", dst.describe(), " (same shape and layout)");
  impl_->activate();
  const int64_t n = src.numel();
  cudaStream_t s = impl_->stream;
  if (src.dtype() == DType::F32 && dst.dtype() == DType::F16)
    cuda::launch_cast_f32_f16(src.data_as<float>(), dst.data_as<uint16_t>(), n, s);
  else if (src.dtype() == DType::F32 && dst.dtype() == DType::BF16)
    cuda::launch_cast_f32_bf16(src.data_as<float>(), dst.data_as<uint16_t>(), n, s);
  else if (src.dtype() == DType::F16 && dst.dtype() == DType::F32)
    cuda::launch_cast_f16_f32(src.data_as<uint16_t>(), dst.data_as<float>(), n, s);
  else if (src.dtype() == DType::BF16 && dst.dtype() == DType::F32)
    cuda::launch_cast_bf16_f32(src.data_as<uint16_t>(), dst.data_as<float>(), n, s);
  else
    TB_FAIL("cast: only f32 <-> f16/bf16, got ", src.describe(), " -> ", dst.describe(),
            low_precision(src.dtype()) && low_precision(dst.dtype()) ? " (go through f32)" : "");
}

void CudaBackend::amp_scale(Tensor& t, const Tensor& scaler_state) {
  const float* st = state_ptr(*this, scaler_state, "amp_scale");
  cuda::check_on(*this, t, "amp_scale", "tensor");
  cuda::check_f32(t, "amp_scale", "tensor");
  impl_->activate();
  cuda::launch_amp_scale(t.data_as<float>(), t.numel(), st, impl_->stream);
}

void CudaBackend::amp_unscale_and_check(Tensor& grads, Tensor& scaler_state) {
  float* st = state_ptr(*this, scaler_state, "amp_unscale_and_check");
  cuda::check_on(*this, grads, "amp_unscale_and_check", "gradients");
  cuda::check_f32(grads, "amp_unscale_and_check", "gradients");
  impl_->activate();
  cuda::launch_amp_unscale_check(grads.data_as<float>(), grads.numel(), st, impl_->stream);
}

void CudaBackend::optimizer_step_amp(const OptimizerStep& step, const std::vector<ParamSlot>& slots,
                                     bool multi_tensor, const Tensor& scaler_state) {
  const float* st = state_ptr(*this, scaler_state, "optimizer_step_amp");
  FoundInfScope scope(impl_->opt_found_inf, st + 2);
  optimizer_step(step, slots, multi_tensor);
}

void CudaBackend::amp_update_scale(Tensor& scaler_state, float growth_factor, float backoff_factor,
                                   int64_t growth_interval) {
  float* st = state_ptr(*this, scaler_state, "amp_update_scale");
  TB_CHECK(growth_interval > 0, "amp_update_scale: growth_interval must be > 0, got ",
           growth_interval);
  impl_->activate();
  cuda::launch_amp_update_scale(st, growth_factor, backoff_factor, growth_interval, impl_->stream);
}

}  // namespace tb
