// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Runtime choice of the instruction set for the CPU backend's own loops (the
// op families' fast f32 paths; OpenBLAS and libc pick their own). The build
// targets baseline x86-64 (SSE2) so that one binary, as packaged, runs on every
// x86-64 machine; a hot loop written once is compiled again for AVX2 and for
// AVX-512 and the copy for this machine is called (TB_CPU_KERNEL below).
//
// The copies compute the same bits: no copy enables FMA (a fused multiply-add
// rounds once where the baseline rounds twice), the build is ISO C++
// (-ffp-contract=off) without -ffast-math, so the compiler neither contracts
// nor reorders floating-point sums; wider registers only do more lanes of the
// same arithmetic at once. tests/engine/test_cpu_isa.cpp checks that bit for
// bit on every ISA the machine has.
//
// Which copy runs: the widest this processor supports, or the one named by
// TRAINBENCH_CPU_ISA (default, avx2, avx512; "auto" or unset: the widest). A
// name the processor cannot run is refused with an error when the CPU
// backend is made. The CPU backend's describe() (the run's stored
// environment) says which one ran.
#include <atomic>
#include <string>
#include <vector>

namespace tb {

enum class CpuIsa : int {
  Unset = -1,  // not decided yet (cpu_isa() decides at its first call)
  Default = 0,  // the build's baseline: x86-64 with SSE2 (or any other architecture)
  Avx2 = 1,     // AVX2 (Haswell, Zen and later)
  Avx512 = 2,   // AVX-512 F, BW, VL, DQ (Skylake-SP, Ice Lake, Sapphire Rapids, Zen 4)
};

// "default", "avx2", "avx512": the names TRAINBENCH_CPU_ISA takes.
const char* cpu_isa_name(CpuIsa isa);
// Every ISA this build has copies for, narrowest first.
std::vector<CpuIsa> cpu_isas_built();
// Whether this processor (and its OS: the wide registers saved on a switch) runs isa.
bool cpu_supports(CpuIsa isa);
// The ISAs of cpu_isas_built() this processor runs, narrowest first.
std::vector<CpuIsa> cpu_isas_supported();
// The name in TRAINBENCH_CPU_ISA's terms; throws tb::Error naming the value and
// the choices for any other, and naming what is missing for one this processor
// cannot run.
CpuIsa parse_cpu_isa(const std::string& name);
// Where the choice came from: "detected", "TRAINBENCH_CPU_ISA" or a test's set_cpu_isa.
std::string cpu_isa_source();

namespace detail {
extern std::atomic<CpuIsa> g_cpu_isa;
CpuIsa decide_cpu_isa();  // from TRAINBENCH_CPU_ISA or the processor; throws tb::Error
}  // namespace detail

// The ISA whose copies run now. Decided once (the CPU backend's constructor
// asks first, so a bad TRAINBENCH_CPU_ISA fails there, not inside a kernel).
inline CpuIsa cpu_isa() {
  const CpuIsa isa = detail::g_cpu_isa.load(std::memory_order_relaxed);
  return isa != CpuIsa::Unset ? isa : detail::decide_cpu_isa();
}

// Test hook: run the copies for isa from now on (throws tb::Error where this
// processor cannot run it). Not for use while kernels run on other threads.
void set_cpu_isa(CpuIsa isa);

}  // namespace tb

// ---------------------------------------------------------------- the copies
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define TB_CPU_MULTIVERSION 1
// No "fma" in either list: the copies must round as the baseline does. The
// AVX-512 copy prefers 256-bit vectors (its VL forms: masks, 32 registers), as
// GCC's own tuning for Intel's AVX-512 cores does: 512-bit streaming loops
// measured no faster on Zen 4 (ReLU's backward 10-20 % slower, bench/NOTES.md)
// and lower the clock of older Intel cores.
#define TB_TARGET_AVX2 __attribute__((target("avx2")))
#if defined(__clang__)  // Clang takes no prefer-vector-width here (and ignores the whole attribute)
#define TB_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
#else
#define TB_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,prefer-vector-width=256")))
#endif
// Every call inside a copy is inlined into it, so the whole body is compiled
// for the copy's ISA (a helper left out of line would run the baseline code).
#define TB_FLATTEN __attribute__((flatten))
#else
#define TB_CPU_MULTIVERSION 0
#endif

// Elementwise loops whose output may alias an input (y = f(x) in place): each
// iteration reads element i before it writes element i and touches no other,
// so the compiler may vectorise without its runtime overlap check (which sends
// the in-place case to the scalar loop).
#if defined(__clang__)
#define TB_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define TB_IVDEP _Pragma("GCC ivdep")
#else
#define TB_IVDEP
#endif

// TB_CPU_KERNEL(ret, name, (params), (args), body): defines `ret name(params)`,
// which returns body(args) compiled for cpu_isa(); body is an inline function
// or a template's instance (`sgd_kernel<float>`), args the params' names.
// name_default, name_avx2 and name_avx512 are the copies. Put no threads inside
// the body (an OpenMP region is outlined into a function of the baseline ISA):
// dispatch the loop one thread runs and split the work outside it.
//
// TB_CPU_KERNEL_BY_WIDTH(ret, name, (params), (args), body): the same with
// body a template on the copy's vector size in bytes, called body<bytes>(args):
// 16 (baseline), 32 (AVX2), 32 (AVX-512, as preferred above). For loops
// written with the compiler's vector extensions, whose vectors must have the
// register's size to stay in registers (a wider one is kept in memory).
// The vector-extension types of a vector size in bytes (16, 32, 64), for
// TB_CPU_KERNEL_BY_WIDTH bodies; GCC takes no template-dependent vector_size,
// hence one specialisation per size. F32Half: the floats that widen to one F64.
template <int kBytes>
struct CpuVec;
#define TB_CPU_VEC_(bytes)                                                  \
  template <>                                                               \
  struct CpuVec<bytes> {                                                    \
    typedef double F64 __attribute__((vector_size(bytes)));                 \
    typedef float F32 __attribute__((vector_size(bytes)));                  \
    typedef int I32 __attribute__((vector_size(bytes)));                    \
    typedef float F32Half __attribute__((vector_size(bytes / 2)));          \
  };
TB_CPU_VEC_(16)
TB_CPU_VEC_(32)
TB_CPU_VEC_(64)
#undef TB_CPU_VEC_

#if TB_CPU_MULTIVERSION
#define TB_CPU_COPIES_(ret, name, params, args, body_avx512, body_avx2, body_default) \
  TB_TARGET_AVX512 TB_FLATTEN ret name##_avx512 params { return body_avx512 args; }   \
  TB_TARGET_AVX2 TB_FLATTEN ret name##_avx2 params { return body_avx2 args; }         \
  TB_FLATTEN ret name##_default params { return body_default args; }                  \
  ret name params {                                                                  \
    switch (::tb::cpu_isa()) {                                                       \
      case ::tb::CpuIsa::Avx512: return name##_avx512 args;                          \
      case ::tb::CpuIsa::Avx2: return name##_avx2 args;                              \
      default: return name##_default args;                                           \
    }                                                                                \
  }
#define TB_CPU_KERNEL(ret, name, params, args, ...) \
  TB_CPU_COPIES_(ret, name, params, args, __VA_ARGS__, __VA_ARGS__, __VA_ARGS__)
#define TB_CPU_KERNEL_BY_WIDTH(ret, name, params, args, body) \
  TB_CPU_COPIES_(ret, name, params, args, body<32>, body<32>, body<16>)
#else
#define TB_CPU_KERNEL(ret, name, params, args, ...) \
  ret name params { return __VA_ARGS__ args; }
#define TB_CPU_KERNEL_BY_WIDTH(ret, name, params, args, body) \
  ret name params { return body<16> args; }
#endif
