// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The loss family's CUDA launcher (loss.cu), f32, on raw device pointers and
// a stream: loss_cuda.cpp checks the Tensors and calls it; loss.cu never sees
// a Tensor. It enqueues on `s`, returns at once and checks its launches
// (tb::Error on failure).
#include <cuda_runtime_api.h>

#include <cstdint>

namespace tb::cuda {

// logits, dlogits (N, K), labels i32 (N) on the device, stats f64 (2) on the device.
// rows: 2·N doubles of scratch (per-sample loss and hit).
// A label outside [0, K) makes that sample's loss NaN (the host cannot check
// device labels without a sync; NaN makes the error visible in the loss).
void launch_softmax_xent(const float* logits, const int32_t* labels, int64_t N, int64_t K,
                         float label_smoothing, float grad_scale, float* dlogits, double* rows,
                         double* stats, cudaStream_t s);

}  // namespace tb::cuda
