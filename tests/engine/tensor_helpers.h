// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Tensor helpers every suite shares: random fills, host/device copies, and
// comparisons that name the worst element.
//
// - random_tensor: uniform values drawn in logical (NCHW) order, never exactly
//   zero (a zero hides an unwritten output and sits on ReLU's kink), then laid
//   out as asked by an explicit copy; so one seed gives the same logical
//   tensor in every layout.
// - Comparisons are in logical order whatever the layouts, and NaN counts as
//   the worst error. scaled_diff(ref, got) = max|got − ref| / max|ref|;
//   compare() checks |got_i − ref_i| <= atol + rtol·(|ref_i| or max|ref|) per
//   element and says which element failed, and can write the "tb-tolerance"
//   line (gpu_slot.h) that scripts/gpu-check.sh summarises.
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/core/tensor.h"
#include "tests/engine/gpu_slot.h"

namespace tb::test {

// ------------------------------------------------------------ element access

inline double f16_to_double(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0) return s * std::ldexp(double(m), -24);
  if (e == 31) return m ? NAN : s * INFINITY;
  return s * std::ldexp(double(m | 0x400), e - 25);
}

inline double bf16_to_double(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Element i of a host tensor in memory order, as a double.
inline double value_at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::F64: return t.data_as<double>()[i];
    case DType::F32: return t.data_as<float>()[i];
    case DType::I32: return t.data_as<int32_t>()[i];
    case DType::U8: return t.data_as<uint8_t>()[i];
    case DType::F16: return f16_to_double(t.data_as<uint16_t>()[i]);
    case DType::BF16: return bf16_to_double(t.data_as<uint16_t>()[i]);
  }
  return NAN;
}

// ------------------------------------------------------------ making tensors

// A host tensor of the same shape, dtype and layout with the same bytes.
inline Tensor clone(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype(), Device::cpu(), t.layout());
  std::memcpy(c.data(), t.data(), t.nbytes());
  return c;
}

// A host tensor of `t`'s shape and dtype, uninitialised, in `l` (rank 4 only).
inline Tensor like(const Tensor& t, Layout l) {
  return Tensor::empty(t.shape(), t.dtype(), Device::cpu(), t.rank() == 4 ? l : Layout::NCHW);
}

// The host tensor (any layout) in layout `l`, converted by an explicit copy.
inline Tensor in_layout(const Tensor& t, Layout l) {
  if (t.rank() != 4 || t.layout() == l) return t;
  Tensor y = Tensor::empty(t.shape(), t.dtype(), Device::cpu(), l);
  CpuBackend().copy(t, y);
  return y;
}
inline Tensor to_nchw(const Tensor& t) { return in_layout(t, Layout::NCHW); }

// Uniform in [lo, hi), f32 or f64, from `rng` in logical order; never exactly 0.
inline Tensor random_tensor(const Shape& s, DType t, std::mt19937_64& rng,
                            Layout l = Layout::NCHW, double lo = -1.0, double hi = 1.0) {
  // Another dtype would be written as f32 past its end (lp_of in low_precision.h casts).
  TB_CHECK(t == DType::F32 || t == DType::F64, "random_tensor makes f32 or f64, not ",
           dtype_name(t));
  std::uniform_real_distribution<double> dist(lo, hi);
  Tensor x = Tensor::empty(s, t);
  for (int64_t i = 0; i < x.numel(); ++i) {
    double v = dist(rng);
    if (v == 0.0) v = 0.5 * hi;
    if (t == DType::F64)
      x.data_as<double>()[i] = v;
    else
      x.data_as<float>()[i] = float(v);
  }
  return in_layout(x, l);
}

// The same from a fresh generator seeded with `seed`.
inline Tensor random_tensor(const Shape& s, uint64_t seed, double lo = -1.0, double hi = 1.0,
                            DType t = DType::F32, Layout l = Layout::NCHW) {
  std::mt19937_64 rng(seed);
  return random_tensor(s, t, rng, l, lo, hi);
}

// Random bytes, in memory order of layout `l`.
inline Tensor random_u8(const Shape& s, uint64_t seed, Layout l = Layout::NCHW) {
  std::mt19937_64 rng(seed);
  Tensor t = Tensor::empty(s, DType::U8, Device::cpu(), l);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<uint8_t>()[i] = uint8_t(rng() & 0xff);
  return t;
}

// n labels in [0, classes).
inline Tensor random_labels(int64_t n, int64_t classes, std::mt19937_64& rng) {
  Tensor y = Tensor::empty({n}, DType::I32);
  for (int64_t i = 0; i < n; ++i) y.data_as<int32_t>()[i] = int32_t(rng() % uint64_t(classes));
  return y;
}

// Listed values, f32 or f64, NCHW.
inline Tensor from_values(const Shape& s, std::initializer_list<double> v,
                          DType t = DType::F32) {
  Tensor x = Tensor::empty(s, t);
  int64_t i = 0;
  for (double e : v) {
    if (t == DType::F64)
      x.data_as<double>()[i++] = e;
    else
      x.data_as<float>()[i++] = float(e);
  }
  return x;
}

// ------------------------------------------------------------ host <-> backend

// A copy of the host tensor on `be`, rank-4 tensors in layout `l`.
inline Tensor to_device(Backend& be, const Tensor& h, Layout l = Layout::NCHW) {
  if (!h.defined()) return h;
  Tensor d = be.empty(h.shape(), h.dtype(), h.rank() == 4 ? l : Layout::NCHW);
  be.copy(h, d);
  return d;
}

// A host copy of a tensor of `be`, in the same layout.
inline Tensor to_host(Backend& be, const Tensor& d) {
  if (!d.defined()) return d;
  Tensor h = Tensor::empty(d.shape(), d.dtype(), Device::cpu(), d.layout());
  be.copy(d, h);
  be.synchronize();
  return h;
}

// A host copy of a tensor of `be`, NCHW (converted by the copy).
inline Tensor to_host_nchw(Backend& be, const Tensor& d) {
  if (!d.defined()) return d;
  Tensor h = Tensor::empty(d.shape(), d.dtype(), Device::cpu(), Layout::NCHW);
  be.copy(d, h);
  be.synchronize();
  return h;
}

// ------------------------------------------------------------ comparing

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// max |a − b| over logical positions (host tensors, any layouts); INFINITY
// when shapes or dtypes differ; NaN counts as the worst.
// The largest |value| of a host tensor (0 for an empty one).
inline double max_magnitude(const Tensor& t) {
  double m = 0.0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::abs(value_at(t, i)));
  return m;
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return INFINITY;
  const Tensor x = a.layout() == b.layout() ? a : to_nchw(a);
  const Tensor y = a.layout() == b.layout() ? b : to_nchw(b);
  double m = 0.0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double d = std::abs(value_at(x, i) - value_at(y, i));
    if (!(d <= m)) m = d;
  }
  return m;
}

// max |got − ref| / max |ref| (logical order; the scale floored at 1e-30).
inline double scaled_diff(const Tensor& ref, const Tensor& got) {
  double scale = 1e-30;
  for (int64_t i = 0; i < ref.numel(); ++i) scale = std::max(scale, std::abs(value_at(ref, i)));
  return max_abs_diff(ref, got) / scale;
}

struct Comparison {
  bool ok = true;
  std::string msg;  // the first failing element, when !ok
};

// Element i of `got` passes when |got_i − ref_i| <= atol + rtol·s_i, with s_i
// = max|ref| (scale_by_max: near-zero elements of a GEMM output judged against
// the output's size) or |ref_i|. With `report` set to a precision ("fp32"),
// writes one tb-tolerance line with the worst error/tolerance ratio.
inline Comparison compare(const Tensor& ref_in, const Tensor& got_in, double rtol, double atol,
                          const std::string& what, bool scale_by_max = false,
                          const char* report = nullptr) {
  Comparison c;
  if (ref_in.shape() != got_in.shape() || ref_in.dtype() != got_in.dtype()) {
    c.ok = false;
    c.msg = what + ": " + ref_in.describe() + " vs " + got_in.describe();
    return c;
  }
  const Tensor ref = to_nchw(ref_in), got = to_nchw(got_in);
  double mx = 0.0;
  for (int64_t i = 0; i < ref.numel(); ++i) mx = std::max(mx, std::abs(value_at(ref, i)));
  double worst = 0.0;
  int64_t at = -1;
  double worst_ratio = -1.0, ratio_err = 0.0, ratio_tol = 1.0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double r = value_at(ref, i), g = value_at(got, i);
    const double tol = atol + rtol * (scale_by_max ? mx : std::abs(r));
    const double err = std::abs(r - g);
    if (!(err <= tol) && (at < 0 || err > worst)) worst = err, at = i;  // NaN fails
    if (tol > 0 && !(err / tol <= worst_ratio)) worst_ratio = err / tol, ratio_err = err, ratio_tol = tol;
  }
  if (report && ref.numel() > 0 && (rtol > 0 || atol > 0))
    report_tolerance(report, ratio_err, ratio_tol, what);
  if (at >= 0) {
    c.ok = false;
    c.msg = what + ": element " + std::to_string(at) + " ref " + std::to_string(value_at(ref, at)) +
            " got " + std::to_string(value_at(got, at)) + " (|diff| " + std::to_string(worst) +
            ", rtol " + std::to_string(rtol) + ", atol " + std::to_string(atol) + ")";
  }
  return c;
}

// The precision name of a dtype for tb-tolerance lines.
inline const char* precision_of(DType t) {
  switch (t) {
    case DType::F64: return "fp64";
    case DType::F16: return "fp16";
    case DType::BF16: return "bf16";
    default: return "fp32";
  }
}

// The tb::Error message of f(), or a marker that fails every check on it.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const tb::Error& e) {
    return e.what();
  }
  return "<no tb::Error thrown>";
}
template <typename F>
QString qerror_of(F&& f) {
  return QString::fromStdString(error_of(std::forward<F>(f)));
}

}  // namespace tb::test

// value < tol, naming both.
#define CHECK_BELOW(value, tol)                                                              \
  QVERIFY2((value) < (tol), qPrintable(QStringLiteral(#value " = %1, tolerance %2")          \
                                           .arg(double(value), 0, 'g', 3)                    \
                                           .arg(double(tol), 0, 'g', 3)))

// scaled_diff(ref, got) <= tol.
#define EXPECT_SCALED(ref, got, tol, what)                                               \
  do {                                                                                   \
    const double e_ = ::tb::test::scaled_diff((ref), (got));                             \
    QVERIFY2(e_ <= (tol), qPrintable(QString("%1: scaled difference %2 > %3")            \
                                         .arg(QString::fromStdString(std::string(what))) \
                                         .arg(e_)                                        \
                                         .arg(tol)));                                    \
  } while (0)

// Bit for bit in logical order (e.g. NHWC vs NCHW on the reference kernels).
#define EXPECT_SAME(a, b, what)                                                                  \
  do {                                                                                           \
    const double d_ = ::tb::test::max_abs_diff(a, b);                                            \
    QVERIFY2(                                                                                    \
        d_ == 0.0,                                                                               \
        qPrintable(QString("%1: NHWC differs from NCHW by %2 (expected 0)").arg(what).arg(d_))); \
  } while (0)

// compare() with a tb-tolerance line in the reference's precision.
#define EXPECT_CLOSE(ref, got, rtol, atol, what)                                              \
  do {                                                                                        \
    const ::tb::Tensor& r_ = (ref);                                                     \
    const ::tb::test::Comparison c_ = ::tb::test::compare(                                    \
        r_, (got), (rtol), (atol), what, false, r_.dtype() == ::tb::DType::F64 ? "fp64" : "fp32"); \
    QVERIFY2(c_.ok, c_.msg.c_str());                                                          \
  } while (0)
#define EXPECT_CLOSE_SCALED(ref, got, rtol, what)                                             \
  do {                                                                                        \
    const ::tb::Tensor& r_ = (ref);                                                           \
    const ::tb::test::Comparison c_ = ::tb::test::compare(                                    \
        r_, (got), (rtol), 0.0, what, true, r_.dtype() == ::tb::DType::F64 ? "fp64" : "fp32"); \
    QVERIFY2(c_.ok, c_.msg.c_str());                                                          \
  } while (0)
