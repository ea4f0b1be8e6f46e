// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The augment op family's contract and entry points: the input path's device
// ops, which turn a batch of the data set's u8 images into the normalised f32
// batch the host loader would have made (augment::normalize_u8 for
// h2d_uint8, augment::augment_normalize_u8 for gpu_augment). Whether a
// backend runs them on its device is its capabilities' device_normalize_u8
// and device_augment (engine/backend/capabilities.h).
//
// normalize_u8 (h2d_uint8)
//   src u8 (N, C, H, W), dst f32 of src's shape and layout (NCHW or NHWC),
//   scale and shift C floats each:
//   dst[n,c,h,w] = float(src[n,c,h,w]) * scale[c] + shift[c]
//   with the loader's arithmetic exactly (one multiply, one add, no fused
//   multiply-add), so the images are bit-identical to normalising on the host
//   (engine/data/transforms.cpp).
// augment_normalize_u8 (gpu_augment): the loader's whole per-sample pipeline
//   in one pass.
//   src     u8 (N, C, H, W) NCHW: the data set's bytes, not transformed
//   indices i32 (N): each row's data set index (seeds its SampleRng draws),
//           >= 0 (the CPU checks each; a device cannot without a sync)
//   dst     f32 (N, C, spec.out_h, spec.out_w), NCHW or NHWC
//   spec    out_h >= H, out_w >= W (pad_to only grows), crop padding within
//           0..min(out_h, out_w) when cropping, epoch >= 0
//   dst[n] = normalize(SampleTransform::apply(src[n], spec.seed, spec.epoch,
//   indices[n])) bit for bit: pad_to placement, crop with zero padding, flip
//   (the draws: augment_draw, engine/data/augment_draw.h), then
//   * scale[c] + shift[c] without fused multiply-add.
// Devices   every tensor operand on the backend's device.
// dst is written, never accumulated into; it must not overlap src (not
// checked).
//
// Files: augment.cpp (the checks and entry points), augment_cpu.cpp (the CPU
// ops, the reference the device kernels are compared with), normalize_u8.cu,
// augment.cu + augment.cuh (CUDA kernels and launchers), augment_cuda.cpp
// (the CUDA backend's Kernels), test_op_augment.cpp. How a family plugs into
// a backend: engine/ops/registry.h.
#include <vector>

#include "engine/core/tensor.h"
#include "engine/data/augment_draw.h"
#include "engine/ops/registry.h"

namespace tb::augment {

// Entry points: the contract's checks (augment.cpp, once for every backend),
// then this backend's kernels.
void normalize_u8(Backend& be, const Tensor& src, const std::vector<float>& scale,
                  const std::vector<float>& shift, Tensor& dst);
void augment_normalize_u8(Backend& be, const Tensor& src, const Tensor& indices,
                          const AugmentSpec& spec, const std::vector<float>& scale,
                          const std::vector<float>& shift, Tensor& dst);

// What a backend implements, called with arguments that passed the
// contract's checks (on this backend's device included). Each checks what it
// adds (its limits) and names the op in its errors.
class Kernels : public OpKernels {
 public:
  static constexpr const char* kFamily = "augment";
  virtual void normalize_u8(const Tensor& src, const std::vector<float>& scale,
                            const std::vector<float>& shift, Tensor& dst) = 0;
  virtual void augment_normalize_u8(const Tensor& src, const Tensor& indices,
                                    const AugmentSpec& spec, const std::vector<float>& scale,
                                    const std::vector<float>& shift, Tensor& dst) = 0;
};

}  // namespace tb::augment
