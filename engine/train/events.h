// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Run events, fanned out to sinks: the JSON-lines stream on stdout (for the
// GUI; format in docs/events.md), the terminal progress display, and the run
// store. Every event is a JSON object {"v": 1, "type": ..., "t": seconds since
// the run started, ...}.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tb {

constexpr int kEventsVersion = 1;

class RunStore;

class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void on_event(const nlohmann::json& event) = 0;
};

class EventBus {
 public:
  EventBus();
  void add(EventSink* sink) { sinks_.push_back(sink); }
  // Stamps version and time, then hands the event to every sink.
  void publish(const std::string& type, nlohmann::json fields);
  double seconds() const;  // since construction (the run's start)

 private:
  std::vector<EventSink*> sinks_;
  std::chrono::steady_clock::time_point start_;
};

// One JSON object per line, flushed per line so a reader sees it at once.
class JsonlSink final : public EventSink {
 public:
  explicit JsonlSink(std::FILE* out) : out_(out) {}
  void on_event(const nlohmann::json& event) override;

 private:
  std::FILE* out_;
};

// Human progress: a redrawn bar on a terminal, plain lines otherwise.
class ProgressSink final : public EventSink {
 public:
  ProgressSink(std::FILE* out, bool terminal, bool quiet = false);
  void on_event(const nlohmann::json& event) override;

 private:
  void draw_bar(const nlohmann::json& event);
  std::FILE* out_;
  bool terminal_, quiet_;
  int64_t total_steps_ = 0, steps_per_epoch_ = 0, epochs_ = 0, log_every_ = 50;
  double last_draw_ = -1;
  bool bar_open_ = false;
  std::string last_loss_;
};

// Writes metrics, events, status and summary into the run store.
class StoreSink final : public EventSink {
 public:
  StoreSink(RunStore& store, int64_t run_id) : store_(store), run_(run_id) {}
  void on_event(const nlohmann::json& event) override;

 private:
  RunStore& store_;
  int64_t run_;
  double last_heartbeat_ = 0;
};

}  // namespace tb
