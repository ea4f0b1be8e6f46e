// SPDX-License-Identifier: GPL-3.0-or-later
// The augment contract's checks (augment.h), one copy for every backend, and
// the entry points.
#include "engine/ops/augment/augment.h"

#include <algorithm>
#include <initializer_list>

#include "engine/backend/backend.h"
#include "engine/core/error.h"

namespace tb::augment {

namespace {

void check_on(Device device, std::initializer_list<const Tensor*> operands, const char* op) {
  for (const Tensor* t : operands)
    TB_CHECK(t->device() == device, op, ": ", t->describe(), " is not on ", device.str());
}

// src u8 and dst f32 of one rank-4 shape and layout, on the backend's device,
// one scale and shift per channel.
void check_normalize_u8_args(Device device, const Tensor& src, const std::vector<float>& scale,
                             const std::vector<float>& shift, const Tensor& dst) {
  TB_CHECK(src.defined() && dst.defined(), "normalize_u8: undefined tensor");
  TB_CHECK(src.rank() == 4 && src.dtype() == DType::U8,
           "normalize_u8: src must be u8 (N, C, H, W), got ", src.describe());
  TB_CHECK(dst.dtype() == DType::F32 && dst.shape() == src.shape() && dst.layout() == src.layout(),
           "normalize_u8: dst ", dst.describe(), " must be f32 of src's shape and layout (",
           src.describe(), ")");
  TB_CHECK(static_cast<int64_t>(scale.size()) == src.c() && shift.size() == scale.size(),
           "normalize_u8: ", scale.size(), " scales and ", shift.size(), " shifts for ", src.c(),
           " channels");
  check_on(device, {&src, &dst}, "normalize_u8");
}

// The shapes, dtypes and devices of augment.h, the spec's ranges.
void check_augment_normalize_u8_args(Device device, const Tensor& src, const Tensor& indices,
                                     const AugmentSpec& spec, const std::vector<float>& scale,
                                     const std::vector<float>& shift, const Tensor& dst) {
  const char* op = "augment_normalize_u8";
  TB_CHECK(src.defined() && indices.defined() && dst.defined(), op, ": undefined tensor");
  TB_CHECK(src.rank() == 4 && src.dtype() == DType::U8 && src.layout() == Layout::NCHW, op,
           ": src must be u8 (N, C, H, W) in NCHW, got ", src.describe());
  TB_CHECK(indices.dtype() == DType::I32 && indices.shape() == Shape{src.n()}, op,
           ": indices must be i32 (", src.n(), "), got ", indices.describe());
  TB_CHECK(spec.out_h >= src.h() && spec.out_w >= src.w(), op, ": output ", spec.out_h, "x",
           spec.out_w, " is smaller than the input ", src.h(), "x", src.w(),
           " (pad_to only grows)");
  TB_CHECK(!spec.random_crop || (spec.crop_padding >= 0 && spec.crop_padding <= spec.out_h &&
                                 spec.crop_padding <= spec.out_w),
           op, ": crop padding ", spec.crop_padding, " outside 0..",
           std::min(spec.out_h, spec.out_w));
  TB_CHECK(spec.epoch >= 0, op, ": epoch must be >= 0, got ", spec.epoch);
  const Shape out{src.n(), src.c(), spec.out_h, spec.out_w};
  TB_CHECK(dst.dtype() == DType::F32 && dst.shape() == out, op, ": dst ", dst.describe(),
           " must be f32 ", shape_str(out));
  TB_CHECK(static_cast<int64_t>(scale.size()) == src.c() && shift.size() == scale.size(), op, ": ",
           scale.size(), " scales and ", shift.size(), " shifts for ", src.c(), " channels");
  check_on(device, {&src, &indices, &dst}, op);
}

}  // namespace

void normalize_u8(Backend& be, const Tensor& src, const std::vector<float>& scale,
                  const std::vector<float>& shift, Tensor& dst) {
  check_normalize_u8_args(be.device(), src, scale, shift, dst);
  be.kernels<Kernels>().normalize_u8(src, scale, shift, dst);
}

void augment_normalize_u8(Backend& be, const Tensor& src, const Tensor& indices,
                          const AugmentSpec& spec, const std::vector<float>& scale,
                          const std::vector<float>& shift, Tensor& dst) {
  check_augment_normalize_u8_args(be.device(), src, indices, spec, scale, shift, dst);
  be.kernels<Kernels>().augment_normalize_u8(src, indices, spec, scale, shift, dst);
}

}  // namespace tb::augment
