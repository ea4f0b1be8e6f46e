// SPDX-License-Identifier: GPL-3.0-or-later
// The per-layer profile's clock on a CUDA stream (layer_profiler.h): one
// event per mark, recorded where the mark is made, so whatever the scope
// launched on the stream (its own kernels, cuDNN's, cuBLAS's) falls between
// its marks. NOT RUN ON A GPU.
#include "engine/metrics/layer_profiler.h"

#ifdef TRAINBENCH_HAVE_CUDA
#include <cuda_runtime.h>

#include "engine/backend/cuda/cuda_check.h"
#include "engine/core/error.h"

namespace tb {

namespace {

class CudaScopeClock final : public ScopeClock {
 public:
  explicit CudaScopeClock(cudaStream_t stream) : stream_(stream) {}
  ~CudaScopeClock() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  CudaScopeClock(const CudaScopeClock&) = delete;
  CudaScopeClock& operator=(const CudaScopeClock&) = delete;

  // From scope destructors too: a failure is kept for intervals() to report.
  void mark(size_t i) override {
    while (events_.size() <= i) {
      cudaEvent_t e = nullptr;
      if (!ok(cudaEventCreate(&e), "cudaEventCreate")) return;
      events_.push_back(e);
    }
    ok(cudaEventRecord(events_[i], stream_), "cudaEventRecord");
  }
  bool ready(size_t n) override {
    if (n == 0 || !error_.empty() || n > events_.size()) return true;
    try {
      return TB_CUDA_POLL(cudaEventQuery(events_[n - 1]));  // not ready: the error slot cleared
    } catch (const Error& e) {
      keep(e.what());  // for intervals() to report
      return true;
    }
  }
  std::vector<double> intervals(size_t n) override {
    std::vector<double> out;
    // A failed cudaEventCreate left fewer events than marks (its error is kept).
    if (n > events_.size() && error_.empty())
      error_ = std::to_string(n) + " marks asked for, " + std::to_string(events_.size()) + " made";
    if (n > 0 && error_.empty()) ok(cudaEventSynchronize(events_[n - 1]), "cudaEventSynchronize");
    for (size_t i = 0; i + 1 < n && error_.empty(); ++i) {
      float ms = 0;
      if (ok(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]), "cudaEventElapsedTime"))
        out.push_back(ms);
    }
    const std::string error = std::move(error_);
    error_.clear();
    TB_CHECK(error.empty(), "per-layer profile: ", error);
    return out;
  }

 private:
  bool ok(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    keep(std::string(what) + ": " + cudaGetErrorString(e));
    return false;
  }
  void keep(const std::string& error) {
    if (error_.empty()) error_ = error;
    (void)cudaGetLastError();  // kept here; not a later launch's failure
  }
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
  std::string error_;
};

}  // namespace

std::unique_ptr<ScopeClock> make_cuda_scope_clock(void* stream) {
  return std::make_unique<CudaScopeClock>(static_cast<cudaStream_t>(stream));
}

}  // namespace tb

#else

namespace tb {
std::unique_ptr<ScopeClock> make_cuda_scope_clock(void*) { return nullptr; }
}  // namespace tb

#endif  // TRAINBENCH_HAVE_CUDA
