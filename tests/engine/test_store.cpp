// SPDX-License-Identifier: GPL-3.0-or-later
// The SQLite run store: round trips, following a live run, two processes at
// once, a writer killed mid-batch, schema migration and refusal of bad files.
#include <QtTest>

#include <sqlite3.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "engine/core/error.h"
#include "engine/store/run_store.h"

using namespace std::chrono_literals;
using tb::RunStore;

namespace {

// A plain SQLite connection, standing in for an old engine or for a check
// that must not go through the code under test.
class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK)
      throw std::runtime_error("cannot open " + path);
    sqlite3_busy_timeout(db_, 10000);
  }
  ~RawDb() { sqlite3_close(db_); }
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;

  void exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      const std::string msg = err ? err : "?";
      sqlite3_free(err);
      throw std::runtime_error(msg + " in: " + sql);
    }
  }
  // The first column of the first row, as text ("" if there is none).
  std::string text(const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK)
      throw std::runtime_error(std::string(sqlite3_errmsg(db_)) + " in: " + sql);
    std::string result;
    if (sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_text(stmt, 0))
      result = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    sqlite3_finalize(stmt);
    return result;
  }
  long long integer(const std::string& sql) { return std::stoll(text(sql)); }

 private:
  sqlite3* db_ = nullptr;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs `body` in a forked child. The child never returns into Qt Test: it
// leaves with 0, or 1 after printing the exception.
template <typename Body>
pid_t fork_child(Body body) {
  std::fflush(nullptr);  // or buffered output would be printed twice
  const pid_t pid = fork();
  if (pid != 0) return pid;
  int rc = 0;
  try {
    body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child: %s\n", e.what());
    rc = 1;
  }
  std::fflush(nullptr);
  _exit(rc);
}

// Owns a forked child: a test that fails early still kills and reaps it.
class Child {
 public:
  explicit Child(pid_t pid) : pid_(pid) {}
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  bool kill_now() { return kill(pid_, SIGKILL) == 0; }
  // Exit code, or 128 + signal like a shell.
  int wait() {
    int status = 0;
    const pid_t pid = std::exchange(pid_, 0);
    if (waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_;
};

// Schema version 1 exactly as the first engine release wrote it.
constexpr const char* kVersion1Schema = R"sql(
CREATE TABLE schema_version (version INTEGER NOT NULL);
INSERT INTO schema_version (version) VALUES (1);
CREATE TABLE runs (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL DEFAULT '',
  created_at TEXT NOT NULL,
  started_at TEXT,
  finished_at TEXT,
  status TEXT NOT NULL DEFAULT 'queued'
    CHECK (status IN ('queued', 'running', 'finished', 'failed', 'stopped')),
  config_json TEXT NOT NULL DEFAULT '{}',
  environment_json TEXT NOT NULL DEFAULT '{}',
  engine_version TEXT NOT NULL DEFAULT '',
  tricks_json TEXT NOT NULL DEFAULT '{}',
  summary_json TEXT NOT NULL DEFAULT '{}',
  error TEXT NOT NULL DEFAULT ''
);
CREATE TABLE series (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE step_metrics (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  series_id INTEGER NOT NULL REFERENCES series(id),
  step INTEGER NOT NULL, wall_time REAL NOT NULL, value REAL
);
CREATE INDEX step_metrics_by_series ON step_metrics (run_id, series_id, step);
CREATE TABLE epoch_metrics (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  series_id INTEGER NOT NULL REFERENCES series(id),
  epoch INTEGER NOT NULL, step INTEGER NOT NULL, wall_time REAL NOT NULL, value REAL
);
CREATE INDEX epoch_metrics_by_series ON epoch_metrics (run_id, series_id, epoch);
CREATE TABLE events (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  time TEXT NOT NULL, level TEXT NOT NULL, message TEXT NOT NULL
);
CREATE INDEX events_by_run ON events (run_id, id);
)sql";

std::vector<tb::MetricPoint> one_point(const std::string& name, int64_t step, double value) {
  return {{name, step, 0.01 * static_cast<double>(step), value}};
}

}  // namespace

class TestStore : public QObject {
  Q_OBJECT

 private:
  std::optional<QTemporaryDir> dir_;
  std::string db_;  // this test's database; checked by cleanup() when it exists

  std::string file(const char* name) const { return dir_->filePath(name).toStdString(); }

  // A database with one run, made and closed before any fork.
  int64_t make_run(const std::string& status = tb::run_status::kQueued) {
    RunStore store(db_);
    tb::RunRecord r;
    r.name = "mlp";
    r.status = status;
    return store.create_run(r);
  }

 private slots:
  void init() {
    dir_.emplace();
    QVERIFY(dir_->isValid());
    db_ = file("runs.db");
  }

  // Every test leaves a sound database behind (checked by SQLite itself).
  void cleanup() {
    if (!db_.empty() && QFile::exists(QString::fromStdString(db_))) {
      RawDb raw(db_);
      QCOMPARE(QString::fromStdString(raw.text("PRAGMA integrity_check")), QString("ok"));
      QCOMPARE(QString::fromStdString(raw.text("PRAGMA foreign_key_check")), QString());
    }
    dir_.reset();
  }

  void defaultPathFollowsXdgBaseDirectories() {
    const QByteArray old_xdg = qgetenv("XDG_DATA_HOME"), old_home = qgetenv("HOME");
    auto restore = [&] {
      if (old_xdg.isNull())
        qunsetenv("XDG_DATA_HOME");
      else
        qputenv("XDG_DATA_HOME", old_xdg);
      qputenv("HOME", old_home);
    };
    qputenv("HOME", QByteArray::fromStdString(file("home")));
    qputenv("XDG_DATA_HOME", QByteArray::fromStdString(file("xdg")));
    const std::string xdg_path = RunStore::default_path();
    qunsetenv("XDG_DATA_HOME");
    const std::string home_path = RunStore::default_path();
    qputenv("XDG_DATA_HOME", "relative/dir");  // the XDG spec says: ignore it
    const std::string relative_path = RunStore::default_path();
    restore();

    QCOMPARE(QString::fromStdString(xdg_path),
             QString::fromStdString(file("xdg/trainbench/runs.db")));
    QCOMPARE(QString::fromStdString(home_path),
             QString::fromStdString(file("home/.local/share/trainbench/runs.db")));
    QCOMPARE(relative_path, home_path);
    // Working out the path creates nothing (only recording a run makes the folder).
    QVERIFY(!QFileInfo::exists(QString::fromStdString(file("xdg"))));
    QVERIFY(!QFileInfo::exists(QString::fromStdString(file("home"))));

    qunsetenv("XDG_DATA_HOME");
    qunsetenv("HOME");
    try {
      RunStore::default_path();
      restore();
      QFAIL("a default path without HOME");
    } catch (const tb::Error& e) {
      restore();
      QVERIFY2(QString(e.what()).contains("--db"), e.what());
    }
  }

  void roundTrip() {
    RunStore store(db_);
    QCOMPARE(store.schema_version(), RunStore::kSchemaVersion);
    QCOMPARE(QString::fromStdString(store.integrity_check()), QString("ok"));

    tb::RunRecord in;
    in.name = "resnet-cifar";
    in.config = {{"model", "resnet8"}, {"batch_size", 128}, {"lr", 0.1}};
    in.environment = {{"device", "cpu"}, {"openblas", "0.3.21"}};
    in.engine_version = "0.1.0";
    in.tags = "baseline";
    in.notes = "first try";
    in.engine_pid = 4242;
    in.engine_host = "workstation-7";
    const int64_t id = store.create_run(in);
    QVERIFY(id > 0);

    auto created = store.get_run(id);
    QVERIFY(created);
    QCOMPARE(created->engine_pid, int64_t(4242));
    QCOMPARE(QString::fromStdString(created->engine_host), QString("workstation-7"));
    QCOMPARE(QString::fromStdString(created->status), QString("queued"));
    QVERIFY(!created->created_at.empty());
    QVERIFY(created->started_at.empty());

    store.set_status(id, "running");
    const std::string started = store.get_run(id)->started_at;
    QVERIFY(!started.empty());

    const double nan = std::nan("");
    store.append_step_metrics(id,
                              {{"loss", 0, 0.5, 2.3}, {"loss", 1, 1.0, nan}, {"lr", 0, 0.5, 0.1}});
    store.append_step_metrics(id, {{"loss", 2, 1.5, 1.7}, {"lr", 1, 1.0, 0.09}});
    store.append_epoch_metrics(
        id, {{"val_accuracy", 0, 2, 1.6, 0.41}, {"val_accuracy", 1, 4, 3.2, 0.58}});
    store.append_event(id, "info", "epoch 1 done");
    store.append_event(id, "warning", "loss is NaN at step 1");
    store.flush();

    const nlohmann::json tricks = {
        {"amp", {{"requested", true}, {"applied", false}, {"reason", "no GPU"}}}};
    const nlohmann::json summary = {{"median_step_ms", 12.5}, {"final_accuracy", 0.58}};
    store.set_tricks(id, tricks);
    store.set_summary(id, summary);
    store.set_environment(id, {{"device", "cuda:0"}});
    store.set_status(id, "finished");

    const auto out = store.get_run(id);
    QVERIFY(out);
    QCOMPARE(out->id, id);
    QCOMPARE(QString::fromStdString(out->name), QString("resnet-cifar"));
    QCOMPARE(QString::fromStdString(out->status), QString("finished"));
    QCOMPARE(QString::fromStdString(out->started_at), QString::fromStdString(started));
    QVERIFY(out->finished_at >= out->started_at);
    QCOMPARE(out->config, in.config);
    QCOMPARE(out->environment, (nlohmann::json{{"device", "cuda:0"}}));
    QCOMPARE(out->tricks, tricks);
    QCOMPARE(out->summary, summary);
    QCOMPARE(QString::fromStdString(out->engine_version), QString("0.1.0"));
    QCOMPARE(QString::fromStdString(out->tags), QString("baseline"));
    QCOMPARE(QString::fromStdString(out->notes), QString("first try"));
    QVERIFY(out->error.empty());

    QCOMPARE(store.step_series_names(id), (std::vector<std::string>{"loss", "lr"}));
    QCOMPARE(store.epoch_series_names(id), (std::vector<std::string>{"val_accuracy"}));

    const auto loss = store.step_series(id, "loss");
    QCOMPARE(loss.size(), size_t(3));
    QCOMPARE(loss[0].step, int64_t(0));
    QCOMPARE(loss[0].value, 2.3);
    QCOMPARE(loss[0].wall_time, 0.5);
    QVERIFY(std::isnan(loss[1].value));  // a diverged loss survives as NaN
    QCOMPARE(loss[2].step, int64_t(2));
    QCOMPARE(QString::fromStdString(loss[2].name), QString("loss"));
    const auto tail = store.step_series(id, "loss", 1);
    QCOMPARE(tail.size(), size_t(1));
    QCOMPARE(tail[0].value, 1.7);
    QVERIFY(store.step_series(id, "no such series").empty());

    const auto acc = store.epoch_series(id, "val_accuracy");
    QCOMPARE(acc.size(), size_t(2));
    QCOMPARE(acc[1].epoch, int64_t(1));
    QCOMPARE(acc[1].step, int64_t(4));
    QCOMPARE(acc[1].wall_time, 3.2);
    QCOMPARE(acc[1].value, 0.58);
    QCOMPARE(store.epoch_series(id, "val_accuracy", 0).size(), size_t(1));

    const auto events = store.events(id);
    QCOMPARE(events.size(), size_t(2));
    QCOMPARE(QString::fromStdString(events[0].level), QString("info"));
    QCOMPARE(QString::fromStdString(events[1].message), QString("loss is NaN at step 1"));
    QVERIFY(!events[0].time.empty());
    QCOMPARE(store.events(id, events[0].id).size(), size_t(1));

    store.rename_run(id, "renamed");
    store.set_tags(id, "a,b");
    store.set_notes(id, "ünïcode notes");
    const auto runs = store.list_runs();
    QCOMPARE(runs.size(), size_t(1));
    QCOMPARE(QString::fromStdString(runs[0].name), QString("renamed"));
    QCOMPARE(QString::fromStdString(runs[0].tags), QString("a,b"));
    QCOMPARE(QString::fromStdString(runs[0].notes), QString("ünïcode notes"));

    QVERIFY(!store.get_run(id + 100));
    QVERIFY_THROWS_EXCEPTION(tb::Error, store.set_status(id, "exploded"));
    QVERIFY_THROWS_EXCEPTION(tb::Error, store.rename_run(id + 100, "ghost"));

    store.set_status(id, "failed", "out of memory at batch size 4096");
    const auto failed = store.get_run(id);
    QCOMPARE(QString::fromStdString(failed->status), QString("failed"));
    QCOMPARE(QString::fromStdString(failed->error), QString("out of memory at batch size 4096"));
    QCOMPARE(QString::fromStdString(store.integrity_check()), QString("ok"));
  }

  // Points become visible in batches of N, after T ms, on flush, on set_status
  // and when the writer is destroyed; never one by one.
  void writesAreBatched() {
    const int64_t id = make_run();
    RunStore reader(db_, RunStore::Mode::ReadOnly);
    {
      tb::RunStoreOptions options;
      options.batch_points = 10;
      options.batch_interval = 1h;
      RunStore writer(db_, RunStore::Mode::ReadWrite, options);
      for (int64_t step = 0; step < 9; ++step)
        writer.append_step_metrics(id, one_point("loss", step, 1.0));
      QCOMPARE(reader.step_series(id, "loss").size(), size_t(0));
      writer.append_step_metrics(id, one_point("loss", 9, 1.0));
      QCOMPARE(reader.step_series(id, "loss").size(), size_t(10));

      writer.append_step_metrics(id, one_point("loss", 10, 1.0));
      QCOMPARE(reader.step_series(id, "loss").size(), size_t(10));
      writer.flush();
      QCOMPARE(reader.step_series(id, "loss").size(), size_t(11));

      writer.append_step_metrics(id, one_point("loss", 11, 1.0));
      writer.set_status(id, "running");
      QCOMPARE(reader.step_series(id, "loss").size(), size_t(12));
      writer.append_step_metrics(id, one_point("loss", 12, 1.0));
    }  // destruction flushes
    QCOMPARE(reader.step_series(id, "loss").size(), size_t(13));

    tb::RunStoreOptions timed;
    timed.batch_points = 1000;
    timed.batch_interval = 50ms;
    RunStore writer(db_, RunStore::Mode::ReadWrite, timed);
    writer.append_step_metrics(id, one_point("loss", 13, 1.0));
    QCOMPARE(reader.step_series(id, "loss").size(), size_t(13));
    std::this_thread::sleep_for(80ms);
    writer.append_step_metrics(id, one_point("loss", 14, 1.0));
    QCOMPARE(reader.step_series(id, "loss").size(), size_t(15));
  }

  // A batch that fails half-way (here: a point for a run that does not exist)
  // leaves none of its points behind, and the store stays usable.
  void failedBatchIsRolledBack() {
    const int64_t id = make_run();
    RunStore store(db_);
    store.append_step_metrics(id, one_point("loss", 0, 1.0));
    store.append_step_metrics(id + 1000, one_point("loss", 0, 1.0));
    store.append_step_metrics(id, one_point("new_series", 1, 1.0));
    try {
      store.flush();
      QFAIL("a point of a missing run was accepted");
    } catch (const tb::Error& e) {
      const QString msg = e.what();
      QVERIFY2(msg.contains(QString::fromStdString(db_)), e.what());
      QVERIFY2(msg.contains("FOREIGN KEY"), e.what());
    }
    QCOMPARE(store.step_series(id, "loss").size(), size_t(0));
    QVERIFY(store.step_series_names(id).empty());
    store.append_step_metrics(id, one_point("new_series", 2, 1.0));
    store.flush();
    QCOMPARE(store.step_series(id, "new_series").size(), size_t(1));
  }

  // A reader polls with after_step/after_id and gets each point exactly once;
  // once it reads a terminal status, one more read has everything.
  void readerFollowsRunningRun() {
    const int64_t id = make_run();
    tb::RunStoreOptions options;
    options.batch_points = 7;
    RunStore writer(db_, RunStore::Mode::ReadWrite, options);
    RunStore reader(db_, RunStore::Mode::ReadOnly);
    writer.set_status(id, "running");

    std::vector<int64_t> seen;
    int64_t last_step = -1, last_event = 0;
    size_t events_seen = 0;
    auto poll = [&] {
      for (const auto& p : reader.step_series(id, "loss", last_step)) {
        seen.push_back(p.step);
        last_step = p.step;
      }
      for (const auto& e : reader.events(id, last_event)) {
        ++events_seen;
        last_event = e.id;
      }
    };
    for (int64_t step = 0; step < 100; ++step) {
      writer.append_step_metrics(id, one_point("loss", step, 1.0 / double(step + 1)));
      if (step % 25 == 0) writer.append_event(id, "info", "checkpoint");
      if (step % 3 == 0) poll();
    }
    writer.append_step_metrics(id, one_point("loss", 100, 0.0));  // still buffered
    writer.set_status(id, "finished");
    QCOMPARE(QString::fromStdString(reader.get_run(id)->status), QString("finished"));
    poll();
    QCOMPARE(seen.size(), size_t(101));
    for (size_t i = 0; i < seen.size(); ++i) QCOMPARE(seen[i], int64_t(i));
    QCOMPARE(events_seen, size_t(4));
  }

  // Engine and GUI in separate processes: the child writes continuously while
  // the parent reads (and now and then writes notes); no SQLITE_BUSY surfaces.
  void concurrentReaderAndWriterProcesses() {
    const int64_t id = make_run();
    constexpr int64_t kPoints = 3000;
    const std::string path = db_;
    Child child(fork_child([&] {
      tb::RunStoreOptions options;
      options.batch_points = 20;
      RunStore writer(path, RunStore::Mode::ReadWrite, options);
      writer.set_status(id, "running");
      for (int64_t step = 0; step < kPoints; ++step) {
        writer.append_step_metrics(id, {{"loss", step, 0.001 * double(step), 1.0},
                                        {"accuracy", step, 0.001 * double(step), 0.5}});
        if (step % 500 == 0) writer.append_event(id, "info", "progress");
        std::this_thread::sleep_for(200us);
      }
      writer.set_status(id, "finished");
    }));
    QVERIFY(child.started());

    int64_t last_step = -1, polls_with_news = 0, polls = 0;
    std::string status;
    try {
      RunStore reader(path, RunStore::Mode::ReadOnly);
      RunStore editor(path);
      const auto deadline = std::chrono::steady_clock::now() + 60s;
      do {
        status = reader.get_run(id)->status;  // status first: see the docs
        const auto points = reader.step_series(id, "loss", last_step);
        for (const auto& p : points) {
          QCOMPARE(p.step, last_step + 1);
          last_step = p.step;
        }
        reader.step_series_names(id);
        reader.events(id);
        if (!points.empty()) ++polls_with_news;
        if (++polls % 10 == 0) editor.set_notes(id, "poll " + std::to_string(polls));
        QVERIFY(std::chrono::steady_clock::now() < deadline);
      } while (status != "finished");
    } catch (const tb::Error& e) {
      QFAIL(e.what());
    }
    QCOMPARE(child.wait(), 0);
    QCOMPARE(last_step, kPoints - 1);
    QVERIFY2(polls_with_news > 3, "the reader never saw the run while it was running");
    RunStore check(path, RunStore::Mode::ReadOnly);
    QCOMPARE(check.step_series(id, "accuracy").size(), size_t(kPoints));
    QCOMPARE(check.events(id).size(), size_t(kPoints / 500));
  }

  // kill -9 in the middle of writing: SQLite's WAL keeps every committed batch
  // whole, and the run is later recognised as interrupted.
  void killedWriterLeavesConsistentDatabase() {
    const int64_t id = make_run();
    const int64_t done = make_run(tb::run_status::kFinished);
    constexpr size_t kBatch = 50;
    const std::string path = db_;
    Child child(fork_child([&] {
      tb::RunStoreOptions options;
      options.batch_points = kBatch;
      options.batch_interval = 1h;
      RunStore writer(path, RunStore::Mode::ReadWrite, options);
      writer.set_status(id, "running");
      for (int64_t step = 0;; ++step) {
        writer.append_step_metrics(id, one_point("loss", step, 1.0));
        if (step % 1000 == 0) writer.append_event(id, "info", "still going");
      }
    }));
    QVERIFY(child.started());
    std::this_thread::sleep_for(200ms);
    QVERIFY(child.kill_now());
    QCOMPARE(child.wait(), 128 + SIGKILL);

    RunStore store(path);
    QCOMPARE(QString::fromStdString(store.integrity_check()), QString("ok"));
    const auto points = store.step_series(id, "loss");
    QVERIFY2(!points.empty(), "the child committed nothing in 200 ms");
    QCOMPARE(points.size() % kBatch, size_t(0));  // whole batches only
    for (size_t i = 0; i < points.size(); ++i) QCOMPARE(points[i].step, int64_t(i));
    QVERIFY(!store.events(id).empty());

    // No engine pid was recorded and its heartbeat is fresh: it could still be
    // alive; once the heartbeat is older than the limit it reads as interrupted.
    auto run = store.get_run(id);
    QCOMPARE(QString::fromStdString(run->status), QString("running"));
    std::this_thread::sleep_for(300ms);
    const std::string gone = tb::engine_gone_reason(*run, std::chrono::system_clock::now(), 100ms);
    QVERIFY2(QString::fromStdString(gone).contains("no heartbeat"), gone.c_str());
    QCOMPARE(QString::fromStdString(store.get_run(done)->status), QString("finished"));
  }

  // A run whose engine process on this host is gone reads as interrupted at
  // once, for every reader, without anyone writing it; a live one does not.
  void runsOfDeadEnginesReadAsInterrupted() {
    Child child(fork_child([] {}));
    const pid_t dead_pid = child.pid();
    QCOMPARE(child.wait(), 0);  // reaped: the pid no longer exists

    const std::string host = tb::this_host_name();
    QVERIFY(!host.empty());
    auto run_of = [&](const char* status, int64_t pid, const std::string& engine_host,
                      const std::string& heartbeat = "") {
      RunStore store(db_);
      tb::RunRecord r;
      r.status = status;
      r.engine_pid = pid;
      r.engine_host = engine_host;
      r.heartbeat_at = heartbeat;
      return store.create_run(r);
    };
    const int64_t dead_running = run_of("running", dead_pid, host);
    const int64_t dead_queued = run_of("queued", dead_pid, host);  // killed while loading data
    const int64_t alive = run_of("running", getpid(), host);
    const int64_t elsewhere_fresh = run_of("running", dead_pid, "another-host");
    const int64_t elsewhere_stale =
        run_of("running", dead_pid, "another-host", "2020-01-01T00:00:00.000Z");
    const int64_t finished = run_of("finished", dead_pid, host);

    for (auto mode : {RunStore::Mode::ReadOnly, RunStore::Mode::ReadWrite}) {
      RunStore store(db_, mode);
      auto status = [&](int64_t id) { return QString::fromStdString(store.get_run(id)->status); };
      QCOMPARE(status(dead_running), QString("interrupted"));
      QCOMPARE(status(dead_queued), QString("interrupted"));
      QCOMPARE(status(alive), QString("running"));
      QCOMPARE(status(elsewhere_fresh), QString("running"));
      QCOMPARE(status(elsewhere_stale), QString("interrupted"));
      QCOMPARE(status(finished), QString("finished"));
      const auto run = store.get_run(dead_running);
      QCOMPARE(QString::fromStdString(run->recorded_status), QString("running"));
      QVERIFY2(QString::fromStdString(run->error).contains(QString::number(dead_pid)),
               run->error.c_str());
      QVERIFY(QString::fromStdString(store.get_run(elsewhere_stale)->error).contains("no heartbeat"));
      size_t interrupted = 0;
      for (const auto& r : store.list_runs()) interrupted += r.status == "interrupted";
      QCOMPARE(interrupted, size_t(3));
    }
    // Nothing was written: the stored status is what the engine left.
    QCOMPARE(QString::fromStdString(RawDb(db_).text(
                 "SELECT status FROM runs WHERE id = " + std::to_string(dead_running))),
             QString("running"));
    // "interrupted" is shown, never stored; a writer may still record the end.
    RunStore store(db_);
    QVERIFY_THROWS_EXCEPTION(tb::Error, store.set_status(dead_running, "interrupted"));
    store.set_status(dead_running, "failed", "engine killed");
    QCOMPARE(QString::fromStdString(store.get_run(dead_running)->status), QString("failed"));
  }

  // A full disk (here: a file size limit on the writer) fails the batch with
  // an error naming the database, and rolls it back whole.
  void fullDiskFailsBatchCleanly() {
    const int64_t id = make_run();
    constexpr size_t kBatch = 100;
    const std::string path = db_;
    Child child(fork_child([&] {
      signal(SIGXFSZ, SIG_IGN);  // make oversized writes fail instead of killing us
      const rlimit limit{512 * 1024, 512 * 1024};
      if (setrlimit(RLIMIT_FSIZE, &limit) != 0) throw std::runtime_error("setrlimit failed");
      tb::RunStoreOptions options;
      options.batch_points = kBatch;
      RunStore writer(path, RunStore::Mode::ReadWrite, options);
      try {
        for (int64_t step = 0; step < 1'000'000; ++step)
          writer.append_step_metrics(id, one_point("loss", step, 1.0));
      } catch (const tb::Error& e) {
        std::fprintf(stderr, "child got the expected error: %s\n", e.what());
        if (std::string(e.what()).find(path) == std::string::npos) _exit(3);
        _exit(0);
      }
      _exit(2);  // a million points fit in 512 KiB: the limit did not work
    }));
    QVERIFY(child.started());
    QCOMPARE(child.wait(), 0);

    RunStore store(path);
    QCOMPARE(QString::fromStdString(store.integrity_check()), QString("ok"));
    const auto points = store.step_series(id, "loss");
    QVERIFY(!points.empty());
    QCOMPARE(points.size() % kBatch, size_t(0));
    for (size_t i = 0; i < points.size(); ++i) QCOMPARE(points[i].step, int64_t(i));
  }

  void migratesVersion1Database() {
    {
      RawDb old(db_);
      old.exec(kVersion1Schema);
      old.exec(
          "INSERT INTO runs (id, name, created_at, started_at, status, config_json) VALUES "
          "(1, 'old run', '2025-01-02T03:04:05.000Z', '2025-01-02T03:04:06.000Z', 'finished', "
          "'{\"lr\":0.01}'),"
          "(2, 'crashed run', '2025-01-03T00:00:00.000Z', '2025-01-03T00:00:01.000Z', 'running', "
          "'{}');"
          "INSERT INTO series (id, name) VALUES (1, 'loss');"
          "INSERT INTO step_metrics VALUES (1, 1, 0, 0.1, 2.0), (1, 1, 1, 0.2, 1.5), (1, 1, 2, "
          "0.3, 1.0);"
          "INSERT INTO epoch_metrics VALUES (1, 1, 0, 2, 0.3, 1.1);"
          "INSERT INTO events (run_id, time, level, message) VALUES (1, "
          "'2025-01-02T03:05:00.000Z', 'info', 'done');");
    }
    RunStore store(db_);
    QCOMPARE(store.schema_version(), RunStore::kSchemaVersion);
    QCOMPARE(RawDb(db_).integer("SELECT version FROM schema_version"), static_cast<long long>(RunStore::kSchemaVersion));
    QCOMPARE(RawDb(db_).integer("SELECT count(*) FROM schema_version"), 1LL);

    const auto run = store.get_run(1);
    QVERIFY(run);
    QCOMPARE(QString::fromStdString(run->name), QString("old run"));
    QCOMPARE(run->config, (nlohmann::json{{"lr", 0.01}}));
    QVERIFY(run->tags.empty());
    QVERIFY(run->notes.empty());
    QVERIFY(run->heartbeat_at.empty());
    QCOMPARE(run->engine_pid, int64_t(0));  // not recorded by v1: unknown
    QVERIFY(run->engine_host.empty());
    const auto loss = store.step_series(1, "loss");
    QCOMPARE(loss.size(), size_t(3));
    QCOMPARE(loss[2].value, 1.0);
    QCOMPARE(store.epoch_series(1, "loss").size(), size_t(1));
    QCOMPARE(store.events(1).size(), size_t(1));

    store.set_tags(1, "legacy");
    QCOMPARE(QString::fromStdString(store.get_run(1)->tags), QString("legacy"));
    // A v1 run left running has no heartbeat; its start time counts instead.
    QCOMPARE(QString::fromStdString(store.get_run(2)->status), QString("interrupted"));
    const int64_t fresh = store.create_run({});
    QVERIFY(fresh > 2);
  }

  void refusesNewerSchema() {
    make_run();
    RawDb(db_).exec("UPDATE schema_version SET version = 99");
    const std::string before = read_file(db_);
    for (auto mode : {RunStore::Mode::ReadWrite, RunStore::Mode::ReadOnly}) {
      try {
        RunStore store(db_, mode);
        QFAIL("a database from the future was opened");
      } catch (const tb::Error& e) {
        const QString msg = e.what();
        QVERIFY2(msg.contains(QString::fromStdString(db_)), e.what());
        QVERIFY2(msg.contains("99"), e.what());
      }
    }
    QVERIFY(read_file(db_) == before);
    QCOMPARE(RawDb(db_).integer("SELECT version FROM schema_version"), 99LL);
  }

  void rejectsFilesThatAreNotRunDatabases() {
    const std::string text_file = file("notes.txt");
    std::string junk;
    for (int i = 0; i < 200; ++i) junk += "this is not a database\n";
    std::ofstream(text_file) << junk;
    try {
      RunStore store(text_file);
      QFAIL("a text file was opened as a run database");
    } catch (const tb::Error& e) {
      const QString msg = e.what();
      QVERIFY2(msg.contains(QString::fromStdString(text_file)), e.what());
      QVERIFY2(msg.contains("not a database"), e.what());
    }
    QVERIFY(read_file(text_file) == junk);

    const std::string other = file("other.db");
    RawDb(other).exec("CREATE TABLE photos (id INTEGER PRIMARY KEY)");
    try {
      RunStore store(other);
      QFAIL("a foreign SQLite database was opened as a run database");
    } catch (const tb::Error& e) {
      QVERIFY2(QString(e.what()).contains("not a Trainbench run database"), e.what());
    }

    const std::string missing_dir = file("no/such/dir/runs.db");
    try {
      RunStore store(missing_dir);
      QFAIL("a database in a missing folder was created");
    } catch (const tb::Error& e) {
      QVERIFY2(QString(e.what()).contains(QString::fromStdString(missing_dir)), e.what());
    }

    const std::string absent = file("absent.db");
    QVERIFY_THROWS_EXCEPTION(tb::Error, RunStore(absent, RunStore::Mode::ReadOnly));
    QVERIFY(!QFile::exists(QString::fromStdString(absent)));

    // Unwritable folder (root ignores permissions, so only checked as a user).
    if (geteuid() != 0) {
      const QString locked = dir_->filePath("locked");
      QVERIFY(QDir().mkdir(locked));
      QFile::setPermissions(locked, QFileDevice::ReadOwner | QFileDevice::ExeOwner);
      const std::string path = (locked + "/runs.db").toStdString();
      try {
        RunStore store(path);
        QFAIL("a database in a read-only folder was created");
      } catch (const tb::Error& e) {
        QVERIFY2(QString(e.what()).contains(QString::fromStdString(path)), e.what());
      }
      QFile::setPermissions(
          locked, QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner);
    }
  }

  // Damaged pages are reported as tb::Error naming the file, never as garbage.
  void reportsCorruptDatabase() {
    const std::string path = file("corrupt.db");
    int64_t id = 0;
    {
      RunStore store(path);
      id = store.create_run({});
      for (int64_t step = 0; step < 5000; ++step)
        store.append_step_metrics(id, one_point("loss", step, 1.0));
    }  // closing checkpoints the WAL into the main file
    std::string bytes = read_file(path);
    const size_t page = 4096;
    QVERIFY(bytes.size() > 8 * page);

    // Scribble over the data pages (pages 3.. hold step_metrics and its index).
    std::string damaged = bytes;
    for (size_t i = 2 * page; i < damaged.size(); ++i) damaged[i] = static_cast<char>(0xA5);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << damaged;
    try {
      RunStore store(path);
      QVERIFY(store.integrity_check() != "ok");
      store.step_series(id, "loss");
      QFAIL("reading corrupt pages did not fail");
    } catch (const tb::Error& e) {
      const QString msg = e.what();
      QVERIFY2(msg.contains(QString::fromStdString(path)), e.what());
      QVERIFY2(msg.contains("malformed"), e.what());
    }

    // Scribble over the schema on page 1 (after the 100-byte file header).
    damaged = bytes;
    for (size_t i = 100; i < page; ++i) damaged[i] = static_cast<char>(0xA5);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << damaged;
    try {
      RunStore store(path);
      QFAIL("a database with a destroyed schema was opened");
    } catch (const tb::Error& e) {
      const QString msg = e.what();
      QVERIFY2(msg.contains(QString::fromStdString(path)), e.what());
      QVERIFY2(msg.contains("malformed"), e.what());
    }
  }

  void readOnlyStoreRefusesWrites() {
    const int64_t id = make_run();
    RunStore reader(db_, RunStore::Mode::ReadOnly);
    QCOMPARE(reader.list_runs().size(), size_t(1));
    QVERIFY_THROWS_EXCEPTION(tb::Error, reader.create_run({}));
    QVERIFY_THROWS_EXCEPTION(tb::Error, reader.set_status(id, "running"));
    QVERIFY_THROWS_EXCEPTION(tb::Error, reader.append_step_metrics(id, one_point("loss", 0, 1.0)));
    QCOMPARE(QString::fromStdString(reader.get_run(id)->status), QString("queued"));
  }

  void deleteCascades() {
    RunStore store(db_);
    const int64_t a = store.create_run({});
    const int64_t b = store.create_run({});
    for (int64_t run : {a, b}) {
      store.append_step_metrics(run, {{"loss", 0, 0.0, 1.0}, {"loss", 1, 0.1, 0.5}});
      store.append_epoch_metrics(run, {{"acc", 0, 1, 0.1, 0.3}});
      store.append_event(run, "info", "hello");
    }
    store.flush();
    store.append_step_metrics(a, one_point("loss", 2, 0.1));  // buffered, must not resurrect a
    store.delete_run(a);
    store.flush();
    QVERIFY(!store.get_run(a));
    QCOMPARE(store.list_runs().size(), size_t(1));
    QVERIFY_THROWS_EXCEPTION(tb::Error, store.delete_run(a));

    RawDb raw(db_);
    for (const char* table : {"step_metrics", "epoch_metrics", "events"}) {
      const std::string count = std::string("SELECT count(*) FROM ") + table + " WHERE run_id = ";
      QCOMPARE(raw.integer(count + std::to_string(a)), 0LL);
      QVERIFY(raw.integer(count + std::to_string(b)) > 0);
    }
    QCOMPARE(store.step_series(b, "loss").size(), size_t(2));
    QCOMPARE(QString::fromStdString(store.integrity_check()), QString("ok"));
  }

  void movedStoreKeepsWorking() {
    RunStore first(db_);
    const int64_t id = first.create_run({});
    first.append_step_metrics(id, one_point("loss", 0, 1.0));
    RunStore second(std::move(first));
    second.flush();
    QCOMPARE(second.step_series(id, "loss").size(), size_t(1));
    QVERIFY_THROWS_EXCEPTION(tb::Error, first.list_runs());  // NOLINT(bugprone-use-after-move)
    first = RunStore(db_, RunStore::Mode::ReadOnly);
    QCOMPARE(first.list_runs().size(), size_t(1));
  }

  // Reading never writes: an older schema is read as it is (no migration, no
  // journal change), so a reader works on a file it may not change.
  void readOnlyReadsOlderSchemasWithoutChangingThem() {
    {
      RawDb old(db_);
      old.exec(kVersion1Schema);
      old.exec(
          "INSERT INTO runs (id, name, created_at, status, config_json) VALUES "
          "(1, 'old run', '2025-01-02T03:04:05.000Z', 'finished', '{\"lr\":0.01}');"
          "INSERT INTO series (id, name) VALUES (1, 'loss');"
          "INSERT INTO step_metrics VALUES (1, 1, 0, 0.1, 2.0);");
    }
    const std::string before = read_file(db_);
    {
      RunStore reader(db_, RunStore::Mode::ReadOnly);
      QCOMPARE(reader.schema_version(), 1);
      const auto runs = reader.list_runs();
      QCOMPARE(runs.size(), size_t(1));
      QCOMPARE(QString::fromStdString(runs[0].name), QString("old run"));
      QCOMPARE(runs[0].config, (nlohmann::json{{"lr", 0.01}}));
      QVERIFY(runs[0].tags.empty());
      QCOMPARE(reader.step_series(1, "loss").size(), size_t(1));
    }
    QVERIFY(read_file(db_) == before);
    QVERIFY(!QFile::exists(QString::fromStdString(db_ + "-wal")));
  }

  // A writer that opens an up-to-date store takes no lock: it does not wait
  // for (or fail on) another process's write transaction.
  void upToDateStoreOpensWhileAnotherWrites() {
    make_run();
    RawDb other(db_);
    other.exec("BEGIN IMMEDIATE");  // holds the write lock
    tb::RunStoreOptions quick;
    quick.busy_timeout = 200ms;
    const auto t0 = std::chrono::steady_clock::now();
    RunStore writer(db_, RunStore::Mode::ReadWrite, quick);
    RunStore reader(db_, RunStore::Mode::ReadOnly, quick);
    QCOMPARE(writer.list_runs().size(), size_t(1));
    QCOMPARE(reader.list_runs().size(), size_t(1));
    QVERIFY(std::chrono::steady_clock::now() - t0 < 150ms);
    other.exec("COMMIT");
  }

  // A file someone else made (empty) or a folder is named as the problem and
  // left exactly as it was.
  void emptyFilesAndFoldersAreRefused() {
    const std::string empty = file("empty.db");
    std::ofstream(empty).close();
    for (auto mode : {RunStore::Mode::ReadWrite, RunStore::Mode::ReadOnly}) {
      try {
        RunStore store(empty, mode);
        QFAIL("an empty file was opened as a run store");
      } catch (const tb::Error& e) {
        QVERIFY2(QString(e.what()).contains("empty"), e.what());
        QVERIFY2(QString(e.what()).contains(QString::fromStdString(empty)), e.what());
      }
    }
    QCOMPARE(QFileInfo(QString::fromStdString(empty)).size(), 0);
    QVERIFY(!QFile::exists(QString::fromStdString(empty + "-wal")));

    const std::string folder = file("");
    try {
      RunStore store(folder, RunStore::Mode::ReadOnly);
      QFAIL("a folder was opened as a run store");
    } catch (const tb::Error& e) {
      QVERIFY2(QString(e.what()).contains("folder"), e.what());
    }
  }

  // Invalid UTF-8 is replaced on the way in; damage made by others (a hand
  // edit, an old tool) is reported per run and column on the way out, and the
  // other runs and columns read normally.
  void damagedRowsDoNotHideTheRest() {
    RunStore store(db_);
    tb::RunRecord bad_name;
    bad_name.name = "caf\xC3 \xFF run";
    bad_name.config = {{"model", "mlp"}};
    const int64_t sanitised = store.create_run(bad_name);
    store.append_event(sanitised, "info", "bad \xFE byte");
    const int64_t good = store.create_run({});
    const int64_t raw_bad = store.create_run({});
    {
      RawDb raw(db_);
      raw.exec("UPDATE runs SET name = CAST(X'6E616D65FF' AS TEXT), config_json = '{\"lr\": 0.1,,',"
               " summary_json = '[1, 2]' WHERE id = " + std::to_string(raw_bad));
    }
    const auto runs = store.list_runs();
    QCOMPARE(runs.size(), size_t(3));
    nlohmann::json listing = nlohmann::json::array();
    for (const auto& r : runs) listing.push_back({{"name", r.name}, {"config", r.config}});
    QVERIFY(!listing.dump().empty());  // throws on invalid UTF-8

    QCOMPARE(QString::fromStdString(runs[0].name), QString::fromUtf8("caf\uFFFD \uFFFD run"));
    QVERIFY(runs[0].problems.empty());  // cleaned when written
    QCOMPARE(QString::fromStdString(store.events(sanitised)[0].message),
             QString::fromUtf8("bad \uFFFD byte"));
    QVERIFY(store.get_run(good)->problems.empty());

    const auto bad = *store.get_run(raw_bad);
    QCOMPARE(QString::fromStdString(bad.name), QString::fromUtf8("name\uFFFD"));
    QVERIFY(bad.config.is_object() && bad.config.empty());
    QVERIFY(bad.summary.is_object() && bad.summary.empty());
    QString problems;
    for (const auto& p : bad.problems) problems += QString::fromStdString(p) + "\n";
    QVERIFY2(problems.contains("name: not valid UTF-8"), qPrintable(problems));
    QVERIFY2(problems.contains("config_json: not valid JSON"), qPrintable(problems));
    QVERIFY2(problems.contains("summary_json: expected a JSON object"), qPrintable(problems));
    QCOMPARE(bad.problems.size(), size_t(3));
    QCOMPARE(tb::valid_utf8("ok \xE2\x82\xAC"), std::string("ok \xE2\x82\xAC"));  // valid stays
    QCOMPARE(tb::valid_utf8("\xED\xA0\x80"), std::string("\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"));
  }

  // While another process holds the write lock (or the disk is full) a batch
  // fails, stays buffered and goes in whole once the store can be written.
  void failedBatchIsKeptAndRetried() {
    const int64_t id = make_run();
    tb::RunStoreOptions options;
    options.busy_timeout = 100ms;
    options.batch_points = 5;
    options.retry_interval = 50ms;
    RunStore writer(db_, RunStore::Mode::ReadWrite, options);
    RawDb other(db_);
    other.exec("BEGIN IMMEDIATE");
    for (int64_t step = 0; step < 4; ++step) writer.append_step_metrics(id, one_point("loss", step, 1.0));
    QVERIFY_THROWS_EXCEPTION(tb::Error, writer.append_step_metrics(id, one_point("loss", 4, 1.0)));
    QCOMPARE(writer.pending_points(), size_t(5));
    // Within the retry interval appending does not try (and wait) again.
    const auto t0 = std::chrono::steady_clock::now();
    writer.append_step_metrics(id, one_point("loss", 5, 1.0));
    QVERIFY(std::chrono::steady_clock::now() - t0 < 50ms);
    QVERIFY_THROWS_EXCEPTION(tb::Error, writer.flush());
    other.exec("COMMIT");
    writer.flush();
    QCOMPARE(writer.pending_points(), size_t(0));
    const auto points = writer.step_series(id, "loss");
    QCOMPARE(points.size(), size_t(6));
    for (size_t i = 0; i < points.size(); ++i) QCOMPARE(points[i].step, int64_t(i));
    QCOMPARE(writer.dropped_points(), int64_t(0));
  }

  // Defect (issue 26): what piled up while the disk was full was retried as one
  // transaction, so space that came back for part of it stored none of it.
  // Here a file size limit on the writer stands in for the disk: too small for
  // one batch of 1000 points, then room for a few batches, never for all 10000.
  void spaceThatComesBackTakesWhatFits() {
    const int64_t id = make_run();
    constexpr int64_t kPoints = 10000;
    constexpr size_t kBatch = 1000;
    const std::string path = db_;
    Child child(fork_child([&] {
      signal(SIGXFSZ, SIG_IGN);  // oversized writes fail instead of killing us
      auto limit_files = [](rlim_t bytes) {
        const rlimit limit{bytes, RLIM_INFINITY};
        if (setrlimit(RLIMIT_FSIZE, &limit) != 0) throw std::runtime_error("setrlimit failed");
      };
      tb::RunStoreOptions options;
      options.batch_points = kBatch;
      options.retry_interval = 1h;  // appending never retries; flush() below does
      RunStore writer(path, RunStore::Mode::ReadWrite, options);
      // The WAL index (-shm, 32 KiB) fits; a batch's WAL frames do not.
      limit_files(40 * 1024);
      bool failed = false;
      for (int64_t step = 0; step < kPoints; ++step) {
        try {
          writer.append_step_metrics(id, one_point("loss", step, 1.0));
        } catch (const tb::Error&) {
          failed = true;
        }
      }
      if (!failed || writer.pending_points() != size_t(kPoints)) _exit(3);  // the limit did nothing
      limit_files(200 * 1024);  // some space comes back
      try {
        writer.flush();
        _exit(4);  // everything fit: the test proves nothing
      } catch (const tb::Error&) {
      }
      const size_t stored = writer.step_series(id, "loss").size();
      std::fprintf(stderr, "child: %zu of %lld points stored in the space that came back\n",
                   stored, static_cast<long long>(kPoints));
      if (stored == 0) _exit(5);  // all or nothing: what fits was not stored
      if (stored + writer.pending_points() != size_t(kPoints)) _exit(6);
      limit_files(RLIM_INFINITY);
      writer.flush();
    }));
    QVERIFY(child.started());
    QCOMPARE(child.wait(), 0);
    RunStore store(path);
    QCOMPARE(QString::fromStdString(store.integrity_check()), QString("ok"));
    const auto points = store.step_series(id, "loss");
    QCOMPARE(points.size(), size_t(kPoints));
    for (size_t i = 0; i < points.size(); ++i) QCOMPARE(points[i].step, int64_t(i));
  }

  // The buffer of points that cannot be written yet is bounded: the oldest go.
  void pendingPointsAreBounded() {
    const int64_t id = make_run();
    tb::RunStoreOptions options;
    options.busy_timeout = 10ms;
    options.batch_points = 5;
    options.max_pending_points = 10;
    options.retry_interval = 1h;
    RunStore writer(db_, RunStore::Mode::ReadWrite, options);
    RawDb other(db_);
    other.exec("BEGIN IMMEDIATE");
    for (int64_t step = 0; step < 25; ++step) {
      try {
        writer.append_step_metrics(id, one_point("loss", step, 1.0));
      } catch (const tb::Error&) {
      }
    }
    QCOMPARE(writer.pending_points(), size_t(10));
    QCOMPARE(writer.dropped_points(), int64_t(15));
    other.exec("COMMIT");
    writer.flush();
    const auto points = writer.step_series(id, "loss");
    QCOMPARE(points.size(), size_t(10));
    QCOMPARE(points.front().step, int64_t(15));  // the newest ten
  }

  // start_run and finish_run are one transaction each: a reader sees all of
  // the start (or end) or none of it.
  void startAndFinishAreOneWriteEach() {
    const int64_t id = make_run();
    RunStore writer(db_);
    writer.start_run(id, {{"device", "cpu"}}, {{"amp", {{"applied", false}}}});
    auto run = *writer.get_run(id);
    QCOMPARE(QString::fromStdString(run.status), QString("running"));
    QCOMPARE(run.environment, (nlohmann::json{{"device", "cpu"}}));
    QVERIFY(run.tricks.contains("amp"));
    QVERIFY(!run.started_at.empty());
    writer.append_step_metrics(id, one_point("loss", 0, 1.0));
    writer.finish_run(id, "finished", {{"steps", 1}});
    RunStore reader(db_, RunStore::Mode::ReadOnly);
    run = *reader.get_run(id);
    QCOMPARE(QString::fromStdString(run.status), QString("finished"));
    QCOMPARE(run.summary, (nlohmann::json{{"steps", 1}}));
    QCOMPARE(reader.step_series(id, "loss").size(), size_t(1));
    QVERIFY_THROWS_EXCEPTION(tb::Error, writer.finish_run(id, "running", {}));
    QVERIFY_THROWS_EXCEPTION(tb::Error, writer.start_run(id + 99, {}, {}));
  }
};

QTEST_GUILESS_MAIN(TestStore)
#include "test_store.moc"
