// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// RunStore's private state and the SQLite helpers its files share, for
// engine/store/*.cpp only. RunStore is one class (run_store.h) cut into files
// by what makes each change:
//   run_store.cpp   opening and closing a store; what writer and reader share
//   schema.cpp      the tables (one migration per version), reading and
//                   upgrading a file's version, the integrity check
//   run_writer.cpp  runs, metric points and events written: the buffer and its
//                   batches, retries and bound
//   run_reader.cpp  runs, series and events read by the GUI and the CLI
//   ladders.cpp     the ladder and run-link tables (schema v4), both ways
//   liveness.cpp    whether a run's engine is still alive (pid, heartbeat)
//   layer_profiles.cpp  the per-layer profiles of sampled steps (schema v5)
#include <sqlite3.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/store/run_store.h"

namespace tb {

// The column helpers writer, reader and ladders share (run_store.cpp).
namespace store_internal {
std::string now_utc();
std::string json_text(const nlohmann::json& j);
nlohmann::json parse_json_column(const std::string& text, const char* column,
                                 std::vector<std::string>& problems);
}  // namespace store_internal

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

namespace store_internal {

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

}  // namespace store_internal

}  // namespace tb
