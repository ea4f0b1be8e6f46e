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
// neighbouring addresses in either layout.
//
// Ran on an H200 before the move (gpu-runs/2026-11-26-h200: test_op_pooling
// passed); moved without a change to the arithmetic, not run on a GPU since.
#include "engine/ops/pooling/pooling.cuh"

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/device_utils.cuh"
#include "engine/ops/amp/amp_elements.cuh"

namespace tb::cuda {

namespace {

// Flat index j of a (N, C, h, w) tensor -> (n, c, ih, iw), in its layout.
struct Coord {
  int64_t n, c, h, w;
};
__device__ __forceinline__ Coord decode(int64_t j, int64_t C, int64_t H, int64_t W, bool nhwc) {
  Coord k;
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
__device__ __forceinline__ int64_t at(const Coord& k, int64_t C, int64_t H, int64_t W, int64_t h,
                                      int64_t w, bool nhwc) {
  return nhwc ? ((k.n * H + h) * W + w) * C + k.c : ((k.n * C + k.c) * H + h) * W + w;
}

// Output windows along one axis that contain input i: [lo, hi).
__device__ __forceinline__ void covering(int64_t i, int64_t kernel, int64_t stride, int64_t pad,
                                         int64_t n_out, int64_t& lo, int64_t& hi) {
  const int64_t a = i + pad - kernel + 1;  // o·stride ≥ a
  lo = a <= 0 ? 0 : (a + stride - 1) / stride;
  hi = (i + pad) / stride + 1;
  if (hi > n_out) hi = n_out;
}

template <typename T>
__global__ void maxpool_forward_kernel(PoolDims d, const T* x, T* y, int32_t* argmax) {
  const int64_t total = d.N * d.C * d.H_out * d.W_out;
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < total;
       j += int64_t(gridDim.x) * blockDim.x) {
    const Coord o = decode(j, d.C, d.H_out, d.W_out, d.nhwc);
    float best = 0.0f;
    int64_t arg = -1;
    for (int64_t kh = 0; kh < d.kernel; ++kh) {
      const int64_t ih = o.h * d.stride - d.pad + kh;
      if (ih < 0 || ih >= d.H) continue;
      for (int64_t kw = 0; kw < d.kernel; ++kw) {
        const int64_t iw = o.w * d.stride - d.pad + kw;
        if (iw < 0 || iw >= d.W) continue;
        const float v = to_compute(x[at(o, d.C, d.H, d.W, ih, iw, d.nhwc)]);
        if (arg < 0 || v > best || (isnan(v) && !isnan(best))) best = v, arg = ih * d.W + iw;
      }
    }
    y[j] = from_compute<T>(best);
    argmax[j] = int32_t(arg);
  }
}

template <typename T>
__global__ void maxpool_backward_kernel(PoolDims d, const T* dy, const int32_t* argmax, T* dx) {
  const int64_t total = d.N * d.C * d.H * d.W;
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < total;
       j += int64_t(gridDim.x) * blockDim.x) {
    const Coord i = decode(j, d.C, d.H, d.W, d.nhwc);
    const int32_t me = int32_t(i.h * d.W + i.w);
    int64_t h0, h1, w0, w1;
    covering(i.h, d.kernel, d.stride, d.pad, d.H_out, h0, h1);
    covering(i.w, d.kernel, d.stride, d.pad, d.W_out, w0, w1);
    float acc = 0.0f;
    for (int64_t oh = h0; oh < h1; ++oh)
      for (int64_t ow = w0; ow < w1; ++ow) {
        const int64_t o = at(i, d.C, d.H_out, d.W_out, oh, ow, d.nhwc);
        if (argmax[o] == me) acc += to_compute(dy[o]);
      }
    dx[j] = from_compute<T>(acc);
  }
}

template <typename T>
__global__ void avgpool_forward_kernel(PoolDims d, const T* x, T* y) {
  const int64_t total = d.N * d.C * d.H_out * d.W_out;
  const float inv = 1.0f / float(d.kernel * d.kernel);
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < total;
       j += int64_t(gridDim.x) * blockDim.x) {
    const Coord o = decode(j, d.C, d.H_out, d.W_out, d.nhwc);
    float acc = 0.0f;
    for (int64_t kh = 0; kh < d.kernel; ++kh) {
      const int64_t ih = o.h * d.stride - d.pad + kh;
      if (ih < 0 || ih >= d.H) continue;
      for (int64_t kw = 0; kw < d.kernel; ++kw) {
        const int64_t iw = o.w * d.stride - d.pad + kw;
        if (iw >= 0 && iw < d.W) acc += to_compute(x[at(o, d.C, d.H, d.W, ih, iw, d.nhwc)]);
      }
    }
    y[j] = from_compute<T>(acc * inv);
  }
}

template <typename T>
__global__ void avgpool_backward_kernel(PoolDims d, const T* dy, T* dx) {
  const int64_t total = d.N * d.C * d.H * d.W;
  const float inv = 1.0f / float(d.kernel * d.kernel);
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < total;
       j += int64_t(gridDim.x) * blockDim.x) {
    const Coord i = decode(j, d.C, d.H, d.W, d.nhwc);
    int64_t h0, h1, w0, w1;
    covering(i.h, d.kernel, d.stride, d.pad, d.H_out, h0, h1);
    covering(i.w, d.kernel, d.stride, d.pad, d.W_out, w0, w1);
    float acc = 0.0f;
    for (int64_t oh = h0; oh < h1; ++oh)
      for (int64_t ow = w0; ow < w1; ++ow)
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
template <typename T>
__global__ void gap_backward_kernel(const T* dy, T* dx, int64_t N, int64_t C, int64_t HW,
                                    bool nhwc) {
  const float inv = float(1.0 / double(HW));
  const int64_t total = N * C * HW;
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < total;
       j += int64_t(gridDim.x) * blockDim.x) {
    const int64_t nc = nhwc ? (j / (HW * C)) * C + j % C : j / HW;
    dx[j] = from_compute<T>(to_compute(dy[nc]) * inv);
  }
}

}  // namespace

template <typename T>
void launch_maxpool_forward(const PoolDims& d, const T* x, T* y, int32_t* argmax,
                            cudaStream_t s) {
  const int64_t total = d.N * d.C * d.H_out * d.W_out;
  if (total <= 0) return;
  maxpool_forward_kernel<<<grid_for(total), kThreads, 0, s>>>(d, x, y, argmax);
  TB_CUDA_LAUNCH_CHECK("maxpool_forward_kernel");
}

template <typename T>
void launch_maxpool_backward(const PoolDims& d, const T* dy, const int32_t* argmax, T* dx,
                             cudaStream_t s) {
  const int64_t total = d.N * d.C * d.H * d.W;
  if (total <= 0) return;
  maxpool_backward_kernel<<<grid_for(total), kThreads, 0, s>>>(d, dy, argmax, dx);
  TB_CUDA_LAUNCH_CHECK("maxpool_backward_kernel");
}

template <typename T>
void launch_avgpool_forward(const PoolDims& d, const T* x, T* y, cudaStream_t s) {
  const int64_t total = d.N * d.C * d.H_out * d.W_out;
  if (total <= 0) return;
  avgpool_forward_kernel<<<grid_for(total), kThreads, 0, s>>>(d, x, y);
  TB_CUDA_LAUNCH_CHECK("avgpool_forward_kernel");
}

template <typename T>
void launch_avgpool_backward(const PoolDims& d, const T* dy, T* dx, cudaStream_t s) {
  const int64_t total = d.N * d.C * d.H * d.W;
  if (total <= 0) return;
  avgpool_backward_kernel<<<grid_for(total), kThreads, 0, s>>>(d, dy, dx);
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
  gap_backward_kernel<<<grid_for(total), kThreads, 0, s>>>(dy, dx, N, C, HW, nhwc);
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
