// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The batch-norm family's CUDA launchers (batchnorm.cu) on raw device
// pointers and a stream: batchnorm_cuda.cpp checks the Tensors and calls
// these; batchnorm.cu never sees a Tensor. Each enqueues on `s` and returns
// at once; each checks its launches (tb::Error on failure).
//   x, y, dy, dx, r, dres (N, C, HW) of element type T: float, __half or
//   __nv_bfloat16 (amp_elements.cuh); `plan` = batchnorm::plan_reduce(N, C,
//   HW, nhwc, the device's SM count) gives the shape, the memory order and the
//   grid; per-channel vectors (C), f32 for every T; `work` holds
//   plan.workspace_bytes of device scratch (the reductions' partial sums). An
//   empty plan launches nothing, but for backward's dgamma and dbeta, which
//   are written as the empty sums (0) unless accumulating.
// The epilogue: y = act(γ·(x−μ)·invstd + β [+ r]) in one sweep, r null: no
// residual, relu false: none (the plain op: the same kernels).
#include <cuda_runtime_api.h>

#include "engine/ops/amp/amp_elements.cuh"
#include "engine/ops/batchnorm/batchnorm_plan.h"

namespace tb::cuda {

// Train: the batch statistics into save_* (mean, 1/sqrt(var + eps)), the
// running mean and unbiased variance moved by `momentum`, then y.
template <typename T>
void launch_bn_forward_train(const T* x, const float* gamma, const float* beta, const T* r,
                             bool relu, float* running_mean, float* running_var, float momentum,
                             float eps, T* y, float* save_mean, float* save_invstd,
                             const batchnorm::ReducePlan& plan, double* work, cudaStream_t s);
template <typename T>
void launch_bn_forward_eval(const T* x, const float* gamma, const float* beta, const T* r,
                            bool relu, const float* running_mean, const float* running_var,
                            float eps, T* y, const batchnorm::ReducePlan& plan, cudaStream_t s);
// dz = dy·[y>0] (relu) or dy, folded into batch norm's backward; dres := dz.
// dx, dres, dgamma, dbeta may be null (not wanted); dgamma/dbeta written or
// accumulated. With relu the mask is read from y, or, when mask_beta is given
// (the forward's β, a forward without residual, save_* its statistics), taken
// from x as the forward's apply made y, bit for bit, without reading y (which
// may then be null).
template <typename T>
void launch_bn_backward(const T* x, const T* y, const T* dy, const float* gamma,
                        const float* mask_beta, const float* save_mean, const float* save_invstd,
                        bool relu, T* dx, T* dres, float* dgamma, float* dbeta, bool accumulate,
                        const batchnorm::ReducePlan& plan, double* work, cudaStream_t s);

}  // namespace tb::cuda
