// SPDX-License-Identifier: GPL-3.0-or-later
// What the emulated .cu files need from the CUDA backend's host code
// (cuda_backend.cpp in a CUDA build), compiled like them (tb::cuda_emu).
#include <sstream>

#include "engine/backend/cuda/cuda_check.h"

namespace tb::cuda {

void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line, size_t bytes) {
  std::ostringstream os;
  os << "cuda (emulated): " << call << " failed: " << cudaGetErrorName(e) << ": "
     << cudaGetErrorString(e) << " (" << file << ":" << line << ")";
  if (e == cudaErrorMemoryAllocation) throw OutOfMemory(os.str(), bytes);
  throw Error(os.str());
}

}  // namespace tb::cuda
