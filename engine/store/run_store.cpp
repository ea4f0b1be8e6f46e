// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/store/run_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/core/error.h"
#include "engine/metrics/layer_profile.h"

namespace tb {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

#ifdef TRAINBENCH_VERSION
constexpr const char* kEngineVersion = TRAINBENCH_VERSION;
#else
constexpr const char* kEngineVersion = "unknown";
#endif

// migrations[N-1] brings schema version N-1 to N. Never edit a shipped entry:
// databases in the field were made by it. Append a new one instead.
constexpr const char* kMigrations[] = {
    // v1: the initial tables.
    R"sql(
CREATE TABLE schema_version (version INTEGER NOT NULL);
INSERT INTO schema_version (version) VALUES (0);
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
CREATE TABLE series (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE
);
CREATE TABLE step_metrics (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  series_id INTEGER NOT NULL REFERENCES series(id),
  step INTEGER NOT NULL,
  wall_time REAL NOT NULL,
  value REAL
);
CREATE INDEX step_metrics_by_series ON step_metrics (run_id, series_id, step);
CREATE TABLE epoch_metrics (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  series_id INTEGER NOT NULL REFERENCES series(id),
  epoch INTEGER NOT NULL,
  step INTEGER NOT NULL,
  wall_time REAL NOT NULL,
  value REAL
);
CREATE INDEX epoch_metrics_by_series ON epoch_metrics (run_id, series_id, epoch);
CREATE TABLE events (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  time TEXT NOT NULL,
  level TEXT NOT NULL,
  message TEXT NOT NULL
);
CREATE INDEX events_by_run ON events (run_id, id);
)sql",
    // v2: user tags and notes, the writer's heartbeat, and the GUI's status filter.
    R"sql(
ALTER TABLE runs ADD COLUMN tags TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN notes TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN heartbeat_at TEXT;
CREATE INDEX runs_by_status ON runs (status);
)sql",
    // v3: the writing engine's process id and host, so a reader on the same host
    // can tell a live writer from a dead one and can ask it to stop.
    R"sql(
ALTER TABLE runs ADD COLUMN engine_pid INTEGER;
ALTER TABLE runs ADD COLUMN engine_host TEXT NOT NULL DEFAULT '';
)sql",
    // v4: ladders (a baseline and rungs measured in interleaved repeats), the
    // runs of each linked by rung and repetition, and links between runs (an
    // advisor's before/after pair).
    R"sql(
CREATE TABLE ladders (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL DEFAULT '',
  created_at TEXT NOT NULL,
  finished_at TEXT,
  status TEXT NOT NULL DEFAULT 'running'
    CHECK (status IN ('running', 'finished', 'failed', 'stopped')),
  error TEXT NOT NULL DEFAULT '',
  spec_json TEXT NOT NULL DEFAULT '{}',
  result_json TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE ladder_runs (
  ladder_id INTEGER NOT NULL REFERENCES ladders(id) ON DELETE CASCADE,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  rung INTEGER NOT NULL,
  repetition INTEGER NOT NULL,
  kind TEXT NOT NULL DEFAULT 'speed' CHECK (kind IN ('speed', 'accuracy')),
  PRIMARY KEY (ladder_id, run_id)
);
CREATE INDEX ladder_runs_by_run ON ladder_runs (run_id);
CREATE TABLE run_links (
  from_run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  to_run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  kind TEXT NOT NULL,
  created_at TEXT NOT NULL,
  note_json TEXT NOT NULL DEFAULT '{}',
  PRIMARY KEY (from_run, to_run, kind)
);
CREATE INDEX run_links_by_to ON run_links (to_run);
)sql",
    // v5: per-layer profiles of sampled steps (engine/metrics/layer_profile.h):
    // a step's time, and its rows (layer, phase, time, counted work) in order.
    R"sql(
CREATE TABLE layer_profile_steps (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  step_time_ms REAL NOT NULL,
  PRIMARY KEY (run_id, step)
);
CREATE TABLE layer_profile_rows (
  run_id INTEGER NOT NULL,
  step INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  layer TEXT NOT NULL,
  kind TEXT NOT NULL,
  phase TEXT NOT NULL,
  time_ms REAL NOT NULL,
  flops REAL,
  bytes REAL,
  PRIMARY KEY (run_id, step, seq),
  FOREIGN KEY (run_id, step) REFERENCES layer_profile_steps (run_id, step) ON DELETE CASCADE
);
)sql",
};
static_assert(std::size(kMigrations) == RunStore::kSchemaVersion,
              "one migration per schema version");

// Fixed width with milliseconds, so that text order is time order.
std::string iso_utc(std::chrono::system_clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch());
  const std::time_t secs = static_cast<std::time_t>(ms.count() / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[80];  // roomy enough for any int the compiler imagines
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms.count() % 1000));
  return buf;
}

std::string now_utc() { return iso_utc(std::chrono::system_clock::now()); }

std::optional<std::chrono::system_clock::time_point> parse_iso_utc(const std::string& text) {
  std::tm tm{};
  int ms = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3d", &tm.tm_year, &tm.tm_mon,
                  &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) < 6)
    return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const std::time_t secs = timegm(&tm);
  if (secs == static_cast<std::time_t>(-1)) return std::nullopt;
  return std::chrono::system_clock::from_time_t(secs) + std::chrono::milliseconds(ms);
}

std::string json_text(const json& j) {
  if (j.is_null()) return "{}";
  // Replace invalid UTF-8 instead of throwing: a run's config must not fail to save.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// A JSON column: an object, or {} with the damage described in `problems`.
json parse_json_column(const std::string& text, const char* column,
                       std::vector<std::string>& problems) {
  try {
    json j = json::parse(text);
    if (j.is_object()) return j;
    problems.push_back(detail::concat(column, ": expected a JSON object, found ", j.type_name()));
  } catch (const json::exception& e) {
    problems.push_back(detail::concat(column, ": not valid JSON (", e.what(), ")"));
  }
  return json::object();
}

// The process exists and is not a zombie (a killed engine its parent has not
// reaped yet is gone all the same).
bool process_alive(int64_t pid) {
  if (pid <= 0 || pid > std::numeric_limits<pid_t>::max()) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;  // no /proc: trust kill()
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return true;
  const char state = line[paren + 2];
  return state != 'Z' && state != 'X';
}

const std::string& cached_host_name() {
  static const std::string name = this_host_name();
  return name;
}

}  // namespace

std::string valid_utf8(std::string text) {
  // Fast path: most text is valid and comes back as it is.
  auto sequence_length = [&](size_t i) -> size_t {  // 0: invalid at i
    const auto c = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
    const unsigned char b = c(i);
    if (b < 0x80) return 1;
    size_t n;
    uint32_t min, cp;
    if ((b & 0xE0) == 0xC0) n = 2, min = 0x80, cp = b & 0x1F;
    else if ((b & 0xF0) == 0xE0) n = 3, min = 0x800, cp = b & 0x0F;
    else if ((b & 0xF8) == 0xF0) n = 4, min = 0x10000, cp = b & 0x07;
    else return 0;
    if (i + n > text.size()) return 0;
    for (size_t k = 1; k < n; ++k) {
      if ((c(i + k) & 0xC0) != 0x80) return 0;
      cp = (cp << 6) | (c(i + k) & 0x3F);
    }
    // Overlong forms, UTF-16 surrogates and code points past U+10FFFF are invalid.
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
  };
  size_t i = 0;
  while (i < text.size()) {
    const size_t n = sequence_length(i);
    if (n == 0) break;
    i += n;
  }
  if (i == text.size()) return text;
  std::string out = text.substr(0, i);
  while (i < text.size()) {
    const size_t n = sequence_length(i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD for each bad byte
      ++i;
    } else {
      out.append(text, i, n);
      i += n;
    }
  }
  return out;
}

std::string engine_gone_reason(const RunRecord& r, std::chrono::system_clock::time_point now,
                               std::chrono::milliseconds stale_after) {
  const std::string& status = r.recorded_status.empty() ? r.status : r.recorded_status;
  if (status != run_status::kQueued && status != run_status::kRunning) return "";
  if (r.engine_pid > 0 && !r.engine_host.empty() && r.engine_host == cached_host_name() &&
      !process_alive(r.engine_pid))
    return detail::concat("the engine (process ", r.engine_pid, " on ", r.engine_host,
                          ") ended without recording the end of the run (killed, crashed, or "
                          "its run store could not be written)");
  // Runs from schema v1 have no heartbeat; their start time stands in for it.
  const std::string& beat =
      !r.heartbeat_at.empty() ? r.heartbeat_at
                              : (!r.started_at.empty() ? r.started_at : r.created_at);
  const auto last = parse_iso_utc(beat);
  const auto age = last ? now - *last : std::chrono::system_clock::duration::max();
  if (age <= stale_after) return "";
  const std::string seen =
      last ? detail::concat("no heartbeat for ",
                            std::chrono::duration_cast<std::chrono::seconds>(age).count(), " s")
           : detail::concat("no readable heartbeat ('", beat, "')");
  return detail::concat(seen, ": the engine",
                        r.engine_pid > 0 ? detail::concat(" (process ", r.engine_pid, " on ",
                                                          r.engine_host.empty() ? "an unknown host"
                                                                                : r.engine_host,
                                                          ")")
                                         : std::string(),
                        " stopped without recording the end of the run");
}

bool is_valid_run_status(const std::string& s) {
  return s == run_status::kQueued || s == run_status::kRunning || is_terminal_run_status(s);
}

bool is_terminal_run_status(const std::string& s) {
  return s == run_status::kFinished || s == run_status::kFailed || s == run_status::kStopped;
}

// --- Connection state ------------------------------------------------------

struct RunStore::Impl {
  struct PendingStep {
    int64_t run;
    MetricPoint point;
  };
  struct PendingEpoch {
    int64_t run;
    EpochPoint point;
  };

  std::string path;
  Mode mode = Mode::ReadWrite;
  RunStoreOptions options;
  sqlite3* db = nullptr;
  int version = 0;  // the file's schema version (ReadOnly reads older ones as they are)
  int last_error_code = SQLITE_OK;  // of the last failure, kept past a rollback
  std::chrono::steady_clock::time_point retry_after{};  // no automatic flush before
  int64_t dropped_points = 0;
  std::unordered_map<std::string, sqlite3_stmt*> statements;
  // Series ids never change once committed, so a name is looked up once.
  std::unordered_map<std::string, int64_t> series_ids;
  std::deque<PendingStep> pending_steps;  // the bound drops from the front
  std::vector<PendingEpoch> pending_epochs;
  std::chrono::steady_clock::time_point oldest_pending;
  std::mutex mutex;

  ~Impl() {
    for (auto& [sql, stmt] : statements) sqlite3_finalize(stmt);
    if (db) sqlite3_close_v2(db);
  }

  [[noreturn]] void fail(const std::string& op) {
    last_error_code = sqlite3_extended_errcode(db);
    TB_FAIL("run database '", path, "': ", op, ": ", sqlite3_errmsg(db), " (SQLite code ",
            sqlite3_extended_errcode(db), ")");
  }

  void require_writable(const char* op) const {
    TB_CHECK(mode == Mode::ReadWrite, "run database '", path, "': ", op,
             ": the store was opened read-only");
  }

  sqlite3_stmt* prepare(const std::string& sql, const std::string& op) {
    if (auto it = statements.find(sql); it != statements.end()) return it->second;
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v3(db, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr) !=
        SQLITE_OK)
      fail(op);
    statements.emplace(sql, stmt);
    return stmt;
  }

  void exec_script(const char* sql, const std::string& op) {
    char* message = nullptr;
    if (sqlite3_exec(db, sql, nullptr, nullptr, &message) != SQLITE_OK) {
      const std::string text = message ? message : sqlite3_errmsg(db);
      sqlite3_free(message);
      TB_FAIL("run database '", path, "': ", op, ": ", text);
    }
  }

  void open();
  void check_room();
  int read_version();
  void migrate();
  std::string run_columns() const;
  int64_t series_id(const std::string& name, bool create);
  // The first `steps` step points and `epochs` epoch points pending (all by default).
  void write_pending(size_t steps = SIZE_MAX, size_t epochs = SIZE_MAX);
  void pending_written(size_t steps = SIZE_MAX, size_t epochs = SIZE_MAX);
  void flush_pending();
  void bound_pending();
  void maybe_flush();
  void update_column(int64_t id, const char* column, const std::string& value, const char* op);
  void update_status(int64_t id, const std::string& status, const std::string& error,
                     const char* op);
  void expect_one_change(int64_t id, const char* op) const;
  RunRecord read_run(sqlite3_stmt* stmt, std::chrono::system_clock::time_point now) const;
};

namespace {

// A cached prepared statement in use; resets it on scope exit so it can be reused.
class Query {
 public:
  Query(RunStore::Impl& impl, const std::string& sql, std::string op)
      : impl_(impl), op_(std::move(op)), stmt_(impl.prepare(sql, op_)) {}
  ~Query() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;

  Query& bind_int(int i, int64_t v) { return check(sqlite3_bind_int64(stmt_, i, v)); }
  Query& bind_text(int i, const std::string& v) {
    return check(
        sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  // SQLite has no NaN: it would store NULL anyway, so say so explicitly.
  Query& bind_real(int i, double v) {
    return check(std::isnan(v) ? sqlite3_bind_null(stmt_, i) : sqlite3_bind_double(stmt_, i, v));
  }
  Query& bind_optional_text(int i, const std::string& v) {
    return v.empty() ? check(sqlite3_bind_null(stmt_, i)) : bind_text(i, v);
  }
  Query& bind_optional_int(int i, int64_t v) {  // 0 means "not known"
    return v == 0 ? check(sqlite3_bind_null(stmt_, i)) : bind_int(i, v);
  }

  // True while a row is available.
  bool next() {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    impl_.fail(op_);
  }
  void run() {
    while (next()) {
    }
  }
  // For a statement reused in a loop: runs it and makes it ready for new
  // bindings. On failure returns false and leaves SQLite's message in place
  // for the caller's more specific error.
  bool try_run() {
    int rc;
    while ((rc = sqlite3_step(stmt_)) == SQLITE_ROW) {
    }
    if (rc != SQLITE_DONE) return false;
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
    return true;
  }

  sqlite3_stmt* stmt() const { return stmt_; }
  int64_t int_at(int col) const { return sqlite3_column_int64(stmt_, col); }
  double real_at(int col) const {
    return sqlite3_column_type(stmt_, col) == SQLITE_NULL ? std::numeric_limits<double>::quiet_NaN()
                                                          : sqlite3_column_double(stmt_, col);
  }
  std::string text_at(int col) const { return column_text(stmt_, col); }

  static std::string column_text(sqlite3_stmt* stmt, int col) {
    const auto* p = sqlite3_column_text(stmt, col);
    return p ? std::string(reinterpret_cast<const char*>(p),
                           static_cast<size_t>(sqlite3_column_bytes(stmt, col)))
             : std::string();
  }

 private:
  Query& check(int rc) {
    if (rc != SQLITE_OK) impl_.fail(op_);
    return *this;
  }

  RunStore::Impl& impl_;
  std::string op_;
  sqlite3_stmt* stmt_;
};

// BEGIN IMMEDIATE takes the write lock up front, so a busy database makes us
// wait (busy_timeout) instead of failing when a read would turn into a write.
// Rolled back unless committed.
class Transaction {
 public:
  Transaction(RunStore::Impl& impl, std::string op) : impl_(impl), op_(std::move(op)) {
    Query(impl_, "BEGIN IMMEDIATE", op_).run();
  }
  void commit() {
    Query(impl_, "COMMIT", op_).run();
    committed_ = true;
  }
  ~Transaction() {
    if (committed_) return;
    // Some errors (disk full, I/O) already rolled back on their own.
    if (!sqlite3_get_autocommit(impl_.db))
      sqlite3_exec(impl_.db, "ROLLBACK", nullptr, nullptr, nullptr);
    impl_.series_ids.clear();  // may hold ids inserted by the undone transaction
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

 private:
  RunStore::Impl& impl_;
  std::string op_;
  bool committed_ = false;
};

}  // namespace

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

// --- Opening and migrating ---------------------------------------------------

int RunStore::Impl::read_version() {
  {
    Query q(*this,
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'",
            "reading the schema");
    q.next();
    if (q.int_at(0) == 0) {
      Query all(*this, "SELECT count(*) FROM sqlite_master", "reading the schema");
      all.next();
      TB_CHECK(all.int_at(0) == 0, "'", path,
               "' is an SQLite database but not a Trainbench run database (it has no "
               "schema_version table)");
      return 0;  // a new, empty file
    }
  }
  Query q(*this, "SELECT max(version) FROM schema_version", "reading the schema version");
  TB_CHECK(q.next() && sqlite3_column_type(q.stmt(), 0) == SQLITE_INTEGER, "run database '", path,
           "' has an empty schema_version table; it is damaged");
  return static_cast<int>(q.int_at(0));
}

void RunStore::Impl::open() {
  // Look before changing anything: a database from a newer Trainbench must
  // be left exactly as it is, journal mode included.
  version = read_version();
  TB_CHECK(version <= kSchemaVersion, "run database '", path, "' has schema version ", version,
           " but this Trainbench knows versions up to ", kSchemaVersion,
           "; open it with a newer Trainbench (the file was not changed)");
  Query(*this, "PRAGMA foreign_keys = ON", "enabling foreign keys").run();
  if (mode == Mode::ReadOnly) {
    TB_CHECK(version > 0, "'", path, "' is not a Trainbench run database (it is empty)");
    return;
  }
  // WAL lets readers in other processes work while the engine writes; NORMAL
  // sync is durable up to the last checkpoint and never corrupts on a crash.
  Query(*this, "PRAGMA journal_mode = WAL", "switching to WAL mode").run();
  Query(*this, "PRAGMA synchronous = NORMAL", "setting synchronous mode").run();
  // Checkpoints keep the WAL file reused; this trims it back after a burst.
  Query(*this, "PRAGMA journal_size_limit = 67108864", "limiting the WAL size").run();
  migrate();
}

void RunStore::Impl::migrate() {
  // Up to date (the usual case): no transaction, so no write lock is waited for.
  if (version == kSchemaVersion) return;
  for (;;) {
    // One transaction per migration; the version is read again inside it
    // because another process may have upgraded the file meanwhile.
    Transaction tx(*this, "upgrading the schema");
    const int version = read_version();
    TB_CHECK(version <= kSchemaVersion, "run database '", path, "' has schema version ", version,
             " but this Trainbench knows versions up to ", kSchemaVersion);
    if (version == kSchemaVersion) {
      tx.commit();
      this->version = version;
      return;
    }
    const std::string op =
        detail::concat("upgrading the schema from version ", version, " to ", version + 1);
    exec_script(kMigrations[version], op);
    Query(*this, "UPDATE schema_version SET version = ?", op).bind_int(1, version + 1).run();
    tx.commit();
  }
}

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

int64_t RunStore::Impl::series_id(const std::string& name, bool create) {
  if (auto it = series_ids.find(name); it != series_ids.end()) return it->second;
  if (create)
    Query(*this, "INSERT OR IGNORE INTO series (name) VALUES (?)", "adding a metric series")
        .bind_text(1, name)
        .run();
  Query q(*this, "SELECT id FROM series WHERE name = ?", "looking up a metric series");
  q.bind_text(1, name);
  if (!q.next()) return -1;
  const int64_t id = q.int_at(0);
  series_ids.emplace(name, id);
  return id;
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

std::string this_host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

// --- RunStore ----------------------------------------------------------------

std::string RunStore::default_path() {
  fs::path base;
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg && fs::path(xdg).is_absolute()) {
    base = xdg;
  } else {
    const char* home = std::getenv("HOME");
    TB_CHECK(home && *home,
             "cannot locate the run database: neither XDG_DATA_HOME nor HOME is set "
             "(name one with --db or TRAINBENCH_DB)");
    base = fs::path(home) / ".local" / "share";
  }
  return (base / "trainbench" / "runs.db").string();
}

namespace {
// "file:" URI of a path, for SQLite's URI parameters.
std::string file_uri(const std::string& path) {
  std::string uri = "file:";
  const std::string abs = fs::absolute(path).string();
  for (unsigned char c : abs) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '_' || c == '.' || c == '~') {
      uri += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      uri += buf;
    }
  }
  return uri;
}

sqlite3* open_connection(const std::string& name, int flags, const std::string& path) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(name.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    const std::string message = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    if (db) sqlite3_close_v2(db);
    TB_FAIL("cannot open run database '", path, "': ", message);
  }
  return db;
}
}  // namespace

RunStore::RunStore(const std::string& path, Mode mode, const RunStoreOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  d.path = path;
  d.mode = mode;
  d.options = options;
  if (d.options.batch_points == 0) d.options.batch_points = 1;

  // SQLite only says "unable to open database file"; name the actual cause.
  TB_CHECK(!path.empty(), "cannot open a run database: the path is empty");
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  TB_CHECK(parent.empty() || fs::is_directory(parent, ec), "cannot open run database '", path,
           "': the folder '", parent.string(), "' does not exist");
  TB_CHECK(!fs::is_directory(path, ec), "cannot open run database '", path,
           "': it is a folder; name a file in it, e.g. '", (fs::path(path) / "runs.db").string(),
           "'");
  const bool exists = fs::exists(path, ec);
  TB_CHECK(mode == Mode::ReadWrite || exists, "cannot open run database '", path,
           "' read-only: the file does not exist");
  // SQLite would take an empty file as an empty database and make it a store:
  // a file someone else created (touch, mktemp) is not ours to convert.
  TB_CHECK(!exists || fs::file_size(path, ec) > 0 || ec, "cannot open run database '", path,
           "': the file exists but is empty, so it was not made as a run store; remove it or "
           "name another file");
  if (mode == Mode::ReadWrite && !exists) {
    const std::string folder = parent.empty() ? "." : parent.string();
    TB_CHECK(::access(folder.c_str(), W_OK | X_OK) == 0, "cannot create run database '", path,
             "': the folder '", folder, "' is not writable (", std::strerror(errno),
             "); name a store in a folder you can write to");
  }

  // No SQLite mutex: Impl::mutex serialises every use of the connection.
  const int flags =
      (mode == Mode::ReadOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) |
      SQLITE_OPEN_NOMUTEX;
  auto connect = [&](const std::string& name, int extra) {
    d.db = open_connection(name, flags | extra, path);
    sqlite3_extended_result_codes(d.db, 1);
    sqlite3_busy_timeout(d.db, static_cast<int>(d.options.busy_timeout.count()));
  };
  // A reader must not leave files beside a store that is not its own: opening
  // a WAL store makes SQLite create a missing -wal and -shm, owned by the
  // reader, and the owner's next writer cannot write another user's -shm
  // ("attempt to write a readonly database"). (Root's are given to the store's
  // owner by SQLite itself.) With both files there SQLite creates nothing.
  // Without them no connection is open (each one has both), so an empty or
  // missing -wal means nothing uncheckpointed and the file is read as
  // immutable; a writer that starts during that read may make it fail.
  bool immutable = false;
  if (mode == Mode::ReadOnly) {
    struct stat st {};
    const bool ours =
        ::stat(path.c_str(), &st) == 0 && (st.st_uid == ::geteuid() || ::geteuid() == 0);
    if (!ours && !(fs::exists(path + "-shm", ec) && fs::exists(path + "-wal", ec))) {
      TB_CHECK(!fs::exists(path + "-wal", ec) || fs::file_size(path + "-wal", ec) == 0,
               "cannot read run database '", path, "': its last writer left changes in '", path,
               "-wal', and reading them would leave a '-shm' file of yours beside a store that "
               "is not yours (its owner could no longer write it); let the owner open it once "
               "(e.g. `trainbench-engine list`), or read a copy");
      immutable = true;
    }
  }
  if (immutable) connect(file_uri(path) + "?immutable=1", SQLITE_OPEN_URI);
  else connect(path, 0);
  try {
    d.open();
  } catch (const Error&) {
    if (immutable) throw;
    // A full disk fails the open itself (no room for the -shm file), with
    // SQLite's "disk I/O error": say what it is.
    if (mode == Mode::ReadWrite && ((d.last_error_code & 0xff) == SQLITE_IOERR ||
                                    (d.last_error_code & 0xff) == SQLITE_FULL))
      d.check_room();
    // Reading a WAL database needs its -shm file; in a read-only folder or
    // mount that file cannot be made. With no -wal file there is nothing
    // uncheckpointed and no writer (a writer needs the -wal), so the file can
    // be read as immutable.
    const int code = d.last_error_code & 0xff;
    const bool wal = fs::exists(path + "-wal", ec) && fs::file_size(path + "-wal", ec) > 0;
    if (mode != Mode::ReadOnly || wal || (code != SQLITE_READONLY && code != SQLITE_CANTOPEN))
      throw;
    for (auto& [sql, stmt] : d.statements) sqlite3_finalize(stmt);
    d.statements.clear();
    sqlite3_close_v2(d.db);
    d.db = nullptr;
    connect(file_uri(path) + "?immutable=1", SQLITE_OPEN_URI);
    d.open();
  }
}

RunStore::~RunStore() {
  if (!impl_) return;
  try {
    flush();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainbench: buffered metrics lost: %s\n", e.what());
  }
}

RunStore::RunStore(RunStore&&) noexcept = default;

RunStore& RunStore::operator=(RunStore&& other) noexcept {
  if (this != &other) {
    RunStore old(std::move(*this));  // flushes and closes the current database
    impl_ = std::move(other.impl_);
  }
  return *this;
}

RunStore::Impl& RunStore::impl() const {
  TB_CHECK(impl_, "RunStore used after it was moved from");
  return *impl_;
}

const std::string& RunStore::path() const { return impl().path; }

int RunStore::schema_version() const {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  return d.read_version();
}

int64_t RunStore::data_version() const {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  Query q(d, "PRAGMA data_version", "reading the data version");
  q.next();
  return q.int_at(0);
}

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
  std::string sql = kSeriesNamesSql;
  sql.replace(sql.find("%s"), 2, table);
  return sql;
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

// --- Ladders and run links (schema v4) ----------------------------------------

namespace {
constexpr const char* kLadderColumns =
    "id, name, created_at, finished_at, status, error, spec_json, result_json";

// As the runs' JSON columns, a damaged one reads as {} (these rows keep no
// list of problems).
json parse_json(const std::string& text, const char* column) {
  std::vector<std::string> ignored;
  return parse_json_column(text, column, ignored);
}

LadderRecord read_ladder(const Query& q) {
  return {q.int_at(0), q.text_at(1), q.text_at(2), q.text_at(3), q.text_at(4), q.text_at(5),
          parse_json(q.text_at(6), "spec_json"), parse_json(q.text_at(7), "result_json")};
}

LadderRunLink read_ladder_link(const Query& q) {
  return {q.int_at(0), q.int_at(1), static_cast<int>(q.int_at(2)), static_cast<int>(q.int_at(3)),
          q.text_at(4)};
}

// A read-only store older than v4 has no ladder tables: it holds no ladders
// and no links (a writer migrates before it reads).
constexpr int kLadderSchema = 4;

bool is_ladder_status(const std::string& s) {
  return s == run_status::kRunning || is_terminal_run_status(s);
}
}  // namespace

int64_t RunStore::create_ladder(const LadderRecord& ladder) {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  d.require_writable("creating a ladder");
  const std::string status = ladder.status.empty() ? run_status::kRunning : ladder.status;
  TB_CHECK(is_ladder_status(status), "invalid ladder status '", status, "'");
  Query(d,
        "INSERT INTO ladders (name, created_at, status, spec_json, result_json) "
        "VALUES (?, ?, ?, ?, ?)",
        "creating a ladder")
      .bind_text(1, ladder.name)
      .bind_text(2, ladder.created_at.empty() ? now_utc() : ladder.created_at)
      .bind_text(3, status)
      .bind_text(4, json_text(ladder.spec))
      .bind_text(5, json_text(ladder.result))
      .run();
  return sqlite3_last_insert_rowid(d.db);
}

void RunStore::set_ladder_status(int64_t id, const std::string& status, const std::string& error) {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  d.require_writable("setting the status of a ladder");
  TB_CHECK(is_ladder_status(status), "invalid ladder status '", status,
           "' (expected running, finished, failed or stopped)");
  Query(d,
        "UPDATE ladders SET status = ?1, error = ?2, "
        "finished_at = CASE WHEN ?1 = 'running' THEN NULL ELSE ?3 END WHERE id = ?4",
        "setting the status of a ladder")
      .bind_text(1, status)
      .bind_text(2, error)
      .bind_text(3, now_utc())
      .bind_int(4, id)
      .run();
  TB_CHECK(sqlite3_changes(d.db) == 1, "run database '", d.path, "': no ladder with id ", id);
}

void RunStore::set_ladder_result(int64_t id, const nlohmann::json& result) {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  d.require_writable("setting a ladder's result");
  Query(d, "UPDATE ladders SET result_json = ? WHERE id = ?", "setting a ladder's result")
      .bind_text(1, json_text(result))
      .bind_int(2, id)
      .run();
  TB_CHECK(sqlite3_changes(d.db) == 1, "run database '", d.path, "': no ladder with id ", id);
}

void RunStore::link_ladder_run(const LadderRunLink& link) {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  d.require_writable("linking a run to a ladder");
  TB_CHECK(link.kind == "speed" || link.kind == "accuracy", "invalid ladder run kind '", link.kind,
           "' (expected speed or accuracy)");
  Query(d,
        "INSERT INTO ladder_runs (ladder_id, run_id, rung, repetition, kind) "
        "VALUES (?, ?, ?, ?, ?)",
        detail::concat("linking run ", link.run_id, " to ladder ", link.ladder_id))
      .bind_int(1, link.ladder_id)
      .bind_int(2, link.run_id)
      .bind_int(3, link.rung)
      .bind_int(4, link.repetition)
      .bind_text(5, link.kind)
      .run();
}

std::vector<LadderRecord> RunStore::list_ladders() const {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  if (d.version < kLadderSchema) return {};
  Query q(d, detail::concat("SELECT ", kLadderColumns, " FROM ladders ORDER BY id"),
          "listing ladders");
  std::vector<LadderRecord> out;
  while (q.next()) out.push_back(read_ladder(q));
  return out;
}

std::optional<LadderRecord> RunStore::get_ladder(int64_t id) const {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  if (d.version < kLadderSchema) return {};
  Query q(d, detail::concat("SELECT ", kLadderColumns, " FROM ladders WHERE id = ?"),
          "reading a ladder");
  q.bind_int(1, id);
  if (!q.next()) return std::nullopt;
  return read_ladder(q);
}

std::vector<LadderRunLink> RunStore::ladder_runs(int64_t ladder) const {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  if (d.version < kLadderSchema) return {};
  Query q(d,
          "SELECT ladder_id, run_id, rung, repetition, kind FROM ladder_runs WHERE ladder_id = ? "
          "ORDER BY rung, kind DESC, repetition, run_id",
          "reading a ladder's runs");
  q.bind_int(1, ladder);
  std::vector<LadderRunLink> out;
  while (q.next()) out.push_back(read_ladder_link(q));
  return out;
}

std::optional<LadderRunLink> RunStore::ladder_of_run(int64_t run) const {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  if (d.version < kLadderSchema) return {};
  Query q(d,
          "SELECT ladder_id, run_id, rung, repetition, kind FROM ladder_runs WHERE run_id = ? "
          "ORDER BY ladder_id LIMIT 1",
          "reading a run's ladder");
  q.bind_int(1, run);
  if (!q.next()) return std::nullopt;
  return read_ladder_link(q);
}

void RunStore::delete_ladder(int64_t id) {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  d.require_writable("deleting a ladder");
  Query(d, "DELETE FROM ladders WHERE id = ?", "deleting a ladder").bind_int(1, id).run();
  TB_CHECK(sqlite3_changes(d.db) == 1, "run database '", d.path, "': no ladder with id ", id);
}

void RunStore::link_runs(const RunLink& link) {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  d.require_writable("linking two runs");
  TB_CHECK(!link.kind.empty(), "linking runs ", link.from_run, " and ", link.to_run,
           ": the link needs a kind");
  Query(d,
        "INSERT OR REPLACE INTO run_links (from_run, to_run, kind, created_at, note_json) "
        "VALUES (?, ?, ?, ?, ?)",
        detail::concat("linking run ", link.from_run, " to run ", link.to_run))
      .bind_int(1, link.from_run)
      .bind_int(2, link.to_run)
      .bind_text(3, link.kind)
      .bind_text(4, link.created_at.empty() ? now_utc() : link.created_at)
      .bind_text(5, json_text(link.note))
      .run();
}

std::vector<RunLink> RunStore::run_links(int64_t run) const {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  if (d.version < kLadderSchema) return {};
  Query q(d,
          "SELECT from_run, to_run, kind, created_at, note_json FROM run_links "
          "WHERE from_run = ?1 OR to_run = ?1 ORDER BY created_at, from_run, to_run",
          "reading a run's links");
  q.bind_int(1, run);
  std::vector<RunLink> out;
  while (q.next())
    out.push_back({q.int_at(0), q.int_at(1), q.text_at(2), q.text_at(3), parse_json(q.text_at(4), "note_json")});
  return out;
}

std::string RunStore::integrity_check() const {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  std::string problems;
  {
    Query q(d, "PRAGMA integrity_check", "checking integrity");
    while (q.next()) {
      const std::string line = q.text_at(0);
      if (line != "ok") problems += line + "\n";
    }
  }
  Query q(d, "PRAGMA foreign_key_check", "checking foreign keys");
  while (q.next())
    problems += detail::concat("row ", q.int_at(1), " of ", q.text_at(0),
                               " refers to a missing row of ", q.text_at(2), "\n");
  if (problems.empty()) return "ok";
  problems.pop_back();
  return problems;
}

// --- Per-layer profiles (schema v5) --------------------------------------------

void RunStore::append_layer_profile(int64_t run, const LayerProfileStep& step) {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  d.require_writable("appending a layer profile");
  const std::string op = detail::concat("appending the layer profile of step ", step.step,
                                        " to run ", run);
  Transaction tx(d, op);
  // Written again after a failed try: the step's rows are replaced, not doubled.
  Query(d, "DELETE FROM layer_profile_steps WHERE run_id = ? AND step = ?", op)
      .bind_int(1, run)
      .bind_int(2, step.step)
      .run();
  Query(d, "INSERT INTO layer_profile_steps (run_id, step, step_time_ms) VALUES (?, ?, ?)", op)
      .bind_int(1, run)
      .bind_int(2, step.step)
      .bind_real(3, step.step_time_ms)
      .run();
  Query rows(d,
             "INSERT INTO layer_profile_rows (run_id, step, seq, layer, kind, phase, time_ms, "
             "flops, bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
             op);
  for (size_t i = 0; i < step.rows.size(); ++i) {
    const LayerProfileRow& r = step.rows[i];
    rows.bind_int(1, run).bind_int(2, step.step).bind_int(3, int64_t(i));
    rows.bind_text(4, valid_utf8(r.layer)).bind_text(5, valid_utf8(r.kind));
    rows.bind_text(6, valid_utf8(r.phase)).bind_real(7, r.time_ms);
    rows.bind_real(8, r.flops).bind_real(9, r.bytes);
    if (!rows.try_run()) d.fail(op);
  }
  tx.commit();
}

std::vector<LayerProfileStep> RunStore::layer_profile(int64_t run) const {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  std::vector<LayerProfileStep> steps;
  if (d.version < 5) return steps;  // a read-only store from before profiles
  const std::string op = detail::concat("reading the layer profile of run ", run);
  {
    Query q(d, "SELECT step, step_time_ms FROM layer_profile_steps WHERE run_id = ? ORDER BY step",
            op);
    q.bind_int(1, run);
    while (q.next()) steps.push_back({q.int_at(0), q.real_at(1), {}});
  }
  Query q(d,
          "SELECT step, layer, kind, phase, time_ms, flops, bytes FROM layer_profile_rows "
          "WHERE run_id = ? ORDER BY step, seq",
          op);
  q.bind_int(1, run);
  size_t at = 0;
  while (q.next()) {
    while (at < steps.size() && steps[at].step < q.int_at(0)) ++at;
    if (at == steps.size()) break;
    steps[at].rows.push_back(
        {q.text_at(1), q.text_at(2), q.text_at(3), q.real_at(4), q.real_at(5), q.real_at(6)});
  }
  return steps;
}

}  // namespace tb
