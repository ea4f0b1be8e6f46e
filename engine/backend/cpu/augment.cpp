// SPDX-License-Identifier: GPL-3.0-or-later
// CpuBackend::augment_normalize_u8 (gpu_augment, trick 15): the reference the
// CUDA kernel (backend/cuda/augment.cu) is checked against, and itself checked
// against SampleTransform::apply + normalize (tests/engine/test_device_data.cpp).
//
//   src u8 (N, C, H, W) NCHW   indices i32 (N)   dst f32 (N, C, OH, OW)
//   top = (OH - H) / 2, left = (OW - W) / 2          pad_to placement
//   (dy, dx, flip) = augment_draw(spec, indices[n])  SampleRng's draws
//   sy = y + dy - top,  sx = (flip ? OW-1-x : x) + dx - left
//   dst[n,c,y,x] = float(inside ? src[n,c,sy,sx] : 0) * scale[c] + shift[c]
//
// Written as a gather per output element (what a GPU thread does), not as
// apply()'s row copies, so the two formulations check each other.
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"

namespace tb {

void CpuBackend::augment_normalize_u8(const Tensor& src, const Tensor& indices,
                                      const AugmentSpec& spec, const std::vector<float>& scale,
                                      const std::vector<float>& shift, Tensor& dst) {
  check_augment_normalize_u8_args(src, indices, spec, scale, shift, dst);
  TB_CHECK(src.device().is_cpu() && indices.device().is_cpu() && dst.device().is_cpu(),
           "cpu augment_normalize_u8 between ", src.describe(), ", ", indices.describe(), " and ",
           dst.describe());
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

}  // namespace tb
