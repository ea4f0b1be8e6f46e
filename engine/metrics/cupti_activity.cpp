// SPDX-License-Identifier: GPL-3.0-or-later
// NOT RUN ON A GPU: compiled with TRAINBENCH_HAVE_CUPTI only; see the header.
#include "engine/metrics/cupti_activity.h"

#ifdef TRAINBENCH_HAVE_CUPTI
#include <cupti.h>

#include <cstdlib>
#include <set>

#include "engine/core/error.h"

namespace tb {

namespace {

constexpr size_t kBufferBytes = 8 << 20;  // per CUPTI buffer
constexpr size_t kBufferAlign = 8;        // CUPTI requires 8-byte aligned buffers

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  TB_FAIL("CUPTI: ", what, ": ", msg ? msg : "unknown error");
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CuptiActivityCollector::instance().on_buffer(buffer, valid);
  std::free(buffer);
}

const char* copy_kind(uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "memcpy DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "memcpy PtoP";
    default: return "memcpy";
  }
}

}  // namespace

CuptiActivityCollector& CuptiActivityCollector::instance() {
  static CuptiActivityCollector c;
  return c;
}

uint64_t CuptiActivityCollector::timestamp_ns() {
  uint64_t t = 0;
  check(cuptiGetTimestamp(&t), "cuptiGetTimestamp");
  return t;
}

void CuptiActivityCollector::start() {
  if (started_) return;
  // Once per process: start/stop may alternate (the sampled kernel census).
  if (!registered_)
    check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
          "cuptiActivityRegisterCallbacks");
  registered_ = true;
  // All three or none: a kind left enabled after a refusal would record every
  // later kernel into a list nothing drains.
  try {
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernel records");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enable memcpy records");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "enable memset records");
  } catch (...) {
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMSET);
    throw;
  }
  started_ = true;
}

void CuptiActivityCollector::stop() {
  if (!started_) return;
  const CUptiResult flushed = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  // Disabled whether or not the flush worked: never left recording.
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMSET);
  started_ = false;
  check(flushed, "cuptiActivityFlushAll");
}

void CuptiActivityCollector::on_buffer(uint8_t* buffer, size_t valid_size) {
  std::lock_guard<std::mutex> lock(mu_);
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid_size, &rec) == CUPTI_SUCCESS) {
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        kernels_.push_back({k->name ? k->name : "?", k->start, k->end, k->streamId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
        copies_.push_back({copy_kind(m->copyKind), m->start, m->end, m->bytes, m->streamId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
        copies_.push_back({"memset", m->start, m->end, m->bytes, m->streamId});
        break;
      }
      default:
        break;
    }
  }
}

std::vector<KernelRecord> CuptiActivityCollector::take_kernels() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(kernels_, {});
}

std::vector<CopyRecord> CuptiActivityCollector::take_copies() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(copies_, {});
}

void CuptiActivityCollector::append_to(ChromeTrace& trace, const std::vector<KernelRecord>& kernels,
                                       const std::vector<CopyRecord>& copies,
                                       uint64_t zero_ns, const KernelClassifier& classifier) {
  auto us = [&](uint64_t ns) { return (double(ns) - double(zero_ns)) / 1e3; };
  std::set<uint32_t> streams;
  trace.name_process(kTraceDevicePid, "device");
  for (const KernelRecord& k : kernels) {
    const KernelClass c = classifier.classify(k.name);
    trace.add(k.name, "kernel", us(k.start_ns), double(k.duration_ns()) / 1e3, kTraceDevicePid,
              int(k.stream), {{"tensor_core", c.tensor_core}, {"rule", c.rule}});
    streams.insert(k.stream);
  }
  for (const CopyRecord& c : copies) {
    trace.add(c.kind, c.kind == "memset" ? "memset" : "memcpy", us(c.start_ns),
              double(c.duration_ns()) / 1e3, kTraceDevicePid, int(c.stream),
              {{"bytes", c.bytes}});
    streams.insert(c.stream);
  }
  for (uint32_t s : streams) trace.name_thread(kTraceDevicePid, int(s), "stream " + std::to_string(s));
}

}  // namespace tb
#endif  // TRAINBENCH_HAVE_CUPTI
