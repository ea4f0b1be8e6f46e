// SPDX-License-Identifier: GPL-3.0-or-later
// What the engine writes: runs (created, started, ended, edited, deleted),
// their metric points and events. Points are buffered and written in batches
// (RunStoreOptions: how many, how old, retries after a failure that may pass,
// the bound on what is kept), and a run's end is written after its points, so
// a reader that sees the end sees every point. The thread that calls these
// (the store sink's, engine/train/) is not part of the store.
#include "engine/store/run_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/store/store_internal.h"

namespace tb {
using store_internal::json_text;
using store_internal::now_utc;
using store_internal::Query;
using store_internal::Transaction;

namespace {

#ifdef TRAINBENCH_VERSION
constexpr const char* kEngineVersion = TRAINBENCH_VERSION;
#else
constexpr const char* kEngineVersion = "unknown";
#endif

}  // namespace

// --- Writing -----------------------------------------------------------------

// A run on a full disk would train to its end and only then fail to be
// recorded: kRoomProbeBytes written beside the store (then removed) before a
// run is created say so at the start.
void RunStore::Impl::check_room() {
  const std::string probe = path + ".room-probe-" + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return;  // a folder we cannot write to: SQLite's own error says so
  static const std::vector<char> zeros(kRoomProbeBytes, 0);
  size_t written = 0;
  int error = 0;
  while (written < zeros.size() && error == 0) {
    const ssize_t n = ::write(fd, zeros.data() + written, zeros.size() - written);
    if (n > 0) written += static_cast<size_t>(n);
    else if (n == 0 || errno != EINTR) error = n == 0 ? ENOSPC : errno;
  }
  if (::close(fd) != 0 && error == 0) error = errno;
  ::unlink(probe.c_str());
  TB_CHECK(error == 0, "run database '", path, "': no room on its disk: writing ",
           kRoomProbeBytes / 1024, " KiB in its folder failed (", std::strerror(error),
           "); free some space and try again");
}

// Inside an open transaction; the points stay pending until the caller has
// committed (pending_written), so a rolled-back batch is retried whole, never
// point by point.
void RunStore::Impl::write_pending(size_t step_count, size_t epoch_count) {
  step_count = std::min(step_count, pending_steps.size());
  epoch_count = std::min(epoch_count, pending_epochs.size());
  if (step_count == 0 && epoch_count == 0) return;

  // One prepared insert per table for the whole batch.
  std::set<int64_t> runs;
  Query insert_step(*this,
                    "INSERT INTO step_metrics (run_id, series_id, step, wall_time, value) "
                    "VALUES (?, ?, ?, ?, ?)",
                    "writing step metrics");
  for (size_t i = 0; i < step_count; ++i) {
    const auto& [run, p] = pending_steps[i];
    insert_step.bind_int(1, run)
        .bind_int(2, series_id(p.name, true))
        .bind_int(3, p.step)
        .bind_real(4, p.wall_time)
        .bind_real(5, p.value);
    if (!insert_step.try_run())
      fail(detail::concat("writing step metrics of run ", run, " ('", p.name, "' at step ", p.step,
                          ")"));
    runs.insert(run);
  }
  Query insert_epoch(*this,
                     "INSERT INTO epoch_metrics (run_id, series_id, epoch, step, wall_time, value) "
                     "VALUES (?, ?, ?, ?, ?, ?)",
                     "writing epoch metrics");
  for (size_t i = 0; i < epoch_count; ++i) {
    const auto& [run, p] = pending_epochs[i];
    insert_epoch.bind_int(1, run)
        .bind_int(2, series_id(p.name, true))
        .bind_int(3, p.epoch)
        .bind_int(4, p.step)
        .bind_real(5, p.wall_time)
        .bind_real(6, p.value);
    if (!insert_epoch.try_run())
      fail(detail::concat("writing epoch metrics of run ", run, " ('", p.name, "' at epoch ",
                          p.epoch, ")"));
    runs.insert(run);
  }
  const std::string now = now_utc();
  for (int64_t run : runs)
    Query(*this, "UPDATE runs SET heartbeat_at = ? WHERE id = ?", "updating the heartbeat")
        .bind_text(1, now)
        .bind_int(2, run)
        .run();
}

void RunStore::Impl::pending_written(size_t steps, size_t epochs) {
  pending_steps.erase(pending_steps.begin(),
                      pending_steps.begin() + static_cast<ptrdiff_t>(std::min(steps, pending_steps.size())));
  pending_epochs.erase(pending_epochs.begin(),
                       pending_epochs.begin() +
                           static_cast<ptrdiff_t>(std::min(epochs, pending_epochs.size())));
  retry_after = {};
}

namespace {
// Failures that may pass: another process's lock, a full disk, an I/O error.
// Anything else (a constraint: a point of a deleted run) fails the same way again.
bool may_pass(int extended_code) {
  switch (extended_code & 0xff) {
    case SQLITE_BUSY: case SQLITE_LOCKED: case SQLITE_FULL: case SQLITE_IOERR: case SQLITE_NOMEM:
    case SQLITE_CANTOPEN: case SQLITE_PROTOCOL: case SQLITE_READONLY:
      return true;
    default:
      return false;
  }
}
}  // namespace

// In batches of at most batch_points, each committed on its own, oldest first:
// what piled up while the disk was full (or the lock held) is stored as far as
// the space that came back allows, instead of waiting for room for all of it
// in one transaction.
void RunStore::Impl::flush_pending() {
  while (!pending_steps.empty() || !pending_epochs.empty()) {
    const size_t steps = std::min(pending_steps.size(), options.batch_points);
    const size_t epochs = std::min(pending_epochs.size(), options.batch_points - steps);
    try {
      Transaction tx(*this, "writing metrics");
      write_pending(steps, epochs);
      tx.commit();
    } catch (const Error&) {
      if (may_pass(last_error_code)) {
        retry_after = std::chrono::steady_clock::now() + options.retry_interval;
      } else {
        pending_steps.clear();
        pending_epochs.clear();
      }
      throw;
    }
    pending_written(steps, epochs);
  }
}

// Keeps at most max_pending_points buffered: the oldest step points go first.
void RunStore::Impl::bound_pending() {
  const size_t n = pending_steps.size() + pending_epochs.size();
  if (n <= options.max_pending_points) return;
  const size_t excess = std::min(n - options.max_pending_points, pending_steps.size());
  pending_steps.erase(pending_steps.begin(), pending_steps.begin() + static_cast<ptrdiff_t>(excess));
  dropped_points += static_cast<int64_t>(excess);
}

void RunStore::Impl::maybe_flush() {
  bound_pending();
  const size_t n = pending_steps.size() + pending_epochs.size();
  if (n == 0) return;
  const auto now = std::chrono::steady_clock::now();
  if (now < retry_after) return;  // a failed batch waits before it is tried again
  if (n >= options.batch_points || now - oldest_pending >= options.batch_interval)
    flush_pending();
}

void RunStore::Impl::expect_one_change(int64_t id, const char* op) const {
  TB_CHECK(sqlite3_changes(db) == 1, "run database '", path, "': ", op, ": no run with id ", id);
}

void RunStore::Impl::update_status(int64_t id, const std::string& status,
                                   const std::string& error, const char* op) {
  Query(*this,
        "UPDATE runs SET status = ?1, error = ?2, heartbeat_at = ?3, "
        "started_at = CASE WHEN ?1 = 'running' THEN coalesce(started_at, ?3) ELSE started_at END, "
        "finished_at = CASE WHEN ?1 IN ('finished', 'failed', 'stopped') THEN ?3 ELSE NULL END "
        "WHERE id = ?4",
        op)
      .bind_text(1, status)
      .bind_text(2, valid_utf8(error))
      .bind_text(3, now_utc())
      .bind_int(4, id)
      .run();
  expect_one_change(id, op);
}

void RunStore::Impl::update_column(int64_t id, const char* column, const std::string& value,
                                   const char* op) {
  require_writable(op);
  Query(*this, detail::concat("UPDATE runs SET ", column, " = ? WHERE id = ?"), op)
      .bind_text(1, valid_utf8(value))
      .bind_int(2, id)
      .run();
  expect_one_change(id, op);
}

// --- Runs, metrics and events ------------------------------------------------

int64_t RunStore::create_run(const RunRecord& run) {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  d.require_writable("creating a run");
  d.check_room();
  const std::string status = run.status.empty() ? run_status::kQueued : run.status;
  TB_CHECK(is_valid_run_status(status), "invalid run status '", status, "'");
  const std::string now = now_utc();
  Query q(d,
          "INSERT INTO runs (name, created_at, started_at, finished_at, status, config_json, "
          "environment_json, engine_version, tricks_json, summary_json, error, tags, notes, "
          "heartbeat_at, engine_pid, engine_host) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
          "creating a run");
  q.bind_text(1, valid_utf8(run.name))
      .bind_text(2, run.created_at.empty() ? now : run.created_at)
      .bind_optional_text(3, run.started_at)
      .bind_optional_text(4, run.finished_at)
      .bind_text(5, status)
      .bind_text(6, json_text(run.config))
      .bind_text(7, json_text(run.environment))
      .bind_text(8, valid_utf8(run.engine_version.empty() ? kEngineVersion : run.engine_version))
      .bind_text(9, json_text(run.tricks))
      .bind_text(10, json_text(run.summary))
      .bind_text(11, valid_utf8(run.error))
      .bind_text(12, valid_utf8(run.tags))
      .bind_text(13, valid_utf8(run.notes))
      .bind_text(14, run.heartbeat_at.empty() ? now : run.heartbeat_at)
      .bind_optional_int(15, run.engine_pid)
      .bind_text(16, valid_utf8(run.engine_host));
  q.run();
  return sqlite3_last_insert_rowid(d.db);
}

void RunStore::set_status(int64_t id, const std::string& status, const std::string& error) {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  d.require_writable("setting the status of a run");
  TB_CHECK(is_valid_run_status(status), "invalid run status '", status,
           "' (expected queued, running, finished, failed or stopped)");
  // Every point before the status (in batches, as far as there is room, then
  // the rest with the status): whoever sees the final status sees every point.
  d.flush_pending();
  Transaction tx(d, "setting the status of a run");
  d.write_pending();
  d.update_status(id, status, error, "setting the status of a run");
  tx.commit();
  d.pending_written();
}

void RunStore::start_run(int64_t id, const nlohmann::json& environment,
                         const nlohmann::json& tricks, const nlohmann::json& plan) {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  d.require_writable("starting a run");
  const char* op = "starting a run";
  Transaction tx(d, op);
  Query(d,
        "UPDATE runs SET environment_json = ?, tricks_json = ?, "
        "summary_json = COALESCE(?, summary_json) WHERE id = ?",
        op)
      .bind_text(1, json_text(environment))
      .bind_text(2, json_text(tricks))
      .bind_optional_text(3, plan.empty() ? std::string() : json_text(plan))
      .bind_int(4, id)
      .run();
  d.expect_one_change(id, op);
  d.update_status(id, run_status::kRunning, "", op);
  tx.commit();
}

void RunStore::finish_run(int64_t id, const std::string& status, const nlohmann::json& summary,
                          const std::string& error) {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  d.require_writable("recording the end of a run");
  TB_CHECK(is_terminal_run_status(status), "invalid final run status '", status,
           "' (expected finished, failed or stopped)");
  const char* op = "recording the end of a run";
  // Points first (in batches, as far as there is room), then summary and status
  // with any rest: a reader that sees the end sees everything.
  d.flush_pending();
  Transaction tx(d, op);
  d.write_pending();
  Query(d, "UPDATE runs SET summary_json = ? WHERE id = ?", op)
      .bind_text(1, json_text(summary))
      .bind_int(2, id)
      .run();
  d.expect_one_change(id, op);
  d.update_status(id, status, error, op);
  tx.commit();
  d.pending_written();
}

void RunStore::set_summary(int64_t id, const nlohmann::json& summary) {
  std::lock_guard lock(impl().mutex);
  impl_->update_column(id, "summary_json", json_text(summary), "setting a run's summary");
}

void RunStore::set_tricks(int64_t id, const nlohmann::json& tricks) {
  std::lock_guard lock(impl().mutex);
  impl_->update_column(id, "tricks_json", json_text(tricks), "setting a run's tricks");
}

void RunStore::set_environment(int64_t id, const nlohmann::json& environment) {
  std::lock_guard lock(impl().mutex);
  impl_->update_column(id, "environment_json", json_text(environment),
                       "setting a run's environment");
}

void RunStore::rename_run(int64_t id, const std::string& name) {
  std::lock_guard lock(impl().mutex);
  impl_->update_column(id, "name", name, "renaming a run");
}

void RunStore::set_tags(int64_t id, const std::string& tags) {
  std::lock_guard lock(impl().mutex);
  impl_->update_column(id, "tags", tags, "setting a run's tags");
}

void RunStore::set_notes(int64_t id, const std::string& notes) {
  std::lock_guard lock(impl().mutex);
  impl_->update_column(id, "notes", notes, "setting a run's notes");
}

void RunStore::heartbeat(int64_t id) {
  std::lock_guard lock(impl().mutex);
  impl_->update_column(id, "heartbeat_at", now_utc(), "updating a run's heartbeat");
}

void RunStore::delete_run(int64_t id) {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  d.require_writable("deleting a run");
  // Buffered points of this run would break the next batch's foreign keys.
  std::erase_if(d.pending_steps, [id](const auto& p) { return p.run == id; });
  std::erase_if(d.pending_epochs, [id](const auto& p) { return p.run == id; });
  Query(d, "DELETE FROM runs WHERE id = ?", "deleting a run").bind_int(1, id).run();
  d.expect_one_change(id, "deleting a run");
}

void RunStore::append_step_metrics(int64_t run, const std::vector<MetricPoint>& points) {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  d.require_writable("appending metrics");
  if (points.empty()) return;
  if (d.pending_steps.empty() && d.pending_epochs.empty())
    d.oldest_pending = std::chrono::steady_clock::now();
  for (const auto& p : points) d.pending_steps.push_back({run, p});
  d.maybe_flush();
}

void RunStore::append_epoch_metrics(int64_t run, const std::vector<EpochPoint>& points) {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  d.require_writable("appending metrics");
  if (points.empty()) return;
  if (d.pending_steps.empty() && d.pending_epochs.empty())
    d.oldest_pending = std::chrono::steady_clock::now();
  for (const auto& p : points) d.pending_epochs.push_back({run, p});
  d.maybe_flush();
}

void RunStore::flush() {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  d.flush_pending();
}

size_t RunStore::pending_points() const {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  return d.pending_steps.size() + d.pending_epochs.size();
}

int64_t RunStore::dropped_points() const {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  return d.dropped_points;
}

void RunStore::append_event(int64_t run, const std::string& level, const std::string& message) {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  d.require_writable("appending an event");
  Query(d, "INSERT INTO events (run_id, time, level, message) VALUES (?, ?, ?, ?)",
        detail::concat("appending an event to run ", run))
      .bind_int(1, run)
      .bind_text(2, now_utc())
      .bind_text(3, valid_utf8(level))
      .bind_text(4, valid_utf8(message))
      .run();
}

}  // namespace tb
