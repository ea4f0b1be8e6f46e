// SPDX-License-Identifier: GPL-3.0-or-later
// The CUDA backend's mixed-precision Kernels (contract: amp.h): this
// backend's own checks (f32 tensors), then the launchers of amp.cu. Every op
// enqueues on the backend's stream and returns at once; the scaler state is
// read and written on the device. Semantics are the CPU reference's
// (amp_cpu.cpp).
//
// Ran on an H200 before the move (2026-11-26, commit b0014f2: test_op_amp and
// test_amp_training's GPU slots passed); moved without a change to the
// arithmetic, not run on a GPU since.
#include "engine/backend/cuda/cuda_internal.h"
#include "engine/ops/amp/amp.cuh"
#include "engine/ops/amp/amp.h"

namespace tb {

namespace {

class CudaKernels final : public amp::Kernels {
 public:
  explicit CudaKernels(CudaBackend& be) : be_(be) {}

  void cast(const Tensor& src, Tensor& dst) override;
  void scale(Tensor& t, const Tensor& scaler_state) override;
  void unscale_and_check(Tensor& grads, Tensor& scaler_state) override;
  void update_scale(Tensor& scaler_state, float growth_factor, float backoff_factor,
                    int64_t growth_interval) override;

 private:
  CudaBackend& be_;
};

}  // namespace

void CudaKernels::cast(const Tensor& src, Tensor& dst) {
  const CudaBackend::Impl& m = be_.impl();
  m.activate();
  // The contract allows exactly the four pairs launch_cast takes.
  cuda::launch_cast(src.dtype(), dst.dtype(), src.data(), dst.data(), src.numel(), m.stream);
}

void CudaKernels::scale(Tensor& t, const Tensor& scaler_state) {
  cuda::check_f32(t, "amp_scale", "tensor");
  const CudaBackend::Impl& m = be_.impl();
  m.activate();
  cuda::launch_amp_scale(t.data_as<float>(), t.numel(), scaler_state.data_as<float>(), m.stream);
}

void CudaKernels::unscale_and_check(Tensor& grads, Tensor& scaler_state) {
  cuda::check_f32(grads, "amp_unscale_and_check", "gradients");
  const CudaBackend::Impl& m = be_.impl();
  m.activate();
  cuda::launch_amp_unscale_check(grads.data_as<float>(), grads.numel(),
                                 scaler_state.data_as<float>(), m.stream);
}

void CudaKernels::update_scale(Tensor& scaler_state, float growth_factor, float backoff_factor,
                               int64_t growth_interval) {
  const CudaBackend::Impl& m = be_.impl();
  m.activate();
  cuda::launch_amp_update_scale(scaler_state.data_as<float>(), growth_factor, backoff_factor,
                                growth_interval, m.stream);
}

namespace amp {
void register_cuda_kernels() {
  register_kernels<Kernels, CudaKernels, CudaBackend>(DeviceKind::CUDA);
}
}  // namespace amp

}  // namespace tb
