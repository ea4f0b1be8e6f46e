// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The CUDA backend (first slice). This header is plain C++: it names no CUDA
// type, so the registry (backend.cpp), the tests and the app include it without
// the toolkit's headers. Device state lives in CudaBackend::Impl
// (cuda_internal.h), seen only by the backend's own .cpp/.cu files.
//
// Layout of the backend, one file per op family:
//   cuda_backend.cpp   device selection, stream, library handles, describe(), fill/copy
//   caching_allocator  stream-aware caching device allocator (registered for DeviceKind::CUDA)
//   memory.cu          fill, dtype cast, NCHW<->NHWC conversion kernels
//   bias.cu            bias add and bias gradient (convolution, linear)
//   (batch norm, conv, linear, pointwise, channel padding, augment, pooling,
//   loss, optimizer and sum of squares, amp casts and loss scaler: their op
//   family folders, engine/ops/<family>/)
//   peer.cpp           copies between two devices' backends (parallel: dp)
//
// NOTE: written and compiled on a machine without a GPU; see the tests.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend/backend.h"

namespace tb {

// Number of usable CUDA devices; 0 with the reason in *why (no driver, no
// device, driver too old for the runtime ...).
int cuda_device_count(std::string* why = nullptr);
// {"cuda:0", "NVIDIA H100 80GB HBM3"}, ...
std::vector<std::pair<std::string, std::string>> cuda_device_names();
std::unique_ptr<Backend> make_cuda_backend(int index, const BackendOptions& options);

class CudaBackend final : public Backend {
 public:
  CudaBackend(int index, const BackendOptions& options);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device device() const override { return Device::cuda(index_); }
  std::string name() const override;
  nlohmann::json describe() const override;
  void synchronize() override;
  const BackendOptions& options() const { return options_; }
  // Built cuDNN convolution plans (forward, dgrad, wgrad counted apart), held
  // by the convolution family's kernels (engine/ops/conv/conv_cuda.cpp).
  size_t conv_plan_count();

  void fill(Tensor& t, double value) override;
  void copy(const Tensor& src, Tensor& dst) override;
  // peer.cpp: cudaMemcpyPeerAsync between two CudaBackends, ordered by events
  // on both streams (parallel: dp). NOT yet run on a GPU.
  void copy_from_peer(Backend& src_backend, const Tensor& src, Tensor& dst) override;


  // Device memory and the input path (staging.cpp).
  DeviceMemory* memory() override { return &memory_; }
  Staging* staging() override { return &staging_; }
  // What the trainer may use on this backend (engine/backend/capabilities.h).
  // Declared here, once; capabilities_of(DeviceKind::CUDA) reads the same set
  // in builds without CUDA, so a configuration resolves the same everywhere.
  static constexpr BackendCapabilities kCapabilities{
      .pinned_host_memory = true,      // pinned_host_empty (caching_allocator.cpp)
      .async_upload = true,            // upload_async on the copy stream (staging.cpp)
      .device_normalize_u8 = true,     // augment::normalize_u8 (ops/augment/normalize_u8.cu)
      .device_augment = true,          // augment::augment_normalize_u8 (ops/augment/augment.cu)
      .device_side_init = true,        // Model fills constant tensors with fill()
      .caching_allocator = true,       // memory(): stats, empty_cache (caching_allocator.cpp)
      .low_precision = true,           // f16/bf16 conv and linear, amp_* (amp.cu, amp_ops.cpp)
      .autotuned_convolutions = true,  // cuDNN plans timed per shape (ops/conv)
      .channels_last = true,           // NHWC convolutions, BN, pooling
      .tensor_core_alignment = true,   // layout::pad_channels_* (ops/layout/layout.cu)
      .fused_pointwise = true,         // ops/batchnorm's and ops/linear's epilogues
      .graph_capture = true,           // graphs.cpp
#ifdef TRAINBENCH_HAVE_CUPTI
      .kernel_profiler = true,  // KernelCensus of every step (CUPTI activity records)
#endif
#ifdef TRAINBENCH_HAVE_NCCL
      .process_parallel = true,  // ddp over NCCL (engine/parallel/nccl_communicator.cpp)
#endif
      .multi_device = true,  // parallel: dp, copy_from_peer (peer.cpp)
  };
  BackendCapabilities capabilities() const override { return kCapabilities; }
  // Whole-step capture (graphs.cpp, cuda_graphs; graph_capture above).
  GraphCapture* graphs() override { return &graphs_; }
  // The optimizer's per-step constants for graph replays (cuda_optimizer.cpp;
  // GraphCapture::set_optimizer_constants).
  void set_optimizer_constants(const OptimizerStep& step);
  // The compute stream (a cudaStream_t), for the CUDA-event step timer.
  void* stream_handle() const;

  // Backend-private state (stream, handles, scratch); defined in cuda_internal.h.
  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  // The capability objects, over impl_ (staging.cpp, graphs.cpp).
  class Memory final : public DeviceMemory {
   public:
    explicit Memory(CudaBackend& be) : be_(be) {}
    DeviceMemoryStats stats(bool query_device) override;
    void empty_cache() override;
    void reset_peak() override;

   private:
    CudaBackend& be_;
  };
  class Uploads final : public Staging {
   public:
    explicit Uploads(CudaBackend& be) : be_(be) {}
    Tensor pinned_host_empty(const Shape& shape, DType dtype) override;
    uint64_t upload_async(const Tensor& src, Tensor& dst, uint64_t after_fence) override;
    void wait_upload(uint64_t ticket) override;
    uint64_t fence() override;

   private:
    CudaBackend& be_;
  };
  class Graphs final : public GraphCapture {
   public:
    explicit Graphs(CudaBackend& be) : be_(be) {}
    void begin_capture() override;
    int end_capture() override;
    void launch(int id) override;
    void drop_all() override;
    void set_optimizer_constants(const OptimizerStep& step) override {
      be_.set_optimizer_constants(step);
    }

   private:
    CudaBackend& be_;
  };

  int index_ = 0;
  BackendOptions options_;
  std::unique_ptr<Impl> impl_;
  Memory memory_{*this};
  Uploads staging_{*this};
  Graphs graphs_{*this};
};

}  // namespace tb
