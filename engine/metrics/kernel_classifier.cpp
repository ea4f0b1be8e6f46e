// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/metrics/kernel_classifier.h"

#include <cctype>
#include <cmath>
#include <regex>

namespace tb {

namespace {

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& ch : r) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return r;
}

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

}  // namespace

KernelClass classify_kernel_name(std::string_view raw) {
  const std::string n = lower(raw);
  auto yes = [](const char* rule) { return KernelClass{true, KernelSource::Name, rule}; };
  auto no = [](const char* rule) { return KernelClass{false, KernelSource::Name, rule}; };

  // SIMT kernels say so (cutlass_simt_sgemm, cutlass_..._simt_...).
  if (has(n, "simt")) return no("simt");
  // The MMA instruction families: HMMA (f16/bf16/tf32), IMMA (int), DMMA (f64),
  // and Hopper's warpgroup MMA (GMMA / wgmma).
  for (const char* mma : {"hmma", "imma", "dmma", "wgmma", "gmma"})
    if (has(n, mma)) return yes(mma);
  // CUTLASS and cuBLAS Tensor Core kernels: cutlass_80_tensorop_*, cutlass3x_sm90_tensorop_*.
  if (has(n, "tensorop")) return yes("tensorop");
  // cuBLAS on sm90+ (12.x): nvjet_* GEMMs are Tensor Core kernels.
  if (has(n, "nvjet")) return yes("nvjet");
  // Flash/fused attention kernels are built on MMA.
  if (has(n, "fmha") || has(n, "flash_fwd") || has(n, "flash_bwd")) return yes("attention");
  // MMA tile shapes in cuBLAS/cuDNN names: volta_h884gemm, turing_fp16_s1688gemm,
  // ampere_fp16_s16816gemm, ampere_tf32_s1688gemm, ampere_i8816gemm ...
  static const std::regex mma_shape(R"((884|1688|8816|16816|16832|16864)(gemm|cudnn|conv|fprop|dgrad|wgrad))");
  if (std::regex_search(n, mma_shape)) return yes("mma-shape");
  // xmma (cuDNN/cuBLAS implicit GEMM): Tensor Cores unless every operand is
  // plain f32 (those are FFMA kernels), e.g. sm80_xmma_gemm_f32f32_f32f32_f32.
  if (has(n, "xmma")) {
    const bool reduced_precision = has(n, "tf32") || has(n, "f16") || has(n, "bf16") ||
                                   has(n, "fp16") || has(n, "i8") || has(n, "int8") ||
                                   has(n, "e4m3") || has(n, "e5m2") || has(n, "f64");
    return reduced_precision ? yes("xmma-reduced-precision") : no("xmma-f32");
  }
  return no("no-tensor-core-marker");
}

void KernelClassifier::declare(std::string name_part, bool tensor_core) {
  declared_.emplace_back(std::move(name_part), tensor_core);
}

KernelClass KernelClassifier::classify(std::string_view name) const {
  for (auto it = declared_.rbegin(); it != declared_.rend(); ++it)
    if (name.find(it->first) != std::string_view::npos)
      return {it->second, KernelSource::Declared, it->first};
  return classify_kernel_name(name);
}

double TensorCoreShare::share() const {
  return total_ns > 0 ? double(tensor_core_ns) / double(total_ns) : NAN;
}

TensorCoreShare tensor_core_share(const std::vector<KernelRecord>& kernels,
                                  const KernelClassifier& classifier) {
  TensorCoreShare s;
  for (const KernelRecord& k : kernels) {
    const uint64_t d = k.duration_ns();
    ++s.kernels;
    s.total_ns += d;
    if (classifier.classify(k.name).tensor_core) {
      ++s.tensor_core_kernels;
      s.tensor_core_ns += d;
    }
  }
  return s;
}

}  // namespace tb
