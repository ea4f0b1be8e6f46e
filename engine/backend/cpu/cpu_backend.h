// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The CPU backend: identity, fill and copy here (cpu_backend.cpp); every op
// family's CPU kernels live with the family in engine/ops/<family>/, each a
// plain reference implementation (templated on float/double: the test oracle,
// used for f64 and when options.reference is set) beside the fast f32 path
// (oneDNN or OpenBLAS where they win, vectorisable loops compiled for the
// processor's widest instruction set, engine/core/cpu_features.h; OpenMP
// threads, engine/core/cpu_threads.h).
#include <string>

#include "engine/backend/backend.h"

namespace tb {

// Whether this build's oneDNN runs its convolutions on 16-channel blocks here
// (AVX-512: nChw16c is the layout it picks), where the blocked activations
// (cpu_layout auto) need no reorder at all.
bool onednn_blocks_of_16();
// Whether this build has oneDNN (TRAINBENCH_ONEDNN).
bool cpu_has_onednn();
// Whether this build's oneDNN has bf16 kernels of its own on this CPU
// (AVX512_BF16 dot products, or AMX tiles), which bf16 convolutions run on
// (ops/conv/conv_cpu.cpp); elsewhere it would emulate bf16 or run reference
// loops, slower than widening to f32.
bool cpu_has_bf16_kernels();

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& options = {});

  Device device() const override { return Device::cpu(); }
  std::string name() const override;
  nlohmann::json describe() const override;
  static std::string host_name();  // CPU model name from /proc/cpuinfo

  // What the trainer may use on the CPU (engine/backend/capabilities.h): the
  // fused pointwise ops, and ddp over MPI when this build has it. Streams,
  // pinned memory, cuDNN, Tensor Cores and a caching allocator have no
  // counterpart here.
#ifdef TRAINBENCH_HAVE_MPI
  static constexpr BackendCapabilities kCapabilities{
      .host_kernel_threads = true, .fused_pointwise = true, .process_parallel = true};
#else
  static constexpr BackendCapabilities kCapabilities{.host_kernel_threads = true,
                                                     .fused_pointwise = true};
#endif
  BackendCapabilities capabilities() const override { return kCapabilities; }

  bool reference() const { return options_.reference; }
  int threads() const { return threads_; }
  // True when an op on tensors of dtype t must take the reference path.
  bool use_reference(DType t) const { return options_.reference || t == DType::F64; }

  void fill(Tensor& t, double value) override;
  void copy(const Tensor& src, Tensor& dst) override;

 private:
  BackendOptions options_;
  int threads_ = 1;
  std::string threads_source_;  // what decided threads_ (engine/core/cpu_threads.h)
};

}  // namespace tb
