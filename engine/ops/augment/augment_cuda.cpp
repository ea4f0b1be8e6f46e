// SPDX-License-Identifier: GPL-3.0-or-later
// The CUDA backend's augment Kernels (contract: augment.h): this backend's
// own checks (the kernels' limits), then the launches of normalize_u8.cu and
// augment.cu on the compute stream.
//
// normalize_u8 reads its per-channel constants from a device buffer, uploaded
// when they change (only with the data set); augment_normalize_u8's ride in
// the kernel's parameters, so nothing is uploaded and nothing waits for the
// host.
//
// Ran on an H200 (2026-11-26, commit b0014f2, as CudaBackend's methods):
// test_device_data's and test_op_augment's GPU slots, which compare them with
// the CPU ops, passed. As the family's Kernels (the same launches; the
// constants' buffer moved here from CudaBackend::Impl): not run on a GPU.
#include <algorithm>
#include <utility>

#include "engine/backend/cuda/cuda_internal.h"
#include "engine/ops/augment/augment.cuh"
#include "engine/ops/augment/augment.h"

namespace tb {

namespace {

class CudaKernels final : public augment::Kernels {
 public:
  explicit CudaKernels(CudaBackend& be) : be_(be) {}

  void normalize_u8(const Tensor& src, const std::vector<float>& scale,
                    const std::vector<float>& shift, Tensor& dst) override;
  void augment_normalize_u8(const Tensor& src, const Tensor& indices, const AugmentSpec& spec,
                            const std::vector<float>& scale, const std::vector<float>& shift,
                            Tensor& dst) override;

 private:
  CudaBackend& be_;
  Tensor norm_coef_;                   // f32 [2C] on the device: normalize_u8's scale, shift
  std::vector<float> norm_coef_host_;  // what norm_coef_ holds
};

}  // namespace

void CudaKernels::normalize_u8(const Tensor& src, const std::vector<float>& scale,
                               const std::vector<float>& shift, Tensor& dst) {
  const CudaBackend::Impl& m = be_.impl();
  m.activate();
  // The constants change only with the data set: upload them when they do.
  std::vector<float> coef(scale);
  coef.insert(coef.end(), shift.begin(), shift.end());
  if (coef != norm_coef_host_) {
    norm_coef_ = Tensor::empty({int64_t(coef.size())}, DType::F32, be_.device());
    TB_CUDA_CHECK(cudaMemcpyAsync(norm_coef_.data(), coef.data(), coef.size() * sizeof(float),
                                  cudaMemcpyHostToDevice, m.stream));
    TB_CUDA_CHECK(cudaStreamSynchronize(m.stream));  // coef is pageable and about to go
    norm_coef_host_ = std::move(coef);
  }
  const int64_t C = src.c();
  const float* sc = norm_coef_.data_as<float>();
  cuda::launch_normalize_u8(src.data_as<uint8_t>(), dst.data_as<float>(), sc, sc + C, src.n(), C,
                            src.h() * src.w(), src.layout() == Layout::NHWC, m.stream);
}

void CudaKernels::augment_normalize_u8(const Tensor& src, const Tensor& indices,
                                       const AugmentSpec& spec, const std::vector<float>& scale,
                                       const std::vector<float>& shift, Tensor& dst) {
  const char* op = "augment_normalize_u8";
  const int64_t C = src.c();
  TB_CHECK(C <= cuda::kAugmentMaxC, op, ": ", C, " channels, the cuda kernel takes at most ",
           cuda::kAugmentMaxC);
  TB_CHECK(src.n() <= int64_t(0x7fffffff), op, ": batch of ", src.n(),
           " samples exceeds one thread block per sample");
  // The kernel indexes within a sample in 32 bits.
  const int64_t per_sample = C * std::max(src.h() * src.w(), spec.out_h * spec.out_w);
  TB_CHECK(per_sample <= int64_t(0x7fffffff), op, ": ", per_sample,
           " values per sample exceed the kernel's 32-bit indexing");
  cuda::AugmentCoef coef{};
  for (int64_t c = 0; c < C; ++c)
    coef.scale[c] = scale[size_t(c)], coef.shift[c] = shift[size_t(c)];
  const CudaBackend::Impl& m = be_.impl();
  m.activate();
  cuda::launch_augment_normalize_u8(src.data_as<uint8_t>(), indices.data_as<int32_t>(),
                                    dst.data_as<float>(), src.n(), C, src.h(), src.w(), spec, coef,
                                    dst.layout() == Layout::NHWC, m.stream);
}

namespace augment {
void register_cuda_kernels() {
  register_kernels<Kernels, CudaKernels, CudaBackend>(DeviceKind::CUDA);
}
}  // namespace augment

}  // namespace tb
