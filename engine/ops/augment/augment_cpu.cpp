// SPDX-License-Identifier: GPL-3.0-or-later
// The CPU backend's augment ops (contract: augment.h): the references the
// CUDA kernels (normalize_u8.cu, augment.cu) are checked against, themselves
// checked against the host loader (SampleTransform::apply + normalize,
// test_op_augment.cpp).
//
// normalize_u8: the loader's expression, element by element.
//
// augment_normalize_u8 (gpu_augment, trick 15):
//   src u8 (N, C, H, W) NCHW   indices i32 (N)   dst f32 (N, C, OH, OW)
//   top = (OH - H) / 2, left = (OW - W) / 2          pad_to placement
//   (dy, dx, flip) = augment_draw(spec, indices[n])  SampleRng's draws
//   sy = y + dy - top,  sx = (flip ? OW-1-x : x) + dx - left
//   dst[n,c,y,x] = float(inside ? src[n,c,sy,sx] : 0) * scale[c] + shift[c]
// Written as a gather per output element (what a GPU thread does), not as
// apply()'s row copies, so the two formulations check each other.
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/ops/augment/augment.h"

namespace tb {

namespace {

class CpuKernels final : public augment::Kernels {
 public:
  explicit CpuKernels(CpuBackend&) {}

  void normalize_u8(const Tensor& src, const std::vector<float>& scale,
                    const std::vector<float>& shift, Tensor& dst) override;
  void augment_normalize_u8(const Tensor& src, const Tensor& indices, const AugmentSpec& spec,
                            const std::vector<float>& scale, const std::vector<float>& shift,
                            Tensor& dst) override;
};

}  // namespace

void CpuKernels::normalize_u8(const Tensor& src, const std::vector<float>& scale,
                              const std::vector<float>& shift, Tensor& dst) {
  const int64_t N = src.n(), C = src.c(), HW = src.h() * src.w();
  const uint8_t* s = src.data_as<uint8_t>();
  float* d = dst.data_as<float>();
  // The loader's expression, element by element (engine/data/transforms.cpp).
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t j = 0; j < HW; ++j) {
        const int64_t i = src.layout() == Layout::NCHW ? (n * C + c) * HW + j : (n * HW + j) * C + c;
        d[i] = static_cast<float>(s[i]) * scale[size_t(c)] + shift[size_t(c)];
      }
}

void CpuKernels::augment_normalize_u8(const Tensor& src, const Tensor& indices,
                                      const AugmentSpec& spec, const std::vector<float>& scale,
                                      const std::vector<float>& shift, Tensor& dst) {
  const int64_t N = src.n(), C = src.c(), H = src.h(), W = src.w();
  const int64_t OH = spec.out_h, OW = spec.out_w;
  const int64_t top = (OH - H) / 2, left = (OW - W) / 2;
  const bool nhwc = dst.layout() == Layout::NHWC;
  const uint8_t* s = src.data_as<uint8_t>();
  const int32_t* idx = indices.data_as<int32_t>();
  float* d = dst.data_as<float>();
  for (int64_t n = 0; n < N; ++n) {
    TB_CHECK(idx[n] >= 0, "augment_normalize_u8: indices[", n, "] = ", idx[n], " is negative");
    const AugmentDraw a = augment_draw(spec, static_cast<uint64_t>(idx[n]));
    for (int64_t c = 0; c < C; ++c) {
      const float sc = scale[size_t(c)], sh = shift[size_t(c)];
      for (int64_t y = 0; y < OH; ++y)
        for (int64_t x = 0; x < OW; ++x) {
          const int64_t sy = y + a.dy - top;
          const int64_t sx = (a.flip ? OW - 1 - x : x) + a.dx - left;
          const bool inside = sy >= 0 && sy < H && sx >= 0 && sx < W;
          const uint8_t b = inside ? s[((n * C + c) * H + sy) * W + sx] : uint8_t(0);
          const int64_t o =
              nhwc ? ((n * OH + y) * OW + x) * C + c : ((n * C + c) * OH + y) * OW + x;
          d[o] = static_cast<float>(b) * sc + sh;  // the loader's expression (transforms.cpp)
        }
    }
  }
}

namespace augment {
void register_cpu_kernels() { register_kernels<Kernels, CpuKernels, CpuBackend>(DeviceKind::CPU); }
}  // namespace augment

}  // namespace tb
