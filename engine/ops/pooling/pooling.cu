// SPDX-License-Identifier: GPL-3.0-or-later
// The pooling family's CUDA kernels and their launchers (pooling.cuh), f32,
// f16 or bf16 (the element type T: each value loaded into float, each output
// rounded once, amp_elements.cuh; for float the f32 kernels' arithmetic),
// NCHW and NHWC; contract in pooling.h, the CPU's in pooling_cpu.cpp:
//
//   max:  y[n,c,oh,ow] = max over the window's cells inside the image (padding
//         never wins; NaN wins); argmax (i32) = ih*W + iw of the first maximum
//         in window order (kh, then kw).
//   avg:  y = (sum over cells inside the image) / (kernel²)   (count_include_pad)
//   global: y[n,c] = mean over the H·W plane.
//
// Backward passes are gathers: each input cell visits the output windows that
// contain it (at most ceil(k/stride)² of them) in increasing (oh, ow) order and
// adds their share. No atomics and no memset, and the additions happen in the
// order the CPU's scatter makes them, so max-pool gradients match it exactly.
// One thread per output (forward) or input (backward) cell; the flat index is
// decoded in the tensor's memory order so neighbouring threads touch
// neighbouring addresses in either layout. Index arithmetic in 32 bits where
// every index of the call fits (by_index): a GPU has no integer divider, and a
// 64-bit division or remainder costs several times a 32-bit one, of which
// each cell's decoding takes several (bench/NOTES.md attempt 11).
//
// Ran on an H200 before the move (gpu-runs/2026-11-26-h200: test_op_pooling
// passed); moved without a change to the arithmetic, and given 32-bit index
// arithmetic (the same values and indices), not run on a GPU since.
#include "engine/ops/pooling/pooling.cuh"

#include <algorithm>
#include <cstdint>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/device_utils.cuh"
#include "engine/ops/amp/amp_elements.cuh"

namespace tb::cuda {

namespace {

// PoolDims in the index type I of a launch (by_index).
template <typename I>
struct Dims {
  I N, C, H, W, kernel, stride, pad, H_out, W_out;
  bool nhwc;
  explicit Dims(const PoolDims& d)
      : N(I(d.N)), C(I(d.C)), H(I(d.H)), W(I(d.W)), kernel(I(d.kernel)), stride(I(d.stride)),
        pad(I(d.pad)), H_out(I(d.H_out)), W_out(I(d.W_out)), nhwc(d.nhwc) {}
};

// Flat index j of a (N, C, h, w) tensor -> (n, c, ih, iw), in its layout.
template <typename I>
struct Coord {
  I n, c, h, w;
};
template <typename I>
__device__ __forceinline__ Coord<I> decode(I j, I C, I H, I W, bool nhwc) {
  Coord<I> k;
  if (nhwc) {
    k.c = j % C;
    j /= C;
    k.w = j % W;
    j /= W;
    k.h = j % H;
    k.n = j / H;
  } else {
    k.w = j % W;
    j /= W;
    k.h = j % H;
    j /= H;
    k.c = j % C;
    k.n = j / C;
  }
  return k;
}
template <typename I>
__device__ __forceinline__ I at(const Coord<I>& k, I C, I H, I W, I h, I w, bool nhwc) {
  return nhwc ? ((k.n * H + h) * W + w) * C + k.c : ((k.n * C + k.c) * H + h) * W + w;
}

// Output windows along one axis that contain input i: [lo, hi).
template <typename I>
__device__ __forceinline__ void covering(I i, I kernel, I stride, I pad, I n_out, I& lo, I& hi) {
  const I a = i + pad - kernel + 1;  // o·stride ≥ a
  lo = a <= 0 ? 0 : (a + stride - 1) / stride;
  hi = (i + pad) / stride + 1;
  if (hi > n_out) hi = n_out;
}

template <typename T, typename I>
__global__ void maxpool_forward_kernel(Dims<I> d, const T* x, T* y, int32_t* argmax) {
  const I total = d.N * d.C * d.H_out * d.W_out;
  TB_GRID_STRIDE(I, j, total) {
    const Coord<I> o = decode(j, d.C, d.H_out, d.W_out, d.nhwc);
    float best = 0.0f;
    I arg = -1;
    for (I kh = 0; kh < d.kernel; ++kh) {
      const I ih = o.h * d.stride - d.pad + kh;
      if (ih < 0 || ih >= d.H) continue;
      for (I kw = 0; kw < d.kernel; ++kw) {
        const I iw = o.w * d.stride - d.pad + kw;
        if (iw < 0 || iw >= d.W) continue;
        const float v = to_compute(x[at(o, d.C, d.H, d.W, ih, iw, d.nhwc)]);
        if (arg < 0 || v > best || (isnan(v) && !isnan(best))) best = v, arg = ih * d.W + iw;
      }
    }
    y[j] = from_compute<T>(best);
    argmax[j] = int32_t(arg);
  }
}

template <typename T, typename I>
__global__ void maxpool_backward_kernel(Dims<I> d, const T* dy, const int32_t* argmax, T* dx) {
  const I total = d.N * d.C * d.H * d.W;
  TB_GRID_STRIDE(I, j, total) {
    const Coord<I> i = decode(j, d.C, d.H, d.W, d.nhwc);
    const int32_t me = int32_t(i.h * d.W + i.w);
    I h0, h1, w0, w1;
    covering(i.h, d.kernel, d.stride, d.pad, d.H_out, h0, h1);
    covering(i.w, d.kernel, d.stride, d.pad, d.W_out, w0, w1);
    float acc = 0.0f;
    for (I oh = h0; oh < h1; ++oh)
      for (I ow = w0; ow < w1; ++ow) {
        const I o = at(i, d.C, d.H_out, d.W_out, oh, ow, d.nhwc);
        if (argmax[o] == me) acc += to_compute(dy[o]);
      }
    dx[j] = from_compute<T>(acc);
  }
}

template <typename T, typename I>
__global__ void avgpool_forward_kernel(Dims<I> d, const T* x, T* y) {
  const I total = d.N * d.C * d.H_out * d.W_out;
  const float inv = 1.0f / float(d.kernel * d.kernel);
  TB_GRID_STRIDE(I, j, total) {
    const Coord<I> o = decode(j, d.C, d.H_out, d.W_out, d.nhwc);
    float acc = 0.0f;
    for (I kh = 0; kh < d.kernel; ++kh) {
      const I ih = o.h * d.stride - d.pad + kh;
      if (ih < 0 || ih >= d.H) continue;
      for (I kw = 0; kw < d.kernel; ++kw) {
        const I iw = o.w * d.stride - d.pad + kw;
        if (iw >= 0 && iw < d.W) acc += to_compute(x[at(o, d.C, d.H, d.W, ih, iw, d.nhwc)]);
      }
    }
    y[j] = from_compute<T>(acc * inv);
  }
}

template <typename T, typename I>
__global__ void avgpool_backward_kernel(Dims<I> d, const T* dy, T* dx) {
  const I total = d.N * d.C * d.H * d.W;
  const float inv = 1.0f / float(d.kernel * d.kernel);
  TB_GRID_STRIDE(I, j, total) {
    const Coord<I> i = decode(j, d.C, d.H, d.W, d.nhwc);
    I h0, h1, w0, w1;
    covering(i.h, d.kernel, d.stride, d.pad, d.H_out, h0, h1);
    covering(i.w, d.kernel, d.stride, d.pad, d.W_out, w0, w1);
    float acc = 0.0f;
    for (I oh = h0; oh < h1; ++oh)
      for (I ow = w0; ow < w1; ++ow)
        acc += to_compute(dy[at(i, d.C, d.H_out, d.W_out, oh, ow, d.nhwc)]);
    dx[j] = from_compute<T>(acc * inv);
  }
}

// NCHW: one warp per (n, c) plane of HW contiguous values.
template <typename T>
__global__ void gap_forward_nchw_kernel(const T* x, T* y, int64_t planes, int64_t HW) {
  const int64_t p = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (p >= planes) return;
  const int lane = threadIdx.x & 31;
  double acc = 0.0;
  for (int64_t i = lane; i < HW; i += 32) acc += double(to_compute(x[p * HW + i]));
  acc = warp_sum(acc);
  if (lane == 0) y[p] = from_compute<T>(float(acc / double(HW)));
}

// NHWC: one thread per (n, c); consecutive threads read consecutive channels.
template <typename T>
__global__ void gap_forward_nhwc_kernel(const T* x, T* y, int64_t N, int64_t C, int64_t HW) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < N * C;
       j += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = j / C, c = j % C;
    double acc = 0.0;
    for (int64_t i = 0; i < HW; ++i) acc += double(to_compute(x[(n * HW + i) * C + c]));
    y[j] = from_compute<T>(float(acc / double(HW)));
  }
}

// dx[n,c,i] = dy[n,c] / HW
template <typename T, typename I>
__global__ void gap_backward_kernel(const T* dy, T* dx, I N, I C, I HW, bool nhwc) {
  const float inv = float(1.0 / double(HW));
  const I total = N * C * HW;
  TB_GRID_STRIDE(I, j, total) {
    const I nc = nhwc ? (j / (HW * C)) * C + j % C : j / HW;
    dx[j] = from_compute<T>(to_compute(dy[nc]) * inv);
  }
}

// f(I{}) with I = int32_t where every index of a call over `elements` values
// fits (the grid-stride loop's last step included), else int64_t.
template <class F>
void by_index(int64_t elements, F f) {
  const int64_t last_step = kMaxGridBlocks * kThreads;  // one stride of grid_for's largest grid
  if (elements + last_step < (int64_t(1) << 31))
    f(int32_t{});
  else
    f(int64_t{});
}

}  // namespace

template <typename T>
void launch_maxpool_forward(const PoolDims& d, const T* x, T* y, int32_t* argmax,
                            cudaStream_t s) {
  const int64_t total = d.N * d.C * d.H_out * d.W_out;
  if (total <= 0) return;
  by_index(std::max(total, d.N * d.C * d.H * d.W), [&](auto i) {
    using I = decltype(i);
    maxpool_forward_kernel<T, I><<<grid_for(total), kThreads, 0, s>>>(Dims<I>(d), x, y, argmax);
  });
  TB_CUDA_LAUNCH_CHECK("maxpool_forward_kernel");
}

template <typename T>
void launch_maxpool_backward(const PoolDims& d, const T* dy, const int32_t* argmax, T* dx,
                             cudaStream_t s) {
  const int64_t total = d.N * d.C * d.H * d.W;
  if (total <= 0) return;
  by_index(std::max(total, d.N * d.C * d.H_out * d.W_out), [&](auto i) {
    using I = decltype(i);
    maxpool_backward_kernel<T, I>
        <<<grid_for(total), kThreads, 0, s>>>(Dims<I>(d), dy, argmax, dx);
  });
  TB_CUDA_LAUNCH_CHECK("maxpool_backward_kernel");
}

template <typename T>
void launch_avgpool_forward(const PoolDims& d, const T* x, T* y, cudaStream_t s) {
  const int64_t total = d.N * d.C * d.H_out * d.W_out;
  if (total <= 0) return;
  by_index(std::max(total, d.N * d.C * d.H * d.W), [&](auto i) {
    using I = decltype(i);
    avgpool_forward_kernel<T, I><<<grid_for(total), kThreads, 0, s>>>(Dims<I>(d), x, y);
  });
  TB_CUDA_LAUNCH_CHECK("avgpool_forward_kernel");
}

template <typename T>
void launch_avgpool_backward(const PoolDims& d, const T* dy, T* dx, cudaStream_t s) {
  const int64_t total = d.N * d.C * d.H * d.W;
  if (total <= 0) return;
  by_index(std::max(total, d.N * d.C * d.H_out * d.W_out), [&](auto i) {
    using I = decltype(i);
    avgpool_backward_kernel<T, I><<<grid_for(total), kThreads, 0, s>>>(Dims<I>(d), dy, dx);
  });
  TB_CUDA_LAUNCH_CHECK("avgpool_backward_kernel");
}

template <typename T>
void launch_global_avgpool_forward(const T* x, T* y, int64_t N, int64_t C, int64_t HW, bool nhwc,
                                   cudaStream_t s) {
  if (N * C <= 0) return;
  if (nhwc) {
    gap_forward_nhwc_kernel<T><<<grid_for(N * C), kThreads, 0, s>>>(x, y, N, C, HW);
    TB_CUDA_LAUNCH_CHECK("gap_forward_nhwc_kernel");
  } else {
    const int64_t warps = kThreads / 32;
    const unsigned blocks = unsigned((N * C + warps - 1) / warps);
    gap_forward_nchw_kernel<T><<<blocks, kThreads, 0, s>>>(x, y, N * C, HW);
    TB_CUDA_LAUNCH_CHECK("gap_forward_nchw_kernel");
  }
}

template <typename T>
void launch_global_avgpool_backward(const T* dy, T* dx, int64_t N, int64_t C, int64_t HW,
                                    bool nhwc, cudaStream_t s) {
  const int64_t total = N * C * HW;
  if (total <= 0) return;
  by_index(total, [&](auto i) {
    using I = decltype(i);
    gap_backward_kernel<T, I>
        <<<grid_for(total), kThreads, 0, s>>>(dy, dx, I(N), I(C), I(HW), nhwc);
  });
  TB_CUDA_LAUNCH_CHECK("gap_backward_kernel");
}

#define TB_INSTANTIATE(T)                                                                        \
  template void launch_maxpool_forward<T>(const PoolDims&, const T*, T*, int32_t*, cudaStream_t); \
  template void launch_maxpool_backward<T>(const PoolDims&, const T*, const int32_t*, T*,         \
                                           cudaStream_t);                                         \
  template void launch_avgpool_forward<T>(const PoolDims&, const T*, T*, cudaStream_t);           \
  template void launch_avgpool_backward<T>(const PoolDims&, const T*, T*, cudaStream_t);          \
  template void launch_global_avgpool_forward<T>(const T*, T*, int64_t, int64_t, int64_t, bool,   \
                                                 cudaStream_t);                                   \
  template void launch_global_avgpool_backward<T>(const T*, T*, int64_t, int64_t, int64_t, bool,  \
                                                  cudaStream_t);
TB_INSTANTIATE(float)
TB_INSTANTIATE(__half)
TB_INSTANTIATE(__nv_bfloat16)
#undef TB_INSTANTIATE

}  // namespace tb::cuda
