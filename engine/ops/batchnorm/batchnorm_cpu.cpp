// SPDX-License-Identifier: GPL-3.0-or-later
// The CPU backend's batch normalization (contract: batchnorm.h), NCHW and
// NHWC, with the ReLU / residual epilogue (fuse_pointwise).
//
// Backward (per channel, x̂ = (x−μ)·invstd, dz = dy or its ReLU mask):
//   dβ = Σ dz,  dγ = Σ dz·x̂,  dx = γ·invstd/M · (M·dz − dβ − x̂·dγ)
//
// reference<T> (f64, BackendOptions::reference, NHWC): two passes per channel
// in double; an epilogue is the pointwise reference ops run after it, so the
// fused path is checked against the definition. The reference visits each
// channel's elements in the same (n, i) order in both layouts (only the
// address differs), so NHWC gives the NCHW bits. NHWC takes the reference: the
// fast f32 path streams contiguous HW rows per channel; the CPU's NHWC is the
// oracle for the CUDA channels-last path, not a speed path, and is never
// transposed to reach it. With an epilogue the CPU takes NCHW only.
//
// fast f32: one read of x for the statistics (lane sums in double), then the
// apply, the residual add and the ReLU in one sweep; the backward folds the
// ReLU mask into its two sweeps. Without an epilogue it is the same code (no
// residual, no ReLU), and each element's arithmetic is the unfused ops' in the
// same order, so on x86-64 (no FMA contraction) fused and unfused models give
// the same bits; the tests still ask only for a stated tolerance. Each
// channel's work is compiled for the baseline, AVX2 and AVX-512, and the copy
// for this processor runs (engine/core/cpu_features.h): the same bits in each.
//
// blocked f32 (nChw16c, the CPU's blocked activations): the same sweeps on
// 16 channels at once, image by image, each thread a slice of whole channel
// blocks; each channel's sums run over its values in (n, i) order, one serial
// double sum per channel (the lanes of one vector), so every ISA copy gives
// the same bits; they differ from NCHW's (whose rows are summed in 8 lanes)
// by summation order only, and the tests compare with a derived tolerance.
//
// f16/bf16 (low-precision activations): widen-compute-round. x, dy, the
// residual and the ReLU mask's y are widened to f32 exactly (amp::widened),
// the f32 path above runs on them with the f32 parameters and statistics, and
// each activation output is rounded once into its f16/bf16 tensor
// (amp::round_into), which is what the CUDA kernels do value by value.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/cpu_features.h"
#include "engine/core/cpu_threads.h"
#include "engine/core/dispatch.h"
#include "engine/core/error.h"
#include "engine/ops/amp/amp.h"
#include "engine/ops/batchnorm/batchnorm.h"
#include "engine/ops/pointwise/pointwise.h"

namespace tb {

namespace {

using BnDims = batchnorm::Dims;

// What the CPU backend adds to the contract: host tensors, and an epilogue on
// NCHW and nChw16c only (the fast paths' layouts; NHWC is the reference's).
void check_cpu(const Tensor& x, bool epilogue, const char* op) {
  TB_CHECK(x.device().is_cpu(), op, ": cpu backend given ", x.describe());
  TB_CHECK(!epilogue || x.layout() != Layout::NHWC, op,
           ": the cpu backend takes an epilogue (fuse_pointwise) on NCHW and nChw16c only, got ",
           layout_name(x.layout()), " (", x.describe(), ")");
}

// Element (n, c, i) of the tensor seen as (N, C, HW), i = h*W + w; in NHWC
// memory that is (N, HW, C), in nChw16c (N, C/16, HW, 16).
inline int64_t at(const BnDims& d, int64_t n, int64_t c, int64_t i) {
  if (d.blocked) return offset4(Layout::NCHW16C, d.C, d.HW, 1, n, c, i, 0);
  return d.nhwc ? (n * d.HW + i) * d.C + c : (n * d.C + c) * d.HW + i;
}

// ---------------------------------------------------------------- reference
// Two passes per channel (mean, then centred sum of squares), double sums.

template <typename T>
void bn_train_ref(const BnDims& d, const T* x, const T* gamma, const T* beta, T* rmean, T* rvar,
                  double momentum, double eps, T* y, T* smean, T* sinvstd) {
  const double M = double(d.M());
  for (int64_t c = 0; c < d.C; ++c) {
    double sum = 0.0;
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t i = 0; i < d.HW; ++i) sum += x[at(d, n, c, i)];
    const double mean = sum / M;
    double ss = 0.0;
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t i = 0; i < d.HW; ++i) {
        const double dev = double(x[at(d, n, c, i)]) - mean;
        ss += dev * dev;
      }
    const double var = ss / M;
    const double invstd = 1.0 / std::sqrt(var + eps);
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t i = 0; i < d.HW; ++i) {
        const int64_t k = at(d, n, c, i);
        y[k] = T(double(gamma[c]) * (double(x[k]) - mean) * invstd + double(beta[c]));
      }
    const double unbiased = d.M() > 1 ? ss / (M - 1.0) : var;
    rmean[c] = T((1.0 - momentum) * double(rmean[c]) + momentum * mean);
    rvar[c] = T((1.0 - momentum) * double(rvar[c]) + momentum * unbiased);
    smean[c] = T(mean);
    sinvstd[c] = T(invstd);
  }
}

template <typename T>
void bn_eval_ref(const BnDims& d, const T* x, const T* gamma, const T* beta, const T* rmean,
                 const T* rvar, double eps, T* y) {
  for (int64_t c = 0; c < d.C; ++c) {
    const double invstd = 1.0 / std::sqrt(double(rvar[c]) + eps);
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t i = 0; i < d.HW; ++i) {
        const int64_t k = at(d, n, c, i);
        y[k] = T(double(gamma[c]) * (double(x[k]) - double(rmean[c])) * invstd + double(beta[c]));
      }
  }
}

template <typename T>
void bn_backward_ref(const BnDims& d, const T* x, const T* dy, const T* gamma, const T* smean,
                     const T* sinvstd, T* dx, T* dgamma, T* dbeta, bool accumulate) {
  const double M = double(d.M());
  for (int64_t c = 0; c < d.C; ++c) {
    const double mean = smean[c], invstd = sinvstd[c];
    double sdy = 0.0, sdyxh = 0.0;
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t i = 0; i < d.HW; ++i) {
        const int64_t k = at(d, n, c, i);
        sdy += dy[k];
        sdyxh += double(dy[k]) * (double(x[k]) - mean) * invstd;
      }
    if (dx) {
      const double a = double(gamma[c]) * invstd / M;
      for (int64_t n = 0; n < d.N; ++n)
        for (int64_t i = 0; i < d.HW; ++i) {
          const int64_t k = at(d, n, c, i);
          const double xh = (double(x[k]) - mean) * invstd;
          dx[k] = T(a * (M * double(dy[k]) - sdy - xh * sdyxh));
        }
    }
    if (dgamma) dgamma[c] = T(accumulate ? double(dgamma[c]) + sdyxh : sdyxh);
    if (dbeta) dbeta[c] = T(accumulate ? double(dbeta[c]) + sdy : sdy);
  }
}

// ---------------------------------------------------------------- fast f32
// With OpenMP, the channels are split into one contiguous slice per thread;
// each channel's sums stay in one thread, so results do not depend on the
// thread count. A slice is swept image by image (n-major): in NCHW an image's
// rows of the slice's channels are one contiguous run of memory, where a
// channel alone is N rows of HW floats apart, a stride the hardware
// prefetchers follow poorly (the statistics pass over resnet18-cifar's
// 64x64x32x32 took 2.3-2.5 ms a channel at a time against 0.7 image by image,
// one thread, AMD EPYC Zen 4). Each channel still adds its rows in n order, so
// the bits are those of a channel-at-a-time sweep.
constexpr int64_t kParallelMin = 1 << 15;  // elements below which threads cost more

// Row sums in kLanes independent double accumulators: the compiler may not
// reorder one serial double sum, but it vectorises independent lanes.
constexpr int kLanes = 8;

// f(c0, c1) for slices covering the channels, one per thread; blocked
// (nChw16c) dims slice the channel blocks, f(b0, b1).
template <typename F>
void for_each_channel_slice(const BnDims& d, int threads, F&& f) {
  for_each_slice(d.blocked ? d.C / kLayoutBlock : d.C, threads, d.M() * d.C >= kParallelMin, f);
}

// s += Σ g, sx += Σ g·x over [0, n) in kLanes double lanes: lane l sums
// elements i+l, then the lanes are added in order, whatever the ISA (so every
// copy gives the same bits; a single serial sum would neither vectorise nor
// keep up with the loads). The lanes are kLanes / (kVecBytes / 8) vectors of
// the copy's register size (GCC's and Clang's vector extensions): four SSE2
// pairs, or two quadruples in the AVX2 and AVX-512 copies.
template <int kVecBytes>
inline void sum_dot(const float* g, const float* x, int64_t n, double& s, double& sx) {
  constexpr int kPerVec = kVecBytes / 8;  // doubles a register holds
  constexpr int kVecs = kLanes / kPerVec;
  static_assert(kVecs * kPerVec == kLanes, "whole registers of lanes");
  using F64v = typename CpuVec<kVecBytes>::F64;
  using F32v = typename CpuVec<kVecBytes>::F32Half;
  F64v a[kVecs] = {}, b[kVecs] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kVecs; ++j) {
      F32v gf, xf;
      std::memcpy(&gf, g + i + j * kPerVec, sizeof gf);
      std::memcpy(&xf, x + i + j * kPerVec, sizeof xf);
      const F64v v = __builtin_convertvector(gf, F64v), w = __builtin_convertvector(xf, F64v);
      a[j] += v;
      b[j] += v * w;
    }
  for (; i < n; ++i) {
    a[0][0] += g[i];
    b[0][0] += double(g[i]) * double(x[i]);
  }
  for (int l = 0; l < kLanes; ++l) s += a[l / kPerVec][l % kPerVec], sx += b[l / kPerVec][l % kPerVec];
}

// s += Σ x, s2 += Σ x²: the same lanes and order as sum_dot(x, x).
template <int kVecBytes>
inline void sum_sumsq(const float* x, int64_t n, double& s, double& s2) {
  sum_dot<kVecBytes>(x, x, n, s, s2);
}

// One row: out = act(x·scale + shift [+ r]); r null: no residual.
inline void apply_row(const float* xr, const float* rr, bool relu, float scale, float shift,
                      float* out, int64_t n) {
  if (rr) {
    if (relu)
      for (int64_t i = 0; i < n; ++i) {
        const float v = (xr[i] * scale + shift) + rr[i];
        out[i] = v > 0.0f ? v : 0.0f;
      }
    else
      for (int64_t i = 0; i < n; ++i) out[i] = (xr[i] * scale + shift) + rr[i];
  } else if (relu) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = xr[i] * scale + shift;
      out[i] = v > 0.0f ? v : 0.0f;
    }
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = xr[i] * scale + shift;
  }
}

// The operands of the fast f32 path (one struct, so the per-ISA copies below
// take one argument besides the slice).
struct F32Args {
  BnDims d{};
  const float* x = nullptr;
  const float* y = nullptr;  // backward: the forward's output, for the ReLU mask
  const float* dy = nullptr;
  const float* gamma = nullptr;
  const float* beta = nullptr;
  const float* r = nullptr;  // forward: the residual added before the ReLU (null: none)
  bool relu = false;
  float* rmean = nullptr;  // running statistics: updated (training), read (evaluation)
  float* rvar = nullptr;
  double momentum = 0.0, eps = 0.0;
  float* out = nullptr;      // forward: y; backward: dx (null: not wanted)
  float* smean = nullptr;    // saved statistics: written (training), read (backward)
  float* sinvstd = nullptr;
  float* dres = nullptr;     // backward: the residual's gradient dz (null: not wanted)
  float* dgamma = nullptr;
  float* dbeta = nullptr;
  bool accumulate = false;
};

// The per-channel arithmetic both sweeps share (NCHW rows and nChw16c runs),
// for channels [c0, c1) with their sums at [c − c0].

// Training: mean and variance from Σx and Σx² (double), y = x·scale + shift;
// the running statistics moved and the saved ones written.
inline void train_constants(const F32Args& a, int64_t c0, int64_t c1, const double* s,
                            const double* s2, float* scale, float* shift) {
  const double M = double(a.d.M());
  for (int64_t c = c0; c < c1; ++c) {
    const double mean = s[c - c0] / M;
    const double var = std::max(s2[c - c0] / M - mean * mean, 0.0);
    const double invstd = 1.0 / std::sqrt(var + a.eps);
    scale[c - c0] = float(double(a.gamma[c]) * invstd);
    shift[c - c0] = float(double(a.beta[c]) - mean * double(a.gamma[c]) * invstd);
    const double unbiased = a.d.M() > 1 ? var * M / (M - 1.0) : var;
    a.rmean[c] = float((1.0 - a.momentum) * a.rmean[c] + a.momentum * mean);
    a.rvar[c] = float((1.0 - a.momentum) * a.rvar[c] + a.momentum * unbiased);
    a.smean[c] = float(mean);
    a.sinvstd[c] = float(invstd);
  }
}

// Evaluation: y = x·scale + shift with the running statistics.
inline void eval_constants(const F32Args& a, int64_t c0, int64_t c1, float* scale, float* shift) {
  for (int64_t c = c0; c < c1; ++c) {
    const double invstd = 1.0 / std::sqrt(double(a.rvar[c]) + a.eps);
    scale[c - c0] = float(double(a.gamma[c]) * invstd);
    shift[c - c0] = float(double(a.beta[c]) - double(a.rmean[c]) * double(a.gamma[c]) * invstd);
  }
}

// Backward, from Σdz and Σdz·x (double): dγ and dβ written or added, and
// dx = dz·ka + x·kb + kc; with Σdz·x̂ = invstd·(Σdz·x − μ·Σdz),
// dx = γ·invstd·dz − γ·invstd/M·(Σdz + x̂·Σdz·x̂).
inline void backward_constants(const F32Args& a, int64_t c0, int64_t c1, const double* sdy,
                               const double* sdyx, float* ka, float* kb, float* kc) {
  const double M = double(a.d.M());
  for (int64_t c = c0; c < c1; ++c) {
    const double mean = a.smean[c], invstd = a.sinvstd[c];
    const double sdyxh = invstd * (sdyx[c - c0] - mean * sdy[c - c0]);
    const double g = double(a.gamma[c]) * invstd;
    const double kx = -g / M * sdyxh * invstd;  // coefficient of x
    ka[c - c0] = float(g);
    kb[c - c0] = float(kx);
    kc[c - c0] = float(-g / M * sdy[c - c0] - kx * mean);
    if (a.dgamma) a.dgamma[c] = float(a.accumulate ? a.dgamma[c] + sdyxh : sdyxh);
    if (a.dbeta) a.dbeta[c] = float(a.accumulate ? a.dbeta[c] + sdy[c - c0] : sdy[c - c0]);
  }
}

// Per-channel scale and shift of a slice [c0, c1), then every row of it swept
// image by image: y = act(x·scale + shift [+ r]).
inline void apply_slice(const F32Args& a, int64_t c0, int64_t c1, const float* scale,
                 const float* shift) {
  const BnDims& d = a.d;
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t at0 = at(d, n, c, 0);
      apply_row(a.x + at0, a.r ? a.r + at0 : nullptr, a.relu, scale[c - c0], shift[c - c0],
                a.out + at0, d.HW);
    }
}

// One read of x for the statistics: Σx and Σx² in double, whose cancellation in
// E[x²] − E[x]² stays below f32 resolution unless |mean|/std exceeds ~10^4;
// then y = act(x·scale + shift [+ r]) with per-channel constants.
template <int kVecBytes>
inline void bn_train_slice_body(const F32Args& a, int64_t c0, int64_t c1) {
  const BnDims& d = a.d;
  const int64_t k = c1 - c0;
  std::vector<double> s(size_t(k), 0.0), s2(size_t(k), 0.0);
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t c = c0; c < c1; ++c)
      sum_sumsq<kVecBytes>(a.x + at(d, n, c, 0), d.HW, s[c - c0], s2[c - c0]);
  std::vector<float> scale(static_cast<size_t>(k)), shift(static_cast<size_t>(k));
  train_constants(a, c0, c1, s.data(), s2.data(), scale.data(), shift.data());
  apply_slice(a, c0, c1, scale.data(), shift.data());
}

inline void bn_eval_slice_body(const F32Args& a, int64_t c0, int64_t c1) {
  std::vector<float> scale(static_cast<size_t>(c1 - c0)), shift(static_cast<size_t>(c1 - c0));
  eval_constants(a, c0, c1, scale.data(), shift.data());
  apply_slice(a, c0, c1, scale.data(), shift.data());
}

// Sweep 1: dz = dy, or its ReLU mask row by row (into dres when wanted, else
// a row of scratch), then Σdz and Σdz·x in one pass; with
// Σdz·x̂ = invstd·(Σdz·x − μ·Σdz). Sweep 2: dx = dz·a + x·b + c0 with
// per-channel constants, dz recomputed from y and dy. Both image by image.
template <int kVecBytes>
inline void bn_backward_slice_body(const F32Args& a, int64_t c0, int64_t c1) {
  const BnDims& d = a.d;
  const int64_t k = c1 - c0;
  std::vector<double> sdy(size_t(k), 0.0), sdyx(size_t(k), 0.0);
  std::vector<float> scratch(a.relu && !a.dres ? size_t(d.HW) : 0);
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t at0 = at(d, n, c, 0);
      const float* gr = a.dy + at0;
      const float* dz = gr;
      if (a.relu) {
        const float* yr = a.y + at0;
        float* mz = a.dres ? a.dres + at0 : scratch.data();
        // gr[i] loaded unconditionally: a conditional load keeps GCC from
        // vectorizing the select (the unfused relu_backward is SIMD).
        for (int64_t i = 0; i < d.HW; ++i) {
          const float g = gr[i];
          mz[i] = yr[i] > 0.0f ? g : 0.0f;
        }
        dz = mz;
      } else if (a.dres) {
        std::copy_n(gr, d.HW, a.dres + at0);
      }
      sum_dot<kVecBytes>(dz, a.x + at0, d.HW, sdy[c - c0], sdyx[c - c0]);
    }
  std::vector<float> ka(static_cast<size_t>(k)), kb(static_cast<size_t>(k)), kc(static_cast<size_t>(k));
  backward_constants(a, c0, c1, sdy.data(), sdyx.data(), ka.data(), kb.data(), kc.data());
  if (!a.out) return;
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t at0 = at(d, n, c, 0);
      const float* xr = a.x + at0;
      const float* gr = a.dy + at0;
      float* out = a.out + at0;
      const float fa = ka[c - c0], fb = kb[c - c0], f0 = kc[c - c0];
      if (a.relu) {
        const float* yr = a.y + at0;
        for (int64_t i = 0; i < d.HW; ++i) {
          const float gi = gr[i];
          const float dz = yr[i] > 0.0f ? gi : 0.0f;
          out[i] = dz * fa + xr[i] * fb + f0;
        }
      } else {
        for (int64_t i = 0; i < d.HW; ++i) out[i] = gr[i] * fa + xr[i] * fb + f0;
      }
    }
}

// ---------------------------------------------------------------- blocked f32
// nChw16c: a slice is channel blocks [b0, b1) (16 channels each); (n, b) is
// one contiguous run of HW vectors of 16 channels. Sums per channel in
// double, one serial sum a channel (file comment).
constexpr int64_t kB = kLayoutBlock;

// s[l] += Σ_i g[i·16 + l], sx[l] += Σ_i g[i·16 + l]·x[i·16 + l] over one run.
inline void run_sum_dot(const float* g, const float* x, int64_t HW, double* s, double* sx) {
  double a[kB], b[kB];
  for (int l = 0; l < kB; ++l) a[l] = s[l], b[l] = sx[l];
  for (int64_t i = 0; i < HW; ++i)
    for (int l = 0; l < kB; ++l) {
      const double v = g[i * kB + l];
      a[l] += v;
      b[l] += v * double(x[i * kB + l]);
    }
  for (int l = 0; l < kB; ++l) s[l] = a[l], sx[l] = b[l];
}

// One run: out = act(x·scale[l] + shift[l] [+ r]).
inline void run_apply(const float* x, const float* r, bool relu, const float* scale,
                      const float* shift, float* out, int64_t HW) {
  for (int64_t i = 0; i < HW; ++i)
    for (int l = 0; l < kB; ++l) {
      float v = x[i * kB + l] * scale[l] + shift[l];
      if (r) v = v + r[i * kB + l];
      out[i * kB + l] = relu ? (v > 0.0f ? v : 0.0f) : v;
    }
}

inline int64_t run_at(const BnDims& d, int64_t n, int64_t b) {
  return (n * (d.C / kB) + b) * d.HW * kB;
}

inline void blocked_apply(const F32Args& a, int64_t b0, int64_t b1, const float* scale,
                          const float* shift) {
  const BnDims& d = a.d;
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t at0 = run_at(d, n, b);
      run_apply(a.x + at0, a.r ? a.r + at0 : nullptr, a.relu, scale + (b - b0) * kB,
                shift + (b - b0) * kB, a.out + at0, d.HW);
    }
}

// As bn_train_slice_body, on channel blocks [b0, b1).
inline void bn_train_blocked_body(const F32Args& a, int64_t b0, int64_t b1) {
  const BnDims& d = a.d;
  const int64_t k = (b1 - b0) * kB, c0 = b0 * kB;
  std::vector<double> s(size_t(k), 0.0), s2(size_t(k), 0.0);
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t b = b0; b < b1; ++b) {
      const float* xr = a.x + run_at(d, n, b);
      run_sum_dot(xr, xr, d.HW, &s[size_t((b - b0) * kB)], &s2[size_t((b - b0) * kB)]);
    }
  std::vector<float> scale(static_cast<size_t>(k)), shift(static_cast<size_t>(k));
  train_constants(a, c0, c0 + k, s.data(), s2.data(), scale.data(), shift.data());
  blocked_apply(a, b0, b1, scale.data(), shift.data());
}

inline void bn_eval_blocked_body(const F32Args& a, int64_t b0, int64_t b1) {
  const int64_t k = (b1 - b0) * kB, c0 = b0 * kB;
  std::vector<float> scale(static_cast<size_t>(k)), shift(static_cast<size_t>(k));
  eval_constants(a, c0, c0 + k, scale.data(), shift.data());
  blocked_apply(a, b0, b1, scale.data(), shift.data());
}

// As bn_backward_slice_body: sweep 1 forms dz (dy or its ReLU mask, into
// dres when wanted) and its two sums, sweep 2 writes dx.
inline void bn_backward_blocked_body(const F32Args& a, int64_t b0, int64_t b1) {
  const BnDims& d = a.d;
  const int64_t k = (b1 - b0) * kB, c0 = b0 * kB;
  std::vector<double> sdy(size_t(k), 0.0), sdyx(size_t(k), 0.0);
  std::vector<float> scratch(a.relu && !a.dres ? size_t(d.HW * kB) : 0);
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t at0 = run_at(d, n, b);
      const float* dz = a.dy + at0;
      if (a.relu) {
        const float* yr = a.y + at0;
        float* mz = a.dres ? a.dres + at0 : scratch.data();
        for (int64_t i = 0; i < d.HW * kB; ++i) {
          const float g = a.dy[at0 + i];
          mz[i] = yr[i] > 0.0f ? g : 0.0f;
        }
        dz = mz;
      } else if (a.dres) {
        std::copy_n(a.dy + at0, d.HW * kB, a.dres + at0);
      }
      run_sum_dot(dz, a.x + at0, d.HW, &sdy[size_t((b - b0) * kB)], &sdyx[size_t((b - b0) * kB)]);
    }
  std::vector<float> ka(static_cast<size_t>(k)), kb(static_cast<size_t>(k)), kc(static_cast<size_t>(k));
  backward_constants(a, c0, c0 + k, sdy.data(), sdyx.data(), ka.data(), kb.data(), kc.data());
  if (!a.out) return;
  for (int64_t n = 0; n < d.N; ++n)
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t at0 = run_at(d, n, b);
      const float* xr = a.x + at0;
      const float* gr = a.dy + at0;
      const float* yr = a.relu ? a.y + at0 : nullptr;
      float* out = a.out + at0;
      const float *fa = &ka[size_t((b - b0) * kB)], *fb = &kb[size_t((b - b0) * kB)],
                  *f0 = &kc[size_t((b - b0) * kB)];
      for (int64_t i = 0; i < d.HW; ++i)
        for (int l = 0; l < kB; ++l) {
          const float gi = gr[i * kB + l];
          const float dz = yr ? (yr[i * kB + l] > 0.0f ? gi : 0.0f) : gi;
          out[i * kB + l] = dz * fa[l] + xr[i * kB + l] * fb[l] + f0[l];
        }
    }
}

TB_CPU_KERNEL(void, bn_train_blocked, (const F32Args& a, int64_t b0, int64_t b1), (a, b0, b1),
              bn_train_blocked_body)
TB_CPU_KERNEL(void, bn_eval_blocked, (const F32Args& a, int64_t b0, int64_t b1), (a, b0, b1),
              bn_eval_blocked_body)
TB_CPU_KERNEL(void, bn_backward_blocked, (const F32Args& a, int64_t b0, int64_t b1),
              (a, b0, b1), bn_backward_blocked_body)

// Each slice's work compiled for the processor's widest ISA (cpu_features.h).
TB_CPU_KERNEL_BY_WIDTH(void, bn_train_slice, (const F32Args& a, int64_t c0, int64_t c1),
                       (a, c0, c1), bn_train_slice_body)
TB_CPU_KERNEL(void, bn_eval_slice, (const F32Args& a, int64_t c0, int64_t c1), (a, c0, c1),
              bn_eval_slice_body)
TB_CPU_KERNEL_BY_WIDTH(void, bn_backward_slice, (const F32Args& a, int64_t c0, int64_t c1),
                       (a, c0, c1), bn_backward_slice_body)

void bn_train_f32(const F32Args& a, int threads) {
  for_each_channel_slice(a.d, threads, [&](int64_t u0, int64_t u1) {
    a.d.blocked ? bn_train_blocked(a, u0, u1) : bn_train_slice(a, u0, u1);
  });
}

void bn_eval_f32(const F32Args& a, int threads) {
  for_each_channel_slice(a.d, threads, [&](int64_t u0, int64_t u1) {
    a.d.blocked ? bn_eval_blocked(a, u0, u1) : bn_eval_slice(a, u0, u1);
  });
}

void bn_backward_f32(const F32Args& a, int threads) {
  for_each_channel_slice(a.d, threads, [&](int64_t u0, int64_t u1) {
    a.d.blocked ? bn_backward_blocked(a, u0, u1) : bn_backward_slice(a, u0, u1);
  });
}

template <typename T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_as<T>() : nullptr;
}

// y = act(y + residual) by the pointwise ops (reference or fast by their own
// dispatch), after the reference batch norm: the fused op's definition.
void apply_epilogue_reference(Backend& be, const Epilogue& epilogue, Tensor& y) {
  if (epilogue.residual.defined()) pointwise::add(be, y, epilogue.residual, y);
  if (epilogue.act == Activation::ReLU) pointwise::relu_forward(be, y, y);
}

class CpuKernels final : public batchnorm::Kernels {
 public:
  explicit CpuKernels(CpuBackend& be) : be_(be) {}

  // f16/bf16 by widen-compute-round (file comment).
  bool supports(DType t) const override {
    return t == DType::F32 || t == DType::F64 || amp::is_low_precision(t);
  }

  void forward_train(const BnDims& d, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                     Tensor& running_mean, Tensor& running_var, float momentum, float eps,
                     Tensor& y, Tensor& save_mean, Tensor& save_invstd,
                     const Epilogue& epilogue) override;
  void forward_eval(const BnDims& d, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                    const Tensor& running_mean, const Tensor& running_var, float eps, Tensor& y,
                    const Epilogue& epilogue) override;
  void backward(const BnDims& d, const Tensor& x, const Tensor& dy, const Tensor& gamma,
                const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx, Tensor& dgamma,
                Tensor& dbeta, bool accumulate, const EpilogueGrad& epilogue) override;

 private:
  bool use_reference(DType t) const { return be_.use_reference(t); }

  CpuBackend& be_;
};

}  // namespace

void CpuKernels::forward_train(const BnDims& d, const Tensor& x, const Tensor& gamma,
                               const Tensor& beta, Tensor& running_mean, Tensor& running_var,
                               float momentum, float eps, Tensor& y, Tensor& save_mean,
                               Tensor& save_invstd, const Epilogue& epilogue) {
  check_cpu(x, epilogue.active(), "batchnorm_forward_train");
  if (amp::is_low_precision(x.dtype())) {  // widen-compute-round (file comment)
    Tensor yw = amp::f32_scratch(be_, y);
    forward_train(d, amp::widened(be_, x), gamma, beta, running_mean, running_var, momentum, eps,
                  yw, save_mean, save_invstd,
                  Epilogue{epilogue.act, amp::widened(be_, epilogue.residual)});
    amp::round_into(be_, yw, y);
    return;
  }
  if (use_reference(x.dtype()) || d.nhwc) {  // NHWC: reference (file comment)
    by_dtype(x, [&](auto z) {
      using T = decltype(z);
      bn_train_ref<T>(d, x.data_as<T>(), gamma.data_as<T>(), beta.data_as<T>(),
                      running_mean.data_as<T>(), running_var.data_as<T>(), momentum, eps,
                      y.data_as<T>(), save_mean.data_as<T>(), save_invstd.data_as<T>());
    });
    apply_epilogue_reference(be_, epilogue, y);
    return;
  }
  bn_train_f32({.d = d, .x = x.data_as<float>(), .gamma = gamma.data_as<float>(),
                .beta = beta.data_as<float>(), .r = ptr_or_null<float>(epilogue.residual),
                .relu = epilogue.act == Activation::ReLU,
                .rmean = running_mean.data_as<float>(), .rvar = running_var.data_as<float>(),
                .momentum = momentum, .eps = eps, .out = y.data_as<float>(),
                .smean = save_mean.data_as<float>(), .sinvstd = save_invstd.data_as<float>()},
               be_.threads());
}

void CpuKernels::forward_eval(const BnDims& d, const Tensor& x, const Tensor& gamma,
                              const Tensor& beta, const Tensor& running_mean,
                              const Tensor& running_var, float eps, Tensor& y,
                              const Epilogue& epilogue) {
  check_cpu(x, epilogue.active(), "batchnorm_forward_eval");
  if (amp::is_low_precision(x.dtype())) {  // widen-compute-round (file comment)
    Tensor yw = amp::f32_scratch(be_, y);
    forward_eval(d, amp::widened(be_, x), gamma, beta, running_mean, running_var, eps, yw,
                 Epilogue{epilogue.act, amp::widened(be_, epilogue.residual)});
    amp::round_into(be_, yw, y);
    return;
  }
  if (use_reference(x.dtype()) || d.nhwc) {  // NHWC: reference (file comment)
    by_dtype(x, [&](auto z) {
      using T = decltype(z);
      bn_eval_ref<T>(d, x.data_as<T>(), gamma.data_as<T>(), beta.data_as<T>(),
                     running_mean.data_as<T>(), running_var.data_as<T>(), eps, y.data_as<T>());
    });
    apply_epilogue_reference(be_, epilogue, y);
    return;
  }
  bn_eval_f32({.d = d, .x = x.data_as<float>(), .gamma = gamma.data_as<float>(),
               .beta = beta.data_as<float>(), .r = ptr_or_null<float>(epilogue.residual),
               .relu = epilogue.act == Activation::ReLU,
               .rmean = running_mean.data_as<float>(),
               .rvar = running_var.data_as<float>(), .eps = eps,
               .out = y.data_as<float>()},
              be_.threads());
}

void CpuKernels::backward(const BnDims& d, const Tensor& x, const Tensor& dy, const Tensor& gamma,
                          const Tensor& save_mean, const Tensor& save_invstd, Tensor& dx,
                          Tensor& dgamma, Tensor& dbeta, bool accumulate,
                          const EpilogueGrad& epilogue) {
  check_cpu(x, epilogue.active(), "batchnorm_backward");
  if (amp::is_low_precision(x.dtype())) {  // widen-compute-round (file comment)
    Tensor dxw = amp::f32_scratch(be_, dx), dresw = amp::f32_scratch(be_, epilogue.dresidual);
    backward(d, amp::widened(be_, x), amp::widened(be_, dy), gamma, save_mean, save_invstd, dxw,
             dgamma, dbeta, accumulate,
             EpilogueGrad{epilogue.act, amp::widened(be_, epilogue.y), dresw});
    Tensor dres = epilogue.dresidual;  // a view: the caller's buffer
    amp::round_into(be_, dxw, dx);
    amp::round_into(be_, dresw, dres);
    return;
  }
  const bool relu = epilogue.act == Activation::ReLU;
  if (use_reference(x.dtype()) || d.nhwc) {  // NHWC: reference (file comment)
    // The epilogue's gradient by the pointwise reference ops: dz = relu'(dy)
    // or dy, into dresidual when wanted.
    Tensor dz = dy;
    if (epilogue.active()) {
      dz = epilogue.dresidual.defined() ? epilogue.dresidual
                                           : Tensor::empty(x.shape(), x.dtype(), Device::cpu(), x.layout());
      if (relu)
        pointwise::relu_backward(be_, epilogue.y, dy, dz);
      else
        be_.copy(dy, dz);
    }
    by_dtype(x, [&](auto z) {
      using T = decltype(z);
      bn_backward_ref<T>(d, x.data_as<T>(), dz.data_as<T>(), gamma.data_as<T>(),
                         save_mean.data_as<T>(), save_invstd.data_as<T>(), ptr_or_null<T>(dx),
                         ptr_or_null<T>(dgamma), ptr_or_null<T>(dbeta), accumulate);
    });
    return;
  }
  bn_backward_f32({.d = d, .x = x.data_as<float>(),
                   .y = relu ? epilogue.y.data_as<float>() : nullptr, .dy = dy.data_as<float>(),
                   .gamma = gamma.data_as<float>(), .relu = relu, .out = ptr_or_null<float>(dx),
                   .smean = save_mean.data_as<float>(),
                   .sinvstd = save_invstd.data_as<float>(),
                   .dres = ptr_or_null<float>(epilogue.dresidual),
                   .dgamma = ptr_or_null<float>(dgamma), .dbeta = ptr_or_null<float>(dbeta),
                   .accumulate = accumulate},
                  be_.threads());
}

namespace batchnorm {
void register_cpu_kernels() { register_kernels<Kernels, CpuKernels, CpuBackend>(DeviceKind::CPU); }
}  // namespace batchnorm

}  // namespace tb
