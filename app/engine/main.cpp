// SPDX-License-Identifier: GPL-3.0-or-later
// trainbench-engine: the headless training engine and its run-store tools.
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "app/engine/cli_checks.h"
#include "app/engine/cmd_ladder.h"
#include "app/engine/cmd_layers.h"
#include "app/engine/table.h"
#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/metrics/chrome_trace.h"
#include "engine/parallel/launch.h"
#include "engine/store/run_store.h"
#include "engine/train/config.h"
#include "engine/train/config_file.h"
#include "engine/train/events.h"
#include "engine/train/trainer.h"

using json = nlohmann::json;
using namespace tb;

namespace {

// Exit codes, documented in --help.
constexpr int kExitOk = 0, kExitFailed = 1, kExitUsage = 2, kExitStopped = 130;

std::atomic<bool> g_stop{false};
// The running run's store sink, for the second stop signal (guarded by g_sink_mutex).
std::mutex g_sink_mutex;
StoreSink* g_store_sink = nullptr;

int g_signal_pipe[2] = {-1, -1};

// Any thread may receive the signal (OpenBLAS and OpenMP start theirs before
// main), so the handler only does what is async-signal-safe: it sets the stop
// flag and hands the signal to the signal thread through a pipe.
void on_stop_signal(int sig) {
  g_stop.store(true);
  const char c = static_cast<char>(sig);
  const ssize_t written = write(g_signal_pipe[1], &c, 1);
  (void)written;
}

// Caught from the first thing main does: a signal while the engine starts
// (reading its configuration, opening the store) must stop the run like one
// during training (recorded "stopped", exit 130), not end the process with the
// default action before anything is recorded. Until a command starts the
// signal thread, the handler only sets the flag and queues the signal.
void catch_stop_signals() {
  TB_CHECK(pipe2(g_signal_pipe, O_CLOEXEC) == 0, "cannot create the signal pipe: ",
           std::strerror(errno));
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // Started with them blocked (inherited), they would never stop a run; one
  // already pending is handled now.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);
}

// A command that does not train ends on a stop signal as any program does:
// the default action from now on, or exit 130 when one came already.
bool release_stop_signals() {
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  return g_stop.load();
}

// The first SIGINT/SIGTERM asks the trainer to stop after the current step or
// evaluation batch; the second records the run as stopped and ends the process
// (within ~5 s; a third ends it at once). The signal thread, not the handler,
// talks to the store; it reads the signals queued since catch_stop_signals().
void start_signal_thread() {
  std::thread([] {
    auto next_signal = [](int timeout_ms) {
      pollfd p{g_signal_pipe[0], POLLIN, 0};
      if (poll(&p, 1, timeout_ms) <= 0) return false;
      char c = 0;
      return read(g_signal_pipe[0], &c, 1) == 1;
    };
    while (!next_signal(-1)) {
    }
    std::fprintf(stderr, "trainbench: stopping after the current step (signal again to end now)\n");
    while (!next_signal(-1)) {
    }
    std::fprintf(stderr, "trainbench: second stop signal: recording the run as stopped, ending now\n");
    std::thread([] {
      {
        std::lock_guard lock(g_sink_mutex);
        if (g_store_sink) {
          g_store_sink->record_stop_now("stopped by a second signal before the step ended");
          g_store_sink->close(std::chrono::seconds(4));
        }
      }
      _exit(kExitStopped);
    }).detach();
    next_signal(5000);  // a third signal, or the store taking too long
    _exit(kExitStopped);
  }).detach();
}

std::string fmt(double v, int decimals) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string bytes_str(double b) {
  if (!std::isfinite(b) || b <= 0) return "-";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return fmt(b, u == 0 ? 0 : 1) + " " + units[u];
}

double num(const json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
}

// Read commands open the store read-only: they never wait for a writer's lock,
// work in read-only folders, never migrate and never create or convert a file.
std::unique_ptr<RunStore> open_existing_store(const std::string& path) {
  TB_CHECK(access(path.c_str(), F_OK) == 0, path,
           ": no run store here yet (runs are recorded by `trainbench-engine run`)");
  return std::make_unique<RunStore>(path, RunStore::Mode::ReadOnly);
}

// Damage found in a run's row, on stderr; the run is still shown.
void report_problems(const RunRecord& r) {
  for (const auto& p : r.problems)
    std::fprintf(stderr, "warning: run %lld: %s; shown without it\n", static_cast<long long>(r.id),
                 p.c_str());
}

// The default store's folder is made when a run is first recorded.
void make_store_folder(const std::string& db) {
  const auto folder = std::filesystem::path(db).parent_path();
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  TB_CHECK(!ec, "cannot create the run store folder '", folder.string(), "': ", ec.message(),
           " (name another store with --db or TRAINBENCH_DB)");
}

// A run id as typed: a whole number from 1 up, never saturated or wrapped.
int64_t parse_run_id(const std::string& text) {
  int64_t id = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, id);
  TB_CHECK(ec == std::errc() && p == end && id > 0, "'", text,
           "' is not a run id (a whole number from 1 to 9223372036854775807; see "
           "`trainbench-engine list`)");
  return id;
}

RunRecord require_run(const RunStore& store, int64_t id) {
  auto r = store.get_run(id);
  TB_CHECK(r.has_value(), store.path(), ": no run with id ", id, " (see `trainbench-engine list`)");
  return *r;
}

// ---------------------------------------------------------------- trace

// Re-runs a stored run's configuration for `steps` steps with host spans
// (steps, phases, every layer's forward and backward) and writes a Chrome
// trace (open it in https://ui.perfetto.dev). Nothing is written to the store.
// On CUDA the trace will also hold CUPTI kernel/memcpy/memset rows
// (cupti_activity.h; not wired in: it has not been run on a GPU).
int cmd_trace(const std::string& db, int64_t id, int64_t steps, std::string output) {
  TB_CHECK(steps > 0, "trace: --steps must be at least 1");
  RunRecord rec;
  {
    auto store = open_existing_store(db);
    rec = require_run(*store, id);
  }
  json cfg = rec.config;
  cfg["max_steps"] = steps;
  cfg["epochs"] = 1;
  // The end-of-run evaluation is outside the traced steps: keep it short.
  cfg["test_limit"] = cfg.value("batch_size", 1);
  RunConfig config = RunConfig::from_json(validate_config(cfg, "run " + std::to_string(id)));
  if (output.empty()) output = "trace-" + std::to_string(id) + ".json";

  EventBus bus;  // no store sink: a trace is not a run
  ProgressSink progress(stderr, false, /*quiet=*/true);
  bus.add(&progress);
  ChromeTrace trace;
  Trainer trainer(config, bus, g_stop);
  trainer.set_trace(&trace);
  TrainResult r = trainer.run(0);
  json doc = trace.to_json();
  doc["otherData"] = {{"run_id", id},
                      {"steps", r.summary.value("steps", 0)},
                      {"device", r.summary.value("device", "")},
                      {"model", config.model},
                      {"engine_version", TRAINBENCH_VERSION},
                      // The cost of tracing, shown: traced steps against the stored run's
                      // untraced median (same configuration, a different moment).
                      {"median_step_time_ms", r.summary.value("median_step_time_ms", 0.0)},
                      {"untraced_median_step_time_ms",
                       rec.summary.value("median_step_time_ms", 0.0)}};
  std::ofstream out(output);
  TB_CHECK(out, output, ": cannot open for writing");
  out << doc.dump() << "\n";
  TB_CHECK(out.good(), output, ": write failed");
  std::fprintf(stderr, "trace of run %lld, %lld steps: %s (open in https://ui.perfetto.dev)\n",
               static_cast<long long>(id), static_cast<long long>(r.summary.value("steps", 0)),
               output.c_str());
  const double traced = r.summary.value("median_step_time_ms", 0.0);
  const double untraced = rec.summary.value("median_step_time_ms", 0.0);
  if (traced > 0 && untraced > 0)
    std::fprintf(stderr, "median step %.2f ms traced vs %.2f ms in the stored run (%+.1f %%)\n",
                 traced, untraced, 100.0 * (traced - untraced) / untraced);
  return r.status == "stopped" ? kExitStopped : kExitOk;
}

// ---------------------------------------------------------------- run

// A configuration key given by its own flag (--steps for max_steps): the text
// as typed goes through the same validation as --set key=value.
struct KeyFlag {
  KeyFlag(const char* k, const char* f) : key(k), flag(f) {}
  const char* key;
  const char* flag;
  std::string text;
  CLI::Option* option = nullptr;
};

struct RunArgs {
  std::string config_file, events = "none", db;
  bool db_is_default = false;
  std::vector<std::string> sets;
  std::vector<KeyFlag> flags = {
      {"name", "--name"},         {"model", "--model"},        {"dataset", "--dataset"},
      {"data_dir", "--data-dir"}, {"device", "--device"},      {"epochs", "--epochs"},
      {"max_steps", "--steps"},   {"batch_size", "--batch-size"}, {"lr", "--lr"},
      {"optimizer", "--optimizer"}, {"workers", "--workers"},  {"amp", "--amp"},
      {"seed", "--seed"},         {"train_limit", "--train-limit"},
      {"test_limit", "--test-limit"}};
  bool quiet = false;
};

// A flag's text as the JSON value --set would make of it: an integer, a number,
// else the text itself (which validation then rejects, naming the key).
json flag_value(const ConfigKey& key, const std::string& text) {
  if (key.type == KeyType::String) return text;
  const char* end = text.data() + text.size();
  int64_t i = 0;
  if (auto [p, ec] = std::from_chars(text.data(), end, i); ec == std::errc() && p == end) return i;
  double d = 0;
  if (auto [p, ec] = std::from_chars(text.data(), end, d); ec == std::errc() && p == end) return d;
  return text;
}

// The file (read and checked already) with the flags over it, then --set.
json build_config(const RunArgs& a, json cfg, std::string& source) {
  source = a.config_file.empty() ? "command line" : a.config_file;
  for (const KeyFlag& f : a.flags) {
    if (f.option->count() == 0) continue;
    const auto& schema = config_schema();
    auto key = std::find_if(schema.begin(), schema.end(),
                            [&](const ConfigKey& k) { return k.key == f.key; });
    TB_CHECK(key != schema.end(), f.flag, ": no configuration key '", f.key, "'");
    cfg[f.key] = flag_value(*key, f.text);
  }
  for (const auto& s : a.sets) apply_assignment(cfg, s);
  if (!a.sets.empty() && a.config_file.empty()) source = "--set";
  return cfg;
}

int cmd_run(const RunArgs& a) {
  json file_config = json::object();
  try {
    if (!a.config_file.empty()) {
      file_config = read_config_file(a.config_file);
      // As written: a flag over a key must not hide the file's bad value.
      check_config_keys(file_config, a.config_file);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitUsage;
  }
  std::string source;
  json validated;
  try {
    validated = validate_config(build_config(a, std::move(file_config), source), source);
  } catch (const Error& e) {
    std::string message = e.what();
    // Name the flag too when the key came from one (--steps for max_steps).
    for (const KeyFlag& f : a.flags)
      if (f.option->count() > 0 && std::string(f.key) != f.flag + 2 &&
          message.find(std::string("key '") + f.key + "'") != std::string::npos)
        message += std::string(" (given as ") + f.flag + ")";
    std::fprintf(stderr, "error: %s\n", message.c_str());
    return kExitUsage;
  }
  RunConfig config = RunConfig::from_json(validated);
  if (config.name.empty()) {
    config.name = default_run_name(config.model, config.batch_size);
    config.values["name"] = config.name;
  }

  const bool jsonl = a.events == "jsonl";
  std::unique_ptr<RunStore> store;
  int64_t run_id = 0;
  // ddp: rank 0 alone records the run and reports; the other ranks write
  // nothing and print only their errors (engine/parallel/launch.h).
  const int rank = launch_rank();
  if (rank == 0) try {
    if (a.db_is_default) make_store_folder(a.db);
    store = std::make_unique<RunStore>(a.db);
    RunRecord rec;
    rec.name = config.name;
    rec.status = "queued";
    rec.config = config.values;
    rec.engine_version = TRAINBENCH_VERSION;
    rec.engine_pid = getpid();
    rec.engine_host = this_host_name();
    run_id = store->create_run(rec);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitFailed;
  }

  EventBus bus;
  std::unique_ptr<StoreSink> store_sink;
  if (store) {
    store_sink = std::make_unique<StoreSink>(*store, run_id);
    std::lock_guard lock(g_sink_mutex);
    g_store_sink = store_sink.get();
  }
  JsonlSink jsonl_sink(stdout);
  // With --events jsonl stdout carries the stream; people read stderr.
  ProgressSink progress(jsonl ? stderr : stdout, isatty(fileno(jsonl ? stderr : stdout)) != 0,
                        jsonl || a.quiet);
  // The stream first: whatever the store has, the stream had before it.
  if (rank == 0) {
    if (jsonl) bus.add(&jsonl_sink);
    bus.add(store_sink.get());
    bus.add(&progress);
  }

  Trainer trainer(config, bus, g_stop);
  std::string error;
  int code = kExitFailed;
  try {
    TrainResult r = trainer.run(run_id);
    code = r.status == "stopped" ? kExitStopped : kExitOk;
  } catch (const OutOfMemory& e) {
    error = std::string(e.what()) + " (batch_size " + std::to_string(config.batch_size) +
            ", asked for " + bytes_str(double(e.requested_bytes)) + ")";
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (rank != 0) {
    if (code == kExitFailed) std::fprintf(stderr, "error: rank %d failed: %s\n", rank, error.c_str());
    return code;
  }
  if (code == kExitFailed) {
    std::fprintf(stderr, "error: run %lld failed: %s\n", (long long)run_id, error.c_str());
    bus.publish("failed", {{"run_id", run_id}, {"error", error}, {"summary", trainer.summary_so_far()}});
  }
  // The stream has the final event; now the store gets its last chance (a lock
  // held elsewhere, a disk that fills: retried until the time is up).
  std::string unrecorded;
  {
    std::lock_guard lock(g_sink_mutex);
    g_store_sink = nullptr;
    unrecorded = store_sink->close(std::chrono::seconds(15));
  }
  if (!unrecorded.empty()) {
    const std::string message = "the run store " + store->path() + " could not record the end of run " +
                                std::to_string(run_id) + ": " + unrecorded +
                                "; readers will show the run as interrupted";
    std::fprintf(stderr, "error: %s\n", message.c_str());
    if (jsonl) jsonl_sink.on_event({{"v", kEventsVersion}, {"type", "log"}, {"t", bus.seconds()},
                                    {"level", "error"}, {"message", message}});
    return kExitFailed;
  }
  return code;
}

// ---------------------------------------------------------------- list / show

int cmd_list(const std::string& db, bool as_json) {
  if (access(db.c_str(), F_OK) != 0) {
    if (as_json) std::cout << "[]\n";
    else std::cout << "no runs yet: " << db << " does not exist\n";
    return kExitOk;
  }
  auto store_ptr = open_existing_store(db);
  RunStore& store = *store_ptr;
  auto runs = store.list_runs();
  for (const auto& r : runs) report_problems(r);
  if (as_json) {
    json out = json::array();
    for (const auto& r : runs) {
      json j = {{"id", r.id}, {"name", r.name}, {"status", r.status},
                {"created_at", r.created_at}, {"model", r.config.value("model", "")},
                {"device", r.environment.value("device", "")}, {"summary", r.summary},
                {"heartbeat_at", r.heartbeat_at}, {"error", r.error}};
      if (!r.problems.empty()) j["problems"] = r.problems;
      out.push_back(std::move(j));
    }
    std::cout << out.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    return kExitOk;
  }
  Table t({"id", "name", "status", "created", "model", "device", "batch", "median step ms",
           "samples/s", "test acc"});
  for (const auto& r : runs) {
    t.add({std::to_string(r.id), r.name, r.status, r.created_at.substr(0, 19),
           r.config.value("model", ""), r.environment.value("device", ""),
           std::to_string(r.config.value("batch_size", 0)),
           fmt(num(r.summary, "median_step_time_ms"), 2), fmt(num(r.summary, "samples_per_s"), 0),
           fmt(num(r.summary, "final_test_accuracy"), 4)});
  }
  if (runs.empty()) std::cout << "no runs in " << store.path() << "\n";
  else t.print(std::cout);
  return kExitOk;
}

int cmd_show(const std::string& db, int64_t id) {
  auto store_ptr = open_existing_store(db);
  RunStore& store = *store_ptr;
  RunRecord r = require_run(store, id);
  report_problems(r);
  std::cout << "run " << r.id << ": " << r.name << "\n"
            << "  status    " << r.status << (r.error.empty() ? "" : " (" + r.error + ")") << "\n"
            << "  created   " << r.created_at << "\n"
            << "  started   " << r.started_at << "\n"
            << "  finished  " << r.finished_at << "\n"
            << "  heartbeat " << r.heartbeat_at << "\n"
            << "  engine    " << r.engine_version;
  if (r.engine_pid > 0) std::cout << " (process " << r.engine_pid << " on " << r.engine_host << ")";
  std::cout << "\n";
  for (const auto& p : r.problems) std::cout << "  damaged   " << p << "\n";
  if (!r.tags.empty()) std::cout << "  tags      " << r.tags << "\n";
  if (!r.notes.empty()) std::cout << "  notes     " << r.notes << "\n";
  std::cout << "\nenvironment\n";
  for (const auto& [k, v] : r.environment.items())
    std::cout << "  " << k << ": " << (v.is_string() ? v.get<std::string>() : v.dump()) << "\n";
  std::cout << "\nconfiguration\n";
  for (const auto& [k, v] : r.config.items()) std::cout << "  " << k << ": " << v.dump() << "\n";
  std::cout << "\ntricks\n";
  Table tt({"key", "requested", "applied", "note"});
  for (const auto& [k, st] : r.tricks.items())
    tt.add({k, st["requested"].dump(), st.value("applied", false) ? "yes" : "no",
            st.value("reason", "")});
  tt.print(std::cout);
  std::cout << "\nsummary\n";
  for (const auto& [k, v] : r.summary.items()) std::cout << "  " << k << ": " << v.dump() << "\n";
  const auto names = store.epoch_series_names(id);
  if (!names.empty()) {
    std::cout << "\nepochs\n";
    std::vector<std::string> header{"epoch", "step"};
    header.insert(header.end(), names.begin(), names.end());
    std::map<int64_t, std::vector<std::string>> rows;
    for (size_t i = 0; i < names.size(); ++i)
      for (const auto& p : store.epoch_series(id, names[i])) {
        auto& row = rows[p.epoch];
        if (row.empty()) row = std::vector<std::string>(header.size(), "-");
        row[0] = std::to_string(p.epoch + 1), row[1] = std::to_string(p.step);
        row[2 + i] = fmt(p.value, 4);
      }
    Table et(header);
    for (auto& [e, row] : rows) et.add(row);
    et.print(std::cout);
  }
  const auto events = store.events(id);
  if (!events.empty()) {
    std::cout << "\nevents\n";
    for (const auto& e : events) std::cout << "  " << e.time << " " << e.level << ": " << e.message << "\n";
  }
  return kExitOk;
}

// ---------------------------------------------------------------- compare

int cmd_compare(const std::string& db, const std::vector<int64_t>& ids) {
  TB_CHECK(ids.size() >= 2, "compare needs at least two run ids");
  auto store_ptr = open_existing_store(db);
  RunStore& store = *store_ptr;
  std::vector<RunRecord> runs;
  for (int64_t id : ids) runs.push_back(require_run(store, id));
  for (const auto& r : runs) report_problems(r);

  // The keys of one object per run whose values differ among the runs.
  auto print_differences = [&runs](const std::vector<json>& objects, const char* title,
                                   const char* none) {
    std::set<std::string> keys;
    for (const json& o : objects)
      for (const auto& [k, v] : o.items()) keys.insert(k);
    std::vector<std::string> header{"key"};
    for (const auto& r : runs) header.push_back("run " + std::to_string(r.id));
    Table diff(header);
    for (const auto& k : keys) {
      std::vector<std::string> row{k};
      bool differs = false;
      for (const json& o : objects) {
        row.push_back(o.contains(k) ? o[k].dump() : "(absent)");
        if (row.back() != row[1]) differs = true;
      }
      if (differs) diff.add(row);
    }
    std::cout << title << "\n";
    if (diff.rows() == 0) std::cout << "  (none: " << none << ")\n";
    else diff.print(std::cout);
  };
  std::vector<json> configs, facts;
  for (const auto& r : runs) {
    configs.push_back(r.config);
    facts.push_back(environment_facts(r.environment));
  }
  print_differences(configs, "configuration (keys that differ)", "identical configurations");
  std::cout << "\n";
  print_differences(facts, "where they ran (environment entries that differ)",
                    "the same processor or GPU, instruction set, threads and libraries");

  std::cout << "\nresults (speed-up vs run " << runs[0].id << ")\n";
  Table t({"run", "name", "device", "batch", "peak memory", "median step ms", "samples/s",
           "test acc", "speed-up"});
  const double base = num(runs[0].summary, "samples_per_s");
  for (const auto& r : runs) {
    const double sps = num(r.summary, "samples_per_s");
    t.add({std::to_string(r.id), r.name, r.environment.value("device", ""),
           std::to_string(r.config.value("batch_size", 0)),
           bytes_str(num(r.summary, "peak_memory_bytes")),
           fmt(num(r.summary, "median_step_time_ms"), 2), fmt(sps, 0),
           fmt(num(r.summary, "final_test_accuracy"), 4),
           std::isfinite(base) && base > 0 ? fmt(sps / base, 2) + "x" : "-"});
  }
  t.print(std::cout);
  return kExitOk;
}

// ---------------------------------------------------------------- export

int cmd_export(const std::string& db, int64_t id, const std::string& format,
               const std::string& output) {
  auto store_ptr = open_existing_store(db);
  RunStore& store = *store_ptr;
  RunRecord r = require_run(store, id);
  report_problems(r);
  // Never onto the store itself (or its -wal/-shm files): that would wipe
  // every run. The export goes to a temporary file renamed into place, so a
  // failed export leaves whatever was at `output` as it was.
  std::string temporary;
  std::ofstream file;
  if (!output.empty()) {
    struct stat target {};
    if (::stat(output.c_str(), &target) == 0)
      for (const std::string& f : {db, db + "-wal", db + "-shm", db + "-journal"}) {
        struct stat st {};
        TB_CHECK(::stat(f.c_str(), &st) != 0 || st.st_dev != target.st_dev ||
                     st.st_ino != target.st_ino,
                 output, ": this is the run store (", f,
                 "); exporting onto it would destroy every run. Name another file.");
      }
    temporary = output + ".tmp-" + std::to_string(getpid());
    file.open(temporary, std::ios::trunc);
    TB_CHECK(file, temporary, ": cannot open for writing (", std::strerror(errno), ")");
  }
  std::ostream& out = output.empty() ? std::cout : file;
  const auto names = store.step_series_names(id);
  if (format == "json") {
    json j = {{"id", r.id},          {"name", r.name},       {"status", r.status},
              {"created_at", r.created_at}, {"started_at", r.started_at},
              {"finished_at", r.finished_at}, {"error", r.error}, {"config", r.config},
              {"environment", r.environment}, {"tricks", r.tricks}, {"summary", r.summary},
              {"tags", r.tags},      {"notes", r.notes}};
    json steps = json::object(), epochs = json::object();
    for (const auto& n : names) {
      json s = json::array();
      for (const auto& p : store.step_series(id, n)) s.push_back({p.step, p.wall_time, p.value});
      steps[n] = s;
    }
    for (const auto& n : store.epoch_series_names(id)) {
      json s = json::array();
      for (const auto& p : store.epoch_series(id, n))
        s.push_back({p.epoch, p.step, p.wall_time, p.value});
      epochs[n] = s;
    }
    j["step_series"] = steps;  // [step, wall_time, value]
    j["epoch_series"] = epochs;  // [epoch, step, wall_time, value]
    j["layer_profile"] = cli::layer_profile_export(store, r);  // docs/layers.md
    out << j.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  } else {
    // Wide CSV: one row per step, one column per series (empty where a series has no point).
    std::map<int64_t, std::pair<double, std::vector<std::string>>> rows;
    for (size_t i = 0; i < names.size(); ++i)
      for (const auto& p : store.step_series(id, names[i])) {
        auto& row = rows[p.step];
        if (row.second.empty()) row.second.assign(names.size(), "");
        row.first = p.wall_time;
        std::ostringstream v;
        v.precision(9);
        v << p.value;
        row.second[i] = std::isfinite(p.value) ? v.str() : "nan";
      }
    out << "step,wall_time";
    for (const auto& n : names) out << "," << n;
    out << "\n";
    for (const auto& [step, row] : rows) {
      out << step << "," << fmt(row.first, 6);
      for (const auto& v : row.second) out << "," << v;
      out << "\n";
    }
  }
  out.flush();
  if (!output.empty()) {
    file.close();
    if (!file) {
      std::remove(temporary.c_str());
      TB_FAIL(output, ": write failed (", std::strerror(errno), "); nothing was changed");
    }
    if (std::rename(temporary.c_str(), output.c_str()) != 0) {
      const std::string why = std::strerror(errno);
      std::remove(temporary.c_str());
      TB_FAIL(output, ": cannot move the export into place (", why, ")");
    }
    return kExitOk;
  }
  TB_CHECK(out.good(), "stdout: write failed");
  return kExitOk;
}

int engine_main(int argc, char** argv) {
  CLI::App app{
      "trainbench-engine: trains a model with the chosen speed-up tricks and records every run\n"
      "in a SQLite run store.\n\n"
      "Exit codes: 0 finished, 1 the run failed (or a store error), 2 invalid usage or\n"
      "configuration, 130 stopped by SIGINT/SIGTERM (the current step or evaluation batch\n"
      "finishes, all is stored; a second signal records the run as stopped and ends at once).",
      "trainbench-engine"};
  app.set_version_flag("--version", std::string("trainbench-engine ") + TRAINBENCH_VERSION);
  app.require_subcommand(0, 1);
  app.fallthrough();  // --db may follow the subcommand
  std::string db;
  // The default is worked out only when a command needs it: --help and
  // --version must work without HOME.
  app.add_option("--db", db,
                 "Run store database (default: $XDG_DATA_HOME/trainbench/runs.db, else "
                 "~/.local/share/trainbench/runs.db)")
      ->envname("TRAINBENCH_DB");

  RunArgs ra;
  CLI::App* run = app.add_subcommand(
      "run", "Train one run. With no options: fmnist-cnn on Fashion-MNIST for one epoch.");
  run->add_option("-c,--config", ra.config_file, "Run configuration (JSON object; see `config`)");
  run->add_option("-s,--set", ra.sets, "Override one key: key=value (repeatable)");
  const std::map<std::string, std::string> flag_help = {
      {"--name", "Run name"},
      {"--model", "fmnist-cnn, resnet18-cifar, resnet9 or mlp"},
      {"--dataset", "fashion-mnist, mnist, cifar10 or synthetic"},
      {"--data-dir", "Folder with the data set files"},
      {"--device", "auto, cpu, cuda or cuda:N"},
      {"--epochs", "Epochs"},
      {"--steps", "Stop after this many optimizer steps (key max_steps)"},
      {"--batch-size", "Batch size"},
      {"--lr", "Learning rate"},
      {"--optimizer", "sgd, adamw, rmsprop, lars or lamb"},
      {"--workers", "Data-loader threads"},
      {"--amp", "off, fp16 or bf16 (cuda backend)"},
      {"--seed", "Seed"},
      {"--train-limit", "Use the first N training samples"},
      {"--test-limit", "Use the first N test samples"}};
  for (KeyFlag& f : ra.flags) {
    const std::string names = std::string(f.flag) == "--batch-size" ? "-b,--batch-size" : f.flag;
    f.option = run->add_option(names, f.text, flag_help.at(f.flag) +
                                                  " (checked like --set " + f.key + "=...)");
  }
  run->add_option("--events", ra.events, "none, or jsonl: a JSON-lines event stream on stdout "
                                         "(docs/events.md)")
      ->check(CLI::IsMember({"none", "jsonl"}));
  run->add_flag("-q,--quiet", ra.quiet, "No progress output");

  bool list_json = false;
  CLI::App* list = app.add_subcommand("list", "List the runs in the store");
  list->add_flag("--json", list_json, "JSON output");

  std::string show_id;
  CLI::App* show = app.add_subcommand("show", "Show one run: configuration, tricks, summary, epochs");
  show->add_option("id", show_id, "Run id")->required();

  std::vector<std::string> compare_ids;
  CLI::App* compare = app.add_subcommand(
      "compare", "Compare runs: configuration differences, where they ran (the environment "
                 "entries that differ: processor or GPU, instruction set, threads, libraries) and "
                 "a results table with speed-ups relative to the first run");
  compare->add_option("ids", compare_ids, "Two or more run ids")->required()->expected(2, -1);

  std::string export_id;
  std::string export_format = "csv", export_output;
  CLI::App* exp = app.add_subcommand("export", "Export a run's metric series");
  exp->add_option("id", export_id, "Run id")->required();
  exp->add_option("--format", export_format, "csv (one row per step) or json (everything)")
      ->check(CLI::IsMember({"csv", "json"}));
  exp->add_option("-o,--output", export_output,
                  "Output file (default: stdout); written whole or not at all, never onto the store");

  bool show_defaults = false, show_schema = false;
  std::string validate_file;
  CLI::App* cfg = app.add_subcommand("config", "Print the default configuration or the schema of "
                                               "every key, or validate a configuration file");
  cfg->add_flag("--defaults", show_defaults, "The default configuration (JSON)");
  cfg->add_flag("--schema", show_schema, "Every key: type, default, choices, group, trick number");
  cfg->add_option("--validate", validate_file, "Validate a configuration file");

  std::string trace_id;
  int64_t trace_steps = 5;
  std::string trace_output;
  CLI::App* trace = app.add_subcommand(
      "trace", "Re-run a stored run's configuration for N steps and write a Chrome/Perfetto trace");
  trace->add_option("id", trace_id, "Run id")->required();
  trace->add_option("--steps", trace_steps, "Steps to trace")->check(cli::at_least(1));
  trace->add_option("-o,--output", trace_output, "Trace file (default: trace-ID.json)");

  bool devices_json = false;
  CLI::App* devices = app.add_subcommand("devices", "List the devices this build can use");
  devices->add_flag("--json", devices_json, "JSON output");

  // ladder and advise train in this process: the same signal thread as run;
  // layers and work only read.
  auto ladder_commands = cli::add_ladder_commands(
      app, {g_stop,
            [] {
              std::signal(SIGPIPE, SIG_IGN);
              start_signal_thread();
            },
            [](StoreSink* sink) {
              std::lock_guard lock(g_sink_mutex);
              g_store_sink = sink;
            }});
  for (cli::Command& c : cli::add_layers_commands(app)) ladder_commands.push_back(std::move(c));

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the message and the usage hint
    return kExitUsage;
  }

  // Usage checks that CLI11 cannot do: run ids as typed, the store path.
  std::vector<int64_t> ids;
  std::string db_path = db;
  const bool is_run = run->parsed() || app.get_subcommands().empty();
  bool needs_store = is_run || list->parsed() || show->parsed() || compare->parsed() ||
                     exp->parsed() || trace->parsed();
  for (const cli::Command& c : ladder_commands)
    needs_store = needs_store || (c.app->parsed() && c.store_use() != cli::StoreUse::None);
  try {
    for (const std::string* id : {&show_id, &export_id, &trace_id})
      if (!id->empty()) ids.push_back(parse_run_id(*id));
    for (const std::string& id : compare_ids) ids.push_back(parse_run_id(id));
    if (needs_store && db_path.empty()) {
      db_path = RunStore::default_path();
      ra.db_is_default = true;
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitUsage;
  }

  // Which commands train is known now: the others stop as any program does.
  bool trains = is_run || trace->parsed();
  for (const cli::Command& c : ladder_commands)
    trains = trains || (c.app->parsed() && c.store_use() == cli::StoreUse::Records);
  if (!trains && release_stop_signals()) return kExitStopped;

  try {
    if (is_run) {
      ra.db = db_path;
      // A reader of --events that goes away must not kill the run (EPIPE instead).
      std::signal(SIGPIPE, SIG_IGN);
      start_signal_thread();
      return cmd_run(ra);
    }
    if (list->parsed()) return cmd_list(db_path, list_json);
    if (show->parsed()) return cmd_show(db_path, ids.at(0));
    if (compare->parsed()) return cmd_compare(db_path, ids);
    if (trace->parsed()) {
      std::signal(SIGPIPE, SIG_IGN);
      start_signal_thread();
      return cmd_trace(db_path, ids.at(0), trace_steps, trace_output);
    }
    if (exp->parsed()) return cmd_export(db_path, ids.at(0), export_format, export_output);
    for (const cli::Command& c : ladder_commands) {
      if (!c.app->parsed()) continue;
      if (ra.db_is_default && c.store_use() == cli::StoreUse::Records) make_store_folder(db_path);
      return c.run(db_path);
    }
    if (cfg->parsed()) {
      if (!validate_file.empty()) {
        validate_config(read_config_file(validate_file), validate_file);
        std::cout << validate_file << ": valid\n";
      } else if (show_schema) {
        std::cout << config_schema_json().dump(2) << "\n";
      } else {
        std::cout << default_config().dump(2) << "\n";
      }
      return kExitOk;
    }
    if (devices->parsed()) {
      const auto list_devices = available_devices();
      if (devices_json) {
        json out = json::array();
        for (const auto& [id, name] : list_devices) out.push_back({{"id", id}, {"name", name}});
        std::cout << out.dump(2) << "\n";
      } else {
        for (const auto& [id, name] : list_devices) std::cout << id << "\t" << name << "\n";
      }
      return kExitOk;
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return cfg->parsed() ? kExitUsage : kExitFailed;
  }
  return kExitOk;
}

}  // namespace

// No exception leaves main: whatever escapes a command is an error message
// and exit code 1, never an abort.
int main(int argc, char** argv) {
  try {
    catch_stop_signals();  // first: see there
    return engine_main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "error: unexpected failure\n");
  }
  return kExitFailed;
}
