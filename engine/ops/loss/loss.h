// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The loss op family's contract and entry point
// (loss::softmax_cross_entropy): softmax cross-entropy with label smoothing,
// mean over the batch.
//
// Shapes    logits, dlogits (N, K), K > 0; labels (N); stats (2).
// Dtypes    logits and dlogits share one: f32 or f64 on the CPU, f32 on CUDA;
//           labels i32; stats f64.
// Devices   logits, dlogits and stats on the backend's device; labels there
//           too, or on the host (a device backend copies them over).
//
// Per sample, with log p = z − logsumexp(z) (max-shifted, so exp never
// overflows) and target q = (1−ε)·onehot(y) + ε/K, ε = label_smoothing in [0, 1]:
//   loss_i = −Σ_k q_k log p_k = −(1−ε)·log p_y − ε/K · Σ_k log p_k
//   dlogits = grad_scale · (p − q) / N      (d mean-loss / d logits), written
//             when defined (undefined: not wanted)
//   stats  += {Σ_i loss_i, #(argmax z == y)}  (first maximum wins ties): added
//             to what is there, on the device, so the host reads them only
//             when it wants.
// Labels    host labels outside [0, K) are refused (tb::Error naming the
//           sample); device labels cannot be checked without a sync, so a
//           device backend makes that sample's loss NaN instead.
// Aliasing  dlogits must not alias logits.
//
// Files: loss.cpp (the checks and entry point), loss_cpu.cpp (reference and
// fast f32 path), loss.cu + loss.cuh (CUDA kernels and launcher),
// loss_cuda.cpp (the CUDA backend's Kernels), test_op_loss.cpp. How a family
// plugs into a backend: engine/ops/registry.h.
#include <cstdint>

#include "engine/core/tensor.h"
#include "engine/ops/registry.h"

namespace tb::loss {

// Entry point: the contract's checks (below), then this backend's kernels.
void softmax_cross_entropy(Backend& be, const Tensor& logits, const Tensor& labels,
                           float label_smoothing, float grad_scale, Tensor& dlogits,
                           Tensor& stats);

struct Dims {
  int64_t N, K;
};

// What a backend implements, called with arguments that passed the
// contract's checks and their Dims. Each checks what it adds (its device, its
// dtypes) and names the op in its errors.
class Kernels : public OpKernels {
 public:
  static constexpr const char* kFamily = "loss";
  virtual void softmax_cross_entropy(const Dims& d, const Tensor& logits, const Tensor& labels,
                                     float label_smoothing, float grad_scale, Tensor& dlogits,
                                     Tensor& stats) = 0;
};

// The contract's checks, shared by every backend: defined operands on
// logits' device (labels: or the host) with the shapes and dtypes above,
// label_smoothing in [0, 1], host labels in [0, K), the aliasing rule. Throws
// tb::Error naming the op and the operand.
Dims check_softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                                 float label_smoothing, const Tensor& dlogits,
                                 const Tensor& stats);

}  // namespace tb::loss
