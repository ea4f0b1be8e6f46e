// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The optimization ladder: a baseline configuration and rungs that add tricks
// (rungs.h), each measured `ladder_repeats` times for a fixed number of steps
// after a warm-up, the repeats interleaved (A B C A B C ...) so that drift of
// the machine hits every rung alike. Every run is an ordinary stored run,
// linked to one ladder record (RunStore::create_ladder, schema v4); the
// result is seed article 004's table with the spread (ladder_table.h).
//
//   plan_ladder   which rungs run, with which configuration, and which are
//                 skipped on this device (and why)
//   ladder_runs   the runs in execution order (interleaved repeats, then the
//                 accuracy runs)
//   run_ladder    runs them through an executor (the trainer in this process,
//                 or a test's fake), links each to the ladder record and
//                 updates the table after every run
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tb {

class EventSink;
class RunStore;
class StoreSink;
struct RungDef;

struct PlannedRung {
  int index = 0;               // 0: the baseline
  std::string id, title;       // "baseline", "amp", "all", "without amp", ...
  std::vector<std::string> adds;  // rung ids on top of the baseline
  nlohmann::json config;       // the rung's validated configuration
  std::string skipped;         // why it does not run here ("" when it runs)
  bool changes_results = false;  // its own trick changes the numbers: an accuracy run (ladder_accuracy)
  // The rung this one's trick is judged against: the previous rung that runs
  // (cumulative), the baseline (alone), or "all" (leave_one_out, where the
  // trick's effect is all / this). -1 for the baseline.
  int reference = -1;
  bool effect_inverted = false;  // leave_one_out: effect = reference / this
};

struct LadderPlan {
  std::string name, mode, device;  // device: the resolved one ("cpu", "cuda:0")
  int64_t repeats = 3, warmup_steps = 10, measured_steps = 50;
  bool accuracy = false;
  nlohmann::json baseline;  // validated
  std::vector<PlannedRung> rungs;

  nlohmann::json to_json() const;  // the ladder record's spec
};

// Why rung `def` does nothing on `device` ("cpu", "cuda:0") on top of the
// validated configuration `base`: the first trick it changes and why that is
// not applied there, or "already in the baseline"; "" when it changes at least
// one trick that is applied. The plan records it; the Ladder page shows it
// before a ladder starts.
std::string why_skipped(const RungDef& def, const nlohmann::json& base, const std::string& device);

// The plan for a validated configuration (its ladder_* keys say the rungs,
// mode, repeats and steps) on `device` ("auto" is resolved by the caller:
// pass the device the runs will use). Throws tb::Error for an unknown rung.
LadderPlan plan_ladder(const nlohmann::json& config, const std::string& device);

// One run of the ladder.
struct LadderRun {
  int rung = 0, repetition = 0;
  std::string kind;  // "speed" or "accuracy"
  std::string name;
  nlohmann::json config;  // validated; speed runs: warm-up + measured steps, a short evaluation
  int64_t warmup_steps = 0;  // steps before the measured ones
};

// Execution order: repetition r of every running rung, for r = 0, 1, ...
// (interleaved), then one accuracy run for the baseline and for every running
// rung that changes the numbers (with ladder_accuracy).
std::vector<LadderRun> ladder_runs(const LadderPlan& plan);

// What a run measured: the step times of its measured steps (after the
// warm-up), the stored summary, and how it ended.
struct LadderRunOutcome {
  std::string status;  // finished, stopped or failed
  std::string error;
  std::vector<double> measured_step_ms;
  nlohmann::json summary;
};

// Trains `run` into the stored run `run_id` (already created and linked).
using LadderExecutor = std::function<LadderRunOutcome(int64_t run_id, const LadderRun& run)>;

// The trainer in this process, writing into `store`; extra sinks (progress,
// JSON lines) see every event. The peak resident memory is reset before each
// run, so a CPU run's peak is its own. current_sink, when given, is told the
// run's store sink while it is open and nullptr once it is closed (the
// engine's second stop signal records that run as stopped). A run whose end
// the store could not record (15 s) is failed, saying why.
LadderExecutor in_process_executor(RunStore& store, const std::atomic<bool>& stop,
                                   std::vector<EventSink*> extra_sinks = {},
                                   std::function<void(StoreSink*)> current_sink = {});

struct LadderOutcome {
  int64_t ladder_id = 0;
  std::string status;  // finished, stopped or failed
  nlohmann::json table;  // ladder_table()
};

// Creates the ladder record, then for each run in ladder_runs(): creates the
// run, links it (rung, repetition, kind), executes it, and stores the table
// so far (a reader follows it live). `stop` ends it after the current run
// (status "stopped"); a failed run is recorded in the table and the ladder
// goes on. on_progress sees the table after every run.
LadderOutcome run_ladder(RunStore& store, const LadderPlan& plan, const LadderExecutor& execute,
                         const std::atomic<bool>& stop,
                         const std::function<void(const nlohmann::json& table)>& on_progress = {});

}  // namespace tb
