// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/ladder/ladder.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>

#include "engine/core/device.h"
#include "engine/core/error.h"
#include "engine/ladder/ladder_table.h"
#include "engine/ladder/rungs.h"
#include "engine/metrics/process_memory.h"
#include "engine/store/run_store.h"
#include "engine/train/config.h"
#include "engine/train/events.h"
#include "engine/train/trainer.h"
#include "engine/train/tricks.h"

namespace tb {

using json = nlohmann::json;

namespace {

json merged(json base, const json& changes) {
  for (const auto& [k, v] : changes.items()) base[k] = v;
  return base;
}

}  // namespace

std::string why_skipped(const RungDef& def, const json& base, const std::string& device) {
  const json changes = def.changes(base);
  const json config = validate_config(merged(base, changes), "ladder rung '" + def.id + "'");
  const json tricks = resolve_tricks(RunConfig::from_json(config), parse_device(device));
  std::string reason;
  bool changed = false;
  for (const auto& [k, v] : changes.items()) {
    if (base.at(k) == v) continue;
    changed = true;
    if (!tricks.contains(k) || tricks[k].at("applied").get<bool>()) return "";
    if (reason.empty()) reason = k + ": " + tricks[k].value("reason", "not applied");
  }
  return changed ? reason : "already in the baseline";
}

json LadderPlan::to_json() const {
  json rs = json::array();
  for (const PlannedRung& r : rungs)
    rs.push_back({{"index", r.index},
                  {"id", r.id},
                  {"title", r.title},
                  {"adds", r.adds},
                  {"config", r.config},
                  {"skipped", r.skipped},
                  {"changes_results", r.changes_results},
                  {"reference", r.reference},
                  {"effect_inverted", r.effect_inverted}});
  return {{"name", name},         {"mode", mode},         {"device", device},
          {"repeats", repeats},   {"warmup_steps", warmup_steps},
          {"measured_steps", measured_steps}, {"accuracy", accuracy},
          {"baseline", baseline}, {"rungs", rs}};
}

LadderPlan plan_ladder(const json& config, const std::string& device) {
  const RunConfig c = RunConfig::from_json(config);
  LadderPlan p;
  p.mode = c.ladder_mode;
  p.device = device;
  p.repeats = c.ladder_repeats;
  p.warmup_steps = c.ladder_warmup_steps;
  p.measured_steps = c.ladder_measured_steps;
  p.accuracy = c.ladder_accuracy;
  p.baseline = config;
  p.baseline["device"] = device;
  p.name = c.name.empty() ? c.model + " ladder" : c.name;
  const std::vector<std::string> ids = parse_rung_list(c.ladder_rungs);

  auto add = [&](std::string id, std::string title, std::vector<std::string> adds,
                 std::string skipped, int reference, bool inverted) {
    PlannedRung r;
    r.index = static_cast<int>(p.rungs.size());
    r.id = std::move(id), r.title = std::move(title), r.adds = std::move(adds);
    r.skipped = std::move(skipped);
    r.reference = reference, r.effect_inverted = inverted;
    json cfg = p.baseline;
    for (const std::string& a : r.adds) cfg = merged(cfg, find_rung(a)->changes(p.baseline));
    // The rung's own trick changes the numbers ("all": any of them does).
    if (const RungDef* own = find_rung(r.id)) r.changes_results = own->changes_results;
    for (const std::string& a : r.adds)
      if (r.id == "all") r.changes_results = r.changes_results || find_rung(a)->changes_results;
    r.config = validate_config(cfg, "ladder rung '" + r.id + "'");
    p.rungs.push_back(std::move(r));
    return p.rungs.back().index;
  };
  add("baseline", "baseline", {}, "", -1, false);

  // Which rungs do something here: decided once, against the baseline.
  std::vector<std::string> running;
  std::map<std::string, std::string> skipped;
  for (const std::string& id : ids) {
    std::string why = why_skipped(*find_rung(id), p.baseline, device);
    if (why.empty()) running.push_back(id);
    else skipped[id] = why;
  }

  if (p.mode == "cumulative") {
    std::vector<std::string> so_far;
    int previous = 0;
    for (const std::string& id : ids) {
      const RungDef& def = *find_rung(id);
      if (skipped.count(id)) {
        add(id, def.title, so_far, skipped[id], previous, false);
        continue;
      }
      so_far.push_back(id);
      previous = add(id, "+ " + def.title, so_far, "", previous, false);
    }
  } else if (p.mode == "alone") {
    for (const std::string& id : ids) {
      const RungDef& def = *find_rung(id);
      const bool skip = skipped.count(id) > 0;
      add(id, def.title, skip ? std::vector<std::string>{} : std::vector<std::string>{id},
          skip ? skipped[id] : "", 0, false);
    }
  } else {
    TB_CHECK(p.mode == "leave_one_out", "ladder_mode: '", p.mode, "' is not a mode");
    const int all = add("all", "all rungs", running, running.empty() ? "no rung runs here" : "", 0,
                        false);
    for (const std::string& id : ids) {
      const RungDef& def = *find_rung(id);
      if (skipped.count(id)) {
        add(id, "without " + def.title, {}, skipped[id], all, true);
        continue;
      }
      std::vector<std::string> others;
      for (const std::string& o : running)
        if (o != id) others.push_back(o);
      add(id, "without " + def.title, others, "", all, true);
    }
  }
  return p;
}

std::vector<LadderRun> ladder_runs(const LadderPlan& plan) {
  std::vector<LadderRun> runs;
  const int64_t steps = plan.warmup_steps + plan.measured_steps;
  for (int64_t r = 0; r < plan.repeats; ++r)
    for (const PlannedRung& rung : plan.rungs) {
      if (!rung.skipped.empty()) continue;
      json cfg = rung.config;
      cfg["max_steps"] = steps;
      // Speed runs are measured, not judged: a short final evaluation, no target.
      const int64_t effective = cfg["batch_size"].get<int64_t>();
      const int64_t limit = cfg["test_limit"].get<int64_t>();
      cfg["test_limit"] = limit > 0 ? std::min(limit, effective) : effective;
      cfg["target_accuracy"] = 0.0;
      cfg["eval_every_steps"] = 0;
      // The schedule does not change a step's speed, but a warm-up longer
      // than the run is refused: shortened to fit.
      cfg["warmup_steps"] = std::min(cfg["warmup_steps"].get<int64_t>(), steps - 1);
      cfg["name"] = plan.name + " · " + rung.title + " · " + std::to_string(r + 1) + "/" +
                    std::to_string(plan.repeats);
      runs.push_back({rung.index, static_cast<int>(r), "speed", cfg["name"],
                      validate_config(cfg, "ladder run"), plan.warmup_steps});
    }
  if (plan.accuracy)
    for (const PlannedRung& rung : plan.rungs) {
      if (!rung.skipped.empty() || (rung.index != 0 && !rung.changes_results)) continue;
      json cfg = rung.config;
      cfg["name"] = plan.name + " · " + rung.title + " · accuracy";
      runs.push_back({rung.index, 0, "accuracy", cfg["name"], validate_config(cfg, "ladder run"),
                      0});
    }
  return runs;
}

namespace {

// Keeps the step times of the measured steps (after the warm-up).
struct MeasuredSteps final : EventSink {
  int64_t warmup;
  std::vector<double> step_ms;
  explicit MeasuredSteps(int64_t w) : warmup(w) {}
  void on_event(const json& e) override {
    if (e.value("type", "") != "step" || e.value("step", int64_t(0)) <= warmup) return;
    const json& m = e["metrics"];
    if (m.contains("step_time_ms") && m["step_time_ms"].is_number())
      step_ms.push_back(m["step_time_ms"].get<double>());
  }
};

}  // namespace

LadderExecutor in_process_executor(RunStore& store, const std::atomic<bool>& stop,
                                   std::vector<EventSink*> extra_sinks,
                                   std::function<void(StoreSink*)> current_sink) {
  return [&store, &stop, extra_sinks, current_sink](int64_t run_id, const LadderRun& run) {
    LadderRunOutcome out;
    EventBus bus;
    StoreSink store_sink(store, run_id);
    if (current_sink) current_sink(&store_sink);
    MeasuredSteps measured(run.warmup_steps);
    bus.add(&store_sink);
    bus.add(&measured);
    for (EventSink* s : extra_sinks) bus.add(s);
    reset_process_peak_rss();
    Trainer trainer(RunConfig::from_json(run.config), bus, stop);
    try {
      TrainResult r = trainer.run(run_id);
      out.status = r.status;
      out.summary = r.summary;
    } catch (const std::exception& e) {
      out.status = run_status::kFailed;
      out.error = e.what();
      out.summary = trainer.summary_so_far();
      bus.publish("failed", {{"run_id", run_id}, {"error", out.error}, {"summary", out.summary}});
    }
    // The sink writes from its own thread: the run is stored once it is closed.
    if (current_sink) current_sink(nullptr);
    const std::string unrecorded = store_sink.close(std::chrono::seconds(15));
    if (!unrecorded.empty()) {
      out.status = run_status::kFailed;
      out.error = "the run store " + store.path() + " could not record the end of run " +
                  std::to_string(run_id) + ": " + unrecorded +
                  "; readers will show the run as interrupted";
    }
    out.measured_step_ms = std::move(measured.step_ms);
    return out;
  };
}

LadderOutcome run_ladder(RunStore& store, const LadderPlan& plan, const LadderExecutor& execute,
                         const std::atomic<bool>& stop,
                         const std::function<void(const json& table)>& on_progress) {
  std::map<int, std::vector<RungMeasurement>> measured;
  LadderOutcome out;
  LadderRecord record;
  record.name = plan.name;
  record.spec = plan.to_json();
  out.ladder_id = store.create_ladder(record);
  const std::vector<LadderRun> runs = ladder_runs(plan);
  int done = 0, failed = 0;
  bool stopped = false;
  auto publish = [&] {
    out.table = ladder_table(plan, measured);
    out.table["ladder_id"] = out.ladder_id;
    out.table["runs_done"] = done;
    out.table["runs_total"] = runs.size();
    store.set_ladder_result(out.ladder_id, out.table);
    if (on_progress) on_progress(out.table);
  };
  publish();  // the empty table: every rung pending or skipped
  for (const LadderRun& run : runs) {
    if (stop.load()) {
      stopped = true;
      break;
    }
    RunRecord rec;
    rec.name = run.name;
    rec.config = run.config;
    rec.engine_pid = getpid();
    rec.engine_host = this_host_name();
    const int64_t run_id = store.create_run(rec);
    store.link_ladder_run({out.ladder_id, run_id, run.rung, run.repetition, run.kind});
    LadderRunOutcome o;
    try {
      o = execute(run_id, run);
    } catch (const std::exception& e) {  // an executor that throws fails its run only
      o.status = run_status::kFailed;
      o.error = e.what();
    }
    ++done;
    if (o.status == run_status::kFailed) ++failed;
    if (o.status == run_status::kStopped) stopped = true;
    measured[run.rung].push_back({run_id, run.repetition, run.kind, o});
    publish();
    if (stopped) break;
  }
  out.status = stopped                           ? run_status::kStopped
               : (done > 0 && failed == done)    ? run_status::kFailed
                                                 : run_status::kFinished;
  store.set_ladder_status(out.ladder_id, out.status,
                          out.status == run_status::kFailed ? "every run of the ladder failed" : "");
  return out;
}

}  // namespace tb
