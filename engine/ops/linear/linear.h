// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The linear (fully connected) op family's contract and entry points
// (linear::forward, linear::backward): PyTorch's Linear, y = x·wᵀ + b, with
// an activation epilogue (fuse_pointwise); the operands' dtype picks full or
// mixed precision.
//
// Shapes    x, dx (N, K)   w, dw (M, K)   b, db (M)
//           y, dy and the epilogue's pre, y, dz (N, M)
//           rank 2 only (flatten rank-4 activations first); layouts are not read.
// Dtypes    x and w share one dtype, which picks the path:
//           f32, f64   every operand has x's dtype (the CPU: f32 and f64; CUDA:
//                      f32; FP32 compute, no TF32).
//           f16, bf16  (amp) b, dw, db are f32 and the products of the
//                      low-precision inputs are summed in fp32 (Tensor Cores
//                      on the GPU). The activations' form is read from y
//                      (forward) and dy (backward); dx has dy's dtype:
//             f32 activations  y, dy, dx f32, so what follows (BN, loss,
//                      activations) stays fp32. The backward rounds dy to
//                      x's dtype for the two GEMMs; db sums the unrounded dy.
//             low-precision activations  y, dy, dx in x's dtype (amp keeping
//                      activations in f16/bf16 between layers): y = round(Σ +
//                      b) and dx = round(Σ), each rounded once from its f32
//                      value; dw and db summed in f32 from dy as it is.
//                      No epilogue in either form.
// Devices   every operand on x's device, the backend's own.
//
// forward   z = x·wᵀ + b (b undefined: none), y = act(z); with GELU the
//           epilogue's pre := z (its backward reads it).
// backward  dz = dy·act'(·) (ReLU: [y > 0] from the forward's y; GELU: from
//           pre) into the epilogue's dz buffer, or dz = dy without an epilogue;
//           dx = dz·w is written; dw = dzᵀ·x and db = Σ_n dz[n, :] are
//           written, or added to when `accumulate`. dx, dw, db may each be
//           undefined (not wanted).
// Epilogue  act None, ReLU or exact GELU; residual refused (forward) and
//           dresidual refused (backward). Forward: pre required with GELU,
//           optional with ReLU (not written), refused without an activation.
//           Backward: y required with ReLU, pre with GELU, dz (the caller's
//           work buffer) with either.
// Aliasing  pre is not y; dz is not dy, x, y or pre.
//
// Files: linear.cpp (the checks and entry points), linear_cpu.cpp (reference
// and fast f32 path; f16/bf16 as the widened f32 op), linear.cu + linear.cuh
// (the epilogue kernels and their launchers), linear_cuda.cpp (the CUDA
// backend's Kernels: cuBLAS, cuBLASLt), test_op_linear.cpp. The bias kernels
// are shared with convolution (engine/backend/cuda/bias.cu). How a family
// plugs into a backend: engine/ops/registry.h.
#include <cstdint>

#include "engine/core/tensor.h"
#include "engine/ops/epilogue.h"
#include "engine/ops/registry.h"

namespace tb::linear {

// Entry points: the contract's checks (below), then this backend's kernels.
// Defaults as the contract says: no epilogue.
void forward(Backend& be, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
             const Epilogue& epilogue = {});
void backward(Backend& be, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx,
              Tensor& dw, Tensor& db, bool accumulate, const EpilogueGrad& epilogue = {});

struct Dims {
  int64_t N, K, M;
  bool low_precision;   // x and w f16/bf16: the mixed-precision path
  bool lp_activations;  // ... with y (forward), dy and dx (backward) in x's dtype
};

// What a backend implements, called with arguments that passed the
// contract's checks and their Dims. Each checks what it adds (its device,
// its dtypes) and names the op in its errors.
class Kernels : public OpKernels {
 public:
  static constexpr const char* kFamily = "linear";
  virtual void forward(const Dims& d, const Tensor& x, const Tensor& w, const Tensor& b,
                       Tensor& y, const Epilogue& epilogue) = 0;
  virtual void backward(const Dims& d, const Tensor& x, const Tensor& w, const Tensor& dy,
                        Tensor& dx, Tensor& dw, Tensor& db, bool accumulate,
                        const EpilogueGrad& epilogue) = 0;
};

// The contract's checks, shared by every backend: defined operands on x's
// device with the shapes and dtypes above, the epilogue, the aliasing rules.
// Throw tb::Error naming the op and the operand. What a backend supports
// beyond that (its device, its dtypes) it checks itself.
Dims check_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                   const Epilogue& epilogue);
Dims check_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx,
                    const Tensor& dw, const Tensor& db, const EpilogueGrad& epilogue);

}  // namespace tb::linear
