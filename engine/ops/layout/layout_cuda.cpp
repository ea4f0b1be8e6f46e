// SPDX-License-Identifier: GPL-3.0-or-later
// The CUDA backend's tensor-layout Kernels (contract: layout.h): the kernels
// of layout.cu on the backend's stream (no host sync).
// Ran on an H200 (2026-11-26, commit b0014f2, as CudaBackend's methods):
// test_op_tensor's GPU rows passed. As the family's Kernels (the same
// launches), and with f16/bf16 (2-byte elements): not run on a GPU.
#include "engine/backend/cuda/cuda_internal.h"
#include "engine/ops/layout/layout.cuh"
#include "engine/ops/layout/layout.h"

namespace tb {

namespace {

using layout::PadDims;

class CudaKernels final : public layout::Kernels {
 public:
  explicit CudaKernels(CudaBackend& be) : be_(be) {}

  void pad_channels_forward(const PadDims& d, const Tensor& x, Tensor& y) override;
  void pad_channels_backward(const PadDims& d, const Tensor& dy, Tensor& dx) override;

 private:
  CudaBackend& be_;
};

}  // namespace

void CudaKernels::pad_channels_forward(const PadDims& d, const Tensor& x, Tensor& y) {
  const CudaBackend::Impl& m = be_.impl();
  m.activate();
  cuda::launch_pad_channels_forward(x.data(), y.data(), d.N, d.C, d.Cp, d.HW,
                                    int(dtype_size(x.dtype())), d.nhwc, m.stream);
}

void CudaKernels::pad_channels_backward(const PadDims& d, const Tensor& dy, Tensor& dx) {
  const CudaBackend::Impl& m = be_.impl();
  m.activate();
  cuda::launch_pad_channels_backward(dy.data(), dx.data(), d.N, d.C, d.Cp, d.HW,
                                     int(dtype_size(dy.dtype())), d.nhwc, m.stream);
}

namespace layout {
void register_cuda_kernels() {
  register_kernels<Kernels, CudaKernels, CudaBackend>(DeviceKind::CUDA);
}
}  // namespace layout

}  // namespace tb
