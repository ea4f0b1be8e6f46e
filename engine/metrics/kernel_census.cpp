// SPDX-License-Identifier: GPL-3.0-or-later
// NOT RUN ON A GPU: see the header.
#include "engine/metrics/kernel_census.h"

#include <cstdlib>

#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/metrics/chrome_trace.h"
#include "engine/metrics/cupti_activity.h"

namespace tb {

std::string cupti_switched_off(const char* env_value) {
  const std::string v = env_value ? env_value : "";
  if (v.empty() || v == "on" || v == "1") return "";
  if (v == "off" || v == "0") return "not available: switched off by TRAINBENCH_CUPTI=" + v;
  TB_FAIL("TRAINBENCH_CUPTI: expected on or off (1 or 0), got '", v, "'");
}

std::string cupti_switched_off() { return cupti_switched_off(std::getenv("TRAINBENCH_CUPTI")); }

KernelClassifier engine_kernel_classifier() {
  KernelClassifier c;
  // Our own kernels use no Tensor Cores. CUPTI gives names mangled
  // (_ZN2tb4cuda...), a demangled trace "tb::cuda::...": both spellings.
  c.declare("tb::cuda::", false);
  c.declare("_ZN2tb4cuda", false);
  return c;
}

KernelCensus::KernelCensus(Backend& backend, int64_t interval)
    : be_(backend), interval_(interval < 1 ? 1 : interval), classifier_(engine_kernel_classifier()) {
#ifdef TRAINBENCH_HAVE_CUPTI
  if (backend.device().is_cpu()) {
    reason_ = "not available: no kernels on the cpu backend";
    return;
  }
  if (reason_ = cupti_switched_off(); !reason_.empty()) return;
  try {
    // Probe once: CUPTI refuses when another profiler (Nsight) holds it.
    CuptiActivityCollector::instance().start();
    CuptiActivityCollector::instance().stop();
    (void)CuptiActivityCollector::instance().take_kernels();
    (void)CuptiActivityCollector::instance().take_copies();
    available_ = true;
  } catch (const Error& e) {
    reason_ = std::string("not available: ") + e.what();
  }
#else
  reason_ = "not available: this build has no CUPTI";
#endif
}

KernelCensus::~KernelCensus() {
#ifdef TRAINBENCH_HAVE_CUPTI
  if (sampling_) {
    try {
      CuptiActivityCollector::instance().stop();
    } catch (...) {
    }
  }
#endif
}

void KernelCensus::begin_step(int64_t step) {
  // Not step 1 when sampling: cuDNN's autotuning and a graph capture make it
  // unlike every later step (the H200's stored run: 65 % Tensor Core share at
  // step 1, where the steady step's is ~13 %).
  if (!available_ || !samples_step(step, interval_)) return;
#ifdef TRAINBENCH_HAVE_CUPTI
  // Work of earlier steps still queued must not be counted in this one.
  be_.synchronize();
  auto& c = CuptiActivityCollector::instance();
  (void)c.take_kernels();
  (void)c.take_copies();
  try {
    c.start();
  } catch (const Error& e) {  // CUPTI refused after the probe passed: no census, the run goes on
    give_up(e.what());
    return;
  }
  sampling_ = true;
#endif
}

void KernelCensus::give_up(const std::string& why) {
  available_ = false;
  reason_ = "not available: " + why;
}

void KernelCensus::end_step(nlohmann::json& metrics) {
  if (!sampling_) return;
#ifdef TRAINBENCH_HAVE_CUPTI
  sampling_ = false;
  be_.synchronize();  // every kernel of the step has finished and has its record
  auto& c = CuptiActivityCollector::instance();
  try {
    c.stop();  // flushes the buffers
  } catch (const Error& e) {
    give_up(e.what());
    return;
  }
  const std::vector<KernelRecord> kernels = c.take_kernels();
  const std::vector<CopyRecord> copies = c.take_copies();
  // No record at all: CUPTI delivered nothing for the step (a step without
  // kernels does not exist), so no figure rather than zeros.
  if (kernels.empty()) return;
  const TensorCoreShare s = tensor_core_share(kernels, classifier_);
  int64_t memsets = 0;
  for (const CopyRecord& r : copies) memsets += r.kind == "memset";
  metrics["kernels_per_step"] = double(s.kernels);
  metrics["memsets_per_step"] = double(memsets);
  metrics["kernel_time_ms"] = double(s.total_ns) / 1e6;
  const double share = s.share();
  if (share == share) metrics["tensor_core_share"] = share;  // NaN: no kernel time, absent
#else
  (void)metrics;
#endif
}

bool DeviceTraceRecorder::start(ChromeTrace& trace) {
#ifdef TRAINBENCH_HAVE_CUPTI
  if (reason_ = cupti_switched_off(); !reason_.empty()) return false;
  try {
    auto& c = CuptiActivityCollector::instance();
    c.start();
    (void)c.take_kernels();
    (void)c.take_copies();
    // One instant on both clocks lines the device records up with host spans.
    const double host_us = trace.now_us();
    cupti_ns_at_trace_zero_ = CuptiActivityCollector::timestamp_ns() - uint64_t(host_us * 1e3);
    trace_ = &trace;
    return true;
  } catch (const Error& e) {
    reason_ = std::string("not available: ") + e.what();
    return false;
  }
#else
  (void)trace;
  reason_ = "not available: this build has no CUPTI";
  return false;
#endif
}

void DeviceTraceRecorder::finish(Backend& backend, const KernelClassifier& classifier) {
  if (!trace_) return;
#ifdef TRAINBENCH_HAVE_CUPTI
  backend.synchronize();
  auto& c = CuptiActivityCollector::instance();
  c.stop();
  CuptiActivityCollector::append_to(*trace_, c.take_kernels(), c.take_copies(),
                                    cupti_ns_at_trace_zero_, classifier);
#else
  (void)backend;
  (void)classifier;
#endif
  trace_ = nullptr;
}

}  // namespace tb
