// SPDX-License-Identifier: GPL-3.0-or-later
// The optimization ladder: which rungs run and with what, the interleaved
// order of the repeats, the table's paired ratios and verdicts, the links in
// the store, and a real (tiny) ladder on the CPU.
#include <QtTest>
#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/ladder/ladder.h"
#include "engine/ladder/ladder_table.h"
#include "engine/ladder/rungs.h"
#include "engine/store/run_store.h"
#include "engine/train/config.h"

using namespace tb;
using json = nlohmann::json;

namespace {

json config(json overrides = json::object()) {
  json c = {{"device", "cpu"}, {"model", "fmnist-cnn"}, {"batch_size", 32}};
  for (auto& [k, v] : overrides.items()) c[k] = v;
  return validate_config(c, "test");
}

const PlannedRung* rung(const LadderPlan& p, const std::string& id) {
  for (const PlannedRung& r : p.rungs)
    if (r.id == id) return &r;
  return nullptr;
}

// A fake executor: each rung has a base step time, and every repetition runs
// on a machine that got slower (drift), the same for every rung of that
// repetition. Interleaving makes the paired ratios immune to it.
struct DriftingMachine {
  std::map<int, double> base_ms;  // by rung index
  double drift_per_repetition = 0.3;
  std::vector<std::pair<int, int>> order;  // (rung, repetition) as executed
  std::vector<int64_t> run_ids;
  int fail_rung = -1;
  LadderRunOutcome operator()(int64_t run_id, const LadderRun& run) {
    order.push_back({run.rung, run.repetition});
    run_ids.push_back(run_id);
    if (run.rung == fail_rung) return {"failed", "out of memory (test)", {}, json::object()};
    const double ms = base_ms.at(run.rung) * (1.0 + drift_per_repetition * run.repetition);
    LadderRunOutcome o;
    o.status = "finished";
    o.measured_step_ms = {ms * 1.01, ms, ms * 0.99};
    o.summary = {{"peak_memory_bytes", 1000.0 * (run.rung + 1) + run.repetition},
                 {"final_test_accuracy", 0.5}};
    return o;
  }
};

}  // namespace

class TestLadder : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  std::string db() const { return dir_.filePath("runs.db").toStdString(); }

 private slots:
  // On the CPU only the tricks the CPU backend honours run; the others are
  // listed as skipped with the run plan's reason.
  void cumulativePlanOnTheCpu() {
    const LadderPlan p = plan_ladder(config(), "cpu");
    QCOMPARE(p.mode, std::string("cumulative"));
    QCOMPARE(p.rungs.size(), rung_catalogue().size() + 1);
    QCOMPARE(p.rungs[0].id, std::string("baseline"));
    std::vector<std::string> running;
    for (const PlannedRung& r : p.rungs)
      if (r.skipped.empty() && r.index > 0) running.push_back(r.id);
    QCOMPARE(running, (std::vector<std::string>{"batch_x4", "workers", "fuse_pointwise",
                                                "optimizer_foreach"}));
    QVERIFY2(rung(p, "amp")->skipped.find("not applicable on the cpu backend") != std::string::npos,
             rung(p, "amp")->skipped.c_str());
    QVERIFY(rung(p, "cuda_graphs")->skipped.find("cuda_graphs") != std::string::npos);
    // Each running rung stands on the last: the optimizer rung has them all.
    const json& top = rung(p, "optimizer_foreach")->config;
    QCOMPARE(top["batch_size"].get<int64_t>(), int64_t(128));
    QCOMPARE(top["lr_scaling"].get<std::string>(), std::string("linear"));
    QCOMPARE(top["base_batch_size"].get<int64_t>(), int64_t(32));
    QCOMPARE(top["workers"].get<int64_t>(), int64_t(4));
    QVERIFY(top["fuse_pointwise"].get<bool>());
    QCOMPARE(top["amp"].get<std::string>(), std::string("off"));  // skipped rungs add nothing
    // ... and is judged against the rung below it that ran.
    QCOMPARE(rung(p, "workers")->reference, rung(p, "batch_x4")->index);
    QCOMPARE(rung(p, "fuse_pointwise")->reference, rung(p, "workers")->index);
    QCOMPARE(rung(p, "batch_x4")->reference, 0);
    QVERIFY(rung(p, "batch_x4")->changes_results);
    QVERIFY(!rung(p, "workers")->changes_results);
  }

  void aloneAndLeaveOneOutPlans() {
    const LadderPlan alone =
        plan_ladder(config({{"ladder_mode", "alone"}, {"ladder_rungs", "workers,batch_x4"}}), "cpu");
    QCOMPARE(alone.rungs.size(), size_t(3));
    QCOMPARE(rung(alone, "batch_x4")->config["workers"].get<int64_t>(), int64_t(0));
    QCOMPARE(rung(alone, "workers")->config["batch_size"].get<int64_t>(), int64_t(32));
    QCOMPARE(rung(alone, "batch_x4")->reference, 0);

    const LadderPlan loo = plan_ladder(
        config({{"ladder_mode", "leave_one_out"}, {"ladder_rungs", "workers,batch_x4,amp"}}), "cpu");
    QCOMPARE(loo.rungs[1].id, std::string("all"));
    QCOMPARE(loo.rungs[1].config["workers"].get<int64_t>(), int64_t(4));
    QCOMPARE(loo.rungs[1].config["batch_size"].get<int64_t>(), int64_t(128));
    const PlannedRung* without_workers = rung(loo, "workers");
    QCOMPARE(without_workers->title, std::string("without 4 loader workers"));
    QCOMPARE(without_workers->config["workers"].get<int64_t>(), int64_t(0));
    QCOMPARE(without_workers->config["batch_size"].get<int64_t>(), int64_t(128));
    QCOMPARE(without_workers->reference, 1);
    QVERIFY(without_workers->effect_inverted);
    QVERIFY(!rung(loo, "amp")->skipped.empty());
  }

  void badRungListsAreErrorsNamingTheRung() {
    try {
      plan_ladder(config({{"ladder_rungs", "workers, warp_drive"}}), "cpu");
      QFAIL("an unknown rung was accepted");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("'warp_drive'") != std::string::npos, e.what());
    }
    QVERIFY_THROWS_EXCEPTION(Error, parse_rung_list("workers,workers"));
    QCOMPARE(parse_rung_list(" workers , amp "), (std::vector<std::string>{"workers", "amp"}));
    QCOMPARE(parse_rung_list(""), default_rung_order());
    // Issue 26: "," ran the whole default ladder; an unknown rung passed
    // validation and failed only when the ladder was planned.
    QCOMPARE(parse_rung_list("  "), default_rung_order());
    QVERIFY_THROWS_EXCEPTION(Error, parse_rung_list(","));
    QVERIFY_THROWS_EXCEPTION(Error, parse_rung_list("amp,,workers"));
    try {
      validate_config({{"ladder_rungs", "amp, nosuch"}}, "test");
      QFAIL("validate_config took an unknown rung");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("test: key 'ladder_rungs': unknown rung 'nosuch'") !=
                   std::string::npos,
               e.what());
    }
  }

  // "Add to ladder": an advisor's changes name the rungs that make them.
  void rungsForAdvice() {
    QCOMPARE(rungs_for_changes({{"workers", 4}, {"pin_memory", true}, {"non_blocking", true}, {"h2d_uint8", true}}),
             (std::vector<std::string>{"h2d_uint8", "workers", "pinned"}));
    QCOMPARE(rungs_for_changes({{"pin_memory", true}}), std::vector<std::string>{});  // half a rung
    QCOMPARE(rungs_for_changes({{"batch_size", 256}, {"lr_scaling", "linear"}, {"base_batch_size", 64},
                                {"warmup_steps", 20}}),
             std::vector<std::string>{"batch_x4"});
  }

  // A rung that turns tricks on is titled with their labels, declared once
  // in the settings table (the GUI shows the same names on the trick panel).
  void rungsAreTitledWithTheTricksLabels() {
    auto label = [](const char* key) { return find_config_key(key)->label; };
    QCOMPARE(find_rung("channels_last")->title, label("channels_last"));
    QCOMPARE(find_rung("cuda_graphs")->title, label("cuda_graphs"));
    QCOMPARE(find_rung("pinned")->title, label("pin_memory") + " + " + label("non_blocking"));
    QCOMPARE(find_rung("amp")->title, label("amp") + " (fp16)");
    QCOMPARE(label("workers"), std::string("Data-loader workers"));
  }

  // `ladder --list-rungs --json -` is how bench/ladder.py and the docs' table
  // read the rungs: every rung of the catalogue with its title, and what it
  // sets on the baseline given (batch_x4 on batch 128: 512).
  void listRungsAsJsonOnABaseline() {
    QProcess p;
    p.start(TRAINBENCH_ENGINE_BIN, {"ladder", "--list-rungs", "--json", "-", "--set", "batch_size=128",
                                    "--rungs", "workers,batch_x4"});
    QVERIFY(p.waitForFinished(60000));
    QCOMPARE(p.exitCode(), 0);
    const json listed = json::parse(p.readAllStandardOutput().toStdString());
    QCOMPARE(listed["rungs"].size(), rung_catalogue().size());
    for (size_t i = 0; i < rung_catalogue().size(); ++i) {
      QCOMPARE(listed["rungs"][i]["id"].get<std::string>(), rung_catalogue()[i].id);
      QCOMPARE(listed["rungs"][i]["title"].get<std::string>(), rung_catalogue()[i].title);
    }
    json batch_x4;
    for (const json& r : listed["rungs"])
      if (r["id"] == "batch_x4") batch_x4 = r;
    QCOMPARE(batch_x4["sets"]["batch_size"].get<int64_t>(), int64_t(512));
    QCOMPARE(batch_x4["sets"]["base_batch_size"].get<int64_t>(), int64_t(128));
    QCOMPARE(listed["order"], json({"workers", "batch_x4"}));

    p.start(TRAINBENCH_ENGINE_BIN, {"ladder", "--list-rungs", "--json", "-", "--rungs", "warp_drive"});
    QVERIFY(p.waitForFinished(60000));
    QCOMPARE(p.exitCode(), 2);
    QVERIFY(p.readAllStandardError().contains("'warp_drive'"));
  }

  // A B C A B C: repetition r of every rung before repetition r + 1 of any;
  // then the accuracy runs of the baseline and the rungs that change numbers.
  void runsAreInterleavedThenAccuracyRuns() {
    const LadderPlan p = plan_ladder(
        config({{"ladder_rungs", "batch_x4,workers,amp"}, {"ladder_repeats", 3},
                {"ladder_warmup_steps", 4}, {"ladder_measured_steps", 6}, {"ladder_accuracy", true},
                {"test_limit", 500}, {"epochs", 2}}),
        "cpu");
    const std::vector<LadderRun> runs = ladder_runs(p);
    std::vector<std::pair<int, int>> order;
    for (const LadderRun& r : runs)
      if (r.kind == "speed") order.push_back({r.rung, r.repetition});
    QCOMPARE(order, (std::vector<std::pair<int, int>>{
                        {0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1}, {2, 1}, {0, 2}, {1, 2}, {2, 2}}));
    for (const LadderRun& r : runs) {
      if (r.kind != "speed") continue;
      QCOMPARE(r.config["max_steps"].get<int64_t>(), int64_t(10));
      QCOMPARE(r.warmup_steps, int64_t(4));
      QVERIFY(r.config["test_limit"].get<int64_t>() <= r.config["batch_size"].get<int64_t>());
    }
    // Accuracy: the baseline and batch_x4 (workers does not change the numbers; amp is skipped).
    QCOMPARE(runs.size(), size_t(11));
    QCOMPARE(runs[9].kind, std::string("accuracy"));
    QCOMPARE(runs[9].rung, 0);
    QCOMPARE(runs[10].rung, 1);
    QCOMPARE(runs[10].config["epochs"].get<int64_t>(), int64_t(2));  // trains to the end
    QCOMPARE(runs[10].config["test_limit"].get<int64_t>(), int64_t(500));
  }

  void verdicts() {
    QCOMPARE(ladder_verdict({1.10, 1.20, 1.15}), std::string("faster"));
    QCOMPARE(ladder_verdict({1.10, 0.99, 1.20}), std::string("no measurable change"));
    QCOMPARE(ladder_verdict({1.01, 1.01, 1.015}), std::string("no measurable change"));  // < 2%
    QCOMPARE(ladder_verdict({0.80, 0.90, 0.85}), std::string("slower"));
    QCOMPARE(ladder_verdict({1.5}), std::string("not judged"));
  }

  // The whole orchestration with a fake executor on a drifting machine:
  // every run is created and linked, the table pairs repetitions, and the
  // verdicts are right although the unpaired ranges overlap.
  void ladderRecordLinksTableAndVerdicts() {
    RunStore store(db());
    const LadderPlan p = plan_ladder(
        config({{"ladder_rungs", "batch_x4,workers,fuse_pointwise"}, {"ladder_mode", "alone"}}), "cpu");
    DriftingMachine m;
    m.base_ms = {{0, 10.0}, {1, 32.0}, {2, 10.0}, {3, 12.5}};  // batch x4: 4x samples in 3.2x time
    std::vector<json> progress;
    std::atomic<bool> stop{false};
    const LadderOutcome out =
        run_ladder(store, p, std::ref(m), stop, [&](const json& t) { progress.push_back(t); });
    QCOMPARE(out.status, std::string("finished"));
    QCOMPARE(m.order.size(), size_t(12));
    QCOMPARE(progress.size(), size_t(13));  // the empty table, then one per run
    QCOMPARE(progress[0]["rows"][1]["status"].get<std::string>(), std::string("pending"));

    const auto links = store.ladder_runs(out.ladder_id);
    QCOMPARE(links.size(), size_t(12));
    for (size_t i = 0; i < m.run_ids.size(); ++i) {
      const auto link = store.ladder_of_run(m.run_ids[i]);
      QVERIFY(link);
      QCOMPARE(link->ladder_id, out.ladder_id);
      QCOMPARE(link->rung, m.order[i].first);
      QCOMPARE(link->repetition, m.order[i].second);
      QCOMPARE(link->kind, std::string("speed"));
    }
    const auto rec = store.get_ladder(out.ladder_id);
    QVERIFY(rec);
    QCOMPARE(rec->status, std::string("finished"));
    QVERIFY(!rec->finished_at.empty());
    QCOMPARE(rec->result, out.table);
    QCOMPARE(rec->spec["mode"].get<std::string>(), std::string("alone"));

    const json& rows = out.table["rows"];
    // batch x4: 128 samples per 32 ms against 32 per 10 ms: 1.25x in every pair.
    QCOMPARE(rows[1]["batch"].get<int64_t>(), int64_t(128));
    QVERIFY(std::abs(rows[1]["speedup"]["median"].get<double>() - 1.25) < 1e-9);
    QVERIFY(std::abs(rows[1]["speedup"]["min"].get<double>() - 1.25) < 1e-9);
    QCOMPARE(rows[1]["verdict"].get<std::string>(), std::string("faster"));
    // Drift of 30% per repetition makes samples/s spread far wider than the
    // effect, so only the pairing can see it.
    QVERIFY(rows[0]["samples_per_s"]["max"].get<double>() / rows[0]["samples_per_s"]["min"].get<double>() > 1.5);
    QCOMPARE(rows[2]["verdict"].get<std::string>(), std::string("no measurable change"));
    QCOMPARE(rows[3]["verdict"].get<std::string>(), std::string("slower"));
    QVERIFY(std::abs(rows[3]["effect"]["median"].get<double>() - 0.8) < 1e-9);
    QCOMPARE(rows[0]["median_step_ms"].get<double>(), 13.0);  // the median of 10, 13, 16
    QCOMPARE(rows[1]["peak_memory_bytes"].get<double>(), 2002.0);  // the largest of its runs

    const std::string md = ladder_table_markdown(out.table);
    QVERIFY2(md.find("| + batch x4, lr scaled |") == std::string::npos, md.c_str());  // alone: no "+"
    QVERIFY2(md.find("| batch x4, lr scaled | 128 |") != std::string::npos, md.c_str());
    QVERIFY2(md.find("1.25× (1.25–1.25)") != std::string::npos, md.c_str());
    QVERIFY(ladder_table_csv(out.table).find("batch_x4,\"batch x4, lr scaled\",done,128") != std::string::npos);

    // Deleting a run drops its link; deleting the ladder keeps the runs.
    store.delete_run(m.run_ids[0]);
    QCOMPARE(store.ladder_runs(out.ladder_id).size(), size_t(11));
    store.delete_ladder(out.ladder_id);
    QVERIFY(!store.get_ladder(out.ladder_id));
    QVERIFY(store.get_run(m.run_ids[1]));
    QVERIFY(!store.ladder_of_run(m.run_ids[1]));
    QCOMPARE(store.integrity_check(), std::string("ok"));
  }

  // A failing run (out of memory at the bigger batch) is reported in its row;
  // the other rungs are still measured.
  void failedRunsAreRecordedAndTheLadderGoesOn() {
    RunStore store(db());
    const LadderPlan p = plan_ladder(config({{"ladder_rungs", "batch_x4,workers"}, {"ladder_repeats", 2}}), "cpu");
    DriftingMachine m;
    m.base_ms = {{0, 10.0}, {1, 30.0}, {2, 25.0}};
    m.fail_rung = 1;
    std::atomic<bool> stop{false};
    const LadderOutcome out = run_ladder(store, p, std::ref(m), stop);
    QCOMPARE(out.status, std::string("finished"));
    const json& rows = out.table["rows"];
    QCOMPARE(rows[1]["failed"].size(), size_t(2));
    QCOMPARE(rows[1]["failed"][0]["error"].get<std::string>(), std::string("out of memory (test)"));
    QVERIFY(rows[1]["samples_per_s"].is_null());
    QVERIFY(rows[2]["samples_per_s"].is_object());
    QVERIFY(ladder_table_markdown(out.table).find("(2 failed)") != std::string::npos);
  }

  // A stop request ends the ladder after the run in progress.
  void stopEndsAfterTheCurrentRun() {
    RunStore store(db());
    const LadderPlan p = plan_ladder(config({{"ladder_rungs", "workers"}}), "cpu");
    std::atomic<bool> stop{false};
    int executed = 0;
    LadderExecutor ex = [&](int64_t, const LadderRun&) {
      ++executed;
      stop = true;
      return LadderRunOutcome{"finished", "", {5.0}, json::object()};
    };
    const LadderOutcome out = run_ladder(store, p, ex, stop);
    QCOMPARE(executed, 1);
    QCOMPARE(out.status, std::string("stopped"));
    QCOMPARE(store.get_ladder(out.ladder_id)->status, std::string("stopped"));
  }

  // The real thing, tiny: Fashion-MNIST, the trainer in this process.
  void realLadderOnTheCpu() {
    if (!QFile::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"))
      QSKIP("Fashion-MNIST is not installed (Debian package dataset-fashion-mnist; scripts/setup.sh)");
    RunStore store(db());
    const LadderPlan p = plan_ladder(
        config({{"ladder_rungs", "workers"}, {"ladder_repeats", 2}, {"ladder_warmup_steps", 2},
                {"ladder_measured_steps", 3}, {"train_limit", 512}, {"test_limit", 64}}),
        "cpu");
    std::atomic<bool> stop{false};
    const LadderOutcome out = run_ladder(store, p, in_process_executor(store, stop), stop);
    QCOMPARE(out.status, std::string("finished"));
    const auto links = store.ladder_runs(out.ladder_id);
    QCOMPARE(links.size(), size_t(4));
    for (const LadderRunLink& l : links) {
      const auto run = store.get_run(l.run_id);
      QCOMPARE(run->status, std::string("finished"));
      QCOMPARE(run->config["max_steps"].get<int64_t>(), int64_t(5));
      QCOMPARE(run->summary["steps"].get<int64_t>(), int64_t(5));
      QCOMPARE(store.step_series(l.run_id, "step_time_ms").size(), size_t(5));
    }
    const json& rows = out.table["rows"];
    for (int i : {0, 1}) {
      QCOMPARE(rows[i]["status"].get<std::string>(), std::string("done"));
      QCOMPARE(rows[i]["samples_per_s"]["n"].get<int>(), 2);
      QCOMPARE(rows[i]["runs"][0]["measured_steps"].get<int>(), 3);
      QVERIFY(rows[i]["peak_memory_bytes"].get<double>() > 1e6);
    }
    QVERIFY(rows[1]["speedup"]["median"].get<double>() > 0);
  }

  // The store sink writes from its own thread: the executor returns only once
  // the run's end is recorded, even when another process holds the store's
  // lock through the whole run (released after 2 s here).
  void executorWaitsForTheStoreToRecordTheEnd() {
    RunStoreOptions options;
    options.busy_timeout = std::chrono::milliseconds(50);
    RunStore store(db(), RunStore::Mode::ReadWrite, options);
    const json c = config({{"model", "mlp"}, {"dataset", "synthetic"},
                           {"synthetic_shape", {1, 16, 16}}, {"synthetic_size", 256},
                           {"test_limit", 64}, {"max_steps", 3}});
    RunRecord rec;
    rec.name = "under a lock";
    rec.config = c;
    const int64_t id = store.create_run(rec);
    sqlite3* holder = nullptr;
    QCOMPARE(sqlite3_open(db().c_str(), &holder), SQLITE_OK);
    QCOMPARE(sqlite3_exec(holder, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
    std::thread release([holder] {
      std::this_thread::sleep_for(std::chrono::seconds(2));
      sqlite3_exec(holder, "COMMIT", nullptr, nullptr, nullptr);
      sqlite3_close(holder);
    });
    std::atomic<bool> stop{false};
    const LadderRunOutcome o = in_process_executor(store, stop)(id, {0, 0, "speed", rec.name, c, 0});
    release.join();
    QCOMPARE(o.status, std::string("finished"));
    QVERIFY2(o.error.empty(), o.error.c_str());
    const auto run = store.get_run(id);
    QCOMPARE(run->status, std::string("finished"));
    QCOMPARE(run->summary["steps"].get<int64_t>(), int64_t(3));
    QCOMPARE(store.step_series(id, "step_time_ms").size(), size_t(3));
  }

  // A store made before ladders (v3) gets the ladder tables when opened: v4 is
  // the ladder migration.
  void olderStoresGainTheLadderTables() {
    const std::string path = dir_.filePath("old.db").toStdString();
    {
      RunStore fresh(path);
    }
    {
      // Take it back to v3 by hand: drop what v4 (the ladders) and v5 (the
      // per-layer profiles) added.
      sqlite3* raw = nullptr;
      QCOMPARE(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
      QCOMPARE(sqlite3_exec(raw,
                            "DROP TABLE layer_profile_rows; DROP TABLE layer_profile_steps; "
                            "DROP TABLE run_links; DROP TABLE ladder_runs; DROP TABLE ladders; "
                            "UPDATE schema_version SET version = 3;",
                            nullptr, nullptr, nullptr),
               SQLITE_OK);
      sqlite3_close(raw);
    }
    {
      // A reader does not migrate: the v3 store reads as one without ladders.
      RunStore reader(path, RunStore::Mode::ReadOnly);
      QCOMPARE(reader.schema_version(), 3);
      QVERIFY(reader.list_ladders().empty());
      QVERIFY(!reader.get_ladder(1).has_value());
      QVERIFY(reader.run_links(1).empty());
      QVERIFY(!reader.ladder_of_run(1).has_value());
    }
    RunStore s(path);
    QCOMPARE(s.schema_version(), RunStore::kSchemaVersion);
    QVERIFY(s.list_ladders().empty());
    RunRecord r;
    r.name = "x";
    const int64_t a = s.create_run(r), b = s.create_run(r);
    s.link_runs({a, b, "advice", "", {{"rule", "input_wait"}}});
    s.link_runs({a, b, "advice", "", {{"rule", "input_wait"}, {"max_speedup", 1.4}}});  // replaces
    const auto links = s.run_links(b);
    QCOMPARE(links.size(), size_t(1));
    QCOMPARE(links[0].note["max_speedup"].get<double>(), 1.4);
    QVERIFY_THROWS_EXCEPTION(Error, s.link_ladder_run({12345, a, 0, 0, "speed"}));  // no such ladder
    QVERIFY_THROWS_EXCEPTION(Error, s.set_ladder_status(12345, "finished"));
  }
};

QTEST_GUILESS_MAIN(TestLadder)
#include "test_ladder.moc"
