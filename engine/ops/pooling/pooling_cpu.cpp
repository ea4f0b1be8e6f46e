// SPDX-License-Identifier: GPL-3.0-or-later
// The CPU backend's pooling Kernels (contract: pooling.h), NCHW and NHWC.
// What the CPU adds to the contract: host tensors.
//
// reference<T>: per-cell bounds checks, every element addressed through offset4,
// so NHWC runs the same arithmetic in the same order as NCHW (f64,
// BackendOptions::reference, and every NHWC tensor: the fast paths below walk
// contiguous H*W planes, and NHWC on the CPU is the oracle for the CUDA
// channels-last path, not a speed path, so it is never transposed to reach them).
// fast f32: the window is clipped to the image once per output cell and the
// plane pointers are hoisted, so the inner loops are plain strided reads; max
// pooling 2x2/stride 2 (the usual one) has an SSE2 path without branches;
// both compiled per instruction set (cpu_features.h), so never legacy-encoded
// SSE on a processor with AVX.
// With OpenMP, max pooling splits the N*C planes across the backend's threads
// (each plane is read and written by one thread: no effect on the values).
// oneDNN (builds with oneDNN): f32 NCHW average pooling where its JIT kernel
// takes the shape (pooling_cpu.h says how the path is chosen and recorded).
// f16/bf16: widen-compute-round (amp::widen_compute_round): the f32 paths on
// the widened values, each output rounded once, as the CUDA kernels do.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/cpu_features.h"
#include "engine/core/cpu_threads.h"
#include "engine/core/dispatch.h"
#include "engine/core/error.h"
#include "engine/ops/amp/amp.h"
#include "engine/ops/pooling/pooling.h"
#include "engine/ops/pooling/pooling_cpu.h"
#ifdef TRAINBENCH_HAVE_ONEDNN
#include "engine/ops/pooling/pooling_onednn.h"
#endif

namespace tb {

namespace {

constexpr int64_t kParallelMin = 1 << 15;  // input elements below which threads cost more

// The window of output cell o along one axis, clipped to the image: [lo, hi).
inline void window(int64_t o, const PoolGeometry& g, int64_t n_in, int64_t& lo, int64_t& hi) {
  const int64_t start = o * g.stride - g.pad;
  lo = std::max<int64_t>(start, 0);
  hi = std::min<int64_t>(start + g.kernel, n_in);
}

// ---------------------------------------------------------------- max pooling

template <typename T>
void maxpool_forward_ref(const PoolGeometry& g, Layout l, const T* x, T* y, int32_t* argmax) {
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t oh = 0; oh < g.H_out; ++oh)
        for (int64_t ow = 0; ow < g.W_out; ++ow) {
          T best = T(0);
          int64_t arg = -1;
          for (int64_t kh = 0; kh < g.kernel; ++kh)
            for (int64_t kw = 0; kw < g.kernel; ++kw) {
              const int64_t ih = oh * g.stride - g.pad + kh, iw = ow * g.stride - g.pad + kw;
              if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;
              const T v = x[offset4(l, g.C, g.H, g.W, n, c, ih, iw)];
              if (arg < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
                best = v;
                arg = ih * g.W + iw;  // plane index, whatever the layout
              }
            }
          const int64_t o = offset4(l, g.C, g.H_out, g.W_out, n, c, oh, ow);
          y[o] = best;
          argmax[o] = static_cast<int32_t>(arg);
        }
}

// NHWC and nChw16c backward (reference): dx[n, c, argmax] += dy in the same
// (n, c, oh, ow) order as the NCHW scatter below, so the sums of overlapping
// windows match it bit for bit (and the CUDA gather, which adds in increasing
// (oh, ow) order too).
template <typename T>
void maxpool_backward_ref(const PoolGeometry& g, Layout l, const T* dy, const int32_t* argmax,
                          T* dx) {
  std::fill_n(dx, g.N * g.C * g.H * g.W, T(0));
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t oh = 0; oh < g.H_out; ++oh)
        for (int64_t ow = 0; ow < g.W_out; ++ow) {
          const int64_t o = offset4(l, g.C, g.H_out, g.W_out, n, c, oh, ow);
          const int64_t a = argmax[o];
          dx[offset4(l, g.C, g.H, g.W, n, c, a / g.W, a % g.W)] += dy[o];
        }
}

// The window [h0,h1) x [w0,w1) holds a NaN: the first one is the result.
void first_nan(const float* plane, int64_t W, int64_t h0, int64_t h1, int64_t w0, int64_t w1,
               float& best, int64_t& arg) {
  for (int64_t ih = h0; ih < h1; ++ih)
    for (int64_t iw = w0; iw < w1; ++iw)
      if (plane[ih * W + iw] != plane[ih * W + iw]) {
        best = plane[ih * W + iw];
        arg = ih * W + iw;
        return;
      }
}

// The common window: 2x2, stride 2, no padding (both layouts' fast paths).
bool two_by_two(const PoolGeometry& g) { return g.kernel == 2 && g.stride == 2 && g.pad == 0; }

// One output of a 2x2 window at (r0, r1) + 2*ow: the maximum and the first cell
// that equals it (ties: first max). NaN-free windows only.
inline void max4(const float* r0, const float* r1, int64_t ow, int32_t W, float& best,
                 int32_t& arg) {
  const float a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
  best = std::max(std::max(a, b), std::max(c, d));
  arg = a == best ? 0 : b == best ? 1 : c == best ? W : W + 1;
}

// The common 2x2 / stride 2 / no padding case, without window bookkeeping, on
// planes [nc0, nc1). With SSE2, four outputs at a time: de-interleave the two
// rows into the four window cells (a, b / c, d), take the maximum, then select
// the first cell equal to it. Data-dependent branches would mispredict on half
// of random inputs. A window with a NaN makes the comparisons meaningless; its
// row is redone at the end.
inline void maxpool_2x2_planes_body(const PoolGeometry& g, const float* x, float* y,
                                    int32_t* argmax, int64_t nc0, int64_t nc1) {
  const int64_t HW = g.H * g.W, P = g.H_out * g.W_out;
  const int32_t W = static_cast<int32_t>(g.W);
  for (int64_t nc = nc0; nc < nc1; ++nc) {
    const float* plane = x + nc * HW;
    for (int64_t oh = 0; oh < g.H_out; ++oh) {
      const float* r0 = plane + 2 * oh * W;
      const float* r1 = r0 + W;
      float* yp = y + nc * P + oh * g.W_out;
      int32_t* ap = argmax + nc * P + oh * g.W_out;
      const int32_t base = static_cast<int32_t>(2 * oh * W);
      bool nan = false;
      int64_t ow = 0;
#if defined(__SSE2__)
      const __m128i k0 = _mm_setzero_si128(), k1 = _mm_set1_epi32(1), kW = _mm_set1_epi32(W),
                    kW1 = _mm_set1_epi32(W + 1), k0246 = _mm_setr_epi32(0, 2, 4, 6);
      __m128 unordered = _mm_setzero_ps();
      auto four = [&](int64_t o) {  // outputs o .. o+3
        const __m128 u0 = _mm_loadu_ps(r0 + 2 * o), u1 = _mm_loadu_ps(r0 + 2 * o + 4);
        const __m128 l0 = _mm_loadu_ps(r1 + 2 * o), l1 = _mm_loadu_ps(r1 + 2 * o + 4);
        const __m128 a = _mm_shuffle_ps(u0, u1, _MM_SHUFFLE(2, 0, 2, 0));
        const __m128 b = _mm_shuffle_ps(u0, u1, _MM_SHUFFLE(3, 1, 3, 1));
        const __m128 c = _mm_shuffle_ps(l0, l1, _MM_SHUFFLE(2, 0, 2, 0));
        const __m128 d = _mm_shuffle_ps(l0, l1, _MM_SHUFFLE(3, 1, 3, 1));
        const __m128 m = _mm_max_ps(_mm_max_ps(a, b), _mm_max_ps(c, d));
        unordered = _mm_or_ps(unordered, _mm_or_ps(_mm_cmpunord_ps(a, b), _mm_cmpunord_ps(c, d)));
        // Lowest priority first, so the earliest equal cell is selected last.
        auto select = [](__m128 eq, __m128i v, __m128i cur) {
          const __m128i mk = _mm_castps_si128(eq);
          return _mm_or_si128(_mm_and_si128(mk, v), _mm_andnot_si128(mk, cur));
        };
        __m128i arg = kW1;
        arg = select(_mm_cmpeq_ps(c, m), kW, arg);
        arg = select(_mm_cmpeq_ps(b, m), k1, arg);
        arg = select(_mm_cmpeq_ps(a, m), k0, arg);
        const __m128i pos = _mm_add_epi32(_mm_set1_epi32(base + static_cast<int32_t>(2 * o)), k0246);
        _mm_storeu_ps(yp + o, m);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(ap + o), _mm_add_epi32(pos, arg));
      };
      for (; ow + 4 <= g.W_out; ow += 4) four(ow);
      // A ragged end (e.g. 7 outputs) redoes the last four, overlapping.
      if (ow < g.W_out && g.W_out >= 4) {
        four(g.W_out - 4);
        ow = g.W_out;
      }
      nan = _mm_movemask_ps(unordered) != 0;
#endif
      for (; ow < g.W_out; ++ow) {
        int32_t arg;
        max4(r0, r1, ow, W, yp[ow], arg);
        ap[ow] = base + static_cast<int32_t>(2 * ow) + arg;
        nan |= yp[ow] != yp[ow] || (r0[2 * ow] != r0[2 * ow]) || (r0[2 * ow + 1] != r0[2 * ow + 1]) ||
               (r1[2 * ow] != r1[2 * ow]) || (r1[2 * ow + 1] != r1[2 * ow + 1]);
      }
      if (nan)
        for (ow = 0; ow < g.W_out; ++ow) {
          int64_t full = ap[ow];
          first_nan(plane, W, 2 * oh, 2 * oh + 2, 2 * ow, 2 * ow + 2, yp[ow], full);
          ap[ow] = static_cast<int32_t>(full);
        }
    }
  }
}

// Any window, planes [nc0, nc1).
inline void maxpool_planes_body(const PoolGeometry& g, const float* x, float* y, int32_t* argmax,
                                int64_t nc0, int64_t nc1) {
  const int64_t HW = g.H * g.W, P = g.H_out * g.W_out;
  for (int64_t nc = nc0; nc < nc1; ++nc) {
    const float* plane = x + nc * HW;
    float* yp = y + nc * P;
    int32_t* ap = argmax + nc * P;
    for (int64_t oh = 0; oh < g.H_out; ++oh) {
      int64_t h0, h1;
      window(oh, g, g.H, h0, h1);
      for (int64_t ow = 0; ow < g.W_out; ++ow) {
        int64_t w0, w1;
        window(ow, g, g.W, w0, w1);
        int64_t arg = h0 * g.W + w0;
        float best = plane[arg];
        bool nan = false;
        for (int64_t ih = h0; ih < h1; ++ih) {
          const float* row = plane + ih * g.W;
          for (int64_t iw = w0; iw < w1; ++iw) {
            const float v = row[iw];
            // Branch-free select (random data would mispredict a branch half
            // the time); NaNs are rare and fixed up below.
            const bool take = v > best;
            best = take ? v : best;
            arg = take ? ih * g.W + iw : arg;
            nan |= v != v;
          }
        }
        if (nan) first_nan(plane, g.W, h0, h1, w0, w1, best, arg);
        yp[oh * g.W_out + ow] = best;
        ap[oh * g.W_out + ow] = static_cast<int32_t>(arg);
      }
    }
  }
}

// Both compiled for the processor's widest ISA (engine/core/cpu_features.h):
// there the SSE2 intrinsics are VEX-encoded. The baseline's legacy SSE
// encoding runs 2-3x slower whenever the thread's upper vector state is dirty
// (after AVX code without vzeroupper: a standalone loop on AMD EPYC Zen 4
// under KVM, 128x32x28x28, 0.36 -> 0.95 ms; VEX-encoded 0.46 either way;
// Intel documents such penalties for its processors). The other loops here
// are baseline code still (max pooling's backward is a scalar scatter, global
// average pooling a small op, average pooling mostly oneDNN's).
TB_CPU_KERNEL(void, maxpool_2x2_planes,
              (const PoolGeometry& g, const float* x, float* y, int32_t* argmax, int64_t nc0,
               int64_t nc1),
              (g, x, y, argmax, nc0, nc1), maxpool_2x2_planes_body)
TB_CPU_KERNEL(void, maxpool_planes,
              (const PoolGeometry& g, const float* x, float* y, int32_t* argmax, int64_t nc0,
               int64_t nc1),
              (g, x, y, argmax, nc0, nc1), maxpool_planes_body)

// With OpenMP, the N*C planes split across `threads` in chunks of kPlaneChunk
// (one call of the ISA copy each).
constexpr int64_t kPlaneChunk = 16;

void maxpool_forward_fast(const PoolGeometry& g, const float* x, float* y, int32_t* argmax,
                          [[maybe_unused]] int threads) {
  const int64_t planes = g.N * g.C, chunks = (planes + kPlaneChunk - 1) / kPlaneChunk;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(threads) if (planes * g.H * g.W >= kParallelMin)
#endif
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t nc0 = k * kPlaneChunk, nc1 = std::min(planes, nc0 + kPlaneChunk);
    if (two_by_two(g))
      maxpool_2x2_planes(g, x, y, argmax, nc0, nc1);
    else
      maxpool_planes(g, x, y, argmax, nc0, nc1);
  }
}

// Same code is fast enough for both paths: one scattered add per output cell.
// argmax indexes within a plane, so planes are independent.
template <typename T>
void maxpool_backward(const PoolGeometry& g, const T* dy, const int32_t* argmax, T* dx,
                      [[maybe_unused]] int threads) {
  const int64_t HW = g.H * g.W, P = g.H_out * g.W_out;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(threads) if (g.N * g.C * HW >= kParallelMin)
#endif
  for (int64_t nc = 0; nc < g.N * g.C; ++nc) {
    T* plane = dx + nc * HW;
    std::fill_n(plane, HW, T(0));
    const T* d = dy + nc * P;
    const int32_t* a = argmax + nc * P;
    for (int64_t i = 0; i < P; ++i) plane[a[i]] += d[i];
  }
}

// ---------------------------------------------------------------- blocked max pooling
// nChw16c: run r = (n, channel block) is HW vectors of 16 channels. The
// forward of 2x2 windows, stride 2, no padding (the models' pooling; other
// windows take the reference): one window is four vectors, its 16 lanes 16
// channels' windows side by side; the same maximum and first-maximum rule as
// the NCHW path, a window with a NaN redone lane by lane as the reference
// does. The backward takes any window.
constexpr int64_t kB = kLayoutBlock;

// A window's 16 lanes as 16 / (kVecBytes / 4) vectors of the copy's register
// width (the compiler's vector extensions: SSE in the baseline, AVX in the
// AVX2 and AVX-512 copies).
template <int kVecBytes>
inline void maxpool_2x2_blocked_body(const PoolGeometry& g, const float* x, float* y,
                                     int32_t* argmax, int64_t r0, int64_t r1) {
  using F = typename CpuVec<kVecBytes>::F32;
  using I = typename CpuVec<kVecBytes>::I32;
  constexpr int kLanes = kVecBytes / 4;
  const int64_t HW = g.H * g.W, P = g.H_out * g.W_out;
  const int32_t W = static_cast<int32_t>(g.W);
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * HW * kB;
    for (int64_t oh = 0; oh < g.H_out; ++oh) {
      I unordered{};  // a row's windows with a NaN are redone after it
      for (int64_t ow = 0; ow < g.W_out; ++ow) {
        const int32_t base = static_cast<int32_t>(2 * oh * W + 2 * ow);
        const float* pa = xr + base * kB;
        const float* pc = pa + W * kB;
        const int64_t o = (r * P + oh * g.W_out + ow) * kB;
        for (int q = 0; q < kB; q += kLanes) {
          F a, b, c, d;
          std::memcpy(&a, pa + q, sizeof a);
          std::memcpy(&b, pa + kB + q, sizeof b);
          std::memcpy(&c, pc + q, sizeof c);
          std::memcpy(&d, pc + kB + q, sizeof d);
          // maxps's (x > y ? x : y), as the NCHW path
          const F ab = a > b ? a : b, cd = c > d ? c : d;
          const F m = ab > cd ? ab : cd;
          I arg = I{} + (base + W + 1);  // lowest priority first
          arg = c == m ? I{} + (base + W) : arg;
          arg = b == m ? I{} + (base + 1) : arg;
          arg = a == m ? I{} + base : arg;
          unordered |= (a != a) | (b != b) | (c != c) | (d != d);
          std::memcpy(y + o + q, &m, sizeof m);
          std::memcpy(argmax + o + q, &arg, sizeof arg);
        }
      }
      bool nan = false;
      for (int l = 0; l < kLanes; ++l) nan |= unordered[l] != 0;
      if (!nan) continue;
      for (int64_t ow = 0; ow < g.W_out; ++ow) {
        const int32_t base = static_cast<int32_t>(2 * oh * W + 2 * ow);
        const float* pa = xr + base * kB;
        const float* cell[4] = {pa, pa + kB, pa + W * kB, pa + (W + 1) * kB};
        const int32_t at[4] = {0, 1, W, W + 1};
        const int64_t o = (r * P + oh * g.W_out + ow) * kB;
        for (int l = 0; l < kB; ++l)
          for (int k = 0; k < 4; ++k)
            if (cell[k][l] != cell[k][l]) {
              y[o + l] = cell[k][l];
              argmax[o + l] = base + at[k];
              break;
            }
      }
    }
  }
}

// The backward of any window on runs [r0, r1): as the NCHW path, a run
// zeroed (a fill the processor does at full speed) and dy added at each
// argmax, windows in increasing (oh, ow) order (overlapping windows add as
// the reference does). argmax is the plane index ih·W + iw, so in a run its
// cell is argmax·16 + lane. A gather that wrote each window's four cells
// instead was slower (every cell's line read before it was written).
inline void maxpool_blocked_backward_body(const PoolGeometry& g, const float* dy,
                                          const int32_t* argmax, float* dx, int64_t r0,
                                          int64_t r1) {
  const int64_t HW = g.H * g.W, P = g.H_out * g.W_out;
  for (int64_t r = r0; r < r1; ++r) {
    float* xr = dx + r * HW * kB;
    const float* d = dy + r * P * kB;
    const int32_t* a = argmax + r * P * kB;
    std::fill_n(xr, HW * kB, 0.0f);
    for (int64_t j = 0; j < P; ++j)
      for (int l = 0; l < kB; ++l) xr[int64_t(a[j * kB + l]) * kB + l] += d[j * kB + l];
  }
}

TB_CPU_KERNEL_BY_WIDTH(void, maxpool_2x2_blocked,
                       (const PoolGeometry& g, const float* x, float* y, int32_t* argmax,
                        int64_t r0, int64_t r1),
                       (g, x, y, argmax, r0, r1), maxpool_2x2_blocked_body)
TB_CPU_KERNEL(void, maxpool_blocked_backward,
              (const PoolGeometry& g, const float* dy, const int32_t* argmax, float* dx,
               int64_t r0, int64_t r1),
              (g, dy, argmax, dx, r0, r1), maxpool_blocked_backward_body)

// The runs split across `threads` (one call of the ISA copy per thread).
template <typename F>
void for_each_run_slice(const PoolGeometry& g, int threads, F&& f) {
  for_each_slice(g.N * (g.C / kB), threads, g.N * g.C * g.H * g.W >= kParallelMin, f);
}

// ---------------------------------------------------------------- average pooling

template <typename T>
void avgpool_forward_ref(const PoolGeometry& g, Layout l, const T* x, T* y) {
  const T inv = T(1) / T(g.kernel * g.kernel);
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t oh = 0; oh < g.H_out; ++oh)
        for (int64_t ow = 0; ow < g.W_out; ++ow) {
          T acc = 0;
          for (int64_t kh = 0; kh < g.kernel; ++kh)
            for (int64_t kw = 0; kw < g.kernel; ++kw) {
              const int64_t ih = oh * g.stride - g.pad + kh, iw = ow * g.stride - g.pad + kw;
              if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;
              acc += x[offset4(l, g.C, g.H, g.W, n, c, ih, iw)];
            }
          y[offset4(l, g.C, g.H_out, g.W_out, n, c, oh, ow)] = acc * inv;
        }
}

template <typename T>
void avgpool_backward_ref(const PoolGeometry& g, Layout l, const T* dy, T* dx) {
  const T inv = T(1) / T(g.kernel * g.kernel);
  std::fill_n(dx, g.N * g.C * g.H * g.W, T(0));
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t oh = 0; oh < g.H_out; ++oh)
        for (int64_t ow = 0; ow < g.W_out; ++ow) {
          const T d = dy[offset4(l, g.C, g.H_out, g.W_out, n, c, oh, ow)] * inv;
          for (int64_t kh = 0; kh < g.kernel; ++kh)
            for (int64_t kw = 0; kw < g.kernel; ++kw) {
              const int64_t ih = oh * g.stride - g.pad + kh, iw = ow * g.stride - g.pad + kw;
              if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;
              dx[offset4(l, g.C, g.H, g.W, n, c, ih, iw)] += d;
            }
        }
}

void avgpool_forward_fast(const PoolGeometry& g, const float* x, float* y) {
  const float inv = 1.0f / float(g.kernel * g.kernel);
  const int64_t HW = g.H * g.W, P = g.H_out * g.W_out;
  for (int64_t nc = 0; nc < g.N * g.C; ++nc) {
    const float* plane = x + nc * HW;
    float* yp = y + nc * P;
    for (int64_t oh = 0; oh < g.H_out; ++oh) {
      int64_t h0, h1;
      window(oh, g, g.H, h0, h1);
      for (int64_t ow = 0; ow < g.W_out; ++ow) {
        int64_t w0, w1;
        window(ow, g, g.W, w0, w1);
        float acc = 0.0f;
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) acc += plane[ih * g.W + iw];
        yp[oh * g.W_out + ow] = acc * inv;
      }
    }
  }
}

void avgpool_backward_fast(const PoolGeometry& g, const float* dy, float* dx) {
  const float inv = 1.0f / float(g.kernel * g.kernel);
  const int64_t HW = g.H * g.W, P = g.H_out * g.W_out;
  std::fill_n(dx, g.N * g.C * HW, 0.0f);
  for (int64_t nc = 0; nc < g.N * g.C; ++nc) {
    float* plane = dx + nc * HW;
    const float* dp = dy + nc * P;
    for (int64_t oh = 0; oh < g.H_out; ++oh) {
      int64_t h0, h1;
      window(oh, g, g.H, h0, h1);
      for (int64_t ow = 0; ow < g.W_out; ++ow) {
        int64_t w0, w1;
        window(ow, g, g.W, w0, w1);
        const float d = dp[oh * g.W_out + ow] * inv;
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) plane[ih * g.W + iw] += d;
      }
    }
  }
}

// ---------------------------------------------------------------- global average
// One template serves both paths: a contiguous sum per plane (the f32 sum is
// accumulated in double so large planes lose nothing).

template <typename T>
void global_avgpool_forward_impl(int64_t NC, int64_t HW, const T* x, T* y) {
  for (int64_t i = 0; i < NC; ++i) {
    const T* p = x + i * HW;
    double s = 0.0;
    for (int64_t j = 0; j < HW; ++j) s += p[j];
    y[i] = static_cast<T>(s / double(HW));
  }
}

template <typename T>
void global_avgpool_backward_impl(int64_t NC, int64_t HW, const T* dy, T* dx) {
  const T inv = T(1) / T(HW);
  for (int64_t i = 0; i < NC; ++i) std::fill_n(dx + i * HW, HW, dy[i] * inv);
}

// NHWC: x (N, HW, C) in memory. Channel c of image n is summed over j in the same
// increasing order as the NCHW plane sum, so both layouts give the same bits.
template <typename T>
void global_avgpool_forward_nhwc(int64_t N, int64_t C, int64_t HW, const T* x, T* y) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      double s = 0.0;
      for (int64_t j = 0; j < HW; ++j) s += x[(n * HW + j) * C + c];
      y[n * C + c] = static_cast<T>(s / double(HW));
    }
}

template <typename T>
void global_avgpool_backward_nhwc(int64_t N, int64_t C, int64_t HW, const T* dy, T* dx) {
  const T inv = T(1) / T(HW);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < HW; ++j)
      for (int64_t c = 0; c < C; ++c) dx[(n * HW + j) * C + c] = dy[n * C + c] * inv;
}

// nChw16c: channel c of image n summed over j in increasing order, as the
// NCHW plane sum, so both layouts give the same bits.
template <typename T>
void global_avgpool_forward_blocked(int64_t N, int64_t C, int64_t HW, const T* x, T* y) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t b = 0; b < C / kB; ++b) {
      const T* run = x + (n * (C / kB) + b) * HW * kB;
      double s[kB] = {};
      for (int64_t j = 0; j < HW; ++j)
        for (int l = 0; l < kB; ++l) s[l] += run[j * kB + l];
      for (int l = 0; l < kB; ++l) y[n * C + b * kB + l] = static_cast<T>(s[l] / double(HW));
    }
}

template <typename T>
void global_avgpool_backward_blocked(int64_t N, int64_t C, int64_t HW, const T* dy, T* dx) {
  const T inv = T(1) / T(HW);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t b = 0; b < C / kB; ++b) {
      T* run = dx + (n * (C / kB) + b) * HW * kB;
      const T* d = dy + n * C + b * kB;
      for (int64_t j = 0; j < HW; ++j)
        for (int l = 0; l < kB; ++l) run[j * kB + l] = d[l] * inv;
    }
}

// The first operand (the others passed the contract's checks against it):
// on the host.
void check_cpu(const char* op, const Tensor& lead) {
  TB_CHECK(lead.device().is_cpu(), op, ": ", lead.describe(), " given to the cpu backend");
}

class CpuKernels final : public pooling::Kernels {
 public:
  explicit CpuKernels(CpuBackend& be) : be_(be) {
    be_.report_kernel_paths(kFamily, [this] {
      std::lock_guard lock(avg_mutex_);
      return avg_records_;
    });
  }

  // pooling_cpu.h's set_cpu_avg_pool_path.
  void set_avg_setting(const std::string& value) {
    TB_CHECK(value == "auto" || value == "fast" || value == "onednn",
             "set_cpu_avg_pool_path: expected auto, fast or onednn, got '", value, "'");
#ifndef TRAINBENCH_HAVE_ONEDNN
    TB_CHECK(value != "onednn", "set_cpu_avg_pool_path=onednn: this build has no oneDNN "
                                "(configured with TRAINBENCH_ONEDNN=OFF, or libdnnl-dev was missing)");
#endif
    std::lock_guard lock(avg_mutex_);
    avg_setting_ = value;
    avg_onednn_.clear();
    avg_records_ = nlohmann::json::object();
  }

  bool supports(DType t) const override {
    return t == DType::F32 || t == DType::F64 || amp::is_low_precision(t);
  }

  void max_forward(const PoolGeometry& g, const Tensor& x, Tensor& y, Tensor& argmax) override;
  void max_backward(const PoolGeometry& g, const Tensor& dy, const Tensor& argmax,
                    Tensor& dx) override;
  void avg_forward(const PoolGeometry& g, const Tensor& x, Tensor& y) override;
  void avg_backward(const PoolGeometry& g, const Tensor& dy, Tensor& dx) override;
  void global_avg_forward(const pooling::GlobalDims& d, const Tensor& x, Tensor& y) override;
  void global_avg_backward(const pooling::GlobalDims& d, const Tensor& dy, Tensor& dx) override;

 private:
  // NCHW f32 takes the fast path unless BackendOptions::reference; f64 and
  // NHWC always take the reference (see the file comment).
  bool fast_path(const Tensor& t) const {
    return !be_.use_reference(t.dtype()) && t.layout() == Layout::NCHW;
  }
  // nChw16c f32 takes the blocked max pooling (forward: 2x2 windows) unless
  // BackendOptions::reference.
  bool blocked_fast(const Tensor& t) const {
    return !be_.use_reference(t.dtype()) && t.layout() == Layout::NCHW16C &&
           t.dtype() == DType::F32;
  }

  // Whether the f32 NCHW average pooling's forward (or backward) of g takes
  // oneDNN (pooling_cpu.h), chosen on the first call of each and recorded.
  bool avg_on_onednn(bool forward, const PoolGeometry& g) {
    const std::string shape = detail::concat(forward ? "avg forward" : "avg backward", " N", g.N, " ", g.C, "x", g.H, "x", g.W, " k",
                                             g.kernel, " s", g.stride, " p", g.pad, " NCHW");
    std::lock_guard lock(avg_mutex_);
    if (auto it = avg_onednn_.find(shape); it != avg_onednn_.end()) return it->second;
    bool onednn = false;
    nlohmann::json rec = {{"chosen_by", avg_setting_ == "auto" ? "rule" : "setting"}};
#ifdef TRAINBENCH_HAVE_ONEDNN
    if (avg_setting_ != "fast" && g.N == 0) rec["chosen_by"] = "oneDNN refuses empty tensors";
    if (avg_setting_ != "fast" && g.N > 0) {
      const auto& both = avg_pools_.implementations(g, be_.threads());
      const std::string& impl = forward ? both.forward : both.backward;
      const bool refused = pooling::onednn::is_refused(impl);
      onednn = avg_setting_ == "onednn" ? !refused : pooling::onednn::is_jit(impl);
      rec["onednn_implementation"] = impl;
      if (!onednn) rec["chosen_by"] = refused ? "oneDNN refuses this shape" : "oneDNN has no JIT kernel for it";
    }
#endif
    rec["path"] = onednn ? "onednn" : "fast";
    avg_records_[shape] = std::move(rec);
    return avg_onednn_[shape] = onednn;
  }

  CpuBackend& be_;
  std::mutex avg_mutex_;  // the setting and the choices
  std::string avg_setting_ = "auto";
  std::map<std::string, bool> avg_onednn_;  // shape -> takes oneDNN
  nlohmann::json avg_records_ = nlohmann::json::object();
#ifdef TRAINBENCH_HAVE_ONEDNN
  pooling::onednn::AvgPools avg_pools_;
#endif
};

}  // namespace

// ---------------------------------------------------------------- entry points

void CpuKernels::max_forward(const PoolGeometry& g, const Tensor& x, Tensor& y, Tensor& argmax) {
  check_cpu("maxpool2d_forward", x);
  if (amp::is_low_precision(x.dtype()))
    return amp::widen_compute_round(
        be_, y, false, [&](const Tensor& xw, Tensor& yw) { max_forward(g, xw, yw, argmax); }, x);
  if (fast_path(x))
    return maxpool_forward_fast(g, x.data_as<float>(), y.data_as<float>(),
                                argmax.data_as<int32_t>(), be_.threads());
  if (blocked_fast(x) && two_by_two(g))
    return for_each_run_slice(g, be_.threads(), [&](int64_t r0, int64_t r1) {
      maxpool_2x2_blocked(g, x.data_as<float>(), y.data_as<float>(), argmax.data_as<int32_t>(),
                          r0, r1);
    });
  by_dtype(x, [&](auto z) {
    using T = decltype(z);
    maxpool_forward_ref<T>(g, x.layout(), x.data_as<T>(), y.data_as<T>(),
                           argmax.data_as<int32_t>());
  });
}

void CpuKernels::max_backward(const PoolGeometry& g, const Tensor& dy, const Tensor& argmax,
                              Tensor& dx) {
  check_cpu("maxpool2d_backward", dy);
  if (amp::is_low_precision(dy.dtype()))
    return amp::widen_compute_round(
        be_, dx, false, [&](const Tensor& dyw, Tensor& dxw) { max_backward(g, dyw, argmax, dxw); },
        dy);
  if (blocked_fast(dy))
    return for_each_run_slice(g, be_.threads(), [&](int64_t r0, int64_t r1) {
      maxpool_blocked_backward(g, dy.data_as<float>(), argmax.data_as<int32_t>(),
                               dx.data_as<float>(), r0, r1);
    });
  by_dtype(dy, [&](auto z) {
    using T = decltype(z);
    if (dy.layout() != Layout::NCHW)
      maxpool_backward_ref<T>(g, dy.layout(), dy.data_as<T>(), argmax.data_as<int32_t>(),
                              dx.data_as<T>());
    else  // threaded on the fast f32 path only
      maxpool_backward<T>(g, dy.data_as<T>(), argmax.data_as<int32_t>(), dx.data_as<T>(),
                          be_.use_reference(dy.dtype()) ? 1 : be_.threads());
  });
}

void CpuKernels::avg_forward(const PoolGeometry& g, const Tensor& x, Tensor& y) {
  check_cpu("avgpool2d_forward", x);
  if (amp::is_low_precision(x.dtype()))
    return amp::widen_compute_round(
        be_, y, false, [&](const Tensor& xw, Tensor& yw) { avg_forward(g, xw, yw); }, x);
  if (fast_path(x)) {
    if (avg_on_onednn(true, g)) {
#ifdef TRAINBENCH_HAVE_ONEDNN
      return avg_pools_.forward(g, be_.threads(), x.data_as<float>(), y.data_as<float>());
#endif
    }
    return avgpool_forward_fast(g, x.data_as<float>(), y.data_as<float>());
  }
  by_dtype(x, [&](auto z) {
    using T = decltype(z);
    avgpool_forward_ref<T>(g, x.layout(), x.data_as<T>(), y.data_as<T>());
  });
}

void CpuKernels::avg_backward(const PoolGeometry& g, const Tensor& dy, Tensor& dx) {
  check_cpu("avgpool2d_backward", dy);
  if (amp::is_low_precision(dy.dtype()))
    return amp::widen_compute_round(
        be_, dx, false, [&](const Tensor& dyw, Tensor& dxw) { avg_backward(g, dyw, dxw); }, dy);
  if (fast_path(dy)) {
    if (avg_on_onednn(false, g)) {
#ifdef TRAINBENCH_HAVE_ONEDNN
      return avg_pools_.backward(g, be_.threads(), dy.data_as<float>(), dx.data_as<float>());
#endif
    }
    return avgpool_backward_fast(g, dy.data_as<float>(), dx.data_as<float>());
  }
  by_dtype(dy, [&](auto z) {
    using T = decltype(z);
    avgpool_backward_ref<T>(g, dy.layout(), dy.data_as<T>(), dx.data_as<T>());
  });
}

void CpuKernels::global_avg_forward(const pooling::GlobalDims& d, const Tensor& x, Tensor& y) {
  check_cpu("global_avgpool_forward", x);
  if (amp::is_low_precision(x.dtype()))
    return amp::widen_compute_round(
        be_, y, false, [&](const Tensor& xw, Tensor& yw) { global_avg_forward(d, xw, yw); }, x);
  by_dtype(x, [&](auto z) {
    using T = decltype(z);
    if (d.blocked)
      global_avgpool_forward_blocked<T>(d.N, d.C, d.HW, x.data_as<T>(), y.data_as<T>());
    else if (d.nhwc)
      global_avgpool_forward_nhwc<T>(d.N, d.C, d.HW, x.data_as<T>(), y.data_as<T>());
    else
      global_avgpool_forward_impl<T>(d.N * d.C, d.HW, x.data_as<T>(), y.data_as<T>());
  });
}

void CpuKernels::global_avg_backward(const pooling::GlobalDims& d, const Tensor& dy, Tensor& dx) {
  check_cpu("global_avgpool_backward", dx);
  if (amp::is_low_precision(dy.dtype()))
    return amp::widen_compute_round(
        be_, dx, false, [&](const Tensor& dyw, Tensor& dxw) { global_avg_backward(d, dyw, dxw); },
        dy);
  by_dtype(dy, [&](auto z) {
    using T = decltype(z);
    if (d.blocked)
      global_avgpool_backward_blocked<T>(d.N, d.C, d.HW, dy.data_as<T>(), dx.data_as<T>());
    else if (d.nhwc)
      global_avgpool_backward_nhwc<T>(d.N, d.C, d.HW, dy.data_as<T>(), dx.data_as<T>());
    else
      global_avgpool_backward_impl<T>(d.N * d.C, d.HW, dy.data_as<T>(), dx.data_as<T>());
  });
}

namespace pooling {
void register_cpu_kernels() { register_kernels<Kernels, CpuKernels, CpuBackend>(DeviceKind::CPU); }

void set_cpu_avg_pool_path(CpuBackend& be, const std::string& setting) {
  static_cast<CpuKernels&>(be.kernels<Kernels>()).set_avg_setting(setting);
}
}  // namespace pooling

}  // namespace tb
