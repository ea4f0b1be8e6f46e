// SPDX-License-Identifier: GPL-3.0-or-later
// The instruction set the CPU backend's own loops run (cpu_features.h).
#include "engine/core/cpu_features.h"

#include <cstdlib>

#include "engine/core/error.h"

namespace tb {

namespace detail {
std::atomic<CpuIsa> g_cpu_isa{CpuIsa::Unset};
}  // namespace detail

namespace {

constexpr const char* kEnv = "TRAINBENCH_CPU_ISA";
// Where the decision came from: cpu_isa_source()'s answer.
std::atomic<const char*> g_source{"detected"};

// The processor features a copy needs, as __builtin_cpu_supports names them.
const char* features_of(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Avx2: return "avx2";
    case CpuIsa::Avx512: return "avx512f, avx512bw, avx512vl, avx512dq";
    default: return "nothing beyond the baseline";
  }
}

std::string names(const std::vector<CpuIsa>& isas) {
  std::string s;
  for (CpuIsa i : isas) s += (s.empty() ? "" : ", ") + std::string(cpu_isa_name(i));
  return s;
}

}  // namespace

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Default: return "default";
    case CpuIsa::Avx2: return "avx2";
    case CpuIsa::Avx512: return "avx512";
    case CpuIsa::Unset: break;
  }
  return "unset";
}

std::vector<CpuIsa> cpu_isas_built() {
#if TB_CPU_MULTIVERSION
  return {CpuIsa::Default, CpuIsa::Avx2, CpuIsa::Avx512};
#else
  return {CpuIsa::Default};
#endif
}

bool cpu_supports(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Default: return true;
#if TB_CPU_MULTIVERSION
    // libgcc's (and compiler-rt's) answer includes the OS check: the wide
    // registers are enabled in XCR0, so a context switch saves them.
    case CpuIsa::Avx2: return __builtin_cpu_supports("avx2");
    case CpuIsa::Avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#endif
    default: return false;
  }
}

std::vector<CpuIsa> cpu_isas_supported() {
  std::vector<CpuIsa> out;
  for (CpuIsa i : cpu_isas_built())
    if (cpu_supports(i)) out.push_back(i);
  return out;
}

CpuIsa parse_cpu_isa(const std::string& name) {
  for (CpuIsa i : cpu_isas_built()) {
    if (name != cpu_isa_name(i)) continue;
    TB_CHECK(cpu_supports(i), "CPU instruction set '", name, "' cannot run on this processor: it ",
             "needs ", features_of(i), "; this one runs ", names(cpu_isas_supported()));
    return i;
  }
  TB_FAIL("unknown CPU instruction set '", name, "': expected one of ", names(cpu_isas_built()),
          " (or auto: the widest this processor runs)");
}

std::string cpu_isa_source() { return g_source.load(); }

CpuIsa detail::decide_cpu_isa() {
  CpuIsa isa = cpu_isas_supported().back();
  const char* env = std::getenv(kEnv);
  if (env && *env && std::string(env) != "auto") {
    try {
      isa = parse_cpu_isa(env);
    } catch (const Error& e) {
      TB_FAIL(kEnv, "=", env, ": ", e.what());
    }
    g_source = kEnv;
  }
  CpuIsa expected = CpuIsa::Unset;
  g_cpu_isa.compare_exchange_strong(expected, isa);  // the first decision stands
  return g_cpu_isa.load();
}

void set_cpu_isa(CpuIsa isa) {
  TB_CHECK(isa != CpuIsa::Unset, "set_cpu_isa: no instruction set given");
  const CpuIsa checked = parse_cpu_isa(cpu_isa_name(isa));
  detail::g_cpu_isa.store(checked);
  g_source = "set_cpu_isa (a test)";
}

}  // namespace tb
