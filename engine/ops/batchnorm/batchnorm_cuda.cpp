// SPDX-License-Identifier: GPL-3.0-or-later
// The CUDA backend's batch-norm Kernels (contract: batchnorm.h): f32, f16 and
// bf16 activations (supports), this backend's device check, then the
// launchers of batchnorm.cu in the activations' element type on the launch
// plan for this device (batchnorm_plan.h), with its workspace from the
// backend's scratch. No epilogue is the epilogue launch with no ReLU and no
// residual; every op enqueues on the backend's stream and returns at once.
#include "engine/backend/cuda/cuda_internal.h"
#include "engine/ops/amp/amp_elements.cuh"
#include "engine/ops/batchnorm/batchnorm.h"
#include "engine/ops/batchnorm/batchnorm.cuh"

namespace tb {

using cuda::fptr;

namespace {

using batchnorm::Dims;

// The activation pointers of tensor t as T (null when t is undefined).
template <typename T>
T* act_ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data()) : nullptr;
}

// The kernels' grid for this device and their loads in flight (batchnorm_plan.h).
batchnorm::ReducePlan plan_for(const CudaBackend::Impl& m, const Dims& d) {
  batchnorm::ReducePlan p =
      batchnorm::plan_reduce(d.N, d.C, d.HW, d.nhwc, m.prop.multiProcessorCount);
  p.unroll_forced = batchnorm::unroll_from_environment();
  return p;
}

class CudaKernels final : public batchnorm::Kernels {
 public:
  explicit CudaKernels(CudaBackend& be) : be_(be) {}

  bool supports(DType t) const override {
    return t == DType::F32 || t == DType::F16 || t == DType::BF16;
  }

  void forward_train(const Dims& d, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                     Tensor& running_mean, Tensor& running_var, float momentum, float eps,
                     Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                     const Epilogue& epilogue) override;
  void forward_eval(const Dims& d, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                    const Tensor& running_mean, const Tensor& running_var, float eps, Tensor& y,
                    const Epilogue& epilogue) override;
  void backward(const Dims& d, const Tensor& x, const Tensor& dy, const Tensor& gamma,
                const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx, Tensor& dgamma,
                Tensor& dbeta, bool accumulate, const EpilogueGrad& epilogue) override;

 private:
  // Checks x's device, makes the device current; the backend's state.
  const CudaBackend::Impl& enter(const Tensor& x, const char* op) {
    cuda::check_on(be_, x, op, "x");
    const CudaBackend::Impl& m = be_.impl();
    m.activate();
    return m;
  }

  CudaBackend& be_;
};

}  // namespace

void CudaKernels::forward_train(const Dims& d, const Tensor& x, const Tensor& gamma,
                                const Tensor& beta, Tensor& running_mean, Tensor& running_var,
                                float momentum, float eps, Tensor& y, Tensor& save_mean,
                                Tensor& save_invstd, const Epilogue& epilogue) {
  const CudaBackend::Impl& m = enter(x, "batchnorm_forward_train");
  const batchnorm::ReducePlan plan = plan_for(m, d);
  Tensor work = m.scratch(plan.workspace_bytes);
  cuda::by_element(x.dtype(), [&](auto z) {
    using T = decltype(z);
    cuda::launch_bn_forward_train(act_ptr<T>(x), fptr(gamma), fptr(beta),
                                  act_ptr<T>(epilogue.residual), epilogue.act == Activation::ReLU,
                                  fptr(running_mean), fptr(running_var), momentum, eps,
                                  act_ptr<T>(y), fptr(save_mean), fptr(save_invstd), plan,
                                  work.data_as<double>(), m.stream);
  });
}

void CudaKernels::forward_eval(const Dims& d, const Tensor& x, const Tensor& gamma,
                               const Tensor& beta, const Tensor& running_mean,
                               const Tensor& running_var, float eps, Tensor& y,
                               const Epilogue& epilogue) {
  const CudaBackend::Impl& m = enter(x, "batchnorm_forward_eval");
  cuda::by_element(x.dtype(), [&](auto z) {
    using T = decltype(z);
    cuda::launch_bn_forward_eval(act_ptr<T>(x), fptr(gamma), fptr(beta),
                                 act_ptr<T>(epilogue.residual), epilogue.act == Activation::ReLU,
                                 fptr(running_mean), fptr(running_var), eps, act_ptr<T>(y),
                                 plan_for(m, d), m.stream);
  });
}

void CudaKernels::backward(const Dims& d, const Tensor& x, const Tensor& dy, const Tensor& gamma,
                           const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx,
                           Tensor& dgamma, Tensor& dbeta, bool accumulate,
                           const EpilogueGrad& epilogue) {
  const CudaBackend::Impl& m = enter(x, "batchnorm_backward");
  const batchnorm::ReducePlan plan = plan_for(m, d);
  Tensor work = m.scratch(plan.workspace_bytes);
  const bool relu = epilogue.act == Activation::ReLU;
  cuda::by_element(x.dtype(), [&](auto z) {
    using T = decltype(z);
    cuda::launch_bn_backward(act_ptr<T>(x), relu ? act_ptr<T>(epilogue.y) : nullptr,
                             act_ptr<T>(dy), fptr(gamma), fptr(epilogue.mask_beta),
                             fptr(save_mean), fptr(save_invstd), relu, act_ptr<T>(dx),
                             act_ptr<T>(epilogue.dresidual), fptr(dgamma), fptr(dbeta),
                             accumulate, plan, work.data_as<double>(), m.stream);
  });
}

namespace batchnorm {
void register_cuda_kernels() {
  register_kernels<Kernels, CudaKernels, CudaBackend>(DeviceKind::CUDA);
}
}  // namespace batchnorm

}  // namespace tb
