// SPDX-License-Identifier: GPL-3.0-or-later
// The CPU backend's convolutions (contract: conv.h): every dtype of the
// contract, square kernels only.
//
//   x  (N, Cin, H, W)   w  (Cout, Cin, K, K)   b  (Cout)   y  (N, Cout, Ho, Wo)
//   y[n,co,oh,ow] = b[co] + sum_{ci,kh,kw} w[co,ci,kh,kw] * x[n,ci,oh*s-p+kh,ow*s-p+kw]
//
// Four implementations; for f32 the path is picked per op and shape
// (conv_cpu_paths.h: by a fixed rule, by timing on the first call of a shape,
// or forced by TRAINBENCH_CPU_CONV), f64 and BackendOptions::reference always
// take the reference:
// - reference<T> (float, double): the definition above as nested loops, every
//   element addressed through offset4, so NCHW and NHWC run the same arithmetic
//   in the same order (bit-identical results); the test oracle, used for f64,
//   when BackendOptions::reference is set, and for NHWC operands in builds
//   without oneDNN (the blas path's im2col is written for NCHW planes, and
//   NHWC is not transposed to reach it: that would be the hidden transpose the
//   layout forbids).
// - oneDNN (conv_onednn.h, builds with oneDNN): f32 in any layout pairing.
// - blas f32: im2col of a chunk of B images, then one OpenBLAS GEMM
//   (Cout x Kc) * (Kc x B*P), Kc = Cin*K*K, P = Ho*Wo. B is chosen so the column
//   buffer stays in L2 (one image for most layers, several for small ones such
//   as the 1-channel first layer, Kc = 9, whose per-image GEMM is too thin).
//   With B = 1 the GEMM writes y[n] directly; otherwise its (Cout, B*P) output
//   is copied to y one contiguous row (P) at a time, adding the bias on the way.
//   Backward views dy in the same (Cout, B*P) form and does dW += dY * col^T and
//   dcol = W^T * dY, then col2im. 1x1/stride 1/no padding skips im2col entirely.
//   With OpenMP the batch is split into one contiguous range of images per
//   thread, each running single-threaded GEMMs on its own scratch (OpenBLAS's
//   own threads spin-wait between the many small per-image GEMMs, which cost
//   more than the GEMMs on 2 cores). Backward sums each thread's partial dW in
//   thread order, so results depend on the thread count but not on timing.
// - f16/bf16 (the low-precision reference, at the end): the inputs widened
//   to f32, then the f32 convolution; low-precision outputs (y, dx) rounded
//   once from its f32 result.
#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/cpu_features.h"
#include "engine/core/error.h"
#include "engine/ops/amp/amp.h"
#include "engine/ops/conv/conv.h"
#include "engine/ops/conv/conv_cpu_paths.h"
#ifdef TRAINBENCH_HAVE_ONEDNN
#include "engine/ops/conv/conv_onednn.h"
#endif

namespace tb {

namespace {

// ---------------------------------------------------------------- reference

// Memory orders of the operands: the input side (x, dx), the filters (w, dw)
// and the output side (y, dy): out is act's but where the CPU's blocked
// activations start (x NCHW, y nChw16c: conv.h).
struct ConvLayouts {
  Layout act = Layout::NCHW, filt = Layout::NCHW, out = Layout::NCHW;
};

template <typename T>
void conv_forward_ref(const ConvGeometry& g, ConvLayouts l, const T* x, const T* w, const T* b,
                      T* y) {
  const int64_t K = g.KH, s = g.stride, p = g.pad;
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t co = 0; co < g.C_out; ++co)
      for (int64_t oh = 0; oh < g.H_out; ++oh)
        for (int64_t ow = 0; ow < g.W_out; ++ow) {
          T acc = b ? b[co] : T(0);
          for (int64_t ci = 0; ci < g.C_in; ++ci)
            for (int64_t kh = 0; kh < K; ++kh)
              for (int64_t kw = 0; kw < K; ++kw) {
                const int64_t ih = oh * s - p + kh, iw = ow * s - p + kw;
                if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;  // zero padding
                acc += w[offset4(l.filt, g.C_in, K, K, co, ci, kh, kw)] *
                       x[offset4(l.act, g.C_in, g.H, g.W, n, ci, ih, iw)];
              }
          y[offset4(l.out, g.C_out, g.H_out, g.W_out, n, co, oh, ow)] = acc;
        }
}

// dx is written; dw/db are computed in full into locals (logical KCRS order) and
// then written or added, so accumulate=true adds exactly what accumulate=false writes.
template <typename T>
void conv_backward_ref(const ConvGeometry& g, ConvLayouts l, const T* x, const T* w, const T* dy,
                       T* dx, T* dw, T* db, bool accumulate) {
  const int64_t K = g.KH, s = g.stride, p = g.pad;
  std::vector<T> gw(static_cast<size_t>(g.C_out * g.C_in * K * K), T(0));
  std::vector<T> gb(static_cast<size_t>(g.C_out), T(0));
  if (dx) std::fill_n(dx, g.N * g.C_in * g.H * g.W, T(0));
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t co = 0; co < g.C_out; ++co)
      for (int64_t oh = 0; oh < g.H_out; ++oh)
        for (int64_t ow = 0; ow < g.W_out; ++ow) {
          const T d = dy[offset4(l.out, g.C_out, g.H_out, g.W_out, n, co, oh, ow)];
          gb[co] += d;
          for (int64_t ci = 0; ci < g.C_in; ++ci)
            for (int64_t kh = 0; kh < K; ++kh)
              for (int64_t kw = 0; kw < K; ++kw) {
                const int64_t ih = oh * s - p + kh, iw = ow * s - p + kw;
                if (ih < 0 || ih >= g.H || iw < 0 || iw >= g.W) continue;
                const int64_t wi = ((co * g.C_in + ci) * K + kh) * K + kw;  // logical
                const int64_t xi = offset4(l.act, g.C_in, g.H, g.W, n, ci, ih, iw);
                const int64_t wm = offset4(l.filt, g.C_in, K, K, co, ci, kh, kw);
                gw[wi] += d * x[xi];
                if (dx) dx[xi] += d * w[wm];
              }
        }
  if (dw)
    for (int64_t co = 0; co < g.C_out; ++co)
      for (int64_t ci = 0; ci < g.C_in; ++ci)
        for (int64_t kh = 0; kh < K; ++kh)
          for (int64_t kw = 0; kw < K; ++kw) {
            const T v = gw[((co * g.C_in + ci) * K + kh) * K + kw];
            T& o = dw[offset4(l.filt, g.C_in, K, K, co, ci, kh, kw)];
            o = accumulate ? o + v : v;
          }
  if (db)
    for (size_t i = 0; i < gb.size(); ++i) db[i] = accumulate ? db[i] + gb[i] : gb[i];
}

// ---------------------------------------------------------------- fast f32

// Per-thread scratch that only grows, so steady-state steps allocate nothing.
float* scratch(std::vector<float>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}
thread_local std::vector<float> t_col, t_gemm;

// Output positions o in [0, n_out) whose input index o*s - p + k lies in [0, n_in):
// the half-open range [lo, hi). Outside it the cell reads zero padding.
inline void valid_range(int64_t n_in, int64_t n_out, int64_t s, int64_t p, int64_t k,
                        int64_t& lo, int64_t& hi) {
  lo = p - k > 0 ? (p - k + s - 1) / s : 0;
  const int64_t last = n_in - 1 + p - k;  // largest o*s allowed
  hi = last < 0 ? 0 : std::min(n_out, last / s + 1);
  lo = std::min(lo, hi);
}

// Stride 1 and an output plane the size of the input ("same" padding, e.g.
// 3x3 with padding 1): each im2col row is the input plane shifted.
inline bool same_size(const ConvGeometry& g) {
  return g.stride == 1 && g.H_out == g.H && g.W_out == g.W;
}

// Zeroes the cells of rows [oh_lo, oh_hi) outside columns [ow_lo, ow_hi).
inline void zero_wrapped_columns(float* row0, int64_t Wo, int64_t oh_lo, int64_t oh_hi,
                                 int64_t ow_lo, int64_t ow_hi) {
  for (int64_t oh = oh_lo; oh < oh_hi; ++oh) {
    float* r = row0 + oh * Wo;
    for (int64_t ow = 0; ow < ow_lo; ++ow) r[ow] = 0.0f;
    for (int64_t ow = ow_hi; ow < Wo; ++ow) r[ow] = 0.0f;
  }
}

// col (Kc, L) with L = B*P, row r = (ci*K + kh)*K + kw, column b*P + oh*Wo + ow,
// from x (B, Cin, H, W). Writes every cell (zeros for padding).
inline void im2col_body(const ConvGeometry& g, const float* x, int64_t B, float* col) {
  const int64_t K = g.KH, s = g.stride, p = g.pad, Ho = g.H_out, Wo = g.W_out;
  const int64_t P = Ho * Wo, L = B * P;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t ci = 0; ci < g.C_in; ++ci) {
      const float* plane = x + (b * g.C_in + ci) * g.H * g.W;
      for (int64_t kh = 0; kh < K; ++kh) {
        int64_t oh_lo, oh_hi;
        valid_range(g.H, Ho, s, p, kh, oh_lo, oh_hi);
        for (int64_t kw = 0; kw < K; ++kw) {
          int64_t ow_lo, ow_hi;
          valid_range(g.W, Wo, s, p, kw, ow_lo, ow_hi);
          float* dst = col + ((ci * K + kh) * K + kw) * L + b * P;
          if (same_size(g)) {
            // Output and input planes have the same shape: this row is the plane
            // shifted by (kh-p, kw-p), one contiguous copy; then the cells whose
            // column fell off an edge (wrapped to the next row) become padding.
            if (oh_lo >= oh_hi || ow_lo >= ow_hi) {
              std::fill(dst, dst + P, 0.0f);
              continue;
            }
            const int64_t first = oh_lo * Wo + ow_lo, last = (oh_hi - 1) * Wo + ow_hi;
            const int64_t shift = (kh - p) * g.W + (kw - p);
            std::fill(dst, dst + first, 0.0f);
            std::memcpy(dst + first, plane + first + shift, sizeof(float) * (last - first));
            std::fill(dst + last, dst + P, 0.0f);
            zero_wrapped_columns(dst, Wo, oh_lo, oh_hi, ow_lo, ow_hi);
            continue;
          }
          std::fill(dst, dst + oh_lo * Wo, 0.0f);
          for (int64_t oh = oh_lo; oh < oh_hi; ++oh) {
            float* d = dst + oh * Wo;
            const float* src = plane + (oh * s - p + kh) * g.W + (-p + kw);  // + ow*s
            std::fill(d, d + ow_lo, 0.0f);
            if (s == 1) {
              std::memcpy(d + ow_lo, src + ow_lo, sizeof(float) * (ow_hi - ow_lo));
            } else {
              for (int64_t ow = ow_lo; ow < ow_hi; ++ow) d[ow] = src[ow * s];
            }
            std::fill(d + ow_hi, d + Wo, 0.0f);
          }
          std::fill(dst + oh_hi * Wo, dst + P, 0.0f);
        }
      }
    }
}

// dx (B, Cin, H, W) = sum of col cells onto the input pixels they came from
// (the adjoint of im2col). dx is overwritten; col is clobbered.
inline void col2im_body(const ConvGeometry& g, float* col, int64_t B, float* dx) {
  const int64_t K = g.KH, s = g.stride, p = g.pad, Ho = g.H_out, Wo = g.W_out;
  const int64_t P = Ho * Wo, L = B * P;
  std::fill_n(dx, B * g.C_in * g.H * g.W, 0.0f);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t ci = 0; ci < g.C_in; ++ci) {
      float* plane = dx + (b * g.C_in + ci) * g.H * g.W;
      for (int64_t kh = 0; kh < K; ++kh) {
        int64_t oh_lo, oh_hi;
        valid_range(g.H, Ho, s, p, kh, oh_lo, oh_hi);
        for (int64_t kw = 0; kw < K; ++kw) {
          int64_t ow_lo, ow_hi;
          valid_range(g.W, Wo, s, p, kw, ow_lo, ow_hi);
          float* src = col + ((ci * K + kh) * K + kw) * L + b * P;
          if (same_size(g)) {
            // The adjoint of the shifted copy in im2col: zero the padding cells
            // (they hold GEMM output that belongs to no pixel), then one
            // contiguous add.
            if (oh_lo >= oh_hi || ow_lo >= ow_hi) continue;
            const int64_t first = oh_lo * Wo + ow_lo, last = (oh_hi - 1) * Wo + ow_hi;
            float* d = plane + (kh - p) * g.W + (kw - p);
            zero_wrapped_columns(src, Wo, oh_lo, oh_hi, ow_lo, ow_hi);
            for (int64_t i = first; i < last; ++i) d[i] += src[i];
            continue;
          }
          for (int64_t oh = oh_lo; oh < oh_hi; ++oh) {
            const float* c = src + oh * Wo;
            float* d = plane + (oh * s - p + kh) * g.W + (-p + kw);  // + ow*s
            if (s == 1) {
              for (int64_t ow = ow_lo; ow < ow_hi; ++ow) d[ow] += c[ow];
            } else {
              for (int64_t ow = ow_lo; ow < ow_hi; ++ow) d[ow * s] += c[ow];
            }
          }
        }
      }
    }
}

// im2col and col2im compiled for the processor's widest ISA
// (engine/core/cpu_features.h: the same bits in every copy).
TB_CPU_KERNEL(void, im2col, (const ConvGeometry& g, const float* x, int64_t B, float* col),
              (g, x, B, col), im2col_body)
TB_CPU_KERNEL(void, col2im, (const ConvGeometry& g, float* col, int64_t B, float* dx),
              (g, col, B, dx), col2im_body)

// Images per chunk. The column buffer (Kc, B*P) and the GEMM output (Cout, B*P)
// are written and read straight back, so they should stay in the L2 cache
// (measured on the Fashion-MNIST shapes: 4 images of conv1, 1 of conv2 beat
// bigger chunks by 10-40%). Tiny layers still batch several images per GEMM.
// A 1x1 convolution with stride 1 and no padding: im2col of one image is the
// image itself, (Cin, H*W), so the GEMMs read x and write dx directly.
bool is_pointwise(const ConvGeometry& g) { return g.KH == 1 && g.stride == 1 && g.pad == 0; }

int64_t chunk_images(const ConvGeometry& g) {
  if (is_pointwise(g)) return 1;
  const int64_t per_image = (g.C_in * g.KH * g.KW + g.C_out) * g.H_out * g.W_out;
  const int64_t budget = int64_t(128) << 10;  // floats (512 KiB)
  return std::clamp<int64_t>(budget / std::max<int64_t>(per_image, 1), 1,
                             std::max<int64_t>(g.N, 1));
}

// Sum of n floats with 8 independent partial sums (a single running sum is
// bound by the add latency; this runs several times faster and is more accurate).
float sum_floats(const float* p, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += p[i + j];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += p[i];
  return s;
}

// Threads worth using for a convolution of this size (at least ~1 MFLOP of
// GEMM per thread and one image each), at most `threads`.
int conv_threads(const ConvGeometry& g, int threads) {
#ifndef _OPENMP
  return 1;
#endif
  const int64_t flops = 2 * g.N * g.C_out * g.C_in * g.KH * g.KW * g.H_out * g.W_out;
  const int64_t by_work = flops >> 20;
  return int(std::clamp<int64_t>(std::min<int64_t>(by_work, g.N), 1, std::max(threads, 1)));
}

// Images [lo, hi) of thread t out of nt: contiguous, sizes differing by at most one.
inline void split_range(int64_t n, int t, int nt, int64_t& lo, int64_t& hi) {
  lo = n * t / nt;
  hi = n * (t + 1) / nt;
}

// Runs f(t, nt) on nt threads (inline when nt == 1 or without OpenMP).
template <typename F>
void run_threads(int nt, F&& f) {
#ifdef _OPENMP
  if (nt > 1) {
#pragma omp parallel num_threads(nt)
    f(omp_get_thread_num(), omp_get_num_threads());
    return;
  }
#endif
  f(0, 1);
}

// Forward of images [n_lo, n_hi) on the calling thread.
void conv_forward_range(const ConvGeometry& g, const float* x, const float* w, const float* b,
                        float* y, int64_t n_lo, int64_t n_hi) {
  const int64_t Kc = g.C_in * g.KH * g.KW, P = g.H_out * g.W_out;
  const int64_t chunk = std::min(chunk_images(g), std::max<int64_t>(n_hi - n_lo, 1));
  const bool direct = is_pointwise(g);
  float* col = direct ? nullptr : scratch(t_col, size_t(Kc * chunk * P));
  float* out = chunk > 1 ? scratch(t_gemm, size_t(g.C_out * chunk * P)) : nullptr;
  for (int64_t n0 = n_lo; n0 < n_hi; n0 += chunk) {
    const int64_t B = std::min(chunk, n_hi - n0), L = B * P;
    const float* xn = x + n0 * g.C_in * g.H * g.W;
    if (!direct) im2col(g, xn, B, col);
    const float* cols = direct ? xn : col;
    // One image: the GEMM output (Cout, P) is y[n0] itself.
    float* dst = B == 1 ? y + n0 * g.C_out * P : out;
    // dst (Cout, L) = w (Cout, Kc) * col (Kc, L)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(g.C_out), int(L), int(Kc), 1.0f,
                w, int(Kc), cols, int(L), 0.0f, dst, int(L));
    if (B == 1) {
      if (b)
        for (int64_t co = 0; co < g.C_out; ++co)
          for (int64_t i = 0; i < P; ++i) dst[co * P + i] += b[co];
      continue;
    }
    // y[n0+bi, co, :] = out[co, bi*P : (bi+1)*P] + bias[co]
    for (int64_t bi = 0; bi < B; ++bi)
      for (int64_t co = 0; co < g.C_out; ++co) {
        const float* src = out + co * L + bi * P;
        float* yr = y + ((n0 + bi) * g.C_out + co) * P;
        const float bias = b ? b[co] : 0.0f;
        for (int64_t i = 0; i < P; ++i) yr[i] = src[i] + bias;
      }
  }
}

void conv_forward_fast(const ConvGeometry& g, const float* x, const float* w, const float* b,
                       float* y, int threads) {
  run_threads(conv_threads(g, threads), [&](int t, int nt) {
    int64_t lo, hi;
    split_range(g.N, t, nt, lo, hi);
    conv_forward_range(g, x, w, b, y, lo, hi);
  });
}

// Backward of images [n_lo, n_hi) on the calling thread: dx for those images,
// and (when gw is given) their dW written to gw (Cout, Kc).
void conv_backward_range(const ConvGeometry& g, const float* x, const float* w, const float* dy,
                         float* dx, float* gw, int64_t n_lo, int64_t n_hi) {
  const int64_t Kc = g.C_in * g.KH * g.KW, P = g.H_out * g.W_out;
  if (n_lo >= n_hi) {  // no images: an empty sum
    if (gw) std::fill_n(gw, g.C_out * Kc, 0.0f);
    return;
  }
  const int64_t chunk = std::min(chunk_images(g), n_hi - n_lo);
  const bool direct = is_pointwise(g);
  float* col = direct ? nullptr : scratch(t_col, size_t(Kc * chunk * P));
  float* dyc_buf = chunk > 1 ? scratch(t_gemm, size_t(g.C_out * chunk * P)) : nullptr;
  for (int64_t n0 = n_lo; n0 < n_hi; n0 += chunk) {
    const int64_t B = std::min(chunk, n_hi - n0), L = B * P;
    // dyc (Cout, L): dyc[co, b*P + i] = dy[n0+b, co, i]; for one image that is dy[n0].
    const float* dyc = dy + n0 * g.C_out * P;
    if (B > 1) {
      for (int64_t bi = 0; bi < B; ++bi)
        for (int64_t co = 0; co < g.C_out; ++co)
          std::memcpy(dyc_buf + co * L + bi * P, dy + ((n0 + bi) * g.C_out + co) * P,
                      sizeof(float) * P);
      dyc = dyc_buf;
    }
    const float* xn = x + n0 * g.C_in * g.H * g.W;
    float* dxn = dx ? dx + n0 * g.C_in * g.H * g.W : nullptr;
    if (gw) {
      if (!direct) im2col(g, xn, B, col);
      // gw (Cout, Kc) (+)= dyc (Cout, L) * col^T (L, Kc)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(g.C_out), int(Kc), int(L), 1.0f,
                  dyc, int(L), direct ? xn : col, int(L), n0 == n_lo ? 0.0f : 1.0f, gw, int(Kc));
    }
    if (dx) {
      // dcol (Kc, L) = w^T (Kc, Cout) * dyc (Cout, L), then scattered back onto dx.
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(Kc), int(L), int(g.C_out), 1.0f,
                  w, int(Kc), dyc, int(L), 0.0f, direct ? dxn : col, int(L));
      if (!direct) col2im(g, col, B, dxn);
    }
  }
}

// db[co] (+)= Σ over n and the plane of dy[n, co, :], f32 dy in any
// activation layout, each channel's sum in double across planes (one thread a
// channel or a block of 16, so the thread count does not change it).
void bias_grad_any_layout(const ConvGeometry& g, Layout out, const float* dy, float* db,
                          bool accumulate, int threads) {
  const int64_t P = g.H_out * g.W_out, C = g.C_out;
  std::vector<double> sums(size_t(C), 0.0);
  if (out == Layout::NHWC) {
    for (int64_t i = 0; i < g.N * P; ++i)
      for (int64_t c = 0; c < C; ++c) sums[size_t(c)] += dy[i * C + c];
  } else {
    const int64_t lanes = out == Layout::NCHW16C ? kLayoutBlock : 1, groups = C / lanes;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(threads) if (g.N * C * P >= (1 << 16))
#endif
    for (int64_t cg = 0; cg < groups; ++cg)
      for (int64_t n = 0; n < g.N; ++n) {
        const float* plane = dy + ((n * groups + cg) * P) * lanes;
        if (lanes == 1) {
          sums[size_t(cg)] += sum_floats(plane, P);
          continue;
        }
        for (int64_t q = 0; q < P; ++q)
          for (int64_t j = 0; j < lanes; ++j) sums[size_t(cg * lanes + j)] += plane[q * lanes + j];
      }
  }
  (void)threads;
  for (int64_t c = 0; c < C; ++c)
    db[c] = accumulate ? db[c] + float(sums[size_t(c)]) : float(sums[size_t(c)]);
}

// Partial dW of each thread: (threads, Cout, Kc), owned by the calling thread.
thread_local std::vector<float> t_dw_parts;

void conv_backward_fast(const ConvGeometry& g, const float* x, const float* w, const float* dy,
                        float* dx, float* dw, float* db, bool accumulate, int threads) {
  const int64_t Kc = g.C_in * g.KH * g.KW, nw = g.C_out * Kc;
  const int nt = (dx || dw) ? conv_threads(g, threads) : 1;

  if (db) bias_grad_any_layout(g, Layout::NCHW, dy, db, accumulate, threads);
  if (!dx && !dw) return;
  if (g.N == 0) {  // an empty batch: no image writes dW
    if (dw && !accumulate) std::fill_n(dw, nw, 0.0f);
    return;
  }

  // One thread without accumulate writes dW in place; otherwise each thread's
  // partial goes to scratch and is summed below in thread order, so
  // accumulate=true adds exactly what accumulate=false writes.
  const bool in_place = nt == 1 && !accumulate;
  float* parts = dw && !in_place ? scratch(t_dw_parts, size_t(nt * nw)) : nullptr;
  run_threads(nt, [&](int t, int n_threads) {
    int64_t lo, hi;
    split_range(g.N, t, n_threads, lo, hi);
    float* gw = dw ? (in_place ? dw : parts + t * nw) : nullptr;
    conv_backward_range(g, x, w, dy, dx, gw, lo, hi);
  });
  if (dw && !in_place)
    for (int64_t i = 0; i < nw; ++i) {
      float s = parts[i];
      for (int t = 1; t < nt; ++t) s += parts[t * nw + i];
      dw[i] = accumulate ? dw[i] + s : s;
    }
}

template <typename T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? t.data_as<T>() : nullptr;
}

}  // namespace


namespace conv {

namespace {

// What the CPU adds to the contract: the reference and im2col index one K for
// both axes.
void check_square(const ConvGeometry& g, const char* op) {
  TB_CHECK(g.KH == g.KW, op, ": only square kernels, got ", g.KH, "x", g.KW);
}

// The readable name of a choice's key, for the run's record:
// "forward N64 1x28x28 -> 32 k3 s1 p1 NCHW/KCRS", a backward with its outputs.
std::string shape_name(const char* op, const ConvGeometry& g, ConvLayouts l, unsigned outputs) {
  std::string s = detail::concat(op, " N", g.N, " ", g.C_in, "x", g.H, "x", g.W, " -> ", g.C_out,
                                 " k", g.KH, " s", g.stride, " p", g.pad, " ",
                                 layout_name(l.act), "/", l.filt == Layout::NHWC ? "KRSC" : "KCRS");
  if (l.out != l.act) s += detail::concat(" -> ", layout_name(l.out));
  if (outputs & 8u) s += " bias";
  if (outputs & 7u) {
    s += " (";
    const char* names[] = {"dx", "dw", "db"};
    for (unsigned i = 0, n = 0; i < 3; ++i) {
      if (!(outputs & (1u << i))) continue;
      if (n++) s += ' ';
      s += names[i];
    }
    s += ")";
  }
  return s;
}


class CpuKernels final : public Kernels {
 public:
  explicit CpuKernels(CpuBackend& be) : be_(be), setting_(cpu_conv_setting_from_environment()) {
    be_.report_kernel_paths(kFamily, [this] { return choices_.describe(); });
  }

  bool supports(DType t) const override {
    return t == DType::F32 || t == DType::F64 || low_precision(t);
  }

  void set_setting(const std::string& value) {
    setting_ = parse_cpu_conv_setting(value, "set_cpu_conv_path");
    choices_.clear();
  }

  void forward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
               Tensor& y) override {
    check_square(g, "conv2d_forward");
    const ConvLayouts l{x.layout(), w.layout(), y.layout()};
    if (x.dtype() == DType::F64) {
      conv_forward_ref<double>(g, l, x.data_as<double>(), w.data_as<double>(),
                               ptr_or_null<double>(b), y.data_as<double>());
      return;
    }
    const float* xp = x.data_as<float>();
    const float* wp = w.data_as<float>();
    const float* bp = ptr_or_null<float>(b);
    std::vector<float> y_trial;
    const std::string key = key_of("forward", g, l, bp ? 8u : 0u);
    const CpuConvPath path = path_of(key, "forward", g, l, bp ? 8u : 0u, [&](CpuConvPath p) {
      y_trial.resize(size_t(y.numel()));
      forward_f32(p, key, g, l, xp, wp, bp, y_trial.data());
    });
    forward_f32(path, key, g, l, xp, wp, bp, y.data_as<float>());
  }

  void backward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                Tensor& dx, Tensor& dw, Tensor& db, bool accumulate) override {
    check_square(g, "conv2d_backward");
    auto out = [](Tensor& t) { return t.defined() ? t.data() : nullptr; };
    const ConvLayouts l{x.layout(), w.layout(), dy.layout()};
    if (x.dtype() == DType::F64) {
      conv_backward_ref<double>(g, l, x.data_as<double>(), w.data_as<double>(),
                                dy.data_as<double>(), static_cast<double*>(out(dx)),
                                static_cast<double*>(out(dw)), static_cast<double*>(out(db)),
                                accumulate);
      return;
    }
    const float* xp = x.data_as<float>();
    const float* wp = w.data_as<float>();
    const float* dyp = dy.data_as<float>();
    float* dxp = static_cast<float*>(out(dx));
    float* dwp = static_cast<float*>(out(dw));
    float* dbp = static_cast<float*>(out(db));
    const unsigned outputs = (dxp ? 1u : 0u) | (dwp ? 2u : 0u) | (dbp ? 4u : 0u);
    // The trials write scratch of the same outputs (accumulate=false): the
    // caller's tensors see only the chosen path's one run.
    std::vector<float> dx_trial, dw_trial, db_trial;
    const std::string key = key_of("backward", g, l, outputs);
    const CpuConvPath path = path_of(key, "backward", g, l, outputs, [&](CpuConvPath p) {
      if (dxp) dx_trial.resize(size_t(dx.numel()));
      if (dwp) dw_trial.resize(size_t(dw.numel()));
      if (dbp) db_trial.resize(size_t(db.numel()));
      backward_f32(p, key, g, l, xp, wp, dyp, dxp ? dx_trial.data() : nullptr,
                   dwp ? dw_trial.data() : nullptr, dbp ? db_trial.data() : nullptr, false);
    });
    backward_f32(path, key, g, l, xp, wp, dyp, dxp, dwp, dbp, accumulate);
  }

  // ------------------------------------------------------------ low precision
  // The reference of the low-precision convolution, the same construction as
  // the linear pair's (ops/linear/linear_cpu.cpp): the f16/bf16 inputs widened to f32
  // (exactly: every f16 and bf16 value is an f32 value), then the f32
  // convolution. The products of the low-precision values are thus summed in
  // fp32; the GPU's Tensor Core convolution differs only in summation order
  // (and the rounding of its low-precision output, see conv_cuda.cpp).

  //   x (N,Cin,H,W) lp   w (Cout,Cin,KH,KW) lp   b (Cout) f32
  //   y (N,Cout,Ho,Wo) f32, or lp: the f32 sum + b rounded once on store
  void forward_lp(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
                  Tensor& y) override {
    check_square(g, "conv2d_forward");
#ifdef TRAINBENCH_HAVE_ONEDNN
    const ConvLayouts l{x.layout(), w.layout(), y.layout()};
    if (takes_bf16(g, l, x, y)) {
      const std::string key = "bf16 " + key_of("forward", g, l, b.defined() ? 8u : 0u);
      note_bf16(key, "forward", g, l, b.defined() ? 8u : 0u);
      choices_.note_implementation(
          key, onednn_.forward(g, {l.act, l.filt, l.out}, onednn::Activations::Blocked,
                                     onednn::Algorithm::Direct, be_.threads(), DType::BF16,
                                     x.data(), w.data(), ptr_or_null<float>(b),
                                     y.data_as<float>()));
      return;
    }
#endif
    Tensor y32 = amp::f32_scratch(be_, y);  // y itself when f32
    forward(g, amp::widened(be_, x), amp::widened(be_, w), b, y32);
    amp::round_into(be_, y32, y);
  }

  // f32 activations:
  //   dy (N,Cout,Ho,Wo) f32 -> rounded to x's dtype for dgrad and wgrad;
  //   dx (N,Cin,H,W) f32 written; dw (Cout,Cin,KH,KW) f32 and db (Cout) f32 (+)=,
  //   db from the unrounded dy (as the fp32 layer's, bit for bit).
  // Low-precision activations: dy lp as it is (widened exactly) for all
  //   three; dx's f32 sum rounded once to lp; dw, db f32 (+)=.
  void backward_lp(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                   Tensor& dx, Tensor& dw, Tensor& db, bool accumulate) override {
    const Tensor xf = amp::widened(be_, x), wf = amp::widened(be_, w);
    if (dy.dtype() != DType::F32) {
      Tensor dx32 = amp::f32_scratch(be_, dx);
      backward(g, xf, wf, amp::widened(be_, dy), dx32, dw, db, accumulate);
      amp::round_into(be_, dx32, dx);
      return;
    }
    check_square(g, "conv2d_backward");
#ifdef TRAINBENCH_HAVE_ONEDNN
    const ConvLayouts l{x.layout(), w.layout(), dy.layout()};
    if (takes_bf16(g, l, x, dy)) {
      // oneDNN rounds dy to bf16 for dgrad and wgrad (its reorder into the
      // kernels' layout); db is the f32 path's sum of the unrounded dy.
      float* dxp = dx.defined() ? dx.data_as<float>() : nullptr;
      float* dwp = dw.defined() ? dw.data_as<float>() : nullptr;
      if (dxp || dwp) {
        const unsigned outputs = (dxp ? 1u : 0u) | (dwp ? 2u : 0u);
        const std::string key = "bf16 " + key_of("backward", g, l, outputs);
        note_bf16(key, "backward", g, l, outputs);
        choices_.note_implementation(
            key, onednn_.backward(g, {l.act, l.filt, l.out}, onednn::Activations::Blocked,
                                        onednn::Algorithm::Direct, be_.threads(), DType::BF16,
                                        x.data(), w.data(), dy.data_as<float>(), dxp, dwp,
                                        nullptr, accumulate));
      }
      if (db.defined())
        bias_grad_any_layout(g, l.out, dy.data_as<float>(), db.data_as<float>(), accumulate,
                             be_.threads());
      return;
    }
#endif
    Tensor dy_lp = Tensor::empty(dy.shape(), x.dtype(), Device::cpu(), dy.layout());
    amp::cast(be_, dy, dy_lp);
    const Tensor dyr = amp::widened(be_, dy_lp);
    Tensor none;
    if (dx.defined() || dw.defined()) backward(g, xf, wf, dyr, dx, dw, none, accumulate);
    if (db.defined()) {
      Tensor no_dx, no_dw;
      backward(g, xf, wf, dy, no_dx, no_dw, db, accumulate);
    }
  }

 private:
#ifdef TRAINBENCH_HAVE_ONEDNN
  // Whether oneDNN's bf16 kernels take this mixed-precision problem: bf16 x
  // and w with f32 activations (`out`: y or dy), a fast backend, and oneDNN
  // kernels for bf16 on this CPU that are not its reference loops (AMX or
  // AVX512_BF16; with AMX the kernels alone take 0.4-0.5x the f32 Winograd's
  // time, bench/NOTES.md "Intel at last"). Otherwise the widened f32 path runs.
  bool takes_bf16(const ConvGeometry& g, ConvLayouts l, const Tensor& x, const Tensor& out) {
    return x.dtype() == DType::BF16 && out.dtype() == DType::F32 &&
           !be_.use_reference(DType::BF16) && cpu_has_bf16_kernels() &&
           onednn_.takes(g, {l.act, l.filt, l.out}, onednn::Activations::Blocked,
                         onednn::Algorithm::Direct, DType::BF16);
  }
  void note_bf16(const std::string& key, const char* op, const ConvGeometry& g, ConvLayouts l,
                 unsigned outputs) {
    CpuConvPath known;
    if (!choices_.find(key, known))
      choices_.note(key, "bf16 " + shape_name(op, g, l, outputs), CpuConvPath::OneDnnBlocked,
                    "bf16 inputs: oneDNN's bf16 kernels");
  }
#endif

  static std::string key_of(const char* op, const ConvGeometry& g, ConvLayouts l,
                            unsigned outputs) {
    return detail::concat(op, " ", g.N, " ", g.C_in, " ", g.H, " ", g.W, " ", g.C_out, " ", g.KH,
                          " ", g.stride, " ", g.pad, " ", int(l.act), int(l.filt), int(l.out),
                          " ", outputs);
  }

  // Whether path p can convolve this problem.
  bool can_take(CpuConvPath p, const ConvGeometry& g, ConvLayouts l) {
    switch (p) {
      case CpuConvPath::Reference: return true;
      case CpuConvPath::Blas:
        return l.act == Layout::NCHW && l.out == Layout::NCHW && l.filt == Layout::NCHW;
      case CpuConvPath::OneDnn:
      case CpuConvPath::OneDnnBlocked:
      case CpuConvPath::OneDnnWinograd:
#ifdef TRAINBENCH_HAVE_ONEDNN
        return onednn_.takes(g, {l.act, l.filt, l.out}, form(p), algorithm(p));
#else
        return false;
#endif
    }
    return false;
  }

  // The f32 path of key: the reference when the backend is one, else the
  // setting's (conv_cpu_paths.h).
  CpuConvPath path_of(const std::string& key, const char* op, const ConvGeometry& g,
                      ConvLayouts l, unsigned outputs,
                      const std::function<void(CpuConvPath)>& trial) {
    if (be_.use_reference(DType::F32)) return CpuConvPath::Reference;
    if (CpuConvPath cached; choices_.find(key, cached)) return cached;
    const auto shape = [&] { return shape_name(op, g, l, outputs); };
    switch (setting_.mode) {
      case CpuConvSetting::Mode::Forced:
        if (can_take(setting_.path, g, l)) {
          choices_.note(key, shape(), setting_.path, "setting");
          return setting_.path;
        }
        choices_.note(key, shape(), CpuConvPath::Reference,
                      std::string("setting ") + path_name(setting_.path) +
                          " cannot take this shape: reference");
        return CpuConvPath::Reference;
      case CpuConvSetting::Mode::Rule: {
        const CpuConvPath p = by_rule(g, l, std::string_view(op) == "backward");
        choices_.note(key, shape(), p, "rule");
        return p;
      }
      case CpuConvSetting::Mode::Timed: break;
    }
    std::vector<CpuConvPath> candidates;
    for (CpuConvPath p : {CpuConvPath::Blas, CpuConvPath::OneDnn, CpuConvPath::OneDnnBlocked,
                          CpuConvPath::OneDnnWinograd})
      if (kHaveOneDnn || p == CpuConvPath::Blas)
        if (can_take(p, g, l)) candidates.push_back(p);
    if (candidates.size() <= 1) {
      const CpuConvPath p = candidates.empty() ? CpuConvPath::Reference : candidates.front();
      choices_.note(key, shape(), p, "only candidate");
      return p;
    }
    return choices_.choose(key, shape(), candidates, trial);
  }

  // auto's rule (conv_cpu_paths.h).
  CpuConvPath by_rule(const ConvGeometry& g, ConvLayouts l, bool backward) {
    // Winograd where oneDNN has its kernels (about twice as fast as direct:
    // docs/cpu-conv-paths.md), on its blocked layout like onednn-blocked.
    const auto blocked = [&] {
      return can_take(CpuConvPath::OneDnnWinograd, g, l) ? CpuConvPath::OneDnnWinograd
                                                         : CpuConvPath::OneDnnBlocked;
    };
    // Blocked activations are oneDNN's layout: its kernels read them as they are.
    if (kHaveOneDnn && g.N > 0 && (l.act == Layout::NCHW16C || l.out == Layout::NCHW16C))
      return blocked();
    const bool nchw = can_take(CpuConvPath::Blas, g, l);
    // A model's first layer on NCHW activations (1 or 3 image channels):
    // oneDNN reorders y or dy into its blocks around kernels made for many
    // channels, where blas's im2col is only a few channels wide.
    if (nchw && g.C_in < (backward ? kBlasBackwardChannels : kBlasForwardChannels))
      return CpuConvPath::Blas;
    if (onednn_direct_ && g.N > 0) return nchw ? blocked() : CpuConvPath::OneDnn;
    return nchw ? CpuConvPath::Blas : CpuConvPath::Reference;
  }

  void forward_f32(CpuConvPath p, const std::string& key, const ConvGeometry& g, ConvLayouts l,
                   const float* x, const float* w, const float* b, float* y) {
    switch (p) {
      case CpuConvPath::Reference: conv_forward_ref<float>(g, l, x, w, b, y); return;
      case CpuConvPath::Blas: conv_forward_fast(g, x, w, b, y, be_.threads()); return;
      case CpuConvPath::OneDnn:
      case CpuConvPath::OneDnnBlocked:
      case CpuConvPath::OneDnnWinograd:
#ifdef TRAINBENCH_HAVE_ONEDNN
        choices_.note_implementation(key, onednn_.forward(g, {l.act, l.filt, l.out}, form(p),
                                                          algorithm(p), be_.threads(), DType::F32,
                                                          x, w, b, y));
        return;
#endif
        break;
    }
    TB_FAIL("conv2d_forward: no ", path_name(p), " path in this build");
  }

  void backward_f32(CpuConvPath p, const std::string& key, const ConvGeometry& g, ConvLayouts l,
                    const float* x, const float* w, const float* dy, float* dx, float* dw,
                    float* db, bool accumulate) {
    switch (p) {
      case CpuConvPath::Reference:
        conv_backward_ref<float>(g, l, x, w, dy, dx, dw, db, accumulate);
        return;
      case CpuConvPath::Blas:
        conv_backward_fast(g, x, w, dy, dx, dw, db, accumulate, be_.threads());
        return;
      case CpuConvPath::OneDnn:
      case CpuConvPath::OneDnnBlocked:
      case CpuConvPath::OneDnnWinograd:
#ifdef TRAINBENCH_HAVE_ONEDNN
        choices_.note_implementation(key, onednn_.backward(g, {l.act, l.filt, l.out}, form(p),
                                                           algorithm(p), be_.threads(), DType::F32,
                                                           x, w, dy, dx, dw, db, accumulate));
        return;
#endif
        break;
    }
    TB_FAIL("conv2d_backward: no ", path_name(p), " path in this build");
  }

#ifdef TRAINBENCH_HAVE_ONEDNN
  static constexpr bool kHaveOneDnn = true;
  const bool onednn_direct_ = onednn::has_direct_kernels();
  static onednn::Activations form(CpuConvPath p) {
    return p == CpuConvPath::OneDnn ? onednn::Activations::AsGiven : onednn::Activations::Blocked;
  }
  static onednn::Algorithm algorithm(CpuConvPath p) {
    return p == CpuConvPath::OneDnnWinograd ? onednn::Algorithm::Winograd
                                            : onednn::Algorithm::Direct;
  }
  onednn::Convolutions onednn_;
#else
  static constexpr bool kHaveOneDnn = false;
  static constexpr bool onednn_direct_ = false;
#endif

  CpuBackend& be_;
  CpuConvSetting setting_;
  CpuConvChoices choices_;
};

}  // namespace

void register_cpu_kernels() { register_kernels<Kernels, CpuKernels, CpuBackend>(DeviceKind::CPU); }

void set_cpu_conv_path(CpuBackend& be, const std::string& setting) {
  static_cast<CpuKernels&>(be.kernels<Kernels>()).set_setting(setting);
}

}  // namespace conv

}  // namespace tb
