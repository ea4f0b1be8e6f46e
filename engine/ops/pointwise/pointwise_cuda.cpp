// SPDX-License-Identifier: GPL-3.0-or-later
// The CUDA backend's pointwise Kernels (contract: pointwise.h): the
// launchers of pointwise.cu in the operands' element type (f32, f64, f16 or
// bf16). Every op enqueues on the backend's stream and returns at once.
#include "engine/backend/cuda/cuda_internal.h"
#include "engine/ops/amp/amp_elements.cuh"
#include "engine/ops/pointwise/pointwise.cuh"
#include "engine/ops/pointwise/pointwise.h"

namespace tb {

namespace {

template <typename T>
T* p(const Tensor& t) {
  return t.data_as<T>();
}

class CudaKernels final : public pointwise::Kernels {
 public:
  explicit CudaKernels(CudaBackend& be) : be_(be) {}

  void relu_forward(const Tensor& x, Tensor& y) override;
  void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) override;
  void gelu_forward(const Tensor& x, Tensor& y) override;
  void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) override;
  void add(const Tensor& a, const Tensor& b, Tensor& y) override;
  void accumulate(const Tensor& src, Tensor& dst) override;
  void scale(Tensor& t, double alpha) override;

 private:
  // Makes the device current; returns the stream to enqueue on.
  cudaStream_t enter() {
    const CudaBackend::Impl& m = be_.impl();
    m.activate();
    return m.stream;
  }

  CudaBackend& be_;
};

}  // namespace

void CudaKernels::relu_forward(const Tensor& x, Tensor& y) {
  const cudaStream_t s = enter();
  cuda::by_element(x.dtype(), [&](auto z) {
    using T = decltype(z);
    cuda::launch_relu_forward(p<T>(x), p<T>(y), x.numel(), s);
  }, /*with_f64=*/true);
}

void CudaKernels::relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  const cudaStream_t s = enter();
  cuda::by_element(y.dtype(), [&](auto z) {
    using T = decltype(z);
    cuda::launch_relu_backward(p<T>(y), p<T>(dy), p<T>(dx), y.numel(), s);
  }, /*with_f64=*/true);
}

void CudaKernels::gelu_forward(const Tensor& x, Tensor& y) {
  const cudaStream_t s = enter();
  cuda::by_element(x.dtype(), [&](auto z) {
    using T = decltype(z);
    cuda::launch_gelu_forward(p<T>(x), p<T>(y), x.numel(), s);
  }, /*with_f64=*/true);
}

void CudaKernels::gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  const cudaStream_t s = enter();
  cuda::by_element(x.dtype(), [&](auto z) {
    using T = decltype(z);
    cuda::launch_gelu_backward(p<T>(x), p<T>(dy), p<T>(dx), x.numel(), s);
  }, /*with_f64=*/true);
}

void CudaKernels::add(const Tensor& a, const Tensor& b, Tensor& y) {
  const cudaStream_t s = enter();
  cuda::by_element(a.dtype(), [&](auto z) {
    using T = decltype(z);
    cuda::launch_add(p<T>(a), p<T>(b), p<T>(y), a.numel(), s);
  }, /*with_f64=*/true);
}

void CudaKernels::accumulate(const Tensor& src, Tensor& dst) {
  const cudaStream_t s = enter();
  cuda::by_element(src.dtype(), [&](auto z) {
    using T = decltype(z);
    cuda::launch_accumulate(p<T>(src), p<T>(dst), src.numel(), s);
  }, /*with_f64=*/true);
}

void CudaKernels::scale(Tensor& t, double alpha) {
  const cudaStream_t s = enter();
  cuda::by_element(t.dtype(), [&](auto z) {
    using T = decltype(z);
    cuda::launch_scale(p<T>(t), alpha, t.numel(), s);
  }, /*with_f64=*/true);
}

namespace pointwise {
void register_cuda_kernels() {
  register_kernels<Kernels, CudaKernels, CudaBackend>(DeviceKind::CUDA);
}
}  // namespace pointwise

}  // namespace tb
