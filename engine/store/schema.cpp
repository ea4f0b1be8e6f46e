// SPDX-License-Identifier: GPL-3.0-or-later
// The store's schema: its tables, written as one migration per version, how a
// file's version is read and brought up to date, and the check that a file
// still holds together. A new table or column starts here (a migration
// appended, RunStore::kSchemaVersion raised); docs/store-schema.md describes
// the tables for other tools.
#include "engine/store/run_store.h"

#include <sqlite3.h>

#include <iterator>
#include <mutex>
#include <string>

#include "engine/core/error.h"
#include "engine/store/store_internal.h"

namespace tb {
using store_internal::Query;
using store_internal::Transaction;

namespace {

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

}  // namespace

// --- Reading and upgrading the schema ----------------------------------------

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

int RunStore::schema_version() const {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  return d.read_version();
}

// --- Maintenance -------------------------------------------------------------

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

}  // namespace tb
