// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The batch-norm family's CUDA launchers (batchnorm.cu), f32, on raw device
// pointers and a stream: batchnorm_cuda.cpp checks the Tensors and calls
// these; batchnorm.cu never sees a Tensor. Each enqueues on `s` and returns
// at once; each checks its launches (tb::Error on failure).
//   x, y, dy, dx, r, dres (N, C, HW); `plan` = batchnorm::plan_reduce(N, C,
//   HW, nhwc, the device's SM count) gives the shape, the memory order and the
//   grid; per-channel vectors (C); `work` holds plan.workspace_bytes of device
//   scratch (the reductions' partial sums). An empty plan launches nothing.
#include <cuda_runtime_api.h>

#include "engine/ops/batchnorm/batchnorm_plan.h"

namespace tb::cuda {

// Train: the batch statistics into save_* (mean, 1/sqrt(var + eps)), the
// running mean and unbiased variance moved by `momentum`, then y.
void launch_bn_forward_train(const float* x, const float* gamma, const float* beta,
                             float* running_mean, float* running_var, float momentum, float eps,
                             float* y, float* save_mean, float* save_invstd,
                             const batchnorm::ReducePlan& plan, double* work, cudaStream_t s);
void launch_bn_forward_eval(const float* x, const float* gamma, const float* beta,
                            const float* running_mean, const float* running_var, float eps,
                            float* y, const batchnorm::ReducePlan& plan, cudaStream_t s);
// dx may be null (not wanted); dgamma/dbeta may be null; written or accumulated.
void launch_bn_backward(const float* x, const float* dy, const float* gamma, const float* save_mean,
                        const float* save_invstd, float* dx, float* dgamma, float* dbeta,
                        bool accumulate, const batchnorm::ReducePlan& plan, double* work,
                        cudaStream_t s);

// With the epilogue (fuse_pointwise): y = act(γ·(x−μ)·invstd + β [+ r]) in
// one sweep; r null: no residual. The plain launchers above are these with no
// ReLU and no residual (the same kernels).
void launch_bn_act_forward_train(const float* x, const float* gamma, const float* beta,
                                 const float* r, bool relu, float* running_mean, float* running_var,
                                 float momentum, float eps, float* y, float* save_mean,
                                 float* save_invstd, const batchnorm::ReducePlan& plan,
                                 double* work, cudaStream_t s);
void launch_bn_act_forward_eval(const float* x, const float* gamma, const float* beta,
                                const float* r, bool relu, const float* running_mean,
                                const float* running_var, float eps, float* y,
                                const batchnorm::ReducePlan& plan, cudaStream_t s);
// dz = dy·[y>0] (relu) or dy, folded into batch norm's backward; dres := dz.
// dx, dres, dgamma, dbeta may be null.
void launch_bn_act_backward(const float* x, const float* y, const float* dy, const float* gamma,
                            const float* save_mean, const float* save_invstd, bool relu, float* dx,
                            float* dres, float* dgamma, float* dbeta, bool accumulate,
                            const batchnorm::ReducePlan& plan, double* work, cudaStream_t s);

}  // namespace tb::cuda
