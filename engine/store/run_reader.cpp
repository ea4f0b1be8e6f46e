// SPDX-License-Identifier: GPL-3.0-or-later
// What the GUI and the CLI read: runs, with the status a reader shows and any
// damage named, their metric series and events, and the data version a
// follower polls. Committed data only: a writer's buffered points are not
// visible until flushed. Whether a run's engine is gone is liveness.cpp's.
#include "engine/store/run_store.h"

#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/store/store_internal.h"

namespace tb {
using store_internal::parse_json_column;
using store_internal::Query;

// The columns read_run expects, in its order; columns a schema version does not
// have yet read as their defaults (a ReadOnly store never migrates).
std::string RunStore::Impl::run_columns() const {
  std::string cols =
      "id, name, created_at, started_at, finished_at, status, config_json, environment_json, "
      "engine_version, tricks_json, summary_json, error, ";
  cols += version >= 2 ? "tags, notes, heartbeat_at, " : "'', '', NULL, ";
  cols += version >= 3 ? "engine_pid, engine_host" : "NULL, ''";
  return cols;
}

// One damaged column never hides the run or the rest of the store: text that is
// not UTF-8 gets U+FFFD, a JSON column that is not an object reads as {}, and
// either is named in `problems`.
RunRecord RunStore::Impl::read_run(sqlite3_stmt* s, std::chrono::system_clock::time_point now) const {
  static constexpr const char* kNames[] = {
      "id", "name", "created_at", "started_at", "finished_at", "status", "config_json",
      "environment_json", "engine_version", "tricks_json", "summary_json", "error", "tags",
      "notes", "heartbeat_at", "engine_pid", "engine_host"};
  RunRecord r;
  auto text = [&](int col) {
    std::string raw = Query::column_text(s, col);
    std::string clean = valid_utf8(raw);
    if (clean != raw) r.problems.push_back(detail::concat(kNames[col], ": not valid UTF-8"));
    return clean;
  };
  r.id = sqlite3_column_int64(s, 0);
  r.name = text(1);
  r.created_at = text(2);
  r.started_at = text(3);
  r.finished_at = text(4);
  r.recorded_status = text(5);
  r.config = parse_json_column(text(6), kNames[6], r.problems);
  r.environment = parse_json_column(text(7), kNames[7], r.problems);
  r.engine_version = text(8);
  r.tricks = parse_json_column(text(9), kNames[9], r.problems);
  r.summary = parse_json_column(text(10), kNames[10], r.problems);
  r.error = text(11);
  r.tags = text(12);
  r.notes = text(13);
  r.heartbeat_at = text(14);
  r.engine_pid = sqlite3_column_int64(s, 15);  // NULL reads as 0: unknown
  r.engine_host = text(16);
  r.status = r.recorded_status;
  const std::string gone = engine_gone_reason(r, now, kDefaultStaleAfter);
  if (!gone.empty()) {
    r.status = run_status::kInterrupted;
    r.error = r.error.empty() ? gone : r.error + "; " + gone;
  }
  return r;
}

// --- Reading -----------------------------------------------------------------

int64_t RunStore::data_version() const {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  Query q(d, "PRAGMA data_version", "reading the data version");
  q.next();
  return q.int_at(0);
}

std::vector<RunRecord> RunStore::list_runs() const {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  Query q(d, detail::concat("SELECT ", d.run_columns(), " FROM runs ORDER BY id"), "listing runs");
  std::vector<RunRecord> runs;
  const auto now = std::chrono::system_clock::now();
  while (q.next()) runs.push_back(d.read_run(q.stmt(), now));
  return runs;
}

std::optional<RunRecord> RunStore::get_run(int64_t id) const {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  Query q(d, detail::concat("SELECT ", d.run_columns(), " FROM runs WHERE id = ?"),
          "reading a run");
  q.bind_int(1, id);
  if (!q.next()) return std::nullopt;
  return d.read_run(q.stmt(), std::chrono::system_clock::now());
}

namespace {
// EXISTS per series walks the (run_id, series_id, ...) index instead of every
// point of the run.
constexpr const char* kSeriesNamesSql =
    "SELECT s.name FROM series s WHERE EXISTS "
    "(SELECT 1 FROM %s m WHERE m.run_id = ? AND m.series_id = s.id) ORDER BY s.name";

std::string series_names_sql(const char* table) {
  // Concatenated, not std::string::replace: GCC 12 at -O3 warns (-Wrestrict)
  // on the inlined replace, a known false positive.
  const std::string sql = kSeriesNamesSql;
  const size_t at = sql.find("%s");
  return sql.substr(0, at) + table + sql.substr(at + 2);
}
}  // namespace

std::vector<std::string> RunStore::step_series_names(int64_t run) const {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  Query q(d, series_names_sql("step_metrics"), "listing step series");
  q.bind_int(1, run);
  std::vector<std::string> names;
  while (q.next()) names.push_back(q.text_at(0));
  return names;
}

std::vector<std::string> RunStore::epoch_series_names(int64_t run) const {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  Query q(d, series_names_sql("epoch_metrics"), "listing epoch series");
  q.bind_int(1, run);
  std::vector<std::string> names;
  while (q.next()) names.push_back(q.text_at(0));
  return names;
}

std::vector<MetricPoint> RunStore::step_series(int64_t run, const std::string& name,
                                               int64_t after_step) const {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  std::vector<MetricPoint> points;
  const int64_t series = d.series_id(name, false);
  if (series < 0) return points;
  Query q(d,
          "SELECT step, wall_time, value FROM step_metrics "
          "WHERE run_id = ? AND series_id = ? AND step > ? ORDER BY step, rowid",
          "reading a step series");
  q.bind_int(1, run).bind_int(2, series).bind_int(3, after_step);
  while (q.next()) points.push_back({name, q.int_at(0), q.real_at(1), q.real_at(2)});
  return points;
}

std::vector<EpochPoint> RunStore::epoch_series(int64_t run, const std::string& name,
                                               int64_t after_epoch) const {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  std::vector<EpochPoint> points;
  const int64_t series = d.series_id(name, false);
  if (series < 0) return points;
  Query q(d,
          "SELECT epoch, step, wall_time, value FROM epoch_metrics "
          "WHERE run_id = ? AND series_id = ? AND epoch > ? ORDER BY epoch, rowid",
          "reading an epoch series");
  q.bind_int(1, run).bind_int(2, series).bind_int(3, after_epoch);
  while (q.next()) points.push_back({name, q.int_at(0), q.int_at(1), q.real_at(2), q.real_at(3)});
  return points;
}

std::vector<EventRecord> RunStore::events(int64_t run, int64_t after_id) const {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  Query q(d, "SELECT id, time, level, message FROM events WHERE run_id = ? AND id > ? ORDER BY id",
          "reading events");
  q.bind_int(1, run).bind_int(2, after_id);
  std::vector<EventRecord> events;
  while (q.next()) events.push_back({q.int_at(0), q.text_at(1), q.text_at(2), q.text_at(3)});
  return events;
}

}  // namespace tb
