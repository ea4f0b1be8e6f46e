// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// What a backend honours beyond the portable ops every backend implements.
// Each backend declares its own set once (CpuBackend, CudaBackend); the
// settings table (engine/train/config.cpp) names the capability a key needs,
// and resolve_tricks turns the two into the run plan. Nothing else decides
// where a trick may run.
//
// A capability is "the trainer may use this here", not "the op exists": the
// CPU backend has reference NHWC and low-precision ops (the oracles of the
// CUDA ones), but channels-last and mixed precision are not applied on it.
#include "engine/core/device.h"

namespace tb {

struct BackendCapabilities {
  bool host_kernel_threads = false;   // cpu_threads: the kernels run on this process's threads
  bool pinned_host_memory = false;    // pin_memory: page-locked loader buffers (staging())
  bool async_upload = false;          // non_blocking: copies on a copy stream
  bool device_normalize_u8 = false;   // h2d_uint8: u8 batches normalised on the device
  bool device_augment = false;        // gpu_augment: crops, flips, normalisation on the device
  bool device_side_init = false;      // device_side_init: constant tensors filled in place
  bool caching_allocator = false;     // empty_cache_between_phases, device memory series
  bool low_precision = false;         // amp: f16/bf16 convolutions and GEMMs, loss scaler
  bool autotuned_convolutions = false;  // cudnn_benchmark
  bool channels_last = false;         // channels_last: NHWC activations end to end
  bool tensor_core_alignment = false;  // pad_channels_to: channel counts Tensor Cores want
  bool fused_pointwise = false;       // fuse_pointwise: BN+act(+add), linear+act ops
  bool graph_capture = false;         // cuda_graphs: Backend::graphs()
  bool kernel_profiler = false;       // profiler: a kernel census of every step
  bool process_parallel = false;      // parallel: ddp, a transport over processes (MPI, NCCL)
  bool multi_device = false;          // parallel: dp, one process driving several devices
};

// The set the backend of `kind` reports in this build, without creating one
// (no device needed): what `config --schema` and resolve_tricks(config, device)
// read. Backend::capabilities() returns the same set.
BackendCapabilities capabilities_of(DeviceKind kind);

}  // namespace tb
