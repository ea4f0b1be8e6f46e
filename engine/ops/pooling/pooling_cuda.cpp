// SPDX-License-Identifier: GPL-3.0-or-later
// The CUDA backend's pooling Kernels (contract: pooling.h): f32, f16 and bf16
// (supports), this backend's device check, then the launchers of pooling.cu
// in the operands' element type. Every op enqueues on the backend's stream
// and returns at once.
#include "engine/backend/cuda/cuda_internal.h"
#include "engine/ops/amp/amp_elements.cuh"
#include "engine/ops/pooling/pooling.cuh"
#include "engine/ops/pooling/pooling.h"

namespace tb {

namespace {

cuda::PoolDims dims(const PoolGeometry& g, Layout l) {
  return {g.N, g.C, g.H, g.W, g.kernel, g.stride, g.pad, g.H_out, g.W_out, l == Layout::NHWC};
}

template <typename T>
T* p(const Tensor& t) {
  return static_cast<T*>(t.data());
}

class CudaKernels final : public pooling::Kernels {
 public:
  explicit CudaKernels(CudaBackend& be) : be_(be) {}

  bool supports(DType t) const override {
    return t == DType::F32 || t == DType::F16 || t == DType::BF16;
  }

  void max_forward(const PoolGeometry& g, const Tensor& x, Tensor& y, Tensor& argmax) override {
    const cudaStream_t s = enter("maxpool2d_forward", "x", x);
    cuda::by_element(x.dtype(), [&](auto z) {
      using T = decltype(z);
      cuda::launch_maxpool_forward(dims(g, x.layout()), p<T>(x), p<T>(y),
                                   argmax.data_as<int32_t>(), s);
    });
  }

  void max_backward(const PoolGeometry& g, const Tensor& dy, const Tensor& argmax,
                    Tensor& dx) override {
    const cudaStream_t s = enter("maxpool2d_backward", "dy", dy);
    cuda::by_element(dy.dtype(), [&](auto z) {
      using T = decltype(z);
      cuda::launch_maxpool_backward(dims(g, dy.layout()), p<T>(dy), argmax.data_as<int32_t>(),
                                    p<T>(dx), s);
    });
  }

  void avg_forward(const PoolGeometry& g, const Tensor& x, Tensor& y) override {
    const cudaStream_t s = enter("avgpool2d_forward", "x", x);
    cuda::by_element(x.dtype(), [&](auto z) {
      using T = decltype(z);
      cuda::launch_avgpool_forward(dims(g, x.layout()), p<T>(x), p<T>(y), s);
    });
  }

  void avg_backward(const PoolGeometry& g, const Tensor& dy, Tensor& dx) override {
    const cudaStream_t s = enter("avgpool2d_backward", "dy", dy);
    cuda::by_element(dy.dtype(), [&](auto z) {
      using T = decltype(z);
      cuda::launch_avgpool_backward(dims(g, dy.layout()), p<T>(dy), p<T>(dx), s);
    });
  }

  void global_avg_forward(const pooling::GlobalDims& d, const Tensor& x, Tensor& y) override {
    const cudaStream_t s = enter("global_avgpool_forward", "x", x);
    cuda::by_element(x.dtype(), [&](auto z) {
      using T = decltype(z);
      cuda::launch_global_avgpool_forward(p<T>(x), p<T>(y), d.N, d.C, d.HW, d.nhwc, s);
    });
  }

  void global_avg_backward(const pooling::GlobalDims& d, const Tensor& dy, Tensor& dx) override {
    const cudaStream_t s = enter("global_avgpool_backward", "dx", dx);
    cuda::by_element(dx.dtype(), [&](auto z) {
      using T = decltype(z);
      cuda::launch_global_avgpool_backward(p<T>(dy), p<T>(dx), d.N, d.C, d.HW, d.nhwc, s);
    });
  }

 private:
  // Checks the first operand's device (the others passed the contract's
  // checks against it), makes the device current; the stream to enqueue on.
  cudaStream_t enter(const char* op, const char* what, const Tensor& lead) {
    cuda::check_on(be_, lead, op, what);
    const CudaBackend::Impl& m = be_.impl();
    m.activate();
    return m.stream;
  }

  CudaBackend& be_;
};

}  // namespace

namespace pooling {
void register_cuda_kernels() {
  register_kernels<Kernels, CudaKernels, CudaBackend>(DeviceKind::CUDA);
}
}  // namespace pooling

}  // namespace tb
