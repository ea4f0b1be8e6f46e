// SPDX-License-Identifier: GPL-3.0-or-later
// `trainbench-engine advise ID`: what to try next for a stored run, with the
// evidence, the threshold and the most each recommendation can gain
// (engine/advise/advisor.h); `--apply RULE` re-runs with it and links the pair.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "app/engine/cmd_ladder.h"
#include "engine/advise/advisor.h"
#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/ladder/ladder.h"
#include "engine/store/run_store.h"
#include "engine/train/config.h"
#include "engine/train/events.h"

namespace tb::cli {

using json = nlohmann::json;

namespace {

struct AdviseArgs {
  int64_t id = 0;
  bool as_json = false, quiet = false;
  std::string apply;
};

bool gpu_present() {
  for (const auto& [id, name] : available_devices())
    if (id.rfind("cuda", 0) == 0) return true;
  return false;
}

std::string factor(const json& v) {
  if (!v.is_number()) return "not bounded by the breakdown";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2fx", v.get<double>());
  return buf;
}

void print_advice(const std::vector<Advice>& list) {
  if (list.empty()) std::cout << "no rule fires: nothing in this run's measurements points at a trick\n";
  for (const Advice& a : list) {
    std::cout << "* " << a.title << "  [" << a.rule << "]\n"
              << "    evidence:  " << a.evidence << "\n"
              << "    fires on:  " << a.threshold << "\n"
              << "    try:       " << a.action << "\n";
    if (!a.changes.empty()) std::cout << "    sets:      " << a.changes.dump() << "\n";
    std::cout << "    at most:   " << factor(std::isfinite(a.max_speedup) ? json(a.max_speedup) : json())
              << " (" << a.bound_reason << ")\n";
  }
}

void print_outcomes(const json& outcomes) {
  if (outcomes.empty()) return;
  std::cout << "\nre-runs with advice applied (predicted bound next to the measured result)\n";
  for (const json& o : outcomes)
    std::cout << "  run " << o["run_id"].get<int64_t>() << " (" << o["rule"].get<std::string>()
              << ", " << o["status"].get<std::string>() << "): predicted "
              << (o["max_speedup"].is_number() ? "at most " + factor(o["max_speedup"]) : "no bound")
              << ", measured " << factor(o["measured_speedup"]) << "\n";
}

int run_advise(const AdviseArgs& a, const std::string& db, const Signals& signals) {
  TB_CHECK(access(db.c_str(), F_OK) == 0, db,
           ": no run store here yet (runs are recorded by `trainbench-engine run`)");
  // Advice only reads (never waits for a writer, never migrates); --apply records a run.
  RunStore store(db, a.apply.empty() ? RunStore::Mode::ReadOnly : RunStore::Mode::ReadWrite);
  const auto run = store.get_run(a.id);
  TB_CHECK(run.has_value(), db, ": no run with id ", a.id, " (see `trainbench-engine list`)");
  // Advice reads what a run measured: a failed run's measurements are not its
  // speed, and a run without steps has none ("no rule fires" would be a lie).
  TB_CHECK(run->status != run_status::kFailed, "run ", a.id, " failed (",
           run->error.empty() ? "no error was recorded" : run->error,
           "); there is nothing to advise on: fix that and run it again");
  RunEvidence evidence = evidence_from_store(store, a.id);
  TB_CHECK(!std::isnan(evidence.get("step_time_ms")), "run ", a.id, " (", run->status,
           run->error.empty() ? "" : ": " + run->error,
           ") measured no steps; there is nothing to advise on");
  evidence.gpu_present = gpu_present();
  const std::vector<Advice> list = advise(evidence);
  if (a.apply.empty()) {
    if (a.as_json) {
      json out = {{"run_id", a.id}, {"advice", json::array()}, {"re_runs", advice_outcomes(store, a.id)}};
      for (const Advice& x : list) out["advice"].push_back(x.to_json());
      std::cout << out.dump(2) << "\n";
    } else {
      std::cout << "run " << a.id << ": " << run->name << " on " << evidence.device << "\n\n";
      print_advice(list);
      print_outcomes(advice_outcomes(store, a.id));
    }
    return 0;
  }
  const Advice* chosen = nullptr;
  for (const Advice& x : list)
    if (x.rule == a.apply) chosen = &x;
  TB_CHECK(chosen, "advise --apply ", a.apply, ": that rule does not fire for run ", a.id,
           " (run `trainbench-engine advise ", a.id, "` to see those that do)");
  const json config = validate_config(applied_config(run->config, *chosen), "advise --apply");
  RunRecord rec;
  rec.name = config["name"];
  rec.config = config;
  rec.engine_pid = getpid();
  rec.engine_host = this_host_name();
  const int64_t after = store.create_run(rec);
  link_advice(store, a.id, after, *chosen);
  signals.install();
  ProgressSink progress(stdout, isatty(fileno(stdout)) != 0, a.quiet);
  LadderExecutor execute =
      in_process_executor(store, signals.stop, {&progress}, signals.current_sink);
  const LadderRunOutcome o = execute(after, {0, 0, "speed", rec.name, config, 0});
  std::cout << "\n";
  print_outcomes(advice_outcomes(store, a.id));
  if (o.status == run_status::kStopped) return 130;
  return o.status == run_status::kFinished ? 0 : 1;
}

}  // namespace

Command add_advise_command(CLI::App& app, Signals signals) {
  auto a = std::make_shared<AdviseArgs>();
  CLI::App* cmd = app.add_subcommand(
      "advise", "What to try next for a stored run: rules over its measured series, each with its "
                "evidence, threshold and the most it can gain");
  cmd->add_option("id", a->id, "Run id")->required();
  cmd->add_flag("--json", a->as_json, "JSON output");
  cmd->add_option("--apply", a->apply,
                  "Re-run the run's configuration with this rule's changes and link the pair");
  cmd->add_flag("-q,--quiet", a->quiet, "No progress output while re-running");
  return {cmd, [a] { return a->apply.empty() ? StoreUse::Reads : StoreUse::Records; },
          [a, signals](const std::string& db) {
            return run_advise(*a, db, signals);
          }};
}

}  // namespace tb::cli
