// SPDX-License-Identifier: GPL-3.0-or-later
// The plots of a GPU run, opened from the store as a user opens it. The store
// is made here with the characteristics of the first H200 runs
// (shared/gpu-runs/2026-11-26-h200, resnet18-cifar b512 bf16, all tricks,
// with and without CUDA graphs): a 816 ms first step (cuDNN autotuning), then
// ~31 ms; with graphs, steps 4.. replayed a graph (forward, backward and
// optimizer read 0, the step in other_ms); a data wait of 59 ms in a 31 ms
// step (step 31); one Tensor Core share point (step 1) and one tensor pipe
// point (step 26); NVML telemetry every 10 steps.
#include <QFile>
#include <QJsonObject>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>
#include <cmath>
#include <qcustomplot.h>

#include "compare_view.h"
#include "engine/advise/advisor.h"
#include "engine/store/run_store.h"
#include "live_plot.h"
#include "run_dashboard.h"
#include "run_summary.h"
#include "series_data.h"
#include "series_loader.h"

namespace {
using json = nlohmann::json;

int64_t makeGpuRun(tb::RunStore& store, bool graphs) {
  tb::RunRecord run;
  run.name = graphs ? "resnet18-cifar b512 graphs" : "resnet18-cifar b512";
  run.status = "running";
  run.config = {{"model", "resnet18-cifar"}, {"batch_size", 512}, {"amp", "bf16"}, {"cuda_graphs", graphs},
                {"device", "cuda"}, {"grad_set_to_none", true}};
  run.environment = {{"device", "cuda:0"}, {"device_name", "NVIDIA H200"}};
  const int64_t id = store.create_run(run);
  store.set_tricks(id, {{"cuda_graphs", {{"requested", graphs}, {"applied", graphs}, {"changed", graphs}}},
                        {"amp", {{"requested", "bf16"}, {"applied", true}, {"changed", true}}}});
  std::vector<tb::MetricPoint> points;
  auto add = [&](const char* name, int64_t step, double value) {
    points.push_back({name, step, step * 0.031, value});
  };
  for (int64_t step = 1; step <= 40; ++step) {
    const bool replayed = graphs && step > 3;
    const double total = step == 1 ? 815.9 : 30.8;
    const double wait = step == 31 ? 59.16 : 0.02;
    add("step_time_ms", step, total);
    add("samples_per_s", step, 512 / total * 1000);
    add("data_wait_ms", step, wait);
    add("h2d_ms", step, 0.05);
    add("forward_ms", step, replayed ? 0.0 : (step == 1 ? 492.2 : 12.0));
    add("backward_ms", step, replayed ? 0.0 : (step == 1 ? 239.2 : 18.6));
    add("optimizer_ms", step, replayed ? 0.0 : 0.09);
    // As the engine stores it: the step minus the phases, never below 0.
    const double phases = wait + 0.05 + (replayed ? 0.0 : (step == 1 ? 731.5 : 30.69));
    add("other_ms", step, std::max(0.0, total - phases));
    add("gpu_mem_allocated_bytes", step, 1.7e8);
    if (step == 1 || step % 10 == 0) {
      add("gpu_power_w", step, 141.0 + step);
      add("gpu_sm_clock_mhz", step, 1980.0);
      add("gpu_temp_c", step, 40.0);
      add("gpu_util_pct", step, 90.0);
      add("gpu_mem_total_bytes", step, 150e9);
    }
  }
  add("tensor_core_share", 1, 0.128);
  add("tensor_pipe_active_pct", 26, 7.4);
  store.append_step_metrics(id, points);
  store.flush();
  store.set_summary(id, {{"steps", 40}, {"total_steps", 40}, {"median_step_time_ms", 30.8},
                         {"gpu_mem_peak_bytes", 7.4e9}, {"device", "cuda:0"}});
  store.set_status(id, "finished");
  return id;
}

// The dashboard of a stored run, as the history opens it.
struct Opened {
  RunDashboard dashboard;
  Opened(const QString& db, int64_t id) {
    tb::RunStore store(db.toStdString(), tb::RunStore::Mode::ReadOnly);
    dashboard.setRun(RunSummary::fromRecord(*store.get_run(id)));
    dashboard.setSeries(SeriesLoader::load(db, id));
    dashboard.refreshNow();
  }
};

const QString kBreakdown = QStringLiteral("Step-time breakdown (stacked)");
}  // namespace

class TestGpuRunPlots : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  QString db_;
  int64_t graphs_ = 0, eager_ = 0;

 private slots:
  void initTestCase() {
    Q_INIT_RESOURCE(trainbench);
    QStandardPaths::setTestModeEnabled(true);
    db_ = dir_.filePath(QStringLiteral("gpu.db"));
    tb::RunStore store(db_.toStdString());
    graphs_ = makeGpuRun(store, true);
    eager_ = makeGpuRun(store, false);
  }

  // A replayed graph's phases were not measured: never drawn as 0 ms, and
  // the plot says why; the same run without graphs shows its phases.
  void graphReplayPhasesAreNotMeasuredNotZero() {
    Opened graphs(db_, graphs_);
    LivePlot* plot = graphs.dashboard.plot(kBreakdown);
    QVERIFY(plot);
    QVERIFY2(plot->curveLabels().contains(QStringLiteral("graph replay (phases not timed)")),
             qPrintable(plot->curveLabels().join(QLatin1Char(','))));
    const QString replayed = plot->trackerText(10);
    QVERIFY2(replayed.contains(QLatin1String("forward: not measured (CUDA graph replay)")), qPrintable(replayed));
    QVERIFY2(!replayed.contains(QRegularExpression(QStringLiteral("forward: 0[.,]0"))), qPrintable(replayed));
    QVERIFY2(replayed.contains(QLatin1String("graph replay (phases not timed): 30.")), qPrintable(replayed));
    QVERIFY2(plot->helpText().contains(QLatin1String("not measured")), qPrintable(plot->helpText()));
    // The eager steps before the capture keep their measured phases.
    QVERIFY2(plot->trackerText(2).contains(QLatin1String("forward: 12.00 ms")), qPrintable(plot->trackerText(2)));

    Opened eager(db_, eager_);
    LivePlot* eagerPlot = eager.dashboard.plot(kBreakdown);
    QVERIFY(!eagerPlot->curveLabels().contains(QStringLiteral("graph replay (phases not timed)")));
    QVERIFY2(eagerPlot->trackerText(10).contains(QLatin1String("forward: 12.00 ms")), qPrintable(eagerPlot->trackerText(10)));
  }

  // Live, step by step: eager steps first (the engine's own breakdown), then
  // the replays switch the plot to the view, which then grows with the run.
  void liveGraphRunSwitchesAtTheFirstReplay() {
    RunDashboard d;
    QJsonObject applied{{QStringLiteral("requested"), true}, {QStringLiteral("applied"), true}};
    d.handleRunStarted({{QStringLiteral("run_id"), 1}, {QStringLiteral("name"), QStringLiteral("live")},
                        {QStringLiteral("tricks"), QJsonObject{{QStringLiteral("cuda_graphs"), applied}}}});
    for (int step = 1; step <= 12; ++step) {
      const bool replayed = step > 3;
      QJsonObject m{{QStringLiteral("step_time_ms"), 30.8}, {QStringLiteral("data_wait_ms"), 0.02},
                    {QStringLiteral("forward_ms"), replayed ? 0.0 : 12.0}, {QStringLiteral("backward_ms"), replayed ? 0.0 : 18.6},
                    {QStringLiteral("optimizer_ms"), replayed ? 0.0 : 0.09}, {QStringLiteral("other_ms"), replayed ? 30.78 : 0.09}};
      d.handleStep({{QStringLiteral("step"), step}, {QStringLiteral("epoch"), 0}, {QStringLiteral("t"), step * 0.03},
                    {QStringLiteral("metrics"), m}});
      d.refreshNow();
      LivePlot* plot = d.plot(kBreakdown);
      QVERIFY(plot);
      const bool view = plot->curveLabels().contains(QStringLiteral("graph replay (phases not timed)"));
      QCOMPARE(view, replayed);
      QVERIFY2(plot->trackerText(step).contains(replayed ? QLatin1String("forward: not measured")
                                                         : QLatin1String("forward: 12.00 ms")),
               qPrintable(plot->trackerText(step)));
    }
    QVERIFY(d.plot(kBreakdown)->trackerText(2).contains(QLatin1String("forward: 12.00 ms")));
    QVERIFY(d.plot(kBreakdown)->displayedPointCount() > 0);
  }

  // Parts that add up to more than the step are marked and explained, with
  // the measured step drawn over them.
  void partsExceedingTheStepAreMarked() {
    for (int64_t id : {graphs_, eager_}) {
      Opened opened(db_, id);
      LivePlot* plot = opened.dashboard.plot(kBreakdown);
      QVERIFY(plot);
      QCOMPARE(plot->excessSteps(), QVector<double>{31});
      const QString at31 = plot->trackerText(31);
      QVERIFY2(at31.contains(QLatin1String("step time: 30.80 ms")), qPrintable(at31));
      QVERIFY2(at31.contains(QLatin1String("more than the step time")), qPrintable(at31));
      QVERIFY2(at31.contains(QLatin1String("overlapped")), qPrintable(at31));
      QVERIFY(!plot->trackerText(30).contains(QLatin1String("more than the step time")));
    }
  }

  // Two Tensor Core quantities, two plots, each named with its unit, their
  // one sampled point drawn as a marker on the run's step range.
  void tensorCoreQuantitiesArePlottedApart() {
    Opened opened(db_, graphs_);
    QVERIFY(!opened.dashboard.plot(QStringLiteral("Tensor Core utilization")));
    LivePlot* share = opened.dashboard.plot(QStringLiteral("Tensor Core share of kernel time"));
    LivePlot* pipe = opened.dashboard.plot(QStringLiteral("Tensor pipe active"));
    QVERIFY(share && pipe);
    QCOMPARE(share->curveCount(), 1);
    QCOMPARE(pipe->curveCount(), 1);
    QVERIFY2(share->trackerText(1).contains(QLatin1String("12.80 %")), qPrintable(share->trackerText(1)));
    QVERIFY2(pipe->trackerText(26).contains(QLatin1String("7.400 %")), qPrintable(pipe->trackerText(26)));
    QVERIFY(share->helpText().contains(QLatin1String("sampled")));
    for (LivePlot* p : {share, pipe}) {
      const QCPRange x = p->customPlot()->xAxis->range();
      QVERIFY2(x.lower <= 1 && x.upper >= 40, qPrintable(QStringLiteral("%1..%2").arg(x.lower).arg(x.upper)));
      QCOMPARE(p->customPlot()->graph(0)->scatterStyle().shape(), QCPScatterStyle::ssDisc);
    }
  }

  // Telemetry panels: words and units, not series names.
  void telemetryHasNamesAndUnits() {
    Opened opened(db_, graphs_);
    QVERIFY(!opened.dashboard.plot(QStringLiteral("Gpu power w")));
    LivePlot* power = opened.dashboard.plot(QStringLiteral("GPU power"));
    QVERIFY(power);
    QCOMPARE(power->curveLabels(), QStringList{QStringLiteral("GPU power (W)")});
    QCOMPARE(power->formatValue(151), QStringLiteral("151.0 W"));
    QVERIFY(opened.dashboard.plot(QStringLiteral("GPU SM clock")));
    QVERIFY(opened.dashboard.plot(QStringLiteral("GPU SM clock"))->formatValue(1980).endsWith(QLatin1String(" MHz")));
    QCOMPARE(opened.dashboard.plot(QStringLiteral("GPU temperature"))->formatValue(40), QStringLiteral("40.00 °C"));
    const QCPRange x = power->customPlot()->xAxis->range();
    QVERIFY(x.lower <= 1 && x.upper >= 40);
  }

  // The workbench's units agree with the engine's declaration of its series
  // (docs/events.md: name | unit | when), converted as shown.
  void unitsAgreeWithTheEnginesDeclaration() {
    QFile f(QStringLiteral(TRAINBENCH_SOURCE_DIR "/docs/events.md"));
    QVERIFY(f.open(QIODevice::ReadOnly | QIODevice::Text));
    const QMap<QString, QString> shown = {{QStringLiteral("bytes"), QStringLiteral("MiB")},
                                          {QStringLiteral("fraction"), QStringLiteral("%")},
                                          {QStringLiteral("1/s"), QStringLiteral("samples/s")},
                                          {QStringLiteral("count"), QString()}};
    int checked = 0;
    const QRegularExpression name(QStringLiteral("`([a-z0-9_]+)`"));
    bool inTable = false;  // the step event's table of series: | name | unit | when |
    for (const QString& line : QString::fromUtf8(f.readAll()).split(QLatin1Char('\n'))) {
      if (line.startsWith(QLatin1String("| name | unit |"))) inTable = true;
      if (!line.startsWith(QLatin1Char('|'))) inTable = false;
      const QStringList cells = line.split(QLatin1Char('|'));
      if (!inTable || cells.size() < 4 || !cells[1].contains(QLatin1Char('`'))) continue;
      QStringList names;
      for (auto m = name.globalMatch(cells[1]); m.hasNext();) names << m.next().captured(1);
      QStringList units = cells[2].split(QLatin1Char(','));
      for (QString& u : units) u = u.trimmed();
      if (units.size() == 1) units = QStringList(names.size(), units.first());
      if (units.size() != names.size()) continue;
      for (int i = 0; i < names.size(); ++i) {
        if (units[i].isEmpty() || units[i] == QLatin1String("threads")) continue;
        const auto [title, unit] = seriesTitleAndUnit(names[i]);
        // Abbreviations in words, not as the name's letters ("Gpu power w", "H2d").
        QVERIFY2(!title.startsWith(QLatin1String("Gpu")) && !title.startsWith(QLatin1String("H2d")), qPrintable(title));
        const QString want = shown.value(units[i], units[i]);
        if (units[i] == QLatin1String("count")) {
          QVERIFY2(!unit.isEmpty(), qPrintable(names[i]));  // a count names what it counts
        } else {
          QVERIFY2(unit == want, qPrintable(QStringLiteral("%1: docs say %2, the workbench shows %3")
                                                .arg(names[i], units[i], unit)));
        }
        if (units[i] == QLatin1String("fraction")) QCOMPARE(seriesScale(names[i]), 100.0);
        ++checked;
      }
    }
    QVERIFY2(checked >= 20, qPrintable(QString::number(checked)));
  }

  // The first step (autotuning) is warm-up: shaded, out of the y range, its
  // value marked; "Fit warm-up" brings it back.
  void warmupDoesNotFlattenTheSteadySteps() {
    Opened opened(db_, graphs_);
    LivePlot* step = opened.dashboard.plot(QStringLiteral("Step time"));
    QVERIFY(step);
    QCOMPARE(step->warmupSteps(), 1.0);
    QVERIFY2(step->customPlot()->yAxis->range().upper < 60, qPrintable(QString::number(step->customPlot()->yAxis->range().upper)));
    QVERIFY2(step->warmupMarkText().contains(QLatin1String("815.9 ms")), qPrintable(step->warmupMarkText()));
    QVERIFY(step->trackerText(1).contains(QLatin1String("warm-up")));
    LivePlot* breakdown = opened.dashboard.plot(kBreakdown);
    QVERIFY(breakdown->customPlot()->yAxis->range().upper < 100);  // the 59 ms excess stays in view
    step->setFitWarmup(true);
    QVERIFY(step->customPlot()->yAxis->range().upper > 815);
    QVERIFY(step->warmupMarkText() == QLatin1String("warm-up"));
    // A run without a slow start has no warm-up.
    SeriesPoints flat;
    for (int i = 1; i <= 40; ++i) flat.append(i, 0, i, i, 30.0);
    QCOMPARE(lastWarmupStep(flat), 0.0);
  }

  // Compare, the two runs side by side: the same steady scale and step range.
  void compareScalesToTheSteadySteps() {
    tb::RunStore store(db_.toStdString(), tb::RunStore::Mode::ReadOnly);
    CompareView view;
    view.resize(1200, 800);
    QSignalSpy loaded(&view, &CompareView::allLoaded);
    view.setRuns(db_, {RunSummary::fromRecord(*store.get_run(graphs_)), RunSummary::fromRecord(*store.get_run(eager_))});
    QVERIFY(loaded.wait(20000));
    view.setShownMetrics({QStringLiteral("s:step_time_ms"), QStringLiteral("s:tensor_pipe_active_pct")});
    QCOMPARE(view.plots().size(), 2);
    for (LivePlot* p : view.plots()) {
      const QCPRange x = p->customPlot()->xAxis->range();
      QVERIFY2(x.lower <= 1 && x.upper >= 40, qPrintable(p->title()));
      if (p->title() == QLatin1String("Step time")) {
        QVERIFY2(p->customPlot()->yAxis->range().upper < 60, qPrintable(QString::number(p->customPlot()->yAxis->range().upper)));
        QVERIFY(p->warmupMarkText().contains(QLatin1String("815.9 ms")));
      }
    }
  }

  // The advisor reads the same store: a replayed graph's zero phases bound nothing.
  void advisorOnTheStoredGraphRun() {
    tb::RunStore store(db_.toStdString(), tb::RunStore::Mode::ReadOnly);
    for (int64_t id : {graphs_, eager_}) {
      const tb::RunEvidence e = tb::evidence_from_store(store, id);
      int found = 0;
      for (const tb::Advice& a : tb::advise(e)) {
        if (a.rule != "memory_headroom") continue;  // 7.4 of 150 GB: it fires on both
        ++found;
        QCOMPARE(std::isnan(a.max_speedup), id == graphs_);
        if (id == graphs_) QVERIFY2(a.bound_reason.find("CUDA graph") != std::string::npos, a.bound_reason.c_str());
      }
      QCOMPARE(found, 1);
    }
  }
};

QTEST_MAIN(TestGpuRunPlots)
#include "test_gpu_run_plots.moc"
