// SPDX-License-Identifier: GPL-3.0-or-later
// Memory kernels: fill with a bit pattern, f32<->f64 casts, and the explicit
// NCHW <-> NHWC conversion (Backend::copy is the only place layouts change).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/device_utils.cuh"
#include "engine/backend/cuda/kernels.h"

namespace tb::cuda {

namespace {

template <typename E>
__global__ void fill_kernel(E* p, int64_t n, E v) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    p[i] = v;
}

template <typename S, typename D>
__global__ void cast_kernel(const S* src, D* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = D(src[i]);
}

// Layout conversion through a 32x32 shared tile so both the read and the write
// are coalesced. Per image n the NCHW side is a (C, HW) matrix and the NHWC side
// its transpose (HW, C): one tiled transpose per image.
//   to_nhwc:  src (C, HW) -> dst (HW, C)      else: src (HW, C) -> dst (C, HW)
constexpr int kTile = 32;

template <typename E>
__global__ void transpose_kernel(const E* src, E* dst, int64_t rows, int64_t cols) {
  // src is (rows, cols) row-major per image blockIdx.z; dst is (cols, rows).
  __shared__ E tile[kTile][kTile + 1];  // +1: no bank conflicts on the column read
  const int64_t img = blockIdx.z;
  const E* s = src + img * rows * cols;
  E* d = dst + img * rows * cols;
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    const int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[i][threadIdx.x] = s[r * cols + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    const int64_t c = c0 + i, r = r0 + threadIdx.x;
    if (r < rows && c < cols) d[c * rows + r] = tile[threadIdx.x][i];
  }
}

template <typename E>
void transpose(const void* src, void* dst, int64_t images, int64_t rows, int64_t cols,
               cudaStream_t s) {
  // gridDim.y is limited to 65535 tiles (2M rows); images to 65535 per launch.
  const int64_t ty = (rows + kTile - 1) / kTile, tx = (cols + kTile - 1) / kTile;
  TB_CHECK(ty <= 65535, "layout conversion: ", rows, " rows exceed the kernel's grid");
  for (int64_t i0 = 0; i0 < images; i0 += 65535) {
    const int64_t ni = images - i0 < 65535 ? images - i0 : 65535;
    const dim3 grid{unsigned(tx), unsigned(ty), unsigned(ni)};
    const E* sp = static_cast<const E*>(src) + i0 * rows * cols;
    E* dp = static_cast<E*>(dst) + i0 * rows * cols;
    transpose_kernel<E><<<grid, dim3(kTile, 8), 0, s>>>(sp, dp, rows, cols);
    TB_CUDA_LAUNCH_CHECK("transpose_kernel");
  }
}

}  // namespace

void launch_fill(void* p, int64_t n, int elem_size, uint64_t pattern, cudaStream_t s) {
  if (n <= 0) return;
  const unsigned g = grid_for(n);
  switch (elem_size) {
    case 1:
      fill_kernel<<<g, kThreads, 0, s>>>(static_cast<uint8_t*>(p), n, uint8_t(pattern));
      break;
    case 2:
      fill_kernel<<<g, kThreads, 0, s>>>(static_cast<uint16_t*>(p), n, uint16_t(pattern));
      break;
    case 4:
      fill_kernel<<<g, kThreads, 0, s>>>(static_cast<uint32_t*>(p), n, uint32_t(pattern));
      break;
    case 8:
      fill_kernel<<<g, kThreads, 0, s>>>(static_cast<uint64_t*>(p), n, pattern);
      break;
    default:
      TB_FAIL("fill: unsupported element size ", elem_size);
  }
  TB_CUDA_LAUNCH_CHECK("fill_kernel");
}

uint16_t half_bits(float v) {
  const __half h = __float2half_rn(v);
  return __half_as_ushort(h);
}

uint16_t bfloat16_bits(float v) {
  const __nv_bfloat16 b = __float2bfloat16_rn(v);
  return __bfloat16_as_ushort(b);
}

void launch_cast_f32_f64(const float* src, double* dst, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  cast_kernel<<<grid_for(n), kThreads, 0, s>>>(src, dst, n);
  TB_CUDA_LAUNCH_CHECK("cast_kernel<f32,f64>");
}

void launch_cast_f64_f32(const double* src, float* dst, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  cast_kernel<<<grid_for(n), kThreads, 0, s>>>(src, dst, n);
  TB_CUDA_LAUNCH_CHECK("cast_kernel<f64,f32>");
}

void launch_convert_layout(const void* src, void* dst, int64_t N, int64_t C, int64_t H, int64_t W,
                           int elem_size, bool to_nhwc, cudaStream_t s) {
  if (N * C * H * W == 0) return;
  const int64_t HW = H * W;
  // to_nhwc: each image (C, HW) -> (HW, C); else (HW, C) -> (C, HW).
  const int64_t rows = to_nhwc ? C : HW, cols = to_nhwc ? HW : C;
  switch (elem_size) {
    case 1:
      transpose<uint8_t>(src, dst, N, rows, cols, s);
      break;
    case 2:
      transpose<uint16_t>(src, dst, N, rows, cols, s);
      break;
    case 4:
      transpose<uint32_t>(src, dst, N, rows, cols, s);
      break;
    case 8:
      transpose<uint64_t>(src, dst, N, rows, cols, s);
      break;
    default:
      TB_FAIL("layout conversion: unsupported element size ", elem_size);
  }
}

}  // namespace tb::cuda
