// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A host emulation of the part of CUDA our own kernels use, so that their
// logic (index arithmetic, tails, reductions, barriers, warp exchanges) is
// tested against the CPU reference on every machine, GPU or not. It is a
// test tool, not a backend: results are never called GPU results.
//
// How: each .cu file is compiled as C++ (rewrite_launches.py turns
// `k<<<grid, block, smem, stream>>>(args)` into tb_emu::launch) with this
// header forced in and `cuda` renamed `cuda_emu` (the launchers become
// tb::cuda_emu::*, beside the real tb::cuda::* of a CUDA build). A launch
// runs its blocks one after another on the calling thread; inside a block
// every CUDA thread is a fiber (Boost.Context), switched only at __syncthreads and
// at warp shuffles, so the emulation is deterministic. The order threads run
// between two barriers is a setting (set_schedule): in reverse, a kernel that
// reads shared memory another thread writes without a barrier between them
// reads a stale value whichever way the code assumes.
//
// It reports, as a failed launch (cudaGetLastError, the message in
// last_launch_error()): a bad launch configuration (block over 1024 threads or
// its limits per dimension, grid over 2^31-1 / 65535, an empty grid or
// block); threads of one block waiting at different __syncthreads; a
// __syncthreads while some of the block's threads have exited; a shuffle
// whose mask is not the warp's every live lane; a deadlock.
//
// What it does not emulate: memory-ordering between threads other than at
// the barriers, timing, FMA contraction (nvcc contracts a*b+c, the host
// compiler does not), the hardware's approximate functions (rsqrtf is
// 1/sqrtf here), shared memory's uninitialised contents (__shared__ is a
// static: zero at first, then whatever the last block left), and
// concurrency: a launch runs when it is enqueued, on the calling thread
// (runtime.h), or is recorded while its stream is being captured.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

// ---------------------------------------------------------------- runtime types

#include "tests/cuda_emulator/runtime.h"

struct uint3 {
  unsigned x, y, z;
};

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};

// ---------------------------------------------------------------- f16 and bf16

// Storage types of CUDA's names and sizes; conversions round to nearest even,
// and NaN becomes the canonical 0x7fff, as the GPU's cvt.rn does.
struct __half {
  unsigned short __x;
};
struct __nv_bfloat16 {
  unsigned short __x;
};

namespace tb_emu {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline unsigned short half_bits_rn(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return 0x7fff;                       // NaN
  if (abs >= 0x47800000u) return (unsigned short)(sign | 0x7c00u);  // >= 2^16: inf
  if (abs >= 0x38800000u) {  // normal half (>= 2^-14); [65520, 2^16) carries into inf
    const uint32_t mant = abs & 0x7fffffu;
    const uint32_t exp = (abs >> 23) - 127 + 15;
    uint32_t h = (exp << 10) | (mant >> 13);
    const uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // carries into the exponent
    return (unsigned short)(sign | h);
  }
  // Subnormal half or zero: the value in units of 2^-24, rounded to even.
  if (abs < 0x33000000u) return (unsigned short)sign;  // below 2^-25: rounds to 0
  const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
  const int shift = 126 - int(abs >> 23);  // 14..24: mant·2^(e−150) in 2^-24 units
  uint32_t h = mant >> shift;
  const uint32_t rest = mant & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
  if (rest > halfway || (rest == halfway && (h & 1u))) ++h;
  return (unsigned short)(sign | h);
}

inline float half_to_float(unsigned short h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return bits_float(sign | ((exp - 15 + 127) << 23) | (mant << 13));
  const float v = std::ldexp(float(mant), -24);  // subnormal or zero: exact
  return sign ? -v : v;
}

inline unsigned short bfloat16_bits_rn(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  const uint32_t lsb = (u >> 16) & 1u;
  return (unsigned short)((u + 0x7fffu + lsb) >> 16);
}

inline float bfloat16_to_float(unsigned short b) { return bits_float(uint32_t(b) << 16); }

}  // namespace tb_emu

inline __half __float2half_rn(float f) { return __half{tb_emu::half_bits_rn(f)}; }
inline float __half2float(__half h) { return tb_emu::half_to_float(h.__x); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __ushort_as_half(unsigned short u) { return __half{u}; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  return __nv_bfloat16{tb_emu::bfloat16_bits_rn(f)};
}
inline float __bfloat162float(__nv_bfloat16 b) { return tb_emu::bfloat16_to_float(b.__x); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16{u}; }

// ---------------------------------------------------------------- launches

namespace tb_emu {

// The order a block's threads run between two barriers, and its blocks run.
enum class Schedule { forward, reverse };
void set_schedule(Schedule s);
Schedule schedule();

// The message of the last failed launch ("" when none failed yet).
const std::string& last_launch_error();
// Launches, blocks run, block-barrier completions and warp exchanges since
// the start (for tests: the tool's own, which kernel a launcher picked,
// whether it launched at all).
struct Counters {
  int64_t launches = 0, blocks = 0, barriers = 0, shuffles = 0;
};
Counters counters();

struct Config {
  dim3 grid, block;
  size_t shared_bytes;
  cudaStream_t stream;
  Config(dim3 g, dim3 b, size_t smem = 0, cudaStream_t s = nullptr)
      : grid(g), block(b), shared_bytes(smem), stream(s) {}
};

// The emulated thread's coordinates (valid inside a launch).
struct ThreadState {
  uint3 thread_idx, block_idx;
  dim3 block_dim, grid_dim;
};
extern ThreadState* g_thread;

using Body = void (*)(void* closure);
// Runs body(closure) once for every thread of the grid; false (and the
// last-error slot set) on a bad configuration or a fault found while running.
bool run_grid(const Config& c, Body body, void* closure);

// `kernel` calls the kernel with the launch's arguments (rewrite_launches.py
// makes it a lambda, which deduces a template kernel's arguments as nvcc does).
// The launch owns copies of the arguments, as CUDA's does, so a launch
// recorded into a graph replays with them; each thread's call copies them
// again into the kernel's by-value parameters.
template <typename Kernel, typename... A>
void launch(const Config& c, Kernel kernel, A&&... args) {
  using Params = std::tuple<std::decay_t<A>...>;
  auto work = [c, kernel, params = Params(std::forward<A>(args)...)]() mutable {
    struct Closure {
      Kernel* kernel;
      Params* params;
    } closure{&kernel, &params};
    run_grid(
        c,
        [](void* p) {
          auto* cl = static_cast<Closure*>(p);
          std::apply(*cl->kernel, *cl->params);
        },
        &closure);
  };
  (void)enqueue(c.stream, std::move(work), "a kernel launch");
}

// Device-side operations (valid inside a launch).
void syncthreads(const char* file, int line);
// Exchanges 8 bytes among the warp's lanes; returns those of lane `src`.
uint64_t warp_exchange(unsigned mask, uint64_t bits, int src_lane_or_minus1, const char* what);
inline int lane_id() {
  const ThreadState& t = *g_thread;
  const unsigned linear = t.thread_idx.x + t.block_dim.x * (t.thread_idx.y + t.block_dim.y * t.thread_idx.z);
  return int(linear & 31u);
}

template <typename T>
T shuffle_to(unsigned mask, T v, int src, const char* what) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffle of a value over 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = warp_exchange(mask, bits, src, what);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

}  // namespace tb_emu

// ---------------------------------------------------------------- device code

#if defined(__CUDACC__)
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define threadIdx (::tb_emu::g_thread->thread_idx)
#define blockIdx (::tb_emu::g_thread->block_idx)
#define blockDim (::tb_emu::g_thread->block_dim)
#define gridDim (::tb_emu::g_thread->grid_dim)
#define __syncthreads() ::tb_emu::syncthreads(__FILE__, __LINE__)

// Within a width-lane segment, as CUDA: a source outside it gives the lane's own value.
template <typename T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  const int lane = tb_emu::lane_id(), base = lane & ~(width - 1);
  return tb_emu::shuffle_to(mask, v, base + (src & (width - 1)), "__shfl_sync");
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = tb_emu::lane_id(), base = lane & ~(width - 1);
  const int src = lane + int(delta);
  return tb_emu::shuffle_to(mask, v, src < base + width ? src : lane, "__shfl_down_sync");
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const int lane = tb_emu::lane_id(), base = lane & ~(width - 1);
  const int src = lane ^ lane_mask;
  return tb_emu::shuffle_to(mask, v, src < base + width ? src : lane, "__shfl_xor_sync");
}

inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float rsqrtf(float v) { return 1.0f / std::sqrt(v); }
inline double rsqrt(double v) { return 1.0 / std::sqrt(v); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline double __longlong_as_double(long long v) {
  double d;
  std::memcpy(&d, &v, 8);
  return d;
}
inline unsigned __float_as_uint(float f) { return tb_emu::float_bits(f); }
inline float __uint_as_float(unsigned u) { return tb_emu::bits_float(u); }

// CUDA's global min/max overloads for the integer and floating types.
template <typename A, typename B>
inline auto min(A a, B b) -> std::common_type_t<A, B> {
  return b < a ? b : a;
}
template <typename A, typename B>
inline auto max(A a, B b) -> std::common_type_t<A, B> {
  return a < b ? b : a;
}
using std::isfinite;
using std::isnan;
#endif  // __CUDACC__
