// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Turning CUDA runtime errors into tb::Error. Safe to include from .cu files
// (no JSON, no Backend): only the runtime API and engine/core/error.h.
#include <cuda_runtime_api.h>

#include <cstddef>

#include "engine/core/error.h"

namespace tb::cuda {

// Throws tb::Error "cuda: <call> failed: <cudaErrorName>: <description> (file:line)".
// cudaErrorMemoryAllocation becomes tb::OutOfMemory with `bytes` (0 when the
// call allocates nothing the caller can name).
[[noreturn]] void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line,
                                   size_t bytes = 0);

inline void check(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess) throw_cuda_error(e, call, file, line);
}

// The answer of a non-blocking poll (cudaEventQuery, cudaStreamQuery): true when
// the work is done, false when it is still running. cudaErrorNotReady is no
// error, but the runtime leaves it in the thread's last-error slot, where the
// next launch check (cudaGetLastError) would report it as that launch's
// failure: clear it, as PyTorch does. Any other code throws.
inline bool poll_done(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  check(e, call, file, line);
  return true;
}

}  // namespace tb::cuda

#define TB_CUDA_CHECK(call) ::tb::cuda::check((call), #call, __FILE__, __LINE__)
// For cudaEventQuery/cudaStreamQuery: true = done, false = not yet (slot cleared).
#define TB_CUDA_POLL(call) ::tb::cuda::poll_done((call), #call, __FILE__, __LINE__)
// After a <<<>>> launch: a bad configuration shows up here, not at the next call.
#define TB_CUDA_LAUNCH_CHECK(kernel_name) \
  ::tb::cuda::check(cudaGetLastError(), "launch of " kernel_name, __FILE__, __LINE__)
