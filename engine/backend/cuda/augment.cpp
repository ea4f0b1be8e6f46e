// SPDX-License-Identifier: GPL-3.0-or-later
// CudaBackend::augment_normalize_u8 (gpu_augment, trick 15): argument checks
// and the launch of augment.cu's kernel on the compute stream. The per-channel
// constants ride in the kernel's parameters, so nothing is uploaded and
// nothing waits for the host.
//
// Ran on an H200 (2026-11-26, commit b0014f2): test_device_data's GPU slot,
// which compares it with the CPU op, passed.
#include <algorithm>

#include "engine/backend/cuda/cuda_internal.h"

namespace tb {

void CudaBackend::augment_normalize_u8(const Tensor& src, const Tensor& indices,
                                       const AugmentSpec& spec, const std::vector<float>& scale,
                                       const std::vector<float>& shift, Tensor& dst) {
  const char* op = "augment_normalize_u8";
  check_augment_normalize_u8_args(src, indices, spec, scale, shift, dst);
  cuda::check_on(*this, src, op, "src");
  cuda::check_on(*this, indices, op, "indices");
  cuda::check_on(*this, dst, op, "dst");
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
  Impl& m = *impl_;
  m.activate();
  cuda::launch_augment_normalize_u8(src.data_as<uint8_t>(), indices.data_as<int32_t>(),
                                    dst.data_as<float>(), src.n(), C, src.h(), src.w(), spec, coef,
                                    dst.layout() == Layout::NHWC, m.stream);
}

}  // namespace tb
