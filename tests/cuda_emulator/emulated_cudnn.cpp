// SPDX-License-Identifier: GPL-3.0-or-later
// The handle calls of the cuDNN test double (include/cudnn.h) for the CUDA
// emulator: a handle is the stream it was given. The live handles are kept
// in a set, so a call on a destroyed (or never created) handle is refused
// with CUDNN_STATUS_BAD_PARAM instead of reading freed memory; a destroyed
// handle's memory is kept (a few bytes), so no new handle reuses its address
// and makes a stale one look alive.
#include <cudnn.h>

#include <mutex>
#include <new>
#include <unordered_set>

struct cudnnContext {
  cudaStream_t stream = nullptr;
};

namespace {

std::mutex& handles_mutex() {
  static std::mutex m;
  return m;
}

// Leaked on purpose: handles may be destroyed from static destructors.
std::unordered_set<cudnnHandle_t>& live_handles() {
  static auto* s = new std::unordered_set<cudnnHandle_t>;
  return *s;
}
std::unordered_set<cudnnHandle_t>& destroyed_handles() {
  static auto* s = new std::unordered_set<cudnnHandle_t>;
  return *s;
}

bool live(cudnnHandle_t h) { return h && live_handles().count(h) != 0; }

}  // namespace

size_t cudnnGetVersion() { return CUDNN_VERSION; }

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
#define TB_EMU_CUDNN_STATUS(name) \
  case name:                      \
    return #name;
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_SUCCESS)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_NOT_INITIALIZED)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_DEPRECATED)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_LICENSE_ERROR)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_RUNTIME_IN_PROGRESS)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_RUNTIME_FP_OVERFLOW)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_BAD_PARAM)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_INVALID_VALUE)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_BAD_PARAM_NULL_POINTER)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_SHAPE)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_PADDING)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_EXECUTION_FAILED)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CUBLAS)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CUDART)
    TB_EMU_CUDNN_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CURAND)
#undef TB_EMU_CUDNN_STATUS
  }
  return "CUDNN_UNKNOWN_STATUS";
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (!handle) return CUDNN_STATUS_BAD_PARAM;
  // cuDNN initialises the current device's context: none, no handle.
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    (void)cudaGetLastError();
    return CUDNN_STATUS_NOT_INITIALIZED;
  }
  auto* h = new (std::nothrow) cudnnContext;
  if (!h) return CUDNN_STATUS_ALLOC_FAILED;
  std::lock_guard lock(handles_mutex());
  live_handles().insert(h);
  *handle = h;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  std::lock_guard lock(handles_mutex());
  if (!live(handle)) return CUDNN_STATUS_BAD_PARAM;
  live_handles().erase(handle);
  destroyed_handles().insert(handle);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  std::lock_guard lock(handles_mutex());
  if (!live(handle)) return CUDNN_STATUS_BAD_PARAM;
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* stream) {
  std::lock_guard lock(handles_mutex());
  if (!live(handle) || !stream) return CUDNN_STATUS_BAD_PARAM;
  *stream = handle->stream;
  return CUDNN_STATUS_SUCCESS;
}
