// SPDX-License-Identifier: GPL-3.0-or-later
// The batch-norm family's CUDA kernels and their launchers (batchnorm.cuh),
// f32, f16 or bf16 activations, NCHW and NHWC; contract in batchnorm.h, the
// CPU's in batchnorm_cpu.cpp:
//
//   x, y, dy, dx (N, C, HW)    M = N·HW values per channel
//   train:  μ = Σx/M,  σ² = Σ(x−μ)²/M,  invstd = 1/sqrt(σ² + eps)
//           y = act(γ·(x−μ)·invstd + β [+ r])
//           running_mean = (1−m)·running_mean + m·μ
//           running_var  = (1−m)·running_var  + m·σ²·M/(M−1)   (unbiased, as PyTorch)
//   eval:   the same with the running statistics
//   backward (x̂ = (x−μ)·invstd, dz = dy·[y > 0] with the ReLU epilogue, else dy;
//           dres := dz):
//           dβ = Σdz,  dγ = Σdz·x̂,  dx = γ·invstd/M·(M·dz − dβ − x̂·dγ)
//
// Every kernel runs on batchnorm_plan.h's grid: many blocks per channel
// (slices of the channel's M values), NHWC with adjacent channels across the
// warp so every read is coalesced, NCHW along the contiguous HW planes. A
// reduction is two launches: each block writes one (Σa, Σb) pair per channel
// to the workspace, then a finish kernel adds a channel's slices in a fixed
// order and writes the results (no atomics: the same input gives the same bits
// run to run on one device; the split, and so the order of the sums, depends
// on the SM count; the two launches are safe inside a CUDA graph).
//
// Accumulation: double partial sums, not Welford in float. The pairs of
// slices then merge by plain addition in a fixed order; the statistics keep
// the accuracy of the double two-pass reference (test_op_batchnorm's CUDA
// tolerances) while x is read once: Σ(x−k) and Σ(x−k)² with the shift
// k = the channel's first value, so σ² = Σ(x−k)²/M − (Σ(x−k)/M)² does not
// cancel (x − k is of the order of σ, not of μ). The backward sums Σdz and
// Σdz·x̂ the same way. The cost: one f32→f64 conversion and a few f64 adds a
// value; on sm_80/sm_90 (f64 at half the f32 rate, conversions at 16 a clock
// per SM) that stays under the memory time of the read (bench/NOTES.md).
//
// Each kernel is compiled for 4, 8 and 16 values loaded ahead by a thread;
// the launch picks one from the bytes that keeps in flight (batchnorm_plan.h's
// unroll_for: 8 for f16/bf16 statistics and the apply without a residual, 4
// elsewhere; TRAINBENCH_CUDA_BN_UNROLL forces one for comparison on a GPU).
//
// The epilogue is a template argument (ReLU) and a pointer (the residual r, or
// dres: null = none), so the plain op is the epilogue's kernel with ReLU off
// and no residual: one kernel for both, the same bits for both. The
// backward's ReLU mask is [y > 0], read from y, or, where the forward had no
// residual and the caller gives β, recomputed from x as the apply kernel
// made y (bn_affine, rounded to T): the same bits without reading y, one
// stream of three less in both backward kernels.
//
// The activations' element type T (x, y, r, dy, dx, dres) is a template
// argument too: float, __half or __nv_bfloat16 (amp_elements.cuh). Each value
// is loaded into float, everything after the load is the f32 kernel's
// arithmetic, and a stored activation is rounded to T once (f16/bf16); the
// per-channel vectors stay f32 and the sums double. For T = float the loads
// and stores are the identity: the f32 kernels' bits.
//
// Not run on a GPU: written for issue 23 and compiled for sm_80 and sm_90; the
// GPU slots of test_op_batchnorm and test_op_fused are its check.
#include "engine/ops/batchnorm/batchnorm.cuh"

#include <type_traits>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/kernels.h"  // launch_fill (memory.cu)
#include "engine/core/error.h"
#include "engine/ops/amp/amp_elements.cuh"

namespace tb::cuda {

namespace {

using batchnorm::ChannelWalk;
using batchnorm::kBlocksPerSm;
using batchnorm::kBlockThreads;
using batchnorm::kFinishLanes;
using batchnorm::ReducePlan;

// One channel's pair of sums; partials[] and totals[] hold these.
struct alignas(16) Sums {
  double a = 0.0, b = 0.0;
};
__device__ __forceinline__ Sums operator+(Sums s, Sums t) { return {s.a + t.a, s.b + t.b}; }

__device__ __forceinline__ ChannelWalk thread_walk(const ReducePlan& p) {
  return batchnorm::walk(p, blockIdx.x, blockIdx.y, int(threadIdx.x), int(threadIdx.y));
}

// use(offset, load(offset)) for every value of the walk, in order; loads go
// out kUnroll at a time before their uses, so each thread keeps kUnroll reads
// of every stream in flight (batchnorm_plan.h's unroll_for picks kUnroll;
// the uses, and so the results, come in the same order for each).
template <int kUnroll, class Load, class Use>
__device__ __forceinline__ void for_each_value(ChannelWalk w, Load load, Use use) {
  using V = decltype(load(int64_t{}));
  const int64_t n = w.count();
  int64_t k = 0;
  for (; k + kUnroll <= n; k += kUnroll) {
    // The uses walk the same offsets again (a few integer adds) rather than
    // keep kUnroll 64-bit offsets in registers.
    ChannelWalk again = w;
    V v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      v[u] = load(w.offset);
      w.next();
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      use(again.offset, v[u]);
      again.next();
    }
  }
  for (; k < n; ++k) {
    use(w.offset, load(w.offset));
    w.next();
  }
}

// Folds the block's pairs over its m lanes in a fixed tree (with one channel
// lane, over the whole block); thread (tx, 0) gets channel lane tx's sum.
__device__ __forceinline__ Sums fold_block(Sums s, Sums* smem) {
  const int t = int(threadIdx.y * blockDim.x + threadIdx.x);
  smem[t] = s;
  __syncthreads();
  // half stays a multiple of blockDim.x (both powers of two): t and t + half share a channel.
  for (int half = kBlockThreads / 2; half >= int(blockDim.x); half >>= 1) {
    if (t < half) smem[t] = smem[t] + smem[t + half];
    __syncthreads();
  }
  return smem[threadIdx.x];
}

// The block's pair of channel w.c, written by thread (tx, 0) to its slot.
__device__ __forceinline__ void write_partial(const ReducePlan& p, const ChannelWalk& w, Sums s,
                                              Sums* smem, Sums* partials) {
  s = fold_block(s, smem);
  if (threadIdx.y == 0 && w.c < p.C) partials[p.partial_at(blockIdx.x, w.c)] = s;
}

// Channel blockIdx.x·kFinishLanes + tx: its slices ty, ty + kFinishLanes, ...
// added in order, then a fixed tree over ty. Valid in thread (tx, 0).
__device__ __forceinline__ Sums finish_sum(const ReducePlan& p, const Sums* partials, int64_t c) {
  __shared__ Sums smem[kFinishLanes][kFinishLanes];
  Sums s;
  if (c < p.C)
    for (int64_t k = threadIdx.y; k < p.slices; k += kFinishLanes)
      s = s + partials[p.partial_at(k, c)];
  smem[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  for (int half = kFinishLanes / 2; half > 0; half >>= 1) {
    if (int(threadIdx.y) < half)
      smem[threadIdx.y][threadIdx.x] =
          smem[threadIdx.y][threadIdx.x] + smem[threadIdx.y + half][threadIdx.x];
    __syncthreads();
  }
  return smem[0][threadIdx.x];
}

// ---------------------------------------------------------------- statistics

// partials: Σ(x−k), Σ(x−k)² with k = x at the channel's first value.
template <typename T, int kUnroll>
__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSm)
    bn_stats_reduce_kernel(ReducePlan p, const T* __restrict__ x, Sums* __restrict__ partials) {
  __shared__ Sums smem[kBlockThreads];
  const ChannelWalk w = thread_walk(p);
  Sums s;
  if (w.c < p.C) {
    const double k = to_compute(x[p.first_offset(w.c)]);
    for_each_value<kUnroll>(
        w, [&](int64_t at) { return to_compute(x[at]); },
        [&](int64_t, float v) {
          const double d = double(v) - k;
          s.a += d;
          s.b += d * d;
        });
  }
  write_partial(p, w, s, smem, partials);
}

template <typename T>
__global__ void __launch_bounds__(kFinishLanes * kFinishLanes)
bn_stats_finish_kernel(ReducePlan p, const T* __restrict__ x,
                       const Sums* __restrict__ partials, float* running_mean,
                       float* running_var, double momentum, double eps,
                       float* save_mean, float* save_invstd) {
  const int64_t c = int64_t(blockIdx.x) * kFinishLanes + threadIdx.x;
  const Sums s = finish_sum(p, partials, c);
  if (threadIdx.y != 0 || c >= p.C) return;
  const double M = double(p.M);
  const double shift = s.a / M;  // μ − k
  // Below 0 only by rounding: clamped. NaN (a non-finite x) stays NaN, as on
  // the CPU: fmax would have made it 0, a finite invstd hiding the anomaly.
  const double biased = s.b / M - shift * shift;
  const double var = biased < 0.0 ? 0.0 : biased;
  const double mean = double(to_compute(x[p.first_offset(c)])) + shift;
  const double unbiased = p.M > 1 ? var * M / (M - 1.0) : var;
  save_mean[c] = float(mean);
  save_invstd[c] = float(1.0 / sqrt(var + eps));
  running_mean[c] = float((1.0 - momentum) * double(running_mean[c]) + momentum * mean);
  running_var[c] = float((1.0 - momentum) * double(running_var[c]) + momentum * unbiased);
}

// ---------------------------------------------------------------- apply

struct XR {
  float x, r;
};

// γ·(x − mean)·is + β, each operation rounded on its own: the apply kernel's
// value before the residual and the ReLU, and what the backward recomputes
// for ReLU's mask from x (Mask::FromX). Spelt with __fmul_rn/__fadd_rn so
// that no FMA contraction, left to the compiler, can make the two differ.
__device__ __forceinline__ float bn_affine(float x, float g, float mean, float is, float b) {
  return __fadd_rn(__fmul_rn(__fmul_rn(g, __fadd_rn(x, -mean)), is), b);
}

// y = act(γ·(x − mean)·is + β [+ r]); `invstd_is_var`: eval mode, the vector
// holds running_var and is = rsqrt(var + eps). y may be x or r (in place):
// no __restrict__ on them, and each value is read before it is written.
template <typename T, bool kRelu, int kUnroll>
__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSm)
    bn_apply_kernel(ReducePlan p, const T* x, const float* __restrict__ gamma,
                    const float* __restrict__ beta, const float* __restrict__ mean_v,
                    const float* __restrict__ invstd_or_var, bool invstd_is_var, float eps,
                    const T* r, T* y) {
  const ChannelWalk w = thread_walk(p);
  if (w.c >= p.C) return;
  const float g = gamma[w.c], b = beta[w.c], mean = mean_v[w.c];
  const float is = invstd_is_var ? rsqrtf(invstd_or_var[w.c] + eps) : invstd_or_var[w.c];
  for_each_value<kUnroll>(
      w, [&](int64_t at) { return XR{to_compute(x[at]), r ? to_compute(r[at]) : 0.0f}; },
      [&](int64_t at, XR v) {
        float o = bn_affine(v.x, g, mean, is, b);
        if (r) o = o + v.r;
        if (kRelu) o = o > 0.0f ? o : 0.0f;
        y[at] = from_compute<T>(o);
      });
}

// ---------------------------------------------------------------- backward

struct XDz {
  float x, dz;
};

// Where dz = dy·mask takes ReLU's mask from: none (no ReLU), y > 0 (y read),
// or the forward's y recomputed from x (its affine values and β, no residual).
enum class Mask { None, FromY, FromX };

// A channel's floats of the forward's affine map, for Mask::FromX.
struct Affine {
  float g = 0, mean = 0, is = 0, b = 0;
};

template <Mask kMask, typename T>
__device__ __forceinline__ XDz load_x_dz(const T* x, const T* y, const T* dy, int64_t at,
                                         const Affine& a) {
  const float g = to_compute(dy[at]);
  const float xv = to_compute(x[at]);
  bool pass = true;
  if constexpr (kMask == Mask::FromY) pass = to_compute(y[at]) > 0.0f;
  // y = T(relu(o)) > 0 exactly when T(o) > 0 (NaN: neither).
  if constexpr (kMask == Mask::FromX)
    pass = to_compute(from_compute<T>(bn_affine(xv, a.g, a.mean, a.is, a.b))) > 0.0f;
  return {xv, pass ? g : 0.0f};
}

template <Mask kMask>
__device__ __forceinline__ Affine affine_of(const float* gamma, const float* beta,
                                            const float* mean_v, const float* invstd_v, int64_t c) {
  if constexpr (kMask == Mask::FromX) return {gamma[c], mean_v[c], invstd_v[c], beta[c]};
  return {};
}

// partials: Σdz, Σdz·x̂ (dz stored to dres when wanted).
template <typename T, Mask kMask, int kUnroll>
__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSm)
    bn_backward_reduce_kernel(ReducePlan p, const T* __restrict__ x, const T* __restrict__ y,
                              const T* __restrict__ dy, const float* __restrict__ gamma,
                              const float* __restrict__ beta, const float* __restrict__ mean_v,
                              const float* __restrict__ invstd_v, T* __restrict__ dres,
                              Sums* __restrict__ partials) {
  __shared__ Sums smem[kBlockThreads];
  const ChannelWalk w = thread_walk(p);
  Sums s;
  if (w.c < p.C) {
    const double mean = mean_v[w.c], invstd = invstd_v[w.c];
    const Affine a = affine_of<kMask>(gamma, beta, mean_v, invstd_v, w.c);
    for_each_value<kUnroll>(
        w, [&](int64_t at) { return load_x_dz<kMask>(x, y, dy, at, a); },
        [&](int64_t at, XDz v) {
          if (dres) dres[at] = from_compute<T>(v.dz);  // dy or 0: exact
          const double g = v.dz;
          s.a += g;
          s.b += g * (double(v.x) - mean) * invstd;
        });
  }
  write_partial(p, w, s, smem, partials);
}

// totals[c] = (Σdz, Σdz·x̂); dβ, dγ written or added to (in double, once rounded).
__global__ void __launch_bounds__(kFinishLanes * kFinishLanes)
bn_backward_finish_kernel(ReducePlan p, const Sums* __restrict__ partials,
                          Sums* __restrict__ totals, float* dgamma, float* dbeta,
                          bool accumulate) {
  const int64_t c = int64_t(blockIdx.x) * kFinishLanes + threadIdx.x;
  const Sums s = finish_sum(p, partials, c);
  if (threadIdx.y != 0 || c >= p.C) return;
  totals[c] = s;
  if (dbeta) dbeta[c] = float(accumulate ? double(dbeta[c]) + s.a : s.a);
  if (dgamma) dgamma[c] = float(accumulate ? double(dgamma[c]) + s.b : s.b);
}

template <typename T, Mask kMask, int kUnroll>
__global__ void __launch_bounds__(kBlockThreads, kBlocksPerSm)
    bn_backward_dx_kernel(ReducePlan p, const T* __restrict__ x, const T* __restrict__ y,
                          const T* __restrict__ dy, const float* __restrict__ gamma,
                          const float* __restrict__ beta, const float* __restrict__ mean_v,
                          const float* __restrict__ invstd_v, const Sums* __restrict__ totals,
                          T* __restrict__ dx) {
  const ChannelWalk w = thread_walk(p);
  if (w.c >= p.C) return;
  const double mean = mean_v[w.c], invstd = invstd_v[w.c], M = double(p.M);
  const double a = double(gamma[w.c]) * invstd / M;
  const Sums t = totals[w.c];
  const Affine aff = affine_of<kMask>(gamma, beta, mean_v, invstd_v, w.c);
  for_each_value<kUnroll>(
      w, [&](int64_t at) { return load_x_dz<kMask>(x, y, dy, at, aff); },
      [&](int64_t at, XDz v) {
        const double xh = (double(v.x) - mean) * invstd;
        dx[at] = from_compute<T>(float(a * (M * double(v.dz) - t.a - xh * t.b)));
      });
}

// ---------------------------------------------------------------- launch helpers

dim3 grid_of(const ReducePlan& p) { return dim3(unsigned(p.slices), unsigned(p.tiles)); }
dim3 block_of(const ReducePlan& p) { return dim3(unsigned(p.lanes_c), unsigned(p.lanes_m)); }
dim3 finish_block() { return dim3(kFinishLanes, kFinishLanes); }

// f(std::integral_constant<int, U>) for the plan's unroll U of a kernel that
// reads `streams` tensors of T (batchnorm_plan.h's unroll_for).
template <typename T, class F>
void with_unroll(const ReducePlan& p, int streams, F f) {
  switch (batchnorm::unroll_for(streams, int(sizeof(T)), p.unroll_forced)) {
    case 4: f(std::integral_constant<int, 4>{}); return;
    case 8: f(std::integral_constant<int, 8>{}); return;
    case 16: f(std::integral_constant<int, 16>{}); return;
  }
  TB_FAIL("batch norm: no kernel for that unroll");  // unroll_for returns one of kUnrolls
}

Sums* partials_of(double* work) { return reinterpret_cast<Sums*>(work); }
Sums* totals_of(const ReducePlan& p, double* work) { return partials_of(work) + p.totals_at(); }

template <typename T>
void launch_stats(const ReducePlan& p, const T* x, float* running_mean, float* running_var,
                  float momentum, float eps, float* save_mean, float* save_invstd, double* work,
                  cudaStream_t s) {
  with_unroll<T>(p, 1, [&](auto u) {
    bn_stats_reduce_kernel<T, u()><<<grid_of(p), block_of(p), 0, s>>>(p, x, partials_of(work));
  });
  TB_CUDA_LAUNCH_CHECK("bn_stats_reduce_kernel");
  bn_stats_finish_kernel<T><<<unsigned(p.finish_blocks), finish_block(), 0, s>>>(
      p, x, partials_of(work), running_mean, running_var, momentum, eps, save_mean, save_invstd);
  TB_CUDA_LAUNCH_CHECK("bn_stats_finish_kernel");
}

template <typename T>
void launch_apply(const ReducePlan& p, const T* x, const float* gamma, const float* beta,
                  const float* mean, const float* invstd_or_var, bool invstd_is_var, float eps,
                  const T* r, bool relu, T* y, cudaStream_t s) {
  with_unroll<T>(p, r ? 2 : 1, [&](auto u) {
    if (relu)
      bn_apply_kernel<T, true, u()><<<grid_of(p), block_of(p), 0, s>>>(
          p, x, gamma, beta, mean, invstd_or_var, invstd_is_var, eps, r, y);
    else
      bn_apply_kernel<T, false, u()><<<grid_of(p), block_of(p), 0, s>>>(
          p, x, gamma, beta, mean, invstd_or_var, invstd_is_var, eps, r, y);
  });
  TB_CUDA_LAUNCH_CHECK("bn_apply_kernel");
}

template <typename T, Mask kMask>
void launch_backward_t(const ReducePlan& p, const T* x, const T* y, const T* dy,
                       const float* gamma, const float* beta, const float* save_mean,
                       const float* save_invstd, T* dx, T* dres, float* dgamma, float* dbeta,
                       bool accumulate, double* work, cudaStream_t s) {
  if (p.empty()) {  // M = 0: dβ and dγ are the empty sums, written as the CPU writes them
    if (!accumulate) {
      if (dgamma) launch_fill(dgamma, p.C, 4, 0, s);
      if (dbeta) launch_fill(dbeta, p.C, 4, 0, s);
    }
    return;
  }
  // x and dy, and y for the ReLU mask read from it.
  const int streams = kMask == Mask::FromY ? 3 : 2;
  with_unroll<T>(p, streams, [&](auto u) {
    bn_backward_reduce_kernel<T, kMask, u()><<<grid_of(p), block_of(p), 0, s>>>(
        p, x, y, dy, gamma, beta, save_mean, save_invstd, dres, partials_of(work));
  });
  TB_CUDA_LAUNCH_CHECK("bn_backward_reduce_kernel");
  bn_backward_finish_kernel<<<unsigned(p.finish_blocks), finish_block(), 0, s>>>(
      p, partials_of(work), totals_of(p, work), dgamma, dbeta, accumulate);
  TB_CUDA_LAUNCH_CHECK("bn_backward_finish_kernel");
  if (!dx) return;
  with_unroll<T>(p, streams, [&](auto u) {
    bn_backward_dx_kernel<T, kMask, u()><<<grid_of(p), block_of(p), 0, s>>>(
        p, x, y, dy, gamma, beta, save_mean, save_invstd, totals_of(p, work), dx);
  });
  TB_CUDA_LAUNCH_CHECK("bn_backward_dx_kernel");
}

}  // namespace

template <typename T>
void launch_bn_forward_train(const T* x, const float* gamma, const float* beta, const T* r,
                             bool relu, float* running_mean, float* running_var, float momentum,
                             float eps, T* y, float* save_mean, float* save_invstd,
                             const ReducePlan& plan, double* work, cudaStream_t s) {
  if (plan.empty()) return;
  launch_stats(plan, x, running_mean, running_var, momentum, eps, save_mean, save_invstd, work, s);
  launch_apply(plan, x, gamma, beta, save_mean, save_invstd, false, eps, r, relu, y, s);
}

template <typename T>
void launch_bn_forward_eval(const T* x, const float* gamma, const float* beta, const T* r,
                            bool relu, const float* running_mean, const float* running_var,
                            float eps, T* y, const ReducePlan& plan, cudaStream_t s) {
  if (plan.empty()) return;
  launch_apply(plan, x, gamma, beta, running_mean, running_var, true, eps, r, relu, y, s);
}

template <typename T>
void launch_bn_backward(const T* x, const T* y, const T* dy, const float* gamma,
                        const float* mask_beta, const float* save_mean, const float* save_invstd,
                        bool relu, T* dx, T* dres, float* dgamma, float* dbeta, bool accumulate,
                        const ReducePlan& plan, double* work, cudaStream_t s) {
  if (relu && mask_beta)
    launch_backward_t<T, Mask::FromX>(plan, x, nullptr, dy, gamma, mask_beta, save_mean,
                                      save_invstd, dx, dres, dgamma, dbeta, accumulate, work, s);
  else if (relu)
    launch_backward_t<T, Mask::FromY>(plan, x, y, dy, gamma, nullptr, save_mean, save_invstd, dx,
                                      dres, dgamma, dbeta, accumulate, work, s);
  else
    launch_backward_t<T, Mask::None>(plan, x, nullptr, dy, gamma, nullptr, save_mean,
                                     save_invstd, dx, dres, dgamma, dbeta, accumulate, work, s);
}

#define TB_INSTANTIATE(T)                                                                       \
  template void launch_bn_forward_train<T>(const T*, const float*, const float*, const T*, bool, \
                                           float*, float*, float, float, T*, float*, float*,     \
                                           const ReducePlan&, double*, cudaStream_t);            \
  template void launch_bn_forward_eval<T>(const T*, const float*, const float*, const T*, bool,  \
                                          const float*, const float*, float, T*,                 \
                                          const ReducePlan&, cudaStream_t);                      \
  template void launch_bn_backward<T>(const T*, const T*, const T*, const float*, const float*,  \
                                      const float*, const float*, bool, T*, T*, float*, float*,  \
                                      bool, const ReducePlan&, double*, cudaStream_t);
TB_INSTANTIATE(float)
TB_INSTANTIATE(__half)
TB_INSTANTIATE(__nv_bfloat16)
#undef TB_INSTANTIATE

}  // namespace tb::cuda
