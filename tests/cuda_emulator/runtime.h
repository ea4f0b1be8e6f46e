// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The CUDA runtime of the emulator (emulator.h): the types and calls the
// engine's host code uses, with CUDA's names and C++ linkage (so they never
// meet a real libcudart's extern "C" symbols in one program), implemented in
// emulated_device.cpp on host memory.
//
// - Devices: TRAINBENCH_EMULATED_GPUS (default 0) of them, so a build with
//   the emulated backend (TRAINBENCH_CUDA=EMULATED) behaves as a machine
//   without a GPU unless a test asks for one. Each has
//   TRAINBENCH_EMULATED_GPU_MEMORY bytes (default 8 GiB) and
//   TRAINBENCH_EMULATED_SMS multiprocessors (default 16).
// - Memory: device memory is host memory; cudaMalloc fills it with 0xff
//   bytes (a NaN in every float type), so a read of what nothing wrote shows.
// - Streams: work runs at once, in the calling thread, one piece of work at
//   a time in the whole process (the device is one lock), so stream order
//   always holds and events are host clock readings.
// - Capture: while a stream is being captured, its work is recorded instead
//   (a graph's nodes) and run at each cudaGraphLaunch. Calls a capture
//   forbids fail it as CUDA does: a synchronising call on the capturing
//   stream, cudaMalloc/cudaFree from the capturing thread outside relaxed
//   mode, work on the legacy default stream; cudaStreamEndCapture then
//   reports the capture invalidated.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
typedef struct CUgraph_st* cudaGraph_t;
typedef struct CUgraphExec_st* cudaGraphExec_t;

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorSymbolNotFound = 500,
  cudaErrorNotReady = 600,
  cudaErrorPeerAccessUnsupported = 217,
  cudaErrorPeerAccessAlreadyEnabled = 704,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotSupported = 801,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureWrongThread = 908,
  cudaErrorStreamCaptureImplicit = 906,
  cudaErrorIllegalState = 401,
};

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};

enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,
};

enum cudaDriverEntryPointQueryResult {
  cudaDriverEntryPointSuccess = 0,
  cudaDriverEntryPointSymbolNotFound = 1,
  cudaDriverEntryPointVersionNotSufficent = 2,
};

constexpr unsigned cudaStreamDefault = 0x0, cudaStreamNonBlocking = 0x1;
constexpr unsigned cudaEventDefault = 0x0, cudaEventBlockingSync = 0x1,
                   cudaEventDisableTiming = 0x2;
constexpr unsigned cudaHostAllocDefault = 0x0, cudaHostAllocPortable = 0x1;
constexpr unsigned long long cudaEnableDefault = 0x0;

// The fields the engine reads; the rest of CUDA's struct is not needed.
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int major, minor;
  int multiProcessorCount;
  int l2CacheSize;
};

cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorName(cudaError_t e);
const char* cudaGetErrorString(cudaError_t e);

cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer);
cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags);
cudaError_t cudaDriverGetVersion(int* v);
cudaError_t cudaRuntimeGetVersion(int* v);
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned version,
                                             unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* status);

cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocHost(void** p, size_t bytes);
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemGetInfo(size_t* free, size_t* total);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream = nullptr);

cudaError_t cudaStreamCreate(cudaStream_t* s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);

cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

typedef void (*cudaHostFn_t)(void* user_data);
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void* user_data);

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status);
cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s);
cudaError_t cudaGraphDestroy(cudaGraph_t g);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e);

namespace tb_emu {

// Runs `work` in `stream`'s order: now (under the device lock), or, while
// the stream is being captured, as a node of the capture (run at each
// replay; it must own copies of what it reads from the host). `what` names
// it in errors. Libraries' stand-ins (cuBLAS, cuDNN) enqueue through this.
cudaError_t enqueue(cudaStream_t stream, std::function<void()> work, const char* what);

// Whether `p` points into memory cudaMalloc handed out and not yet freed
// (the stand-ins check their operands with it).
bool is_device_memory(const void* p, size_t bytes);

// Sets the error cudaGetLastError reports next (a stand-in library's
// failure, a kernel fault), as CUDA's sticky-free launch errors.
void set_last_error(cudaError_t e);

// The device lock, held while work runs (kernels, copies, stand-ins).
std::recursive_mutex& device_lock();

}  // namespace tb_emu
