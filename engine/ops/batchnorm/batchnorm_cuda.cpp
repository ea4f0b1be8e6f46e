// SPDX-License-Identifier: GPL-3.0-or-later
// The CUDA backend's batch-norm Kernels (contract: batchnorm.h): this
// backend's own checks (its device, f32), then the launchers of batchnorm.cu
// on the launch plan for this device (batchnorm_plan.h), with its workspace
// from the backend's scratch. An active epilogue takes the bn_act launchers,
// else the plain ones; every op enqueues on the backend's stream and returns
// at once.
#include "engine/backend/cuda/cuda_internal.h"
#include "engine/ops/batchnorm/batchnorm.h"
#include "engine/ops/batchnorm/batchnorm.cuh"

namespace tb {

using cuda::fptr;

namespace {

void check_cuda(const CudaBackend& be, const Tensor& x, const char* op) {
  cuda::check_on(be, x, op, "x");
  cuda::check_f32(x, op, "x");
}

using batchnorm::Dims;

// The kernels' grid for this device (batchnorm_plan.h).
batchnorm::ReducePlan plan_for(const CudaBackend::Impl& m, const Dims& d) {
  return batchnorm::plan_reduce(d.N, d.C, d.HW, d.nhwc, m.prop.multiProcessorCount);
}

class CudaKernels final : public batchnorm::Kernels {
 public:
  explicit CudaKernels(CudaBackend& be) : be_(be) {}

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
  CudaBackend& be_;
};

}  // namespace

void CudaKernels::forward_train(const Dims& d, const Tensor& x, const Tensor& gamma,
                                const Tensor& beta, Tensor& running_mean, Tensor& running_var,
                                float momentum, float eps, Tensor& y, Tensor& save_mean,
                                Tensor& save_invstd, const Epilogue& epilogue) {
  check_cuda(be_, x, "batchnorm_forward_train");
  const CudaBackend::Impl& m = be_.impl();
  m.activate();
  const batchnorm::ReducePlan plan = plan_for(m, d);
  Tensor work = m.scratch(plan.workspace_bytes);
  if (epilogue.active())
    cuda::launch_bn_act_forward_train(fptr(x), fptr(gamma), fptr(beta), fptr(epilogue.residual),
                                      epilogue.act == Activation::ReLU, fptr(running_mean),
                                      fptr(running_var), momentum, eps, fptr(y), fptr(save_mean),
                                      fptr(save_invstd), plan, work.data_as<double>(),
                                      m.stream);
  else
    cuda::launch_bn_forward_train(fptr(x), fptr(gamma), fptr(beta), fptr(running_mean),
                                  fptr(running_var), momentum, eps, fptr(y), fptr(save_mean),
                                  fptr(save_invstd), plan, work.data_as<double>(), m.stream);
}

void CudaKernels::forward_eval(const Dims& d, const Tensor& x, const Tensor& gamma,
                               const Tensor& beta, const Tensor& running_mean,
                               const Tensor& running_var, float eps, Tensor& y,
                               const Epilogue& epilogue) {
  check_cuda(be_, x, "batchnorm_forward_eval");
  const CudaBackend::Impl& m = be_.impl();
  m.activate();
  if (epilogue.active())
    cuda::launch_bn_act_forward_eval(fptr(x), fptr(gamma), fptr(beta), fptr(epilogue.residual),
                                     epilogue.act == Activation::ReLU, fptr(running_mean),
                                     fptr(running_var), eps, fptr(y), plan_for(m, d),
                                     m.stream);
  else
    cuda::launch_bn_forward_eval(fptr(x), fptr(gamma), fptr(beta), fptr(running_mean),
                                 fptr(running_var), eps, fptr(y), plan_for(m, d),
                                 m.stream);
}

void CudaKernels::backward(const Dims& d, const Tensor& x, const Tensor& dy, const Tensor& gamma,
                           const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx,
                           Tensor& dgamma, Tensor& dbeta, bool accumulate,
                           const EpilogueGrad& epilogue) {
  check_cuda(be_, x, "batchnorm_backward");
  const CudaBackend::Impl& m = be_.impl();
  m.activate();
  const batchnorm::ReducePlan plan = plan_for(m, d);
  Tensor work = m.scratch(plan.workspace_bytes);
  if (epilogue.active()) {
    const bool relu = epilogue.act == Activation::ReLU;
    cuda::launch_bn_act_backward(fptr(x), relu ? fptr(epilogue.y) : nullptr, fptr(dy),
                                 fptr(gamma), fptr(save_mean), fptr(save_invstd), relu, fptr(dx),
                                 fptr(epilogue.dresidual), fptr(dgamma), fptr(dbeta), accumulate,
                                 plan, work.data_as<double>(), m.stream);
  } else {
    cuda::launch_bn_backward(fptr(x), fptr(dy), fptr(gamma), fptr(save_mean), fptr(save_invstd),
                             fptr(dx), fptr(dgamma), fptr(dbeta), accumulate, plan,
                             work.data_as<double>(), m.stream);
  }
}

namespace batchnorm {
void register_cuda_kernels() {
  register_kernels<Kernels, CudaKernels, CudaBackend>(DeviceKind::CUDA);
}
}  // namespace batchnorm

}  // namespace tb
