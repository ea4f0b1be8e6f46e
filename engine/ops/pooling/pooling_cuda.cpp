// SPDX-License-Identifier: GPL-3.0-or-later
// The CUDA backend's pooling Kernels (contract: pooling.h): this backend's own
// checks (its device, f32), then the launchers of pooling.cu. Every op
// enqueues on the backend's stream and returns at once.
#include "engine/backend/cuda/cuda_internal.h"
#include "engine/ops/pooling/pooling.cuh"
#include "engine/ops/pooling/pooling.h"

namespace tb {

using cuda::fptr;

namespace {

// The first operand (the others passed the contract's checks against it).
void check_cuda(const CudaBackend& be, const char* op, const char* what, const Tensor& lead) {
  cuda::check_on(be, lead, op, what);
  cuda::check_f32(lead, op, what);
}

cuda::PoolDims dims(const PoolGeometry& g, Layout l) {
  return {g.N, g.C, g.H, g.W, g.kernel, g.stride, g.pad, g.H_out, g.W_out, l == Layout::NHWC};
}

class CudaKernels final : public pooling::Kernels {
 public:
  explicit CudaKernels(CudaBackend& be) : be_(be) {}

  void max_forward(const PoolGeometry& g, const Tensor& x, Tensor& y, Tensor& argmax) override {
    check_cuda(be_, "maxpool2d_forward", "x", x);
    const CudaBackend::Impl& m = be_.impl();
    m.activate();
    cuda::launch_maxpool_forward(dims(g, x.layout()), fptr(x), fptr(y), argmax.data_as<int32_t>(),
                                 m.stream);
  }

  void max_backward(const PoolGeometry& g, const Tensor& dy, const Tensor& argmax,
                    Tensor& dx) override {
    check_cuda(be_, "maxpool2d_backward", "dy", dy);
    const CudaBackend::Impl& m = be_.impl();
    m.activate();
    cuda::launch_maxpool_backward(dims(g, dy.layout()), fptr(dy), argmax.data_as<int32_t>(),
                                  fptr(dx), m.stream);
  }

  void avg_forward(const PoolGeometry& g, const Tensor& x, Tensor& y) override {
    check_cuda(be_, "avgpool2d_forward", "x", x);
    const CudaBackend::Impl& m = be_.impl();
    m.activate();
    cuda::launch_avgpool_forward(dims(g, x.layout()), fptr(x), fptr(y), m.stream);
  }

  void avg_backward(const PoolGeometry& g, const Tensor& dy, Tensor& dx) override {
    check_cuda(be_, "avgpool2d_backward", "dy", dy);
    const CudaBackend::Impl& m = be_.impl();
    m.activate();
    cuda::launch_avgpool_backward(dims(g, dy.layout()), fptr(dy), fptr(dx), m.stream);
  }

  void global_avg_forward(const pooling::GlobalDims& d, const Tensor& x, Tensor& y) override {
    check_cuda(be_, "global_avgpool_forward", "x", x);
    const CudaBackend::Impl& m = be_.impl();
    m.activate();
    cuda::launch_global_avgpool_forward(fptr(x), fptr(y), d.N, d.C, d.HW, d.nhwc, m.stream);
  }

  void global_avg_backward(const pooling::GlobalDims& d, const Tensor& dy, Tensor& dx) override {
    check_cuda(be_, "global_avgpool_backward", "dx", dx);
    const CudaBackend::Impl& m = be_.impl();
    m.activate();
    cuda::launch_global_avgpool_backward(fptr(dy), fptr(dx), d.N, d.C, d.HW, d.nhwc, m.stream);
  }

 private:
  CudaBackend& be_;
};

}  // namespace

namespace pooling {
void register_cuda_kernels() {
  register_kernels<Kernels, CudaKernels, CudaBackend>(DeviceKind::CUDA);
}
}  // namespace pooling

}  // namespace tb
