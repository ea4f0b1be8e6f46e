// SPDX-License-Identifier: GPL-3.0-or-later
// Measurement: the step-time breakdown, the Tensor Core kernel classifier and
// share, the Chrome trace (written, parsed back, checked), NVML's absence
// without a driver, and the metric series through the store. No GPU needed.
#include <QtTest>
#include <dlfcn.h>

#include <atomic>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "engine/metrics/chrome_trace.h"
#include "engine/metrics/kernel_census.h"
#include "engine/metrics/kernel_classifier.h"
#include "engine/metrics/nvml_telemetry.h"
#include "engine/metrics/step_timer.h"
#include "engine/store/run_store.h"
#include "engine/train/config.h"
#include "engine/train/events.h"
#include "engine/train/trainer.h"
#include "tests/engine/run_fixture.h"

using namespace tb;
using json = nlohmann::json;

namespace {

// Series names that only a GPU can produce: absent on the CPU, never zero.
// (docs/events.md's series table names each: gpuOnlySeriesAreTheDocumentedOnes.)
const char* const kGpuOnly[] = {
    "h2d_ms",           "h2d_bytes",          "gpu_mem_allocated_bytes", "gpu_mem_reserved_bytes",
    "gpu_mem_peak_bytes", "gpu_mem_used_bytes", "gpu_mem_total_bytes",     "gpu_util_pct",
    "gpu_mem_util_pct", "gpu_power_w",        "gpu_sm_clock_mhz",        "gpu_temp_c",
    "tensor_core_share", "kernels_per_step",  "memsets_per_step",        "kernel_time_ms",
    "tensor_pipe_active_pct"};

RunConfig small_config(int64_t steps) {
  json c = {{"device", "cpu"},         {"dataset", "synthetic"},  {"synthetic_shape", {1, 8, 8}},
            {"synthetic_size", 256},   {"test_limit", 32},        {"max_steps", steps},
            {"batch_size", 16},        {"model", "mlp"},          {"seed", 3}};
  return RunConfig::from_json(validate_config(c, "test"));
}

std::vector<json> run_steps(int64_t steps, bool measure, ChromeTrace* trace = nullptr) {
  return tb::test::run_trainer(small_config(steps).values, 0, nullptr, [&](Trainer& t) {
           t.set_measure(measure);
           t.set_trace(trace);
         }).of("step");
}

double sum_of_parts(const json& m) {
  double s = 0;
  for (const char* k : {"data_wait_ms", "h2d_ms", "forward_ms", "backward_ms", "optimizer_ms",
                        "step_end_ms", "other_ms"})
    if (m.contains(k)) s += m[k].get<double>();
  return s;
}

}  // namespace

class TestMetrics : public QObject {
  Q_OBJECT

 private slots:
  // --- breakdown arithmetic
  void partsAddUpToTheTotal() {
    StepTimes t;
    t.total_ms = 10;
    t.phase_ms = {1, 0.5, 3, 4, 0.75};
    t.has_h2d = true;
    QCOMPARE(t.measured_ms(), 9.25);
    QCOMPARE(t.other_ms(), 0.75);
    json m;
    t.write_metrics(m);
    QCOMPARE(sum_of_parts(m), 10.0);
    QCOMPARE(m["step_time_ms"].get<double>(), 10.0);
  }

  void hostStepsLeaveH2dOutOfTheSum() {
    StepTimes t;
    t.total_ms = 10;
    t.phase_ms = {1, 2, 3, 1, 1};  // h2d is not reported on the host...
    t.has_h2d = false;
    json m;
    t.write_metrics(m);
    QVERIFY(!m.contains("h2d_ms"));
    QCOMPARE(m["other_ms"].get<double>(), 4.0);  // ...so it is not taken off "other"
    QCOMPARE(sum_of_parts(m), 10.0);
  }

  void overlappingPhasesNeverGiveNegativeOther() {
    StepTimes t;
    t.total_ms = 5;
    t.phase_ms = {0, 0, 4, 4, 0};
    QCOMPARE(t.other_ms(), 0.0);
  }

  void hostTimerMeasuresPhases() {
    HostStepTimer timer(/*report_h2d=*/false);
    timer.begin_step(1);
    {
      PhaseScope p(timer, Phase::Forward);
      std::this_thread::sleep_for(std::chrono::milliseconds(4));
    }
    {
      PhaseScope p(timer, Phase::Backward);  // entered twice: times add
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    {
      PhaseScope p(timer, Phase::Backward);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    timer.end_step();
    std::this_thread::sleep_for(std::chrono::milliseconds(3));  // end-of-step work
    QVERIFY(!timer.poll().has_value());  // open until the next boundary
    timer.begin_step(2);
    std::optional<StepTimes> t = timer.poll();
    QVERIFY(t.has_value());
    QVERIFY(!timer.poll().has_value());  // each step once
    QCOMPARE(t->step, int64_t(1));
    QVERIFY(t->phase(Phase::Forward) >= 4.0);
    QVERIFY(t->phase(Phase::Backward) >= 4.0);
    QVERIFY(t->step_end_ms >= 3.0);
    QVERIFY(t->total_ms >= t->phase(Phase::Forward) + t->phase(Phase::Backward) + t->step_end_ms);
    timer.close_step();  // step 2 ends without a step after it
    QCOMPARE(timer.poll()->step, int64_t(2));
    timer.close_step();  // nothing open: nothing closes
    QVERIFY(!timer.poll().has_value());
  }

  // Consecutive boundaries share one clock reading: the steps tile the loop,
  // and with the time between a close and the next open (an evaluation)
  // they account for all of it. Each boundary call is bracketed by outside
  // clock readings taken just before and just after it, so the steps' sum
  // has exact bounds however long the process is preempted (a fixed slack
  // flaked under the sanitizers on a busy 2-core machine).
  void hostStepsTileTheLoop() {
    HostStepTimer timer(/*report_h2d=*/false);
    using Clock = std::chrono::steady_clock;
    struct Bracket { Clock::time_point before, after; };
    auto bracket = [](auto&& call) {
      Bracket b{Clock::now(), {}};
      call();
      b.after = Clock::now();
      return b;
    };
    const Bracket open1 = bracket([&] { timer.begin_step(1); });
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    timer.begin_step(2);  // shares step 1's closing reading
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const Bracket close2 = bracket([&] { timer.close_step(); });
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // not a step
    const Bracket open3 = bracket([&] { timer.begin_step(3); });
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const Bracket close3 = bracket([&] { timer.close_step(); });
    double sum = 0;
    int steps = 0;
    while (std::optional<StepTimes> t = timer.poll()) sum += t->total_ms, ++steps;
    QCOMPARE(steps, 3);
    using ms = std::chrono::duration<double, std::milli>;
    const double lo = ms((close2.before - open1.after) + (close3.before - open3.after)).count();
    const double hi = ms((close2.after - open1.before) + (close3.after - open3.before)).count();
    QVERIFY2(sum >= lo && sum <= hi, qPrintable(QString("%1 ms, outside clock [%2, %3]").arg(sum).arg(lo).arg(hi)));
    QVERIFY(sum >= 4.0);  // the three steps' sleeps
  }

  // parallel: dp's phases are series only in the steps that entered them,
  // and then count among the parts that add up to the step.
  void hostTimerReportsDpPhasesOnlyWhenEntered() {
    HostStepTimer timer(/*report_h2d=*/false);
    timer.begin_step(1);
    { PhaseScope p(timer, Phase::Forward); }
    timer.end_step();
    timer.close_step();
    json plain;
    timer.poll()->write_metrics(plain);
    for (const char* k : {"dp_replicate_ms", "dp_scatter_ms", "dp_reduce_ms"}) QVERIFY2(!plain.contains(k), k);
    timer.begin_step(2);
    {
      PhaseScope p(timer, Phase::Replicate);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    { PhaseScope p(timer, Phase::Scatter); }
    { PhaseScope p(timer, Phase::Reduce); }
    timer.end_step();
    timer.close_step();
    const std::optional<StepTimes> t = timer.poll();
    QVERIFY(t && t->has_dp);
    json dp;
    t->write_metrics(dp);
    for (const char* k : {"dp_replicate_ms", "dp_scatter_ms", "dp_reduce_ms"}) QVERIFY2(dp.contains(k), k);
    QVERIFY(dp["dp_replicate_ms"].get<double>() >= 2.0);
    QVERIFY(t->measured_ms() >= t->phase(Phase::Replicate));
  }

  // --- which clock readings a step takes (StepMarks; on a GPU one event each)
  // The trainer's step: boundary, data wait, copy, forward, backward,
  // optimizer, work end. Scopes that follow each other share a reading: 7
  // marks, not 12; the parts then tile the step from the first phase on.
  void stepMarksShareFollowingScopes() {
    StepMarks m;
    m.open();
    std::vector<int> taken = {0};
    auto take = [&](std::optional<int> i) {
      if (i) taken.push_back(*i);
    };
    take(m.begin(Phase::DataWait));
    taken.push_back(m.end(Phase::DataWait));
    take(m.begin(Phase::H2D));
    taken.push_back(m.end(Phase::H2D));
    for (Phase p : {Phase::Forward, Phase::Backward, Phase::Optimizer}) {
      take(m.begin(p));
      taken.push_back(m.end(p));
    }
    take(m.end_work());
    QCOMPARE(m.taken(), 7);
    QCOMPARE(taken, (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));  // each index once, in order
    // Mark i read at 10·i ms, the closing boundary at 100: each phase is the
    // interval between its two marks, the end of work shares the optimizer's
    // end, and "other" is only the time before the first phase.
    StepTimes t;
    t.has_h2d = true;
    m.fill(t, [](int a, int b) { return 10.0 * (b - a); }, [](int a) { return 100.0 - 10.0 * a; });
    QCOMPARE(t.total_ms, 100.0);
    QCOMPARE(t.phase(Phase::DataWait), 10.0);  // marks 1 -> 2
    QCOMPARE(t.phase(Phase::H2D), 10.0);       // 2 -> 3
    QCOMPARE(t.phase(Phase::Optimizer), 10.0);  // 5 -> 6
    QCOMPARE(t.step_end_ms, 40.0);              // 6 -> close
    QCOMPARE(t.other_ms(), 10.0);               // boundary -> first phase
    QVERIFY(!t.has_dp);
  }
  // A begin takes its own mark after the boundary, after another begin (a
  // scope inside a scope) and after end_work; micro-batches repeat the
  // pattern; a begin while the phase is open, or an end without a begin, is
  // refused.
  void stepMarksTakeTheirOwnWhereScopesDoNotFollow() {
    StepMarks m;
    QVERIFY(m.begin(Phase::Replicate).has_value());  // right after the boundary
    QCOMPARE(m.end(Phase::Replicate), 2);
    QVERIFY(!m.begin(Phase::Scatter).has_value());   // follows Replicate's end
    QVERIFY(m.begin(Phase::Forward).has_value());    // inside Scatter: its own
    QCOMPARE(m.end(Phase::Forward), 4);
    QCOMPARE(m.end(Phase::Scatter), 5);
    for (int k = 0; k < 3; ++k) {  // micro-batches: forward, backward, again
      QVERIFY(!m.begin(Phase::Forward).has_value());
      m.end(Phase::Forward);
      QVERIFY(!m.begin(Phase::Backward).has_value());
      m.end(Phase::Backward);
    }
    QCOMPARE(m.entries(Phase::Forward), 4);
    QVERIFY(!m.end_work().has_value());
    QVERIFY(m.begin(Phase::Optimizer).has_value());  // after end_work: its own
    QVERIFY_THROWS_EXCEPTION(tb::Error, m.begin(Phase::Optimizer));  // already open
    QVERIFY_THROWS_EXCEPTION(tb::Error, m.end(Phase::H2D));          // never begun
    StepTimes t;
    m.fill(t, [](int a, int b) { return double(b - a); }, [](int) { return 0.0; });
    QVERIFY(t.has_dp);
    m.open();  // the next step starts clean
    QCOMPARE(m.taken(), 1);
    QVERIFY(m.begin(Phase::DataWait).has_value());
  }

  // --- the trainer's step metrics on the CPU
  void cpuStepMetricsAddUpAndGpuSeriesAreAbsent() {
    const std::vector<json> steps = run_steps(4, true);
    QCOMPARE(steps.size(), size_t(4));
    bool saw_rss = false;
    for (const json& e : steps) {
      const json& m = e["metrics"];
      for (const char* k : {"step_time_ms", "data_wait_ms", "forward_ms", "backward_ms",
                            "optimizer_ms", "other_ms"})
        QVERIFY2(m.contains(k), k);
      QVERIFY(m["forward_ms"].get<double>() > 0);
      QVERIFY(m["other_ms"].get<double>() >= 0);
      QVERIFY(std::abs(sum_of_parts(m) - m["step_time_ms"].get<double>()) < 1e-9);
      for (const char* k : kGpuOnly) QVERIFY2(!m.contains(k), k);
      saw_rss = saw_rss || m.contains("host_rss_bytes");
    }
    QVERIFY(saw_rss);
    QVERIFY(steps[0]["metrics"].contains("cpu_threads_busy"));
  }

  // measure_every: the sampled figures (here the CPU's RSS and CPU use) on
  // step 1 and every N steps, the breakdown every step.
  void sampledFiguresFollowMeasureEvery() {
    json c = small_config(7).values;
    c["measure_every"] = 3;
    const std::vector<json> steps = tb::test::run_trainer(c).of("step");
    QCOMPARE(steps.size(), size_t(7));
    for (const json& e : steps) {
      const int64_t step = e["step"];
      const bool sampled = step == 1 || step % 3 == 0;
      QVERIFY2(e["metrics"].contains("host_rss_bytes") == sampled, qPrintable(QString::number(step)));
      QVERIFY2(e["metrics"].contains("cpu_threads_busy") == sampled, qPrintable(QString::number(step)));
      QVERIFY(e["metrics"].contains("forward_ms"));
    }
  }

  void measurementOffKeepsOnlyTheStepTime() {
    const std::vector<json> steps = run_steps(2, false);
    QCOMPARE(steps.size(), size_t(2));
    for (const json& e : steps) {
      const json& m = e["metrics"];
      QVERIFY(m.contains("step_time_ms"));
      QVERIFY(!m.contains("forward_ms"));
      QVERIFY(!m.contains("other_ms"));
    }
  }

  // --- the metric series in the run store
  void breakdownSeriesAreWrittenAndReadBack() {
    QTemporaryDir dir;
    const std::string db = dir.filePath("runs.db").toStdString();
    std::vector<json> published;
    {
      RunStore store(db);
      RunRecord rec;
      rec.name = "metrics";
      const int64_t id = store.create_run(rec);
      EventBus bus;
      StoreSink sink(store, id);
      tb::test::Recorder steps;
      bus.add(&sink);
      bus.add(&steps);
      std::atomic<bool> stop{false};
      Trainer t(small_config(3), bus, stop);
      t.run(id);
      // The sink writes from its own thread: everything is in once it is closed.
      QCOMPARE(QString::fromStdString(sink.close(std::chrono::seconds(30))), QString());
      published = steps.of("step");
      for (const char* name : {"step_time_ms", "forward_ms", "backward_ms", "other_ms"}) {
        const std::vector<MetricPoint> pts = store.step_series(id, name);
        QCOMPARE(pts.size(), size_t(3));
        for (size_t i = 0; i < pts.size(); ++i) {
          QCOMPARE(pts[i].step, int64_t(i + 1));
          QCOMPARE(pts[i].value, published[i]["metrics"][name].get<double>());
        }
      }
      for (const std::string& name : store.step_series_names(id))
        for (const char* k : kGpuOnly) QVERIFY2(name != k, k);
    }
  }

  // The list above is what the engine writes: each name is a series of
  // docs/events.md's table (a misspelt name would make the CPU checks vacuous).
  void gpuOnlySeriesAreTheDocumentedOnes() {
    const std::string path = std::string(TRAINBENCH_SOURCE_DIR) + "/docs/events.md";
    std::ifstream in(path);
    QVERIFY2(in.good(), path.c_str());
    const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (const char* k : kGpuOnly)
      QVERIFY2(doc.find("| `" + std::string(k) + "`") != std::string::npos ||
                   doc.find(", `" + std::string(k) + "`") != std::string::npos,
               k);
  }

  // --- Tensor Core classification
  void classifierLabelsRecordedKernelNames() {
    std::ifstream in(std::string(TRAINBENCH_SOURCE_DIR) + "/tests/engine/data/kernel_names.txt");
    QVERIFY(in.good());
    std::string line;
    int tc = 0, no = 0;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      const size_t tab = line.find('\t');
      QVERIFY2(tab != std::string::npos, line.c_str());
      const std::string label = line.substr(0, tab), name = line.substr(tab + 1);
      QVERIFY2(label == "tc" || label == "no", line.c_str());
      const KernelClass k = classify_kernel_name(name);
      const std::string msg = name + " -> " + (k.tensor_core ? "tc" : "no") + " by " + k.rule;
      QVERIFY2(k.tensor_core == (label == "tc"), msg.c_str());
      (label == "tc" ? tc : no)++;
    }
    QVERIFY(tc >= 20);
    QVERIFY(no >= 15);
  }

  // Every kernel name the H200 launched in the two GPU runs (fp32, fp16,
  // bf16, channels-last resnet18 steps; bench/results/kernel-names-*.tsv), with
  // the label our classifier gave there, judged by rules independent of the
  // classifier's: cuDNN/cuBLAS xmma kernels on f16/bf16 operands and CUTLASS
  // tensorop/wmma kernels use Tensor Cores; fp32 xmma (ffma), SIMT, sgemm,
  // FFT, Winograd, layout, reduction and our own kernels (tb::cuda) do not.
  void classifierLabelsTheH200KernelNames_data() {
    QTest::addColumn<QString>("file");
    for (const char* f : {"kernel-names-h200-2026-11-26.tsv", "kernel-names-h200-2026-11-28.tsv"})
      QTest::addRow("%s", f) << QString(f);
  }
  void classifierLabelsTheH200KernelNames() {
    QFETCH(QString, file);
    const std::string path =
        std::string(TRAINBENCH_SOURCE_DIR) + "/bench/results/" + file.toStdString();
    std::ifstream in(path);
    QVERIFY2(in.good(), path.c_str());
    const auto has = [](const std::string& s, const char* part) {
      return s.find(part) != std::string::npos;
    };
    const KernelClassifier engine = engine_kernel_classifier();
    std::string line;
    int tc = 0, no = 0, own = 0;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::vector<std::string> f;
      std::istringstream cols(line);
      for (std::string c; std::getline(cols, c, '\t');) f.push_back(c);
      QVERIFY2(f.size() == 6, line.c_str());
      const std::string& recorded = f[1];
      const std::string& name = f[5];
      const bool ours = name.rfind("_ZN2tb4cuda", 0) == 0;
      const bool low_precision_xmma =
          has(name, "_xmma_") && (has(name, "bf16bf16") || has(name, "f16f16"));
      // CUTLASS names the tensor-op path in the kernel (cutlass_tensorop_*) or in
      // its template arguments (MmaTensorOp).
      const bool cutlass_tensor_op =
          has(name, "cutlass") && (has(name, "tensorop") || has(name, "TensorOp"));
      const bool expected = !ours && (low_precision_xmma || cutlass_tensor_op);
      const KernelClass k = classify_kernel_name(name);
      const std::string msg = name + " -> " + (k.tensor_core ? "tc" : "no") + " by " + k.rule +
                              " (recorded " + recorded + ")";
      QVERIFY2(k.tensor_core == expected, msg.c_str());
      QVERIFY2((recorded == "tc") == expected, msg.c_str());
      // The engine's classifier knows its own kernels by declaration, in the
      // mangled form CUPTI records them (not by the absence of a marker).
      const KernelClass e = engine.classify(name);
      QVERIFY2(e.tensor_core == expected, msg.c_str());
      QVERIFY2((e.source == KernelSource::Declared) == ours, (name + " by " + e.rule).c_str());
      (expected ? tc : no)++;
      own += ours;
    }
    // The run really covered both kinds and our own kernels.
    QVERIFY(tc >= 50);
    QVERIFY(no >= 100);
    QVERIFY(own >= 20);
  }

  void declaredKernelsWinOverNameRules() {
    KernelClassifier c;
    // The name rules cannot see that our own GEMM uses mma.sync: the engine says so.
    const std::string own = "_ZN2tb4cuda19linear_bf16_kernelEPK";
    QVERIFY(!c.classify(own).tensor_core);
    c.declare("linear_bf16_kernel", true);
    QVERIFY(c.classify(own).tensor_core);
    QVERIFY(c.classify(own).source == KernelSource::Declared);
    // A cuDNN engine known to be FFMA despite a reduced-precision name.
    const std::string cudnn = "sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_example";
    QVERIFY(c.classify(cudnn).tensor_core);
    c.declare("sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_example", false);
    QVERIFY(!c.classify(cudnn).tensor_core);
    c.declare("implicit_gemm_f16", true);  // a later declaration wins
    QVERIFY(c.classify(cudnn).tensor_core);
    QVERIFY(c.classify("ampere_sgemm_128x64_nn").source == KernelSource::Name);
  }

  void tensorCoreShareIsATimeShare() {
    KernelClassifier c;
    c.declare("own_tc", true);
    const std::vector<KernelRecord> ks = {
        {"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_kernel", 1000, 1300, 7},  // 300 ns TC
        {"ampere_sgemm_128x64_nn", 2000, 2100, 7},                           // 100 ns
        {"own_tc_kernel", 3000, 3600, 13},                                   // 600 ns TC
        {"nchwToNhwcKernel", 4000, 4000, 7},                                 // 0 ns
    };
    const TensorCoreShare s = tensor_core_share(ks, c);
    QCOMPARE(s.kernels, int64_t(4));
    QCOMPARE(s.tensor_core_kernels, int64_t(2));
    QCOMPARE(s.total_ns, uint64_t(1000));
    QCOMPARE(s.tensor_core_ns, uint64_t(900));
    QCOMPARE(s.share(), 0.9);
    QVERIFY(std::isnan(tensor_core_share({}, c).share()));  // absent, not 0
  }

  // --- Chrome trace
  void traceWriterRoundTrips() {
    ChromeTrace t;
    t.name_process(kTraceDevicePid, "cuda:0");
    t.name_thread(kTraceDevicePid, 7, "stream 7");
    t.add("step 1", "step", 10, 100);
    t.add("gemm", "kernel", 20, 30, kTraceDevicePid, 7, {{"grid", "8x1x1"}});
    QTemporaryDir dir;
    const std::string path = dir.filePath("t.json").toStdString();
    t.write(path);
    std::ifstream in(path);
    const json doc = json::parse(in);
    QVERIFY(doc["traceEvents"].is_array());
    int meta = 0, complete = 0;
    for (const json& e : doc["traceEvents"]) {
      if (e["ph"] == "M") {
        ++meta;
        QVERIFY(e["args"].contains("name"));
      } else {
        ++complete;
        QCOMPARE(e["ph"].get<std::string>(), std::string("X"));
      }
    }
    QCOMPARE(meta, 4);  // host process + training thread + the two above
    QCOMPARE(complete, 2);
    const json& k = doc["traceEvents"].back();
    QCOMPARE(k["tid"].get<int>(), 7);
    QCOMPARE(k["args"]["grid"].get<std::string>(), std::string("8x1x1"));
    QCOMPARE(k["dur"].get<double>(), 30.0);
  }

  void trainerTraceNestsLayersInPhasesInSteps() {
    ChromeTrace trace;
    const std::vector<json> steps = run_steps(3, true, &trace);
    QTemporaryDir dir;
    const std::string path = dir.filePath("trace.json").toStdString();
    trace.write(path);
    std::ifstream in(path);
    const json doc = json::parse(in);
    checkTrainerTrace(doc, 3);
  }

  void traceSubcommandWritesAParsableFile() {
    QTemporaryDir dir;
    const QString db = dir.filePath("runs.db"), out = dir.filePath("cli.json");
    QProcess run;
    run.start(TRAINBENCH_ENGINE_BIN,
              {"--db", db, "run", "--dataset", "synthetic", "--set", "synthetic_shape=[1,8,8]",
               "--set", "synthetic_size=128", "--model", "mlp", "--steps", "2", "-b", "16",
               "--test-limit", "16"});
    QVERIFY(run.waitForFinished(120000));
    QCOMPARE(run.exitCode(), 0);
    QProcess tr;
    tr.start(TRAINBENCH_ENGINE_BIN, {"--db", db, "trace", "1", "--steps", "4", "--output", out});
    QVERIFY(tr.waitForFinished(120000));
    QVERIFY2(tr.exitCode() == 0, tr.readAllStandardError().constData());
    std::ifstream in(out.toStdString());
    QVERIFY(in.good());
    const json doc = json::parse(in);
    QCOMPARE(doc["otherData"]["run_id"].get<int>(), 1);
    QVERIFY(doc["otherData"]["median_step_time_ms"].get<double>() > 0);
    QVERIFY(doc["otherData"]["untraced_median_step_time_ms"].get<double>() > 0);
    checkTrainerTrace(doc, 4);
    // Nothing was recorded: the store still holds one run.
    RunStore store(db.toStdString());
    QCOMPARE(store.list_runs().size(), size_t(1));
    QProcess missing;
    missing.start(TRAINBENCH_ENGINE_BIN, {"--db", db, "trace", "99", "--output", out});
    QVERIFY(missing.waitForFinished(60000));
    QVERIFY(missing.exitCode() != 0);
  }

  // --- NVML
  // NVML counts GPUs in PCI order whatever CUDA_VISIBLE_DEVICES says: the
  // device is opened by the PCI bus id CUDA gives, not by CUDA's index.
  void nvmlOpensTheDeviceByItsPciBusId() {
    NvmlTelemetry by_bus(FAKE_NVML_LIB, 0, "0000:41:00.0");
    QVERIFY2(by_bus.available(), by_bus.reason().c_str());
    QCOMPARE(by_bus.read()->gpu_utilization_pct, 20.0);  // NVML's device 1
    NvmlTelemetry by_index(FAKE_NVML_LIB, 0);
    QCOMPARE(by_index.read()->gpu_utilization_pct, 10.0);
    NvmlTelemetry unknown(FAKE_NVML_LIB, 0, "0000:99:00.0");
    QVERIFY(!unknown.available());
    QVERIFY2(unknown.reason().find("0000:99:00.0") != std::string::npos, unknown.reason().c_str());
  }
  // A query the device does not support leaves only its own figure out.
  void nvmlUnsupportedPowerLeavesTheOtherFigures() {
    qputenv("FAKE_NVML_NO_POWER", "1");
    NvmlTelemetry nvml(FAKE_NVML_LIB, 1);
    const std::optional<GpuTelemetry> t = nvml.read();
    qunsetenv("FAKE_NVML_NO_POWER");
    QVERIFY(t.has_value());
    json m = json::object();
    t->write_metrics(m);
    QCOMPARE(m.value("gpu_util_pct", -1.0), 20.0);
    QCOMPARE(m.value("gpu_sm_clock_mhz", -1.0), 1980.0);
    QVERIFY(!m.contains("gpu_power_w"));
  }
  // Utilisation unsupported (NVML on a MIG slice): the other figures stay.
  // Every query failing (a card fallen off the bus): no reading, and the
  // sampler stops publishing its last good one as current.
  void nvmlUnsupportedUtilizationLeavesTheOtherFigures() {
    void* fake = dlopen(FAKE_NVML_LIB, RTLD_NOW | RTLD_LOCAL);
    QVERIFY2(fake, dlerror());
    auto fail = reinterpret_cast<void (*)(int)>(dlsym(fake, "fake_nvml_fail"));
    struct Fake {  // on every way out: the fake answers again, then goes
      void* lib;
      void (*fail)(int);
      ~Fake() {
        if (fail) fail(0);
        dlclose(lib);
      }
    } guard{fake, fail};
    QVERIFY(fail);
    fail(1);
    {
      NvmlTelemetry nvml(FAKE_NVML_LIB, 1);
      const std::optional<GpuTelemetry> t = nvml.read();
      QVERIFY(t.has_value());
      json m = json::object();
      t->write_metrics(m);
      QVERIFY(!m.contains("gpu_util_pct"));
      QVERIFY(!m.contains("gpu_mem_util_pct"));
      QCOMPARE(m.value("gpu_power_w", -1.0), 250.0);
      QCOMPARE(m.value("gpu_sm_clock_mhz", -1.0), 1980.0);
      QCOMPARE(m.value("gpu_temp_c", -1.0), 40.0);
      fail(2);
      QVERIFY(!nvml.read().has_value());
    }
    fail(0);
    {
      NvmlSampler sampler(std::make_unique<NvmlTelemetry>(FAKE_NVML_LIB, 1),
                          std::chrono::milliseconds(2));
      QTRY_VERIFY_WITH_TIMEOUT(sampler.latest().has_value(), 10000);
      fail(2);
      QTRY_VERIFY_WITH_TIMEOUT(!sampler.latest().has_value(), 10000);
      fail(0);
      QTRY_VERIFY_WITH_TIMEOUT(sampler.latest().has_value(), 10000);
    }
  }

  // The trainer reads NVML on a thread of its own: a slow driver query never
  // holds up the caller, which gets the newest reading there is.
  void nvmlSamplerNeverWaitsForTheDriver() {
    void* fake = dlopen(FAKE_NVML_LIB, RTLD_NOW | RTLD_LOCAL);
    QVERIFY2(fake, dlerror());
    auto hold = reinterpret_cast<void (*)(int)>(dlsym(fake, "fake_nvml_hold"));
    auto calls = reinterpret_cast<long (*)()>(dlsym(fake, "fake_nvml_utilization_calls"));
    QVERIFY(hold && calls);
    hold(1);  // every utilisation query waits until released
    const long before = calls();
    std::atomic<bool> released{false};
    std::optional<GpuTelemetry> while_held;
    {
      auto nvml = std::make_unique<NvmlTelemetry>(FAKE_NVML_LIB, 1);
      QVERIFY2(nvml->available(), nvml->reason().c_str());
      NvmlSampler sampler(std::move(nvml), std::chrono::milliseconds(5));
      struct Release {  // a failed check below must not leave the sampler's join waiting
        void (*hold)(int);
        ~Release() { hold(0); }
      } release{hold};
      QTRY_VERIFY_WITH_TIMEOUT(calls() > before, 10000);  // its first query is under way
      // Released from elsewhere after a while: if latest() waited for the
      // query, it would return only after that.
      std::jthread releaser([&] {
        std::this_thread::sleep_for(std::chrono::seconds(2));
        released = true;
        hold(0);
      });
      while_held = sampler.latest();
      const bool returned_before_release = !released;
      QVERIFY2(returned_before_release, "latest() waited for the driver's query");
      QVERIFY(!while_held.has_value());  // no reading yet
      releaser.join();
      QTRY_VERIFY_WITH_TIMEOUT(sampler.latest().has_value(), 10000);
      QCOMPARE(sampler.latest()->gpu_utilization_pct, 20.0);  // NVML's device 1
      QTRY_VERIFY_WITH_TIMEOUT(sampler.read_cost().readings >= 3, 10000);  // it keeps reading
      const NvmlSampler::ReadCost c = sampler.read_cost();
      QVERIFY(c.max_ms >= c.mean_ms && c.mean_ms > 0);
      QVERIFY2(c.max_ms >= 1000, "the held query's time is the longest reading's");
    }
    // Gone with the sampler: no query after it.
    const long after = calls();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    QCOMPARE(calls(), after);
    dlclose(fake);
  }
  void nvmlIsAbsentWithAReasonWithoutADriver() {
    NvmlTelemetry missing("libtrainbench-no-such-nvml.so", 0);
    QVERIFY(!missing.available());
    QVERIFY(missing.reason().rfind("not available: ", 0) == 0);
    QVERIFY(!missing.read().has_value());
    // The real library: on this machine without a driver it must say why; with
    // a driver it reads plausible values.
    NvmlTelemetry nvml;
    if (nvml.available()) {
      std::optional<GpuTelemetry> t = nvml.read();
      QVERIFY(t.has_value());
      QVERIFY(t->sm_clock_mhz > 0);
    } else {
      QVERIFY(nvml.reason().rfind("not available: ", 0) == 0);
    }
  }

 private:
  // Every event has name/ph/ts/dur/pid/tid; phases lie within their step, layer
  // spans within their phase; the phases of a step add up to at most the step.
  void checkTrainerTrace(const json& doc, int expected_steps) {
    struct Span {
      std::string name, cat;
      double ts, end;
      int64_t step;
    };
    std::vector<Span> spans;
    for (const json& e : doc["traceEvents"]) {
      for (const char* k : {"name", "ph", "ts", "dur", "pid", "tid"}) QVERIFY2(e.contains(k), k);
      if (e["ph"] != "X") continue;
      QVERIFY(e["dur"].get<double>() >= 0);
      spans.push_back({e["name"], e["cat"], e["ts"], e["ts"].get<double>() + e["dur"].get<double>(),
                       e.contains("args") ? e["args"].value("step", int64_t(-1)) : -1});
    }
    const double eps = 1e-3;  // microseconds, for the JSON round trip
    auto within = [&](const Span& in, const Span& out) {
      return in.ts >= out.ts - eps && in.end <= out.end + eps;
    };
    std::vector<Span> step_spans, phases;
    for (const Span& s : spans) (s.cat == "step" ? step_spans : phases).push_back(s);
    QCOMPARE(int(step_spans.size()), expected_steps);
    std::map<std::string, int> per_phase;
    for (const Span& step : step_spans) {
      double phase_sum = 0;
      for (const Span& p : spans) {
        if (p.cat != "phase" || p.step != step.step) continue;
        QVERIFY2(within(p, step), p.name.c_str());
        phase_sum += p.end - p.ts;
        ++per_phase[p.name];
      }
      QVERIFY(phase_sum <= step.end - step.ts + eps);
    }
    for (const char* p : {"data_wait", "forward", "backward", "optimizer"})
      QCOMPARE(per_phase[p], expected_steps);
    // Every layer span sits inside a phase of its own kind.
    int layers = 0;
    for (const Span& l : spans) {
      if (l.cat != "forward" && l.cat != "backward") continue;
      ++layers;
      bool inside = false;
      for (const Span& p : spans)
        if (p.cat == "phase" && p.name == l.cat && within(l, p)) inside = true;
      QVERIFY2(inside, l.name.c_str());
    }
    QVERIFY(layers >= 2 * expected_steps);
  }
};

QTEST_GUILESS_MAIN(TestMetrics)
#include "test_metrics.moc"
