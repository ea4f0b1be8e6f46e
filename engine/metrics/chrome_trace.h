// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Chrome trace event JSON (the format Perfetto's UI and chrome://tracing open):
// {"traceEvents": [...], "displayTimeUnit": "ms"} with "X" complete events
// (ts and dur in microseconds) and "M" metadata events naming processes and
// threads. Rows: pid 1 is the host (tid 1 the training thread), pid 2 the
// device with one tid per stream (filled from CUPTI records on CUDA).
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/metrics/step_timer.h"

namespace tb {

constexpr int kTraceHostPid = 1, kTraceDevicePid = 2;
constexpr int kTraceTrainThread = 1;

struct TraceEvent {
  std::string name, cat;
  double ts_us = 0, dur_us = 0;
  int pid = kTraceHostPid, tid = kTraceTrainThread;
  nlohmann::json args = nlohmann::json::object();
};

class ChromeTrace {
 public:
  ChromeTrace();
  // Microseconds since this trace was created (the host time base).
  double now_us() const;
  void name_process(int pid, const std::string& name);
  void name_thread(int pid, int tid, const std::string& name);
  void add(TraceEvent e) { events_.push_back(std::move(e)); }
  void add(const std::string& name, const std::string& cat, double ts_us, double dur_us,
           int pid = kTraceHostPid, int tid = kTraceTrainThread,
           nlohmann::json args = nlohmann::json::object());

  const std::vector<TraceEvent>& events() const { return events_; }
  nlohmann::json to_json() const;
  void write(const std::string& path) const;  // throws tb::Error when it cannot

 private:
  std::chrono::steady_clock::time_point start_;
  std::vector<TraceEvent> events_;
  std::vector<nlohmann::json> metadata_;
};

// A span from construction to destruction on the training thread's row.
class TraceSpan {
 public:
  TraceSpan(ChromeTrace* trace, std::string name, std::string cat)
      : trace_(trace), name_(std::move(name)), cat_(std::move(cat)),
        t0_(trace ? trace->now_us() : 0) {}
  ~TraceSpan() {
    if (trace_) trace_->add(name_, cat_, t0_, trace_->now_us() - t0_);
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  ChromeTrace* trace_;
  std::string name_, cat_;
  double t0_;
};

// Wraps a StepTimer and also records every step and phase as a host span
// ("step" events span a step from its boundary to the next; phases, and the
// end-of-step work as "step_end", nest inside them).
class TracingStepTimer final : public StepTimer {
 public:
  TracingStepTimer(StepTimer& inner, ChromeTrace& trace) : inner_(inner), trace_(trace) {}
  void begin_step(int64_t step) override;
  void end_step() override;
  void close_step() override;
  void begin(Phase p) override;
  void end(Phase p) override;
  std::optional<StepTimes> poll() override { return inner_.poll(); }
  void flush() override { inner_.flush(); }
  int lag_steps() const override { return inner_.lag_steps(); }

 private:
  void close_spans();
  StepTimer& inner_;
  ChromeTrace& trace_;
  bool open_ = false, work_ended_ = false;
  int64_t step_ = 0;
  double step_t0_ = 0, work_end_t0_ = 0;
  std::array<double, kPhaseCount> phase_t0_{};
};

}  // namespace tb
