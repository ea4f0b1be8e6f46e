// SPDX-License-Identifier: GPL-3.0-or-later
// The CUDA backend's loss Kernels (contract: loss.h): this backend's own
// checks (its device, f32), then the launcher of loss.cu, enqueued on the
// backend's stream without waiting.
#include <algorithm>

#include "engine/backend/cuda/cuda_internal.h"
#include "engine/ops/loss/loss.cuh"
#include "engine/ops/loss/loss.h"

namespace tb {

using cuda::fptr;

namespace {

class CudaKernels final : public loss::Kernels {
 public:
  explicit CudaKernels(CudaBackend& be) : be_(be) {}

  void softmax_cross_entropy(const loss::Dims& d, const Tensor& logits, const Tensor& labels,
                             float label_smoothing, float grad_scale, Tensor& dlogits,
                             Tensor& stats) override {
    const char* op = "softmax_cross_entropy";
    cuda::check_on(be_, logits, op, "logits");
    cuda::check_f32(logits, op, "logits");
    const CudaBackend::Impl& m = be_.impl();
    m.activate();
    // Host labels passed the contract's range check and are copied; device
    // labels cannot be checked without a sync, so the kernel turns a bad one
    // into a NaN loss instead.
    Tensor y = labels;
    if (labels.device().is_cpu()) {
      y = Tensor::empty({d.N}, DType::I32, be_.device());
      be_.copy(labels, y);
    }
    Tensor rows = m.scratch(size_t(2 * std::max<int64_t>(d.N, 1)) * sizeof(double));
    cuda::launch_softmax_xent(fptr(logits), y.data_as<int32_t>(), d.N, d.K, label_smoothing,
                              grad_scale, fptr(dlogits), rows.data_as<double>(),
                              stats.data_as<double>(), m.stream);
  }

 private:
  CudaBackend& be_;
};

}  // namespace

namespace loss {
void register_cuda_kernels() {
  register_kernels<Kernels, CudaKernels, CudaBackend>(DeviceKind::CUDA);
}
}  // namespace loss

}  // namespace tb
