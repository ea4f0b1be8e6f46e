// SPDX-License-Identifier: GPL-3.0-or-later
// The CPU backend's mixed-precision Kernels (contract: amp.h): the reference
// form of the loss scaler (the CUDA backend's amp.cu must agree with it) and
// f32 <-> f16/bf16 conversion. The CPU never computes in half precision; the
// scaler is here so its decisions (skip, backoff, growth) are testable
// without a GPU. The state is read and written on the host.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/ops/amp/amp.h"
#include "engine/ops/pointwise/pointwise.h"

namespace tb {

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// IEEE binary16, round to nearest even; overflow gives inf, NaN stays a (quiet) NaN.
uint16_t f32_to_f16(float f) {
  const uint32_t u = bits_of(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return uint16_t(sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds past 65504
  const int exp = int(a >> 23) - 127;
  if (exp < -24) {
    // Below half the smallest subnormal (2^-25) -> 0; exactly 2^-25 ties to even (0).
    if (a > 0x33000000u) return uint16_t(sign | 1u);
    return sign;
  }
  uint32_t mant = (a & 0x7fffffu) | 0x800000u;  // 24 bits with the implicit one
  int shift;                                     // bits to drop from mant
  uint32_t base;
  if (exp < -14) {  // subnormal half: value = m · 2^-24
    shift = 13 + (-14 - exp);
    base = 0;
  } else {
    shift = 13;
    base = uint32_t(exp + 15) << 10;
    mant &= 0x7fffffu;
  }
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // a carry rolls into the exponent, as it should
  return uint16_t(sign | (base + q));
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return float_of(sign | 0x7f800000u | (m << 13));
  if (e == 0) return std::copysign(std::ldexp(float(m), -24), sign ? -1.0f : 1.0f);
  return float_of(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t f32_to_bf16(float f) {
  const uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // quiet NaN
  const uint32_t r = u + 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return uint16_t(r >> 16);
}

float bf16_to_f32(uint16_t b) { return float_of(uint32_t(b) << 16); }

template <typename T>
bool unscale(T* g, int64_t n, T inv) {
  bool bad = false;
  for (int64_t i = 0; i < n; ++i) {
    bad |= !std::isfinite(g[i]);
    g[i] *= inv;
  }
  return bad;
}

class CpuKernels final : public amp::Kernels {
 public:
  explicit CpuKernels(CpuBackend& be) : be_(be) {}

  void cast(const Tensor& src, Tensor& dst) override;
  void scale(Tensor& t, const Tensor& scaler_state) override;
  void unscale_and_check(Tensor& grads, Tensor& scaler_state) override;
  void update_scale(Tensor& scaler_state, float growth_factor, float backoff_factor,
                    int64_t growth_interval) override;

 private:
  CpuBackend& be_;
};

}  // namespace

void CpuKernels::cast(const Tensor& src, Tensor& dst) {
  const int64_t n = src.numel();
  if (src.dtype() == DType::F32) {  // -> f16/bf16 (the contract's pairs)
    const float* s = src.data_as<float>();
    uint16_t* d = dst.data_as<uint16_t>();
    const bool f16 = dst.dtype() == DType::F16;
    for (int64_t i = 0; i < n; ++i) d[i] = f16 ? f32_to_f16(s[i]) : f32_to_bf16(s[i]);
  } else {  // f16/bf16 -> f32
    const uint16_t* s = src.data_as<uint16_t>();
    float* d = dst.data_as<float>();
    const bool f16 = src.dtype() == DType::F16;
    for (int64_t i = 0; i < n; ++i) d[i] = f16 ? f16_to_f32(s[i]) : bf16_to_f32(s[i]);
  }
}

void CpuKernels::scale(Tensor& t, const Tensor& scaler_state) {
  // The contract's dtypes (f32, f64 here), though pointwise::scale would take
  // f16/bf16 too: the loss scale is applied to f32 gradients.
  TB_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::F64,
           "amp_scale: tensor must be f32 or f64, got ", t.describe());
  pointwise::scale(be_, t, double(scaler_state.data_as<float>()[0]));
}

void CpuKernels::unscale_and_check(Tensor& grads, Tensor& scaler_state) {
  float* st = scaler_state.data_as<float>();
  // 1/scale in f32 (a power of two, so exact), as torch's _amp_foreach_non_finite_check_and_unscale_.
  const float inv = 1.0f / st[0];
  bool bad;
  if (grads.dtype() == DType::F32)
    bad = unscale(grads.data_as<float>(), grads.numel(), inv);
  else if (grads.dtype() == DType::F64)
    bad = unscale(grads.data_as<double>(), grads.numel(), double(inv));
  else
    TB_FAIL("amp_unscale_and_check: gradients must be f32 or f64, got ", grads.describe());
  if (bad) st[2] = 1.0f;
}

void CpuKernels::update_scale(Tensor& scaler_state, float growth_factor, float backoff_factor,
                              int64_t growth_interval) {
  float* st = scaler_state.data_as<float>();
  if (st[2] != 0.0f) {
    st[0] *= backoff_factor;
    st[1] = 0.0f;
    st[3] += 1.0f;
  } else {
    st[1] += 1.0f;
    if (st[1] >= float(growth_interval)) {
      // Like torch: grow only while the grown scale stays finite.
      const float grown = st[0] * growth_factor;
      if (std::isfinite(grown)) st[0] = grown;
      st[1] = 0.0f;
    }
  }
  st[2] = 0.0f;
}

namespace amp {
void register_cpu_kernels() { register_kernels<Kernels, CpuKernels, CpuBackend>(DeviceKind::CPU); }
}  // namespace amp

}  // namespace tb
