// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// CUPTI activity records of every kernel, memcpy and memset: the input of the
// Tensor Core kernel-time share (kernel_classifier.h) and the device rows of a
// trace (one row per stream). Full per-kernel tracing is trick 17's
// `profiler`: it costs time, so it is off by default.
//
// NOT RUN ON A GPU: compiled only with TRAINBENCH_HAVE_CUPTI (CUDA build with
// CUDA::cupti linked; see docs/metrics.md) and never executed yet.
#include "engine/metrics/chrome_trace.h"
#include "engine/metrics/kernel_classifier.h"

#ifdef TRAINBENCH_HAVE_CUPTI
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace tb {

struct CopyRecord {
  std::string kind;  // "memcpy HtoD", "memcpy DtoH", "memcpy DtoD", ..., "memset"
  uint64_t start_ns = 0, end_ns = 0, bytes = 0;
  uint32_t stream = 0;
  // An incomplete record (end 0, still in flight at the flush) lasts 0.
  uint64_t duration_ns() const { return end_ns > start_ns ? end_ns - start_ns : 0; }
};

// One collector per process (CUPTI's buffer callbacks are global).
class CuptiActivityCollector {
 public:
  static CuptiActivityCollector& instance();
  // Enables kernel (concurrent), memcpy and memset records. Throws tb::Error
  // with CUPTI's message when it cannot (e.g. another profiler is attached).
  void start();
  // Flushes every buffer and disables the records.
  void stop();
  // CUPTI's clock now (ns), to line device records up with host spans.
  static uint64_t timestamp_ns();

  // What was collected since the last take (moves it out).
  std::vector<KernelRecord> take_kernels();
  std::vector<CopyRecord> take_copies();

  // Adds device rows to `trace`: pid kTraceDevicePid, one tid per stream.
  // `cupti_ns_at_trace_zero` is timestamp_ns() taken when the trace's clock read 0.
  static void append_to(ChromeTrace& trace, const std::vector<KernelRecord>& kernels,
                        const std::vector<CopyRecord>& copies, uint64_t cupti_ns_at_trace_zero,
                        const KernelClassifier& classifier);

  // CUPTI's buffer callbacks (public for the C trampolines only).
  void on_buffer(uint8_t* buffer, size_t valid_size);

 private:
  CuptiActivityCollector() = default;
  std::mutex mu_;
  std::vector<KernelRecord> kernels_;
  std::vector<CopyRecord> copies_;
  bool started_ = false;
  bool registered_ = false;
};

}  // namespace tb
#endif  // TRAINBENCH_HAVE_CUPTI
