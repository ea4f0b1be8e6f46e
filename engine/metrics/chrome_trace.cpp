// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/metrics/chrome_trace.h"

#include <fstream>

#include "engine/core/error.h"

namespace tb {

using json = nlohmann::json;

ChromeTrace::ChromeTrace() : start_(std::chrono::steady_clock::now()) {
  name_process(kTraceHostPid, "host");
  name_thread(kTraceHostPid, kTraceTrainThread, "training thread");
}

double ChromeTrace::now_us() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_)
      .count();
}

void ChromeTrace::name_process(int pid, const std::string& name) {
  metadata_.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0},
                       {"ts", 0}, {"dur", 0}, {"args", {{"name", name}}}});
}

void ChromeTrace::name_thread(int pid, int tid, const std::string& name) {
  metadata_.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid},
                       {"ts", 0}, {"dur", 0}, {"args", {{"name", name}}}});
}

void ChromeTrace::add(const std::string& name, const std::string& cat, double ts_us,
                      double dur_us, int pid, int tid, json args) {
  events_.push_back({name, cat, ts_us, dur_us, pid, tid, std::move(args)});
}

json ChromeTrace::to_json() const {
  json events = json::array();
  for (const json& m : metadata_) events.push_back(m);
  for (const TraceEvent& e : events_) {
    json j = {{"name", e.name}, {"cat", e.cat}, {"ph", "X"}, {"ts", e.ts_us},
              {"dur", e.dur_us}, {"pid", e.pid}, {"tid", e.tid}};
    if (!e.args.empty()) j["args"] = e.args;
    events.push_back(std::move(j));
  }
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

void ChromeTrace::write(const std::string& path) const {
  std::ofstream out(path);
  TB_CHECK(out, path, ": cannot open for writing");
  out << to_json().dump() << "\n";
  TB_CHECK(out.good(), path, ": write failed");
}

void TracingStepTimer::begin_step(int64_t step) {
  close_spans();
  inner_.begin_step(step);
  step_ = step;
  step_t0_ = trace_.now_us();
  open_ = true, work_ended_ = false;
}

void TracingStepTimer::end_step() {
  inner_.end_step();
  work_end_t0_ = trace_.now_us();
  work_ended_ = true;
}

void TracingStepTimer::close_step() {
  close_spans();
  inner_.close_step();
}

void TracingStepTimer::close_spans() {
  if (!open_) return;
  const double now = trace_.now_us();
  if (work_ended_)
    trace_.add("step_end", "phase", work_end_t0_, now - work_end_t0_, kTraceHostPid,
               kTraceTrainThread, {{"step", step_}});
  trace_.add("step " + std::to_string(step_), "step", step_t0_, now - step_t0_, kTraceHostPid,
             kTraceTrainThread, {{"step", step_}});
  open_ = false;
}

void TracingStepTimer::begin(Phase p) {
  phase_t0_[static_cast<int>(p)] = trace_.now_us();
  inner_.begin(p);
}

void TracingStepTimer::end(Phase p) {
  inner_.end(p);
  const double t0 = phase_t0_[static_cast<int>(p)];
  trace_.add(phase_name(p), "phase", t0, trace_.now_us() - t0, kTraceHostPid, kTraceTrainThread,
             {{"step", step_}});
}

}  // namespace tb
