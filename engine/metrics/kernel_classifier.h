// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Which GPU kernels use Tensor Cores, for the "share of kernel time in Tensor
// Core kernels" figure. Two sources, in this order:
//  1. What the engine knows: it declares its own kernels, and the cuDNN engine
//     and cuBLASLt algorithm it chose, by (a part of) the kernel's name.
//  2. For every other kernel, the name: library kernels carry their MMA
//     instruction or tile shape in it (hmma/imma/gmma/wgmma, tensorop,
//     s16816gemm, sm90_xmma_..._bf16...). Names change with library versions, so
//     the rules are tested on a file of recorded names
//     (tests/engine/data/kernel_names.txt).
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tb {

enum class KernelSource { Declared, Name };

struct KernelClass {
  bool tensor_core = false;
  KernelSource source = KernelSource::Name;
  std::string rule;  // the declaration or name rule that decided
};

// The name rules alone (mangled or demangled names both work).
KernelClass classify_kernel_name(std::string_view name);

class KernelClassifier {
 public:
  // A kernel whose name contains `name_part` is (not) a Tensor Core kernel.
  // Later declarations win over earlier ones; all win over the name rules.
  void declare(std::string name_part, bool tensor_core);
  KernelClass classify(std::string_view name) const;
  size_t declarations() const { return declared_.size(); }

 private:
  std::vector<std::pair<std::string, bool>> declared_;
};

// One kernel execution, as a CUPTI activity record gives it.
struct KernelRecord {
  std::string name;
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t stream = 0;
  uint64_t duration_ns() const { return end_ns > start_ns ? end_ns - start_ns : 0; }
};

struct TensorCoreShare {
  uint64_t tensor_core_ns = 0, total_ns = 0;
  int64_t kernels = 0, tensor_core_kernels = 0;
  // Sum of Tensor Core kernel durations / sum of all kernel durations; NaN
  // when no kernel time was recorded (absent, not 0).
  double share() const;
};

TensorCoreShare tensor_core_share(const std::vector<KernelRecord>& kernels,
                                  const KernelClassifier& classifier);

}  // namespace tb
