// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The linear family's CUDA launchers (linear.cu): the activation epilogue
// around cuBLAS's GEMMs, f32, on raw device pointers and a stream.
// linear_cuda.cpp checks the Tensors and calls these; linear.cu never sees a
// Tensor. Each enqueues on `s` and returns at once; each checks its launch
// (tb::Error on failure). The bias kernels of the plain op are bias.cu's
// (engine/backend/cuda/kernels.h), shared with convolution.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tb::cuda {

// Linear epilogue after a bias-free GEMM, t (N, M) row-major: z = t + b (b may
// be null); act 0 = ReLU: y = max(z, 0) (y may be t); act 1 = exact GELU:
// pre := z, y = GELU(z) (pre is t).
void launch_bias_act(float* t, const float* b, int act, float* y, int64_t N, int64_t M,
                     cudaStream_t s);
// dpre (N, M) = dy·act'(·) (ReLU from y, GELU from pre) and, in the same sweep,
// db (M) (+)= Σ_n dpre[n, :] in double, fixed order (db may be null).
void launch_act_backward_bgrad(const float* y, const float* pre, const float* dy, int act,
                               float* dpre, float* db, bool accumulate, int64_t N, int64_t M,
                               cudaStream_t s);

}  // namespace tb::cuda
