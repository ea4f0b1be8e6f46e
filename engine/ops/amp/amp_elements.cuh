// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The activation element types of the CUDA kernels that read and write f16 or
// bf16 activations as well as f32 (batch norm, pointwise, pooling, layout):
// a kernel templated on the element type T loads each value into its compute
// type (float for f16 and bf16, T itself for float and double), computes there,
// and stores with one rounding to nearest even, as amp.cu's casts and the
// CPU's widen-compute-round (amp::widened, amp::round_into) do. For float and
// double both conversions are the identity, so an f32 kernel's arithmetic is
// the one it had before it was templated.
//
// Host code (the families' *_cuda.cpp) includes this for by_element, the
// dispatch from a tensor's dtype to T; the launchers are declared on T.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "engine/core/dtype.h"
#include "engine/core/error.h"

namespace tb::cuda {

template <typename T>
struct ComputeOf {
  using type = T;
};
template <>
struct ComputeOf<__half> {
  using type = float;
};
template <>
struct ComputeOf<__nv_bfloat16> {
  using type = float;
};
template <typename T>
using compute_t = typename ComputeOf<T>::type;

#if defined(__CUDACC__)
template <typename T>
__device__ __forceinline__ compute_t<T> to_compute(T v) {
  return v;
}
__device__ __forceinline__ float to_compute(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_compute(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_compute(compute_t<T> v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_compute<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_compute<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
#endif

// f(T{}) with T the element type of dtype t: f32 float, f16 __half, bf16
// __nv_bfloat16, and f64 double where `with_f64`. Another dtype is a
// programming error (the family's checks refused it before): tb::Error.
template <typename F>
void by_element(DType t, F&& f, bool with_f64 = false) {
  switch (t) {
    case DType::F32: f(float{}); return;
    case DType::F16: f(__half{}); return;
    case DType::BF16: f(__nv_bfloat16{}); return;
    case DType::F64:
      if (with_f64) {
        f(double{});
        return;
      }
      break;
    default: break;
  }
  TB_FAIL("no CUDA activation kernel for ", dtype_name(t));
}

}  // namespace tb::cuda
