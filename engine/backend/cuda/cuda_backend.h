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
//   pointwise.cu       relu/gelu forward+backward, add, accumulate, scale
//   reduce.cu          sum of squares
//   linear.cu/.cpp     cuBLAS GEMMs, bias kernels
//   (batch norm: its op family folder, engine/ops/batchnorm/)
//   optimizer.cu       SGD/AdamW/RMSProp/LARS/LAMB, per-tensor and multi-tensor
//   conv_cudnn.cpp     convolutions through the cuDNN 9 graph API (cudnn-frontend)
//   cuda_ops.cpp       argument checks and dispatch for pointwise
//   amp.cu/amp_ops.cpp mixed precision: f32<->f16/bf16 casts, loss-scaler kernels
//   fused.cu/fused_ops.cpp  fuse_pointwise: Linear+act
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
  // Built cuDNN convolution plans (forward, dgrad, wgrad counted apart).
  size_t conv_plan_count() const;

  void fill(Tensor& t, double value) override;
  void copy(const Tensor& src, Tensor& dst) override;
  // peer.cpp: cudaMemcpyPeerAsync between two CudaBackends, ordered by events
  // on both streams (parallel: dp). NOT yet run on a GPU.
  void copy_from_peer(Backend& src_backend, const Tensor& src, Tensor& dst) override;

  void conv2d_forward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
                      Tensor& y) override;
  void conv2d_backward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                       Tensor& dx, Tensor& dw, Tensor& db, bool accumulate) override;

  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override;
  void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx, Tensor& dw,
                       Tensor& db, bool accumulate) override;

  void relu_forward(const Tensor& x, Tensor& y) override;
  void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) override;
  void gelu_forward(const Tensor& x, Tensor& y) override;
  void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) override;
  void add(const Tensor& a, const Tensor& b, Tensor& y) override;
  void accumulate(const Tensor& src, Tensor& dst) override;
  void scale(Tensor& t, double alpha) override;

  // Fused linear + activation (fused.cu, fused_ops.cpp, fuse_pointwise). NOT yet run on a GPU.
  void linear_act_forward(const Tensor& x, const Tensor& w, const Tensor& b, Activation act,
                          Tensor& y, Tensor& pre) override;
  void linear_act_backward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& pre,
                           const Tensor& dy, Activation act, Tensor& dpre, Tensor& dx, Tensor& dw,
                           Tensor& db, bool accumulate) override;

  // pad_channels.cpp (pad_channels.cu). NOT yet run on a GPU.
  void pad_channels_forward(const Tensor& x, Tensor& y) override;
  void pad_channels_backward(const Tensor& dy, Tensor& dx) override;

  double sum_squares(const Tensor& t) override;
  void optimizer_step(const OptimizerStep& step, const std::vector<ParamSlot>& slots,
                      bool multi_tensor) override;

  // Mixed precision (amp.cu, amp_ops.cpp). NOT yet run on a GPU.
  void cast(const Tensor& src, Tensor& dst) override;
  void amp_scale(Tensor& t, const Tensor& scaler_state) override;
  void amp_unscale_and_check(Tensor& grads, Tensor& scaler_state) override;
  void optimizer_step_amp(const OptimizerStep& step, const std::vector<ParamSlot>& slots,
                          bool multi_tensor, const Tensor& scaler_state) override;
  void amp_update_scale(Tensor& scaler_state, float growth_factor, float backoff_factor,
                        int64_t growth_interval) override;
  void linear_forward_lp(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override;
  void linear_backward_lp(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor& dx,
                          Tensor& dw, Tensor& db, bool accumulate) override;
  // conv_lp.cpp: cuDNN graphs with f16/bf16 IO, then a cast to f32. NOT yet run on a GPU.
  void conv2d_forward_lp(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
                         Tensor& y) override;
  void conv2d_backward_lp(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& dy,
                          Tensor& dx, Tensor& dw, Tensor& db, bool accumulate) override;

  // Device memory and the input path (staging.cpp, input.cu). NOT yet run on a GPU.
  std::optional<DeviceMemoryStats> memory_stats(bool query_device) override;
  void empty_cache() override;
  void reset_peak_memory() override;
  Tensor pinned_host_empty(const Shape& shape, DType dtype) override;
  uint64_t upload_async(const Tensor& src, Tensor& dst, uint64_t after_fence) override;
  void wait_upload(uint64_t ticket) override;
  uint64_t fence() override;
  void normalize_u8(const Tensor& src, const std::vector<float>& scale,
                    const std::vector<float>& shift, Tensor& dst) override;
  void augment_normalize_u8(const Tensor& src, const Tensor& indices, const AugmentSpec& spec,
                            const std::vector<float>& scale, const std::vector<float>& shift,
                            Tensor& dst) override;
  // What the trainer may use on this backend (engine/backend/capabilities.h).
  // Declared here, once; capabilities_of(DeviceKind::CUDA) reads the same set
  // in builds without CUDA, so a configuration resolves the same everywhere.
  static constexpr BackendCapabilities kCapabilities{
      .pinned_host_memory = true,      // pinned_host_empty (caching_allocator.cpp)
      .async_upload = true,            // upload_async on the copy stream (staging.cpp)
      .device_normalize_u8 = true,     // normalize_u8 (input.cu)
      .device_augment = true,          // augment_normalize_u8 (augment.cu)
      .device_side_init = true,        // Model fills constant tensors with fill()
      .caching_allocator = true,       // memory_stats, empty_cache (caching_allocator.cpp)
      .low_precision = true,           // *_lp ops, amp_* (amp.cu, amp_ops.cpp, conv_lp.cpp)
      .autotuned_convolutions = true,  // cuDNN plans timed per shape (conv_cudnn.cpp)
      .channels_last = true,           // NHWC convolutions, BN, pooling
      .tensor_core_alignment = true,   // pad_channels (pad_channels.cu)
      .fused_pointwise = true,         // fused.cu, fused_ops.cpp, ops/batchnorm's epilogue
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
  void begin_capture() override;
  int end_capture() override;
  void launch_graph(int id) override;
  void drop_graphs() override;
  void set_optimizer_constants(const OptimizerStep& step) override;
  // The compute stream (a cudaStream_t), for the CUDA-event step timer.
  void* stream_handle() const;

  // Backend-private state (stream, handles, plan caches); defined in cuda_internal.h.
  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  int index_ = 0;
  BackendOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tb
