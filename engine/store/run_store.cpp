// SPDX-License-Identifier: GPL-3.0-or-later
// Opening and closing a store (the file checks before SQLite sees the file, the
// connection and its settings) and what its other files share: the column
// helpers, the run status words, the series-id cache. The rest of RunStore
// is in files by what changes them (store_internal.h lists them).
#include "engine/store/run_store.h"

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "engine/core/error.h"
#include "engine/store/store_internal.h"

namespace tb {
namespace fs = std::filesystem;
using nlohmann::json;
using store_internal::Query;

namespace {

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

}  // namespace

namespace store_internal {

std::string now_utc() { return iso_utc(std::chrono::system_clock::now()); }

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

}  // namespace store_internal

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

bool is_valid_run_status(const std::string& s) {
  return s == run_status::kQueued || s == run_status::kRunning || is_terminal_run_status(s);
}

bool is_terminal_run_status(const std::string& s) {
  return s == run_status::kFinished || s == run_status::kFailed || s == run_status::kStopped;
}

// --- Opening -----------------------------------------------------------------

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

// --- Series ids: created by the writer, looked up by readers -----------------

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

nlohmann::json environment_facts(const nlohmann::json& environment) {
  nlohmann::json facts = nlohmann::json::object();
  if (!environment.is_object()) return facts;
  for (const auto& [k, v] : environment.items())
    if (!v.is_object() && !v.is_array()) facts[k] = v;
  return facts;
}

}  // namespace tb
