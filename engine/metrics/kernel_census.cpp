// SPDX-License-Identifier: GPL-3.0-or-later
// NOT RUN ON A GPU: see the header.
#include "engine/metrics/kernel_census.h"

#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/metrics/cupti_activity.h"

namespace tb {

KernelCensus::KernelCensus(Backend& backend, int64_t interval)
    : be_(backend), interval_(interval < 1 ? 1 : interval) {
  // The engine's own kernels (tb::cuda::...) use no Tensor Cores: declared, so
  // no name rule can misfile them.
  classifier_.declare("tb::cuda::", false);
#ifdef TRAINBENCH_HAVE_CUPTI
  if (backend.device().is_cpu()) {
    reason_ = "not available: no kernels on the cpu backend";
    return;
  }
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
  if (!available_ || (step - 1) % interval_ != 0) return;
#ifdef TRAINBENCH_HAVE_CUPTI
  // Work of earlier steps still queued must not be counted in this one.
  be_.synchronize();
  auto& c = CuptiActivityCollector::instance();
  (void)c.take_kernels();
  (void)c.take_copies();
  c.start();
  sampling_ = true;
#endif
}

void KernelCensus::end_step(nlohmann::json& metrics) {
  if (!sampling_) return;
#ifdef TRAINBENCH_HAVE_CUPTI
  sampling_ = false;
  be_.synchronize();  // every kernel of the step has finished and has its record
  auto& c = CuptiActivityCollector::instance();
  c.stop();  // flushes the buffers
  const std::vector<KernelRecord> kernels = c.take_kernels();
  const std::vector<CopyRecord> copies = c.take_copies();
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

}  // namespace tb
