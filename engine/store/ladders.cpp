// SPDX-License-Identifier: GPL-3.0-or-later
// The ladder and run-link tables (schema v4): written by `trainbench-engine
// ladder` and the advisor (its before/after pairs), read by the ladder view,
// `ladder --show` and the advisor. Written and read side by side because they share the tables'
// columns, row readers and statuses, and change together when ladders do.
#include "engine/store/run_store.h"

#include <sqlite3.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/store/store_internal.h"

namespace tb {
using nlohmann::json;
using store_internal::json_text;
using store_internal::now_utc;
using store_internal::parse_json_column;
using store_internal::Query;

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

}  // namespace tb
