// SPDX-License-Identifier: GPL-3.0-or-later
// The event sinks under faults: the store sink's heartbeat timer, a store that
// cannot be written (lock held elsewhere) while training goes on, the end of a
// run that cannot be recorded, a stream whose reader went away, a sink that throws.
#include <QtTest>

#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>

#include "engine/core/error.h"
#include "engine/store/run_store.h"
#include "engine/train/events.h"

using namespace std::chrono_literals;
using json = nlohmann::json;
using tb::RunStore;

namespace {

// Another process's connection holding the write lock until released.
class WriteLock {
 public:
  explicit WriteLock(const std::string& path) {
    if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK) throw std::runtime_error("open " + path);
    exec("BEGIN IMMEDIATE");
  }
  ~WriteLock() {
    release();
    sqlite3_close(db_);
  }
  void release() {
    if (held_) exec("COMMIT");
    held_ = false;
  }

 private:
  void exec(const char* sql) {
    if (sqlite3_exec(db_, sql, nullptr, nullptr, nullptr) != SQLITE_OK)
      throw std::runtime_error(sqlite3_errmsg(db_));
  }
  sqlite3* db_ = nullptr;
  bool held_ = true;
};

json make_event(const std::string& type, json fields = json::object()) {
  fields["v"] = tb::kEventsVersion;
  fields["type"] = type;
  fields["t"] = 0.0;
  return fields;
}

json step_event(int64_t step) {
  return make_event("step", {{"step", step}, {"epoch", 0}, {"metrics", {{"loss", 1.0 / double(step + 1)}}}});
}

class ThrowingSink final : public tb::EventSink {
 public:
  void on_event(const json&) override { throw tb::Error("this sink always fails"); }
};

class CountingSink final : public tb::EventSink {
 public:
  void on_event(const json&) override { ++count; }
  int count = 0;
};

}  // namespace

class TestStoreSink : public QObject {
  Q_OBJECT
  std::optional<QTemporaryDir> dir_;
  std::string db_;

  int64_t make_run(tb::RunStoreOptions options = {}) {
    RunStore store(db_, RunStore::Mode::ReadWrite, options);
    tb::RunRecord r;
    r.engine_pid = getpid();
    r.engine_host = tb::this_host_name();
    return store.create_run(r);
  }
  std::string heartbeat(int64_t id) {
    return RunStore(db_, RunStore::Mode::ReadOnly).get_run(id)->heartbeat_at;
  }

 private slots:
  void init() {
    dir_.emplace();
    QVERIFY(dir_->isValid());
    db_ = dir_->filePath("runs.db").toStdString();
  }

  // The heartbeat comes from the sink's own timer: it goes on while no event
  // arrives (a long evaluation, data loading while queued).
  void heartbeatBeatsWithoutEvents() {
    const int64_t id = make_run();
    RunStore store(db_);
    tb::StoreSinkOptions options;
    options.heartbeat_interval = 100ms;
    tb::StoreSink sink(store, id, options);
    const std::string first = heartbeat(id);
    std::this_thread::sleep_for(350ms);
    const std::string later = heartbeat(id);
    QVERIFY2(later > first, (first + " then " + later).c_str());
    sink.on_event(make_event("finished", {{"status", "finished"}, {"summary", {{"steps", 0}}}}));
    QCOMPARE(QString::fromStdString(sink.close(5s)), QString());
    QCOMPARE(QString::fromStdString(store.get_run(id)->status), QString("finished"));
  }

  // A store locked by another process delays writes but never the caller:
  // on_event returns at once, and once the lock is gone everything is written
  // in order, the end included.
  void lockedStoreDoesNotBlockTraining() {
    tb::RunStoreOptions options;
    options.busy_timeout = 200ms;
    options.batch_points = 10;
    options.retry_interval = 50ms;
    const int64_t id = make_run();
    RunStore store(db_, RunStore::Mode::ReadWrite, options);
    tb::StoreSinkOptions sink_options;
    sink_options.heartbeat_interval = 100ms;
    tb::StoreSink sink(store, id, sink_options);
    auto lock = std::make_unique<WriteLock>(db_);
    const auto t0 = std::chrono::steady_clock::now();
    sink.on_event(make_event("run_started", {{"environment", {{"device", "cpu"}}}, {"tricks", json::object()}}));
    for (int64_t step = 1; step <= 100; ++step) sink.on_event(step_event(step));
    sink.on_event(make_event("log", {{"level", "info"}, {"message", "still training"}}));
    sink.on_event(make_event("finished", {{"status", "finished"}, {"summary", {{"steps", 100}}}}));
    QVERIFY(std::chrono::steady_clock::now() - t0 < 100ms);  // nothing waited for the lock
    std::this_thread::sleep_for(600ms);  // several failed attempts
    QCOMPARE(QString::fromStdString(RunStore(db_, RunStore::Mode::ReadOnly).get_run(id)->status),
             QString("queued"));
    lock.reset();
    QCOMPARE(QString::fromStdString(sink.close(10s)), QString());
    RunStore reader(db_, RunStore::Mode::ReadOnly);
    const auto run = *reader.get_run(id);
    QCOMPARE(QString::fromStdString(run.status), QString("finished"));
    QCOMPARE(run.environment, (json{{"device", "cpu"}}));
    const auto points = reader.step_series(id, "loss");
    QCOMPARE(points.size(), size_t(100));
    for (size_t i = 0; i < points.size(); ++i) QCOMPARE(points[i].step, int64_t(i + 1));
    QCOMPARE(reader.events(id).size(), size_t(1));
  }

  // When the end cannot be recorded before the time is up, close() says why
  // (the engine puts that on the stream), and readers see the run interrupted
  // once the engine is gone.
  void unrecordedEndIsReported() {
    tb::RunStoreOptions options;
    options.busy_timeout = 100ms;
    const int64_t id = make_run();
    RunStore store(db_, RunStore::Mode::ReadWrite, options);
    tb::StoreSink sink(store, id);
    WriteLock lock(db_);
    sink.on_event(make_event("failed", {{"error", "boom"}}));
    const std::string why = sink.close(500ms);
    QVERIFY2(QString::fromStdString(why).contains("locked"), why.c_str());
  }

  // The start records how long the run is, so a reader that follows the run
  // from the store can show "step N of M" before the end; the end's summary
  // replaces it.
  void theStartRecordsHowLongTheRunIs() {
    const int64_t id = make_run();
    RunStore store(db_);
    tb::StoreSink sink(store, id);
    sink.on_event(make_event("run_started", {{"environment", json::object()}, {"tricks", json::object()},
                                             {"steps_per_epoch", 4}, {"total_steps", 8}, {"epochs", 2}}));
    sink.on_event(step_event(1));
    QTRY_COMPARE(QString::fromStdString(RunStore(db_, RunStore::Mode::ReadOnly).get_run(id)->status),
                 QString("running"));
    QCOMPARE(RunStore(db_, RunStore::Mode::ReadOnly).get_run(id)->summary,
             (json{{"steps_per_epoch", 4}, {"total_steps", 8}}));
    sink.on_event(make_event("finished", {{"status", "finished"}, {"summary", {{"steps", 8}, {"total_steps", 8}}}}));
    QCOMPARE(QString::fromStdString(sink.close(5s)), QString());
    QCOMPARE(RunStore(db_, RunStore::Mode::ReadOnly).get_run(id)->summary, (json{{"steps", 8}, {"total_steps", 8}}));
  }

  // The kernel paths a run chose per shape (the CPU convolutions: known only
  // at the end) join the environment the start recorded; without them the
  // environment stays as started.
  void kernelPathsJoinTheEnvironment() {
    const json started{{"device", "cpu"}, {"threads", 2}};
    const json paths{{"convolution", {{"forward N64 1x28x28 -> 32 k3 s1 p1 NCHW/KCRS",
                                        {{"path", "blas"}, {"chosen_by", "timing"}}}}}};
    for (const bool with_paths : {true, false}) {
      const int64_t id = make_run();
      RunStore store(db_);
      tb::StoreSink sink(store, id);
      sink.on_event(make_event("run_started", {{"environment", started}, {"tricks", json::object()}}));
      json finished{{"status", "finished"}, {"summary", {{"steps", 1}}}};
      if (with_paths) finished["kernel_paths"] = paths;
      sink.on_event(make_event("finished", finished));
      QCOMPARE(QString::fromStdString(sink.close(5s)), QString());
      json want = started;
      if (with_paths) want["kernel_paths"] = paths;
      QCOMPARE(RunStore(db_, RunStore::Mode::ReadOnly).get_run(id)->environment, want);
    }
  }

  // A second stop signal records "stopped" at once, ahead of the trainer.
  void stopNowIsRecorded() {
    const int64_t id = make_run();
    RunStore store(db_);
    tb::StoreSink sink(store, id);
    sink.on_event(make_event("run_started", {{"environment", json::object()}, {"tricks", json::object()}}));
    sink.on_event(step_event(1));
    sink.record_stop_now("stopped by a second signal");
    QCOMPARE(QString::fromStdString(sink.close(5s)), QString());
    const auto run = *RunStore(db_, RunStore::Mode::ReadOnly).get_run(id);
    QCOMPARE(QString::fromStdString(run.status), QString("stopped"));
    QCOMPARE(QString::fromStdString(run.error), QString("stopped by a second signal"));
    QCOMPARE(RunStore(db_, RunStore::Mode::ReadOnly).step_series(id, "loss").size(), size_t(1));
  }

  // A reader that went away closes the stream instead of killing the engine;
  // the bus still feeds the other sinks.
  void closedStreamStopsOnlyTheStream() {
    int fds[2];
    QVERIFY(pipe(fds) == 0);
    ::close(fds[0]);  // the reader is gone
    std::FILE* out = fdopen(fds[1], "w");
    QVERIFY(out);
    auto old = std::signal(SIGPIPE, SIG_IGN);  // as the engine does
    tb::JsonlSink stream(out);
    CountingSink counter;
    ThrowingSink thrower;
    tb::EventBus bus;
    bus.add(&thrower);
    bus.add(&stream);
    bus.add(&counter);
    for (int i = 0; i < 3; ++i) bus.publish("log", {{"level", "info"}, {"message", "hello"}});
    QVERIFY(stream.closed());
    QCOMPARE(counter.count, 3);  // neither the thrower nor the closed stream stopped it
    std::fclose(out);
    std::signal(SIGPIPE, old);
  }
};

QTEST_GUILESS_MAIN(TestStoreSink)
#include "test_store_sink.moc"
