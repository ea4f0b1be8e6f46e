// SPDX-License-Identifier: GPL-3.0-or-later
// `trainbench-engine ladder`: a baseline and rungs of tricks, measured in
// interleaved repeats into one stored ladder (engine/ladder/ladder.h).
#include "app/engine/cmd_ladder.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "app/engine/cli_checks.h"
#include "app/engine/table.h"
#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/ladder/ladder.h"
#include "engine/ladder/ladder_table.h"
#include "engine/ladder/rungs.h"
#include "engine/store/run_store.h"
#include "engine/train/config.h"
#include "engine/train/config_file.h"
#include "engine/train/events.h"

namespace tb::cli {

using json = nlohmann::json;

namespace {

constexpr int kExitOk = 0, kExitFailed = 1, kExitUsage = 2, kExitStopped = 130;

struct LadderArgs {
  std::string config_file, model, device, name, rungs, mode, events = "none";
  std::string markdown, csv, json_out;
  std::vector<std::string> sets;
  int64_t repeats = -1, warmup = -1, measured = -1, show = 0;
  bool accuracy = false, quiet = false, list_rungs = false;
};

// The file as written (a flag must not hide its bad value), then the flags
// over it and --set over both; validated like a run's.
json ladder_config(const LadderArgs& a) {
  json cfg = json::object();
  if (!a.config_file.empty()) {
    cfg = read_config_file(a.config_file);
    check_config_keys(cfg, a.config_file);
  }
  auto str = [&](const char* k, const std::string& v) { if (!v.empty()) cfg[k] = v; };
  auto num = [&](const char* k, int64_t v) { if (v >= 0) cfg[k] = v; };
  str("model", a.model), str("device", a.device), str("name", a.name);
  str("ladder_rungs", a.rungs), str("ladder_mode", a.mode);
  num("ladder_repeats", a.repeats), num("ladder_warmup_steps", a.warmup);
  num("ladder_measured_steps", a.measured);
  if (a.accuracy) cfg["ladder_accuracy"] = true;
  for (const std::string& s : a.sets) apply_assignment(cfg, s);
  return validate_config(cfg, a.config_file.empty() ? "command line" : a.config_file);
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return in ? one + " " + five + " " + fifteen : "";
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  TB_CHECK(out, path, ": cannot open for writing");
  out << text;
  TB_CHECK(out.good(), path, ": write failed");
}

// The rungs and what each sets on the ladder's baseline (-c, the flags and
// --set; none: the defaults): a table, or with --json FILE ("-": stdout)
// {"rungs": [{id, title, changes_results, sets}], "order": [the rungs this
// ladder climbs]} for bench/ladder.py and scripts/ladder_rungs_doc.py.
int list_rungs(const LadderArgs& a) {
  json base;
  std::vector<std::string> order;
  try {
    base = ladder_config(a);
    order = parse_rung_list(base["ladder_rungs"].get<std::string>());
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitUsage;
  }
  if (!a.json_out.empty()) {
    json rungs = json::array();
    for (const RungDef& r : rung_catalogue())
      rungs.push_back({{"id", r.id},
                       {"title", r.title},
                       {"changes_results", r.changes_results},
                       {"sets", r.changes(base)}});
    const std::string text = json{{"rungs", rungs}, {"order", order}}.dump(2) + "\n";
    if (a.json_out == "-")
      std::cout << text;
    else
      write_file(a.json_out, text);
    return kExitOk;
  }
  Table t({"rung", "title", "changes the numbers", "sets (on this baseline)"});
  for (const RungDef& r : rung_catalogue())
    t.add({r.id, r.title, r.changes_results ? "yes" : "no", r.changes(base).dump()});
  t.print(std::cout);
  std::cout << "\norder: ";
  for (const std::string& id : order) std::cout << id << " ";
  std::cout << "\n";
  return kExitOk;
}

int show_ladder(const std::string& db, int64_t id) {
  TB_CHECK(access(db.c_str(), F_OK) == 0, db, ": no run store here yet");
  RunStore store(db, RunStore::Mode::ReadOnly);
  auto l = store.get_ladder(id);
  TB_CHECK(l.has_value(), db, ": no ladder with id ", id);
  std::cout << "ladder " << l->id << ": " << l->name << " (" << l->status << ", "
            << l->spec.value("mode", "") << ", " << l->spec.value("repeats", 0) << " repeats, "
            << l->spec.value("device", "") << ")\n\n"
            << ladder_table_markdown(l->result);
  return kExitOk;
}

// Events of the ladder itself on the JSON-lines stream, beside its runs' events.
void emit(bool jsonl, const std::string& type, json fields) {
  if (!jsonl) return;
  fields["v"] = kEventsVersion;
  fields["type"] = type;
  const std::string line = fields.dump(-1, ' ', false, json::error_handler_t::replace);
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
}

int run_ladder_command(const LadderArgs& a, const std::string& db, const Signals& signals) {
  const std::atomic<bool>& stop = signals.stop;
  if (a.list_rungs) return list_rungs(a);
  if (a.show > 0) return show_ladder(db, a.show);
  json config;
  LadderPlan plan;
  std::string device_name;
  try {
    config = ladder_config(a);
    // "auto" is resolved once, so every rung runs on the same device.
    std::string note;
    auto backend = make_backend(config["device"].get<std::string>(), {}, &note);
    device_name = backend->describe().value("device_name", backend->device().str());
    plan = plan_ladder(config, backend->device().str());
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitUsage;
  }
  const bool jsonl = a.events == "jsonl";
  RunStore store(db);
  signals.install();
  std::FILE* human = jsonl ? stderr : stdout;
  ProgressSink progress(human, isatty(fileno(human)) != 0, /*quiet=*/true);
  JsonlSink jsonl_sink(stdout);
  std::vector<EventSink*> sinks;
  if (!a.quiet) sinks.push_back(&progress);
  if (jsonl) sinks.push_back(&jsonl_sink);

  const std::vector<LadderRun> runs = ladder_runs(plan);
  if (!a.quiet) {
    std::fprintf(human, "ladder '%s' on %s: %zu rungs, %lld repeats, %zu runs (%lld warm-up + %lld measured steps each)\n",
                 plan.name.c_str(), plan.device.c_str(), plan.rungs.size(),
                 (long long)plan.repeats, runs.size(), (long long)plan.warmup_steps,
                 (long long)plan.measured_steps);
    for (const PlannedRung& r : plan.rungs)
      if (!r.skipped.empty())
        std::fprintf(human, "  skipped %s: %s\n", r.title.c_str(), r.skipped.c_str());
  }
  json loads = json::array();
  const std::string started = utc_now(), load_before = load_average();
  LadderExecutor inner = in_process_executor(store, stop, sinks, signals.current_sink);
  size_t n = 0;
  LadderExecutor execute = [&](int64_t run_id, const LadderRun& run) {
    ++n;
    if (!a.quiet)
      std::fprintf(human, "[%zu/%zu] run %lld: %s\n", n, runs.size(), (long long)run_id, run.name.c_str());
    LadderRunOutcome o = inner(run_id, run);
    if (o.status == run_status::kFailed)
      std::fprintf(stderr, "error: run %lld failed: %s\n", (long long)run_id, o.error.c_str());
    loads.push_back({{"run_id", run_id}, {"loadavg", load_average()}});
    return o;
  };
  bool announced = false;
  const LadderOutcome out = run_ladder(store, plan, execute, stop, [&](const json& table) {
    if (!announced) {
      emit(jsonl, "ladder_started", {{"ladder_id", table["ladder_id"]}, {"spec", plan.to_json()}});
      if (!a.quiet) std::fprintf(human, "ladder %lld recorded in %s\n", (long long)table["ladder_id"].get<int64_t>(), db.c_str());
      announced = true;
    }
    emit(jsonl, "ladder_progress", {{"table", table}});
  });
  emit(jsonl, "ladder_finished", {{"ladder_id", out.ladder_id}, {"status", out.status}, {"table", out.table}});
  const std::string markdown = ladder_table_markdown(out.table);
  if (!a.quiet) std::fprintf(human, "\nladder %lld %s\n\n%s", (long long)out.ladder_id, out.status.c_str(), markdown.c_str());
  if (!a.markdown.empty()) write_file(a.markdown, markdown);
  if (!a.csv.empty()) write_file(a.csv, ladder_table_csv(out.table));
  if (!a.json_out.empty()) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    const json doc = {{"ladder_id", out.ladder_id},
                      {"status", out.status},
                      {"date", started},
                      {"finished", utc_now()},
                      {"device", plan.device},
                      {"device_name", device_name},
                      {"host", host},
                      {"engine_version", TRAINBENCH_VERSION},
                      {"compiler", __VERSION__},
                      {"hardware_threads", sysconf(_SC_NPROCESSORS_ONLN)},
                      {"loadavg_before", load_before},
                      {"loadavg_after_each_run", loads},
                      {"spec", plan.to_json()},
                      {"table", out.table},
                      {"markdown", markdown}};
    write_file(a.json_out, doc.dump(2) + "\n");
  }
  if (out.status == run_status::kStopped) return kExitStopped;
  return out.status == run_status::kFinished ? kExitOk : kExitFailed;
}

}  // namespace

Command add_advise_command(CLI::App& app, Signals signals);

std::vector<Command> add_ladder_commands(CLI::App& app, Signals signals) {
  auto a = std::make_shared<LadderArgs>();
  CLI::App* l = app.add_subcommand(
      "ladder",
      "Measure an optimization ladder: the baseline, then rungs of tricks, each run "
      "--repeats times, interleaved; prints the table with the spread and a verdict per rung");
  l->add_option("-c,--config", a->config_file, "Baseline configuration (JSON; ladder_* keys too)");
  l->add_option("-s,--set", a->sets, "Override one key: key=value (repeatable)");
  l->add_option("--name", a->name, "Ladder name");
  l->add_option("--model", a->model, "Model of the baseline");
  l->add_option("--device", a->device, "auto, cpu, cuda or cuda:N");
  l->add_option("--rungs", a->rungs, "Comma-separated rungs in order (see --list-rungs)");
  l->add_option("--mode", a->mode, "cumulative, alone or leave_one_out")
      ->check(CLI::IsMember({"cumulative", "alone", "leave_one_out"}));
  l->add_option("--repeats", a->repeats, "Measured runs per rung (ladder_repeats)")
      ->check(CLI::Range(1, 100));
  l->add_option("--warmup-steps", a->warmup, "Steps before measuring (ladder_warmup_steps)")
      ->check(at_least(0));
  l->add_option("--measured-steps", a->measured, "Measured steps per run (ladder_measured_steps)")
      ->check(at_least(1));
  l->add_flag("--accuracy", a->accuracy,
              "Also train the baseline and every rung that changes the numbers to the end once");
  l->add_option("--events", a->events, "none, or jsonl: the runs' events and ladder_* events on stdout")
      ->check(CLI::IsMember({"none", "jsonl"}));
  l->add_flag("-q,--quiet", a->quiet, "No progress output");
  l->add_option("--markdown", a->markdown, "Write the table as Markdown to this file");
  l->add_option("--csv", a->csv, "Write the table as CSV to this file");
  l->add_option("--json", a->json_out,
                "Write the result (table, plan, device, versions, date, load) as JSON to this file; "
                "with --list-rungs the rungs (\"-\": stdout)");
  l->add_flag("--list-rungs", a->list_rungs,
              "List the rungs and what each sets on the baseline (-c, --set); nothing runs");
  l->add_option("--show", a->show, "Print the table of a stored ladder")->check(at_least(1));
  std::vector<Command> commands;
  commands.push_back({l,
                      [a] {
                        if (a->list_rungs) return StoreUse::None;
                        return a->show > 0 ? StoreUse::Reads : StoreUse::Records;
                      },
                      [a, signals](const std::string& db) {
                        return run_ladder_command(*a, db, signals);
                      }});
  commands.push_back(add_advise_command(app, signals));
  return commands;
}

}  // namespace tb::cli
