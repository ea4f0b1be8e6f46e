// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// CudaBackend's private state and the library error checks, for the backend's
// .cpp files only (the .cu files use cuda_check.h and kernels.h).
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <memory>
#include <vector>

#include "engine/backend/cuda/caching_allocator.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/kernels.h"
#include "engine/ops/optimizer/optimizer.cuh"  // kOptConstsBytes (opt_consts_dev)

namespace tb {

namespace cuda {
[[noreturn]] void throw_cublas_error(cublasStatus_t st, const char* call, const char* file,
                                     int line);
[[noreturn]] void throw_cudnn_error(cudnnStatus_t st, const char* call, const char* file, int line);
}  // namespace cuda

#define TB_CUBLAS_CHECK(call)                                         \
  do {                                                                \
    const cublasStatus_t st_ = (call);                                \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                 \
      ::tb::cuda::throw_cublas_error(st_, #call, __FILE__, __LINE__); \
  } while (0)
#define TB_CUDNN_CHECK(call)                                         \
  do {                                                               \
    const cudnnStatus_t st_ = (call);                                \
    if (st_ != CUDNN_STATUS_SUCCESS)                                 \
      ::tb::cuda::throw_cudnn_error(st_, #call, __FILE__, __LINE__); \
  } while (0)

struct CudaBackend::Impl {
  CudaBackend* owner = nullptr;  // the backend this is the state of
  int device = 0;
  cudaDeviceProp prop{};
  cudaStream_t stream = nullptr;  // every op of this backend runs here, in order
  cublasHandle_t cublas = nullptr;
  cublasLtHandle_t cublaslt = nullptr;  // for epilogue-fused GEMMs (later: bias+GELU, AMP)
  cudnnHandle_t cudnn = nullptr;
  cuda::CachingAllocator* allocator = nullptr;

  // Whole-step capture (graphs.cpp, trick 24). While capturing, `stream` IS the
  // capture stream (every op enqueues on m.stream) and `eager_stream` keeps the
  // compute stream; end_capture swaps them back.
  bool capturing = false;
  cudaStream_t capture_stream = nullptr;
  cudaStream_t eager_stream = nullptr;
  std::vector<cudaGraph_t> graphs;
  std::vector<cudaGraphExec_t> graph_execs;
  Tensor opt_consts_dev;  // u8 [kOptConstsBytes]: the optimizer constants a replay reads
  // cuBLAS's workspace, ours (cublasSetWorkspace) from construction on:
  // cuBLAS must not allocate its own while a graph is being captured, and
  // eager and captured GEMMs must choose their kernels with the same one.
  Tensor cublas_workspace;

  // Input path (staging.cpp), made on first use: the copy stream of
  // non-blocking uploads, and rings of events behind upload tickets and
  // compute fences (a ticket older than the ring waits on a later event of the
  // same kind, which is later in stream order: safe, never too early).
  static constexpr int kEventRing = 16;
  cudaStream_t copy_stream = nullptr;
  cudaEvent_t upload_events[kEventRing] = {};
  cudaEvent_t fence_events[kEventRing] = {};
  uint64_t next_upload = 1, next_fence = 1;

  // Peer copies (peer.cpp, parallel: dp): an event recorded on this stream
  // that another device's stream waits on, and the devices whose memory this
  // one may address directly (cudaDeviceEnablePeerAccess, tried once each).
  cudaEvent_t peer_event = nullptr;
  std::vector<int> peers_tried;

  // Makes this backend's device current on the calling thread and points the
  // allocator at this stream; every public op starts with it.
  void activate() const {
    TB_CUDA_CHECK(cudaSetDevice(device));
    allocator->set_current_stream(stream);
  }
  // Device scratch of `bytes`, valid until the Tensor goes: from the pass's
  // memory plan while a model's pass runs (Backend::scratch), else the cache.
  Tensor scratch(size_t bytes) const { return owner->scratch(int64_t(bytes)); }
  // Scratch from the caching allocator whatever runs: cuDNN's autotuning asks
  // for the largest workspace of all its candidates, once, which must not
  // grow the pass's memory plan for good.
  Tensor allocator_scratch(size_t bytes) const {
    return Tensor::empty({int64_t((bytes + 7) / 8)}, DType::F64, Device::cuda(device));
  }
};

namespace cuda {
// staging.cpp: destroys the copy stream and events (best effort, no throw).
void release_staging(CudaBackend::Impl& m);
// graphs.cpp: destroys the graphs and the capture stream (best effort, no throw).
void release_graphs(CudaBackend::Impl& m);
// peer.cpp: destroys the peer event (best effort, no throw).
void release_peer(CudaBackend::Impl& m);
}  // namespace cuda

// Argument checks shared by the op files.
namespace cuda {
// Defined, on this backend's device, dtype f32; rank-4 tensors NCHW or NHWC.
void check_on(const CudaBackend& b, const Tensor& t, const char* op, const char* what);
void check_f32(const Tensor& t, const char* op, const char* what);
inline float* fptr(const Tensor& t) { return t.defined() ? t.data_as<float>() : nullptr; }
}  // namespace cuda

}  // namespace tb
