// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tb {

struct LayerProfileStep;  // engine/metrics/layer_profile.h

// Values of runs.status. A run moves queued -> running -> one of the three
// terminal states; see docs/store-schema.md.
namespace run_status {
inline constexpr const char* kQueued = "queued";
inline constexpr const char* kRunning = "running";
inline constexpr const char* kFinished = "finished";
inline constexpr const char* kFailed = "failed";
inline constexpr const char* kStopped = "stopped";
// Never stored: what readers show for a queued or running run whose engine is
// gone (see engine_gone_reason).
inline constexpr const char* kInterrupted = "interrupted";
}  // namespace run_status

bool is_valid_run_status(const std::string& status);     // the five stored ones
// finished, failed, stopped: the stored ends. "interrupted" is not one: a writer
// (the GUI that ran the engine) may still record how the run ended.
bool is_terminal_run_status(const std::string& status);

// This machine's host name as runs.engine_host records it (gethostname).
std::string this_host_name();

// `text` with every invalid UTF-8 sequence replaced by U+FFFD, so that it can
// go into JSON (list --json, exports, the GUI). Valid text comes back unchanged.
std::string valid_utf8(std::string text);

// One row of `runs`. Times are ISO-8601 UTC text ("2026-11-22T21:52:39.123Z"),
// empty when not set yet.
struct RunRecord {
  int64_t id = 0;
  // `status` is what a reader shows: the stored status, or "interrupted" (with
  // the reason in `error`) when the run's engine is gone; `recorded_status` is
  // runs.status as stored. Writers set `status`.
  std::string name, created_at, started_at, finished_at, status, engine_version, error, tags, notes,
      heartbeat_at, recorded_status;
  // The engine process that writes the run (0: unknown, e.g. made by an older
  // version) and its host name, so a reader can check or signal it.
  int64_t engine_pid = 0;
  std::string engine_host;
  nlohmann::json config, environment, tricks, summary;
  // Damage found while reading this row ("config_json: not valid JSON ..."):
  // the damaged column reads as {} (text columns with U+FFFD) and the rest of
  // the row and of the store stays readable.
  std::vector<std::string> problems;
};

// Where and how a run ran: its environment's plain entries (processor or GPU,
// instruction set, threads and why, activation layout, library versions),
// without the nested ones (kernel paths, probed peaks, allocator figures).
// Runs that differ here are not repeats of each other, whatever their settings
// (`compare`, the workbench's Compare page).
nlohmann::json environment_facts(const nlohmann::json& environment);

// Why a queued or running run's engine is taken as gone, or "" while it may be
// alive: on this host, its recorded engine pid no longer exists (at once);
// otherwise its heartbeat (or start) is older than stale_after. Terminal runs: "".
std::string engine_gone_reason(const RunRecord& run, std::chrono::system_clock::time_point now,
                               std::chrono::milliseconds stale_after);

// value may be NaN (a diverged loss); it is stored as SQL NULL and read back as NaN.
struct MetricPoint {
  std::string name;
  int64_t step = 0;
  double wall_time = 0.0;  // seconds since the run started
  double value = 0.0;
};

struct EpochPoint {
  std::string name;
  int64_t epoch = 0;
  int64_t step = 0;
  double wall_time = 0.0;
  double value = 0.0;
};

struct EventRecord {
  int64_t id = 0;  // increasing; pass the last one seen to events() to follow a run
  std::string time, level, message;
};

// --- Ladders (schema v4) ------------------------------------------------------
// One row of `ladders`: a `trainbench-engine ladder` (engine/ladder/ladder.h).
// status is running, finished, failed or stopped; spec is what was asked
// (baseline configuration, rungs, mode, repeats, steps), result the table.
struct LadderRecord {
  int64_t id = 0;
  std::string name, created_at, finished_at, status, error;
  nlohmann::json spec, result;
};

// A run that belongs to a ladder: rung 0 is the baseline, repetition counts
// from 0; kind is "speed" (measured steps) or "accuracy" (trained to the end).
struct LadderRunLink {
  int64_t ladder_id = 0, run_id = 0;
  int rung = 0, repetition = 0;
  std::string kind;
};

// Two runs linked by what one did to the other: kind "advice" is the
// advisor's before/after pair (note: the recommendation and its predicted bound).
struct RunLink {
  int64_t from_run = 0, to_run = 0;
  std::string kind, created_at;
  nlohmann::json note;
};

struct RunStoreOptions {
  // Buffered metric points are written once this many are pending, or once
  // the oldest pending point is batch_interval old (checked when points are
  // appended), and always on flush(), set_status() and destruction.
  size_t batch_points = 1000;
  std::chrono::milliseconds batch_interval{500};
  // A batch that fails for a passing reason (database locked, disk full, I/O)
  // stays buffered and is retried, at most this many points (the oldest go
  // first, counted in dropped_points()); automatic retries wait retry_interval.
  // What piled up is written in transactions of batch_points each, oldest
  // first, so space that comes back takes what fits.
  size_t max_pending_points = 200000;
  std::chrono::milliseconds retry_interval{1000};
  // How long a statement waits for another process's lock before failing.
  std::chrono::milliseconds busy_timeout{10000};
};

// The SQLite database of runs, their metric series and events. One writer
// process (the engine) and any number of readers (GUI, CLI) may use the same
// file at once. An instance is internally locked, but meant for one thread.
// Every failure throws tb::Error naming the database path and the operation.
// ReadOnly never writes to the file (no migration, no journal-mode change, no
// lock taken) and reads every schema version up to kSchemaVersion.
class RunStore {
 public:
  enum class Mode { ReadWrite, ReadOnly };

  static constexpr int kSchemaVersion = 5;
  // What create_run writes beside the store (and removes) to see that its disk
  // has room for a run: the run's row and its first batches of points.
  static constexpr size_t kRoomProbeBytes = 128 * 1024;
  // A queued or running run whose heartbeat is older than this is taken as
  // interrupted (writers beat every few seconds from a timer thread).
  static constexpr std::chrono::milliseconds kDefaultStaleAfter{60000};

  // $XDG_DATA_HOME/trainbench/runs.db, else ~/.local/share/trainbench/runs.db.
  // Creates nothing; throws tb::Error when neither variable is usable.
  static std::string default_path();

  // Opens the database; ReadWrite creates it when the file does not exist and
  // brings its schema up to date. Refuses, without touching it, a folder, an
  // existing empty file (not made as a store), a file that is not a run
  // database or whose schema is newer than this code.
  explicit RunStore(const std::string& path, Mode mode = Mode::ReadWrite,
                    const RunStoreOptions& options = {});
  ~RunStore();  // flushes buffered points; reports a failure on stderr
  RunStore(const RunStore&) = delete;
  RunStore& operator=(const RunStore&) = delete;
  RunStore(RunStore&&) noexcept;
  RunStore& operator=(RunStore&&) noexcept;

  const std::string& path() const;
  int schema_version() const;

  // --- Runs. created_at defaults to now, status to 'queued'. Refuses, before
  // anything is written, when the store's disk has no room for a run
  // (kRoomProbeBytes written beside the store and removed again fail).
  int64_t create_run(const RunRecord& run);
  // Flushes buffered points first, so a reader that sees a terminal status has
  // every point. 'running' sets started_at (once), a terminal status sets finished_at.
  void set_status(int64_t id, const std::string& status, const std::string& error = "");
  // The run's start in one transaction: environment, tricks, status 'running',
  // and, when not empty, `plan` as the summary until the end replaces it: what
  // is known before the first step (steps_per_epoch, total_steps), so that a
  // reader can show "step N of M" while the run goes on.
  void start_run(int64_t id, const nlohmann::json& environment, const nlohmann::json& tricks,
                 const nlohmann::json& plan = nlohmann::json::object());
  // The run's end in one transaction: buffered points, summary, terminal status.
  void finish_run(int64_t id, const std::string& status, const nlohmann::json& summary,
                  const std::string& error = "");
  void set_summary(int64_t id, const nlohmann::json& summary);
  void set_tricks(int64_t id, const nlohmann::json& tricks);
  void set_environment(int64_t id, const nlohmann::json& environment);
  void rename_run(int64_t id, const std::string& name);
  void set_tags(int64_t id, const std::string& tags);
  void set_notes(int64_t id, const std::string& notes);
  void delete_run(int64_t id);  // with all its metrics and events
  // Tells readers the writer is alive; flushes also do this for their runs.
  void heartbeat(int64_t id);

  // --- Metrics, buffered (see RunStoreOptions). A failed batch is rolled back
  // and the error thrown; its points stay buffered for the next flush when the
  // cause may pass (busy, full, I/O), and are dropped when it cannot (a point
  // of a deleted run).
  void append_step_metrics(int64_t run, const std::vector<MetricPoint>& points);
  void append_epoch_metrics(int64_t run, const std::vector<EpochPoint>& points);
  void flush();
  size_t pending_points() const;
  int64_t dropped_points() const;  // lost to the max_pending_points bound
  // Written at once (events are rare and readers want them promptly).
  void append_event(int64_t run, const std::string& level, const std::string& message);

  // --- Reading: committed data only (a writer's buffered points are not visible
  // until flushed). Series come back in step (epoch) order. Runs come back with
  // the status readers show (RunRecord::status) and any damage in `problems`.
  std::vector<RunRecord> list_runs() const;
  std::optional<RunRecord> get_run(int64_t id) const;
  std::vector<std::string> step_series_names(int64_t run) const;
  std::vector<std::string> epoch_series_names(int64_t run) const;
  // Points with step > after_step: a follower passes the last step it has.
  std::vector<MetricPoint> step_series(int64_t run, const std::string& name,
                                       int64_t after_step = -1) const;
  std::vector<EpochPoint> epoch_series(int64_t run, const std::string& name,
                                       int64_t after_epoch = -1) const;
  std::vector<EventRecord> events(int64_t run, int64_t after_id = 0) const;
  // PRAGMA data_version of this connection: changes whenever another
  // connection commits to the file, so a follower polls it and reads only
  // when something changed.
  int64_t data_version() const;

  // --- Ladders and run links (schema v4). A ladder's runs are ordinary runs;
  // deleting a run drops its links, deleting a ladder keeps its runs.
  int64_t create_ladder(const LadderRecord& ladder);  // status defaults to 'running'
  void set_ladder_status(int64_t id, const std::string& status, const std::string& error = "");
  void set_ladder_result(int64_t id, const nlohmann::json& result);
  void link_ladder_run(const LadderRunLink& link);
  std::vector<LadderRecord> list_ladders() const;
  std::optional<LadderRecord> get_ladder(int64_t id) const;
  std::vector<LadderRunLink> ladder_runs(int64_t ladder) const;  // by rung, repetition
  std::optional<LadderRunLink> ladder_of_run(int64_t run) const;
  void delete_ladder(int64_t id);
  void link_runs(const RunLink& link);  // replaces a link of the same runs and kind
  std::vector<RunLink> run_links(int64_t run) const;  // where the run is either end

  // --- Per-layer profiles (schema v5): the rows of a run's sampled steps
  // (engine/metrics/layer_profile.h). Written at once, in one transaction; a
  // step written again replaces its rows. Read in step order, each step's
  // rows in their order; none for a run without a profile or in a read-only
  // store older than v5.
  void append_layer_profile(int64_t run, const LayerProfileStep& step);
  std::vector<LayerProfileStep> layer_profile(int64_t run) const;

  // --- Maintenance.
  // "ok", or the problems PRAGMA integrity_check and foreign_key_check found.
  std::string integrity_check() const;

  struct Impl;  // opaque; named here only so the store's files can share it (store_internal.h)

 private:
  Impl& impl() const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tb
