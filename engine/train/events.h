// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Run events, fanned out to sinks: the JSON-lines stream on stdout (for the
// GUI; format in docs/events.md), the terminal progress display, and the run
// store. Every event is a JSON object {"v": 1, "type": ..., "t": seconds since
// the run started, ...}.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
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
  // Stamps version and time, then hands the event to every sink. A sink that
  // throws is reported on stderr and the others still get the event.
  void publish(const std::string& type, nlohmann::json fields);
  double seconds() const;  // since construction (the run's start)

 private:
  std::vector<EventSink*> sinks_;
  std::chrono::steady_clock::time_point start_;
};

// One JSON object per line, flushed per line so a reader sees it at once.
// When the reader goes away (EPIPE; the engine ignores SIGPIPE) the stream is
// closed: no more events are written, the run goes on and is still stored.
class JsonlSink final : public EventSink {
 public:
  explicit JsonlSink(std::FILE* out) : out_(out) {}
  void on_event(const nlohmann::json& event) override;
  bool closed() const { return closed_; }

 private:
  std::FILE* out_;
  bool closed_ = false;
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

struct StoreSinkOptions {
  // The run's heartbeat is written this often (readers take a run whose
  // heartbeat is older than RunStore::kDefaultStaleAfter as interrupted).
  std::chrono::milliseconds heartbeat_interval{5000};
  // Events waiting for the database beyond this are dropped, step events first
  // (the store's own buffer of points is bounded too; RunStoreOptions).
  size_t max_queued_events = 20000;
};

// Writes metrics, events, status and summary into the run store from its own
// thread, which is also the heartbeat's timer: training never waits for the
// database. While the database cannot be written (another process holds the
// lock, the disk is full) events wait, bounded, and are retried; errors are
// reported on stderr, never thrown into the training loop.
class StoreSink final : public EventSink {
 public:
  StoreSink(RunStore& store, int64_t run_id, StoreSinkOptions options = {});
  ~StoreSink() override;  // close(0) when close() was not called
  StoreSink(const StoreSink&) = delete;
  StoreSink& operator=(const StoreSink&) = delete;

  void on_event(const nlohmann::json& event) override;  // queues; never blocks or throws
  // Queues "stopped" with `error` as the run's status (a second stop signal:
  // the process is about to end before the trainer gets to its end).
  void record_stop_now(const std::string& error);
  // Waits up to `timeout` for every queued event to be written, then ends the
  // thread. Returns "" when the run's last status was recorded, else why not.
  std::string close(std::chrono::milliseconds timeout);

 private:
  bool apply(const nlohmann::json& event);  // false: retry it later
  void note_error(const std::string& error);
  void loop();

  RunStore& store_;
  int64_t run_;
  StoreSinkOptions options_;
  nlohmann::json environment_;  // run_started's, which finished's kernel_paths join
  std::mutex close_mutex_;  // close() may come from the signal thread and from main
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<nlohmann::json> queue_;  // guarded by mutex_
  bool closing_ = false, ended_ = false;
  std::chrono::steady_clock::time_point close_deadline_{};
  int64_t dropped_events_ = 0;
  std::string last_error_;  // guarded by mutex_
  std::chrono::steady_clock::time_point last_printed_{};
  bool end_recorded_ = false;
  std::thread thread_;
};

}  // namespace tb
