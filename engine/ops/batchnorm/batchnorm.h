// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The batch-norm op family's contract and entry points
// (batchnorm::forward_train, forward_eval, backward): batch normalization
// over (N, H, W) per channel, PyTorch's semantics, with an epilogue.
//
// Shapes    x, y, dy, dx, epilogue residual / y / dresidual   (N, C, H, W)
//           gamma, beta, running_mean, running_var,
//           save_mean, save_invstd, dgamma, dbeta              (C)
//           M = N·H·W values per channel.
// Dtypes    dtype as data, read from x:
//           f32, f64  every operand has x's dtype;
//           f16, bf16 (low-precision activations, as PyTorch's autocast)
//                     x, y, dy, dx and the epilogue's residual, y and
//                     dresidual have x's dtype; gamma, beta, the running and
//                     saved statistics, dgamma and dbeta are f32. Each value
//                     is read into f32, the sums are the f32 form's (double),
//                     and each activation output is rounded once to x's dtype
//                     when it is stored.
//           A backend that lacks x's dtype says so (Kernels::supports) and the
//           entry point refuses it naming the op, the dtype and the backend:
//           the cpu takes all four, cuda f32, f16 and bf16.
// Layouts   NCHW or NHWC, one for every rank-4 operand (never a hidden
//           transpose); the CPU also nChw16c (its blocked activations). With
//           an active epilogue the CPU takes NCHW and nChw16c.
// Devices   every operand on x's device, the backend's own.
//
// train     μ = Σx/M, σ² = Σ(x−μ)²/M (biased), invstd = 1/sqrt(σ² + eps);
//           y = act(γ·(x−μ)·invstd + β + residual)
//           writes y, save_mean = μ, save_invstd; moves running_mean towards μ
//           and running_var towards the unbiased σ²·M/(M−1) by `momentum`:
//           r = (1−momentum)·r + momentum·value. M must be > 0.
// eval      the same with running_mean and running_var; writes y only.
// backward  dz = dy·[y > 0] (ReLU epilogue, y the forward's output) or dy;
//           with the epilogue's mask_beta (the forward's β; only for a train
//           forward without residual, whose save_mean and save_invstd these
//           are) a backend may instead recompute y's sign from x as its
//           forward computed y (CUDA: one stream less to read; the CPU reads
//           y); the mask is the same bit for bit;
//           dresidual := dz when defined;
//           dβ = Σdz, dγ = Σdz·x̂, dx = γ·invstd/M·(M·dz − dβ − x̂·dγ),
//           x̂ = (x − save_mean)·save_invstd.
//           dx is written (undefined: not wanted); dgamma and dbeta are
//           written, or added to when `accumulate` (either may be undefined).
//           Given the running mean and 1/sqrt(running_var + eps) as the saved
//           pair it is the parameter half of eval mode's backward.
// Epilogue  act None or ReLU, residual optional (engine/ops/epilogue.h); GELU
//           is refused.
// Aliasing  with an active epilogue y must not be x (the backward reads both);
//           dx and dresidual must not alias x, dy or y, nor each other.
//
// Files: batchnorm.cpp (the checks and entry points), batchnorm_cpu.cpp
// (reference, fast f32 path, f16/bf16 by widen-compute-round), batchnorm.cu + batchnorm.cuh (CUDA kernels
// and launchers), batchnorm_plan.h/.cpp (their launch plan, host code),
// batchnorm_cuda.cpp (the CUDA backend's Kernels), test_op_batchnorm.cpp.
// How a family plugs into a backend: engine/ops/registry.h.
#include <cstdint>

#include "engine/core/tensor.h"
#include "engine/ops/epilogue.h"
#include "engine/ops/registry.h"

namespace tb::batchnorm {

// Entry points: the contract's checks (below), then this backend's kernels
// for x's dtype. Defaults as the contract says: no epilogue.
void forward_train(Backend& be, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                   Tensor& running_mean, Tensor& running_var, float momentum, float eps,
                   Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                   const Epilogue& epilogue = {});
void forward_eval(Backend& be, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                  const Tensor& running_mean, const Tensor& running_var, float eps, Tensor& y,
                  const Epilogue& epilogue = {});
void backward(Backend& be, const Tensor& x, const Tensor& dy, const Tensor& gamma,
              const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx, Tensor& dgamma,
              Tensor& dbeta, bool accumulate, const EpilogueGrad& epilogue = {});

struct Dims {
  int64_t N, C, HW;
  bool nhwc;
  bool blocked = false;  // nChw16c (tensor.h): the CPU's blocked activations
  int64_t M() const { return N * HW; }
};

// What a backend implements, called with arguments that passed the
// contract's checks, their Dims, and an x dtype it supports. Each checks what
// it adds (its device, its layouts) and names the op in its errors.
class Kernels : public OpKernels {
 public:
  static constexpr const char* kFamily = "batch norm";
  // Whether this backend normalises x of dtype t (f32, f64, f16 or bf16).
  virtual bool supports(DType t) const = 0;
  virtual void forward_train(const Dims& d, const Tensor& x, const Tensor& gamma,
                             const Tensor& beta, Tensor& running_mean, Tensor& running_var,
                             float momentum, float eps, Tensor& y, Tensor& save_mean,
                             Tensor& save_invstd, const Epilogue& epilogue) = 0;
  virtual void forward_eval(const Dims& d, const Tensor& x, const Tensor& gamma,
                            const Tensor& beta, const Tensor& running_mean,
                            const Tensor& running_var, float eps, Tensor& y,
                            const Epilogue& epilogue) = 0;
  virtual void backward(const Dims& d, const Tensor& x, const Tensor& dy, const Tensor& gamma,
                        const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx,
                        Tensor& dgamma, Tensor& dbeta, bool accumulate,
                        const EpilogueGrad& epilogue) = 0;
};

// The contract's checks, shared by every backend: defined operands on x's
// device with the shapes, dtypes and layout above, the epilogue, the aliasing
// rules. Throw tb::Error naming the op, the operand and the dtypes. Whether a
// backend takes x's dtype the entry points ask it (Kernels::supports); its
// device it checks itself.
Dims check_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                         const Tensor& running_mean, const Tensor& running_var, const Tensor& y,
                         const Tensor& save_mean, const Tensor& save_invstd,
                         const Epilogue& epilogue);
Dims check_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                        const Tensor& running_mean, const Tensor& running_var, const Tensor& y,
                        const Epilogue& epilogue);
Dims check_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                    const Tensor& save_mean, const Tensor& save_invstd, const Tensor& dx,
                    const Tensor& dgamma, const Tensor& dbeta, const EpilogueGrad& epilogue);

}  // namespace tb::batchnorm
