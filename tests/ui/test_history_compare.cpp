// SPDX-License-Identifier: GPL-3.0-or-later
// History and comparison over a real run store: the history table reads the
// store, sorts, searches and filters; rename, tags, notes and delete reach the
// store; the configuration diff can hide equal keys; the summary computes the
// speed-up against a chosen baseline; reports and CSV exports are written.
#include <QDir>
#include <QHeaderView>
#include <QLabel>
#include <QFile>
#include <QStandardPaths>
#include <QPlainTextEdit>
#include <QRegularExpression>
#include <QStatusBar>
#include <QTableView>
#include <QTemporaryDir>
#include <QtTest>
#include <cmath>
#include <qcustomplot.h>

#include "compare_summary_model.h"
#include "compare_view.h"
#include "config_diff_model.h"
#include "engine/store/run_store.h"
#include "live_plot.h"
#include "main_window.h"
#include "run_dashboard.h"
#include <QTabWidget>
#include "run_config.h"
#include "run_history_filter.h"
#include "run_history_model.h"
#include "run_history_view.h"
#include "series_loader.h"
#include "speedup_chart.h"
#include "table_export.h"

namespace {
nlohmann::json toJson(const QJsonObject& o) {
  return nlohmann::json::parse(QJsonDocument(o).toJson(QJsonDocument::Compact).toStdString());
}

qint64 addRun(tb::RunStore& store, const QString& name, const QString& model, const QString& status,
              const QJsonObject& overrides, double stepMs, double samplesPerS, double accuracy, int steps = 50) {
  tb::RunRecord r;
  r.name = name.toStdString();
  r.config = toJson(RunConfig::merged(RunConfig::merged(RunConfig::defaults(), {{"model", model}}), overrides));
  const qint64 id = store.create_run(r);
  store.set_status(id, tb::run_status::kRunning);
  std::vector<tb::MetricPoint> points;
  for (int s = 1; s <= steps; ++s) {
    points.push_back({"step_time_ms", s, s * stepMs / 1000.0, stepMs + (s % 5)});
    points.push_back({"samples_per_s", s, s * stepMs / 1000.0, samplesPerS});
    points.push_back({"loss", s, s * stepMs / 1000.0, 2.0 / s});
  }
  store.append_step_metrics(id, points);
  store.append_epoch_metrics(id, {{"test_accuracy", 0, steps, steps * stepMs / 1000.0, accuracy}});
  store.set_summary(id, {{"median_step_time_ms", stepMs},
                         {"samples_per_s", samplesPerS},
                         {"peak_memory_bytes", 300.0 * 1024 * 1024},
                         {"final_test_accuracy", accuracy},
                         {"steps_per_epoch", steps}});
  store.set_status(id, status.toStdString(), status == QLatin1String("failed") ? "boom" : "");
  return id;
}
}  // namespace

class TestHistoryCompare : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    Q_INIT_RESOURCE(trainbench);
    QStandardPaths::setTestModeEnabled(true);
    QVERIFY(dir_.isValid());
    db_ = dir_.filePath(QStringLiteral("runs.db"));
    tb::RunStore store(db_.toStdString());
    baseline_ = addRun(store, QStringLiteral("baseline"), QStringLiteral("fmnist-cnn"), QStringLiteral("finished"),
                       {{"batch_size", 64}}, 20.0, 3200.0, 0.80);
    amp_ = addRun(store, QStringLiteral("amp bf16"), QStringLiteral("fmnist-cnn"), QStringLiteral("finished"),
                  {{"batch_size", 64}, {"amp", "bf16"}}, 10.0, 6400.0, 0.81);
    broken_ = addRun(store, QStringLiteral("resnet attempt"), QStringLiteral("resnet9"), QStringLiteral("failed"),
                     {{"batch_size", 128}, {"model", "resnet9"}}, 50.0, 2560.0, 0.10, 5);
  }

  void historyReadsTheStore() {
    RunHistoryModel model;
    QString error;
    QVERIFY2(model.reload(db_, &error), qPrintable(error));
    QCOMPARE(model.rowCount(), 3);
    QCOMPARE(model.columnCount(), int(RunHistoryModel::ColumnCount));
    const RunSummary* amp = model.run(amp_);
    QVERIFY(amp);
    QCOMPARE(amp->medianStepMs, 10.0);
    QCOMPARE(amp->samplesPerSecond, 6400.0);
    QCOMPARE(amp->finalAccuracy, 0.81);
    int row = -1;
    for (int r = 0; r < model.rowCount(); ++r)
      if (model.index(r, 0).data(RunHistoryModel::RunIdRole).toLongLong() == amp_) row = r;
    QCOMPARE(model.index(row, RunHistoryModel::Name).data().toString(), QStringLiteral("amp bf16"));
    QCOMPARE(model.index(row, RunHistoryModel::Model).data().toString(), QStringLiteral("fmnist-cnn"));
    QCOMPARE(model.index(row, RunHistoryModel::Status).data().toString(), QStringLiteral("finished"));
    QCOMPARE(model.index(row, RunHistoryModel::MedianStep).data().toString(), QStringLiteral("10.00"));
    QCOMPARE(model.index(row, RunHistoryModel::SamplesPerSecond).data().toString(), QStringLiteral("6400.0"));
    QCOMPARE(model.index(row, RunHistoryModel::PeakMemory).data().toString(), QStringLiteral("300.0 MiB"));
    QCOMPARE(model.index(row, RunHistoryModel::FinalAccuracy).data().toString(), QStringLiteral("81.00 %"));
    QCOMPARE(model.models(), (QStringList{"fmnist-cnn", "resnet9"}));
    QCOMPARE(model.statuses(), (QStringList{"finished", "failed"}));  // the runs' own, any string
    // Reading an unchanged store again does not reset the model (views keep their place).
    QSignalSpy resets(&model, &QAbstractItemModel::modelReset);
    bool changed = true;
    QVERIFY(model.reload(db_, &error, &changed));
    QVERIFY(!changed);
    QCOMPARE(resets.count(), 0);
    // An unreadable file is reported, not fatal.
    QFile junk(dir_.filePath(QStringLiteral("junk.db")));
    QVERIFY(junk.open(QIODevice::WriteOnly));
    junk.write("this is not sqlite at all, not even close................................................");
    junk.close();
    QVERIFY(!model.reload(junk.fileName(), &error));
    QVERIFY(!error.isEmpty());
    QCOMPARE(model.rowCount(), 0);
  }

  void sortSearchFilter() {
    RunHistoryModel model;
    QVERIFY(model.reload(db_));
    RunHistoryFilter filter;
    filter.setSourceModel(&model);
    filter.sort(RunHistoryModel::MedianStep, Qt::AscendingOrder);
    QCOMPARE(filter.index(0, RunHistoryModel::Name).data().toString(), QStringLiteral("amp bf16"));
    QCOMPARE(filter.index(2, RunHistoryModel::Name).data().toString(), QStringLiteral("resnet attempt"));
    filter.setStatusFilter(QStringLiteral("failed"));
    QCOMPARE(filter.rowCount(), 1);
    filter.setStatusFilter(QString());
    filter.setModelFilter(QStringLiteral("fmnist-cnn"));
    QCOMPARE(filter.rowCount(), 2);
    filter.setModelFilter(QString());
    filter.setSearchText(QStringLiteral("AMP"));
    QCOMPARE(filter.rowCount(), 1);
    filter.setSearchText(QStringLiteral("resnet9 failed"));
    QCOMPARE(filter.rowCount(), 1);
    // Configuration values: a bare value, a key=value pair, an id.
    filter.setSearchText(QStringLiteral("bf16"));
    QCOMPARE(filter.rowCount(), 1);
    filter.setSearchText(QStringLiteral("batch_size=128"));
    QCOMPARE(filter.rowCount(), 1);
    QCOMPARE(filter.index(0, RunHistoryModel::Name).data().toString(), QStringLiteral("resnet attempt"));
    filter.setSearchText(QStringLiteral("batch_size=64 amp=off"));
    QCOMPARE(filter.rowCount(), 1);
    QCOMPARE(filter.index(0, RunHistoryModel::Name).data().toString(), QStringLiteral("baseline"));
    filter.setSearchText(QStringLiteral("#%1").arg(amp_));
    QCOMPARE(filter.rowCount(), 1);
    filter.setSearchText(QString());
    QCOMPARE(filter.rowCount(), 3);
  }

  void editsReachTheStore() {
    // A copy of the database, so the other tests keep their runs.
    const QString copy = dir_.filePath(QStringLiteral("edit.db"));
    {
      tb::RunStore store(copy.toStdString());
      addRun(store, QStringLiteral("one"), QStringLiteral("mlp"), QStringLiteral("finished"), {{"model", "mlp"}}, 5, 100, 0.5);
      addRun(store, QStringLiteral("two"), QStringLiteral("mlp"), QStringLiteral("stopped"), {{"model", "mlp"}}, 5, 100, 0.5);
    }
    RunHistoryView view;
    view.setDatabasePath(copy);
    QTRY_COMPARE(view.model()->rowCount(), 2);  // read on the history's worker
    const qint64 id = view.model()->runs().first().id;
    QVERIFY(view.renameRun(id, QStringLiteral("renamed")));
    QVERIFY(view.setRunTags(id, QStringLiteral("ladder, amp")));
    QVERIFY(view.setRunNotes(id, QStringLiteral("fast one")));
    {
      tb::RunStore store(copy.toStdString(), tb::RunStore::Mode::ReadOnly);
      const auto run = store.get_run(id);
      QCOMPARE(QString::fromStdString(run->name), QStringLiteral("renamed"));
      QCOMPARE(QString::fromStdString(run->tags), QStringLiteral("ladder, amp"));
      QCOMPARE(QString::fromStdString(run->notes), QStringLiteral("fast one"));
    }
    QTRY_COMPARE(view.model()->tags(), (QStringList{"amp", "ladder"}));
    view.filter()->setTagFilter(QStringLiteral("amp"));
    QCOMPARE(view.filter()->rowCount(), 1);
    view.filter()->setTagFilter(QString());
    view.selectRuns({id});
    QCOMPARE(view.selectedRunIds(), QList<qint64>{id});
    QVERIFY(view.deleteRuns({id}));
    QTRY_COMPARE(view.model()->rowCount(), 1);
    tb::RunStore store(copy.toStdString(), tb::RunStore::Mode::ReadOnly);
    QVERIFY(!store.get_run(id).has_value());
    QCOMPARE(QString::fromStdString(store.integrity_check()), QStringLiteral("ok"));
  }

  // Notes typed in the history reach the store when the selection moves on
  // or the editor loses focus, without pressing "Save notes".
  void notesAreKeptWhenTheSelectionChanges() {
    const QString path = dir_.filePath(QStringLiteral("notes.db"));
    qint64 first = 0, second = 0;
    {
      tb::RunStore store(path.toStdString());
      first = addRun(store, QStringLiteral("one"), QStringLiteral("mlp"), QStringLiteral("finished"), {}, 5, 100, 0.5);
      second = addRun(store, QStringLiteral("two"), QStringLiteral("mlp"), QStringLiteral("finished"), {}, 5, 100, 0.5);
    }
    RunHistoryView view;
    view.setDatabasePath(path);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    QTRY_COMPARE(view.model()->rowCount(), 2);
    auto* notes = view.findChild<QPlainTextEdit*>();
    QVERIFY(notes);
    auto storedNotes = [&path](qint64 id) {
      tb::RunStore store(path.toStdString(), tb::RunStore::Mode::ReadOnly);
      return QString::fromStdString(store.get_run(id)->notes);
    };
    view.selectRuns({first});
    notes->setFocus();
    QTest::keyClicks(notes, QStringLiteral("lr too high"));
    view.selectRuns({second});  // selection moves on before "Save notes"
    QCOMPARE(storedNotes(first), QStringLiteral("lr too high"));
    QVERIFY(notes->toPlainText().isEmpty());  // the second run's (empty) notes
    view.selectRuns({first});
    QCOMPARE(notes->toPlainText(), QStringLiteral("lr too high"));
    // Focus leaving the editor saves too.
    notes->setFocus();
    QTest::keyClicks(notes, QStringLiteral(", try 0.05"));
    view.table()->setFocus();
    QTRY_COMPARE(storedNotes(first), QStringLiteral("lr too high, try 0.05"));
  }

  void runsWrittenElsewhereAppearOnTheirOwn() {
    const QString path = dir_.filePath(QStringLiteral("follow.db"));
    { tb::RunStore store(path.toStdString()); }
    RunHistoryView view;
    view.setDatabasePath(path);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    QCOMPARE(view.model()->rowCount(), 0);
    {
      // Another process (here: another connection) records a run.
      tb::RunStore store(path.toStdString());
      addRun(store, QStringLiteral("from the command line"), QStringLiteral("mlp"), QStringLiteral("finished"),
             {{"model", "mlp"}}, 5, 100, 0.5);
    }
    QTRY_COMPARE_WITH_TIMEOUT(view.model()->rowCount(), 1, 3000);  // on the commit, not a slow timer
  }

  void diffOnlyHidesEqualKeys() {
    ConfigDiffModel diff;
    const QJsonObject a = RunConfig::merged(RunConfig::defaults(), {{"name", "a"}});
    const QJsonObject b = RunConfig::merged(a, {{"name", "b"}, {"amp", "bf16"}, {"batch_size", 256}});
    diff.setRuns({"a", "b"}, {a, b});
    QCOMPARE(diff.rowCount(), a.size());
    QCOMPARE(diff.columnCount(), 3);
    diff.setDifferencesOnly(true);
    QCOMPARE(diff.shownKeys(), (QStringList{"amp", "batch_size", "name"}));
    QCOMPARE(diff.rowCount(), 3);
    QCOMPARE(diff.index(0, 1).data().toString(), QStringLiteral("off"));
    QCOMPARE(diff.index(0, 2).data().toString(), QStringLiteral("bf16"));
    QVERIFY(diff.index(0, 2).data(Qt::BackgroundRole).isValid());  // highlighted
    QVERIFY(!diff.index(0, 1).data(Qt::BackgroundRole).isValid());
    QCOMPARE(diff.headerData(2, Qt::Horizontal).toString(), QStringLiteral("b"));
    diff.setRuns({"a", "a2"}, {a, a});
    QCOMPARE(diff.rowCount(), 0);
  }

  // The environments' plain entries follow the configuration as
  // "environment: KEY" (a laptop's AVX2 against a workstation's AVX-512);
  // nested ones (probed peaks, kernel paths) are not rows.
  void diffShowsWhereTheRunsRanAfterTheirSettings() {
    ConfigDiffModel diff;
    const QJsonObject a = RunConfig::merged(RunConfig::defaults(), {{"name", "a"}});
    const QJsonObject b = RunConfig::merged(a, {{"name", "b"}});
    RunSummary ra, rb;
    ra.environment = {{"cpu_isa", "avx512"}, {"threads", 2}, {"peaks", QJsonObject{{"bytes_per_s", 2.5e10}}}};
    rb.environment = {{"cpu_isa", "avx2"}, {"threads", 2}, {"peaks", QJsonObject{{"bytes_per_s", 1.9e10}}}};
    QCOMPARE(ra.environmentFacts().keys(), (QStringList{"cpu_isa", "threads"}));
    diff.setRuns({"a", "b"}, {a, b}, {ra.environmentFacts(), rb.environmentFacts()});
    QCOMPARE(diff.rowCount(), a.size() + 2);
    QCOMPARE(diff.shownKeys().last(), QStringLiteral("environment: threads"));
    diff.setDifferencesOnly(true);
    QCOMPARE(diff.shownKeys(), (QStringList{"name", "environment: cpu_isa"}));
    QCOMPARE(diff.index(1, 1).data().toString(), QStringLiteral("avx512"));
    QCOMPARE(diff.index(1, 2).data().toString(), QStringLiteral("avx2"));
    QVERIFY(diff.index(1, 2).data(Qt::BackgroundRole).isValid());
    QVERIFY(diff.index(1, 0).data(Qt::ToolTipRole).toString().contains(QLatin1String("Environment tab")));
    diff.setRuns({"a", "b"}, {a, b});  // runs without a recorded environment: the settings alone
    QCOMPARE(diff.shownKeys(), (QStringList{"name"}));
  }

  void summarySpeedUpAgainstChosenBaseline() {
    RunHistoryModel model;
    QVERIFY(model.reload(db_));
    CompareSummaryModel summary;
    summary.setRuns({*model.run(baseline_), *model.run(amp_)});
    summary.setBaseline(baseline_);
    QCOMPARE(summary.speedUp(0), 1.0);
    QCOMPARE(summary.speedUp(1), 2.0);
    QCOMPARE(summary.index(1, CompareSummaryModel::SpeedUp).data().toString(), QStringLiteral("200 %"));
    QCOMPARE(summary.index(0, CompareSummaryModel::Batch).data().toString(), QStringLiteral("64"));
    QCOMPARE(summary.index(1, CompareSummaryModel::MedianStep).data().toString(), QStringLiteral("10.00"));
    summary.setBaseline(amp_);
    QCOMPARE(summary.speedUp(0), 0.5);
    QVERIFY(summary.index(1, CompareSummaryModel::Name).data().toString().contains(QLatin1String("baseline")));
  }

  void compareViewOverlaysAndExportsReports() {
    RunHistoryModel model;
    QVERIFY(model.reload(db_));
    CompareView view;
    view.resize(1200, 800);
    QSignalSpy loaded(&view, &CompareView::allLoaded);
    view.setRuns(db_, {*model.run(baseline_), *model.run(amp_), *model.run(broken_)});
    QVERIFY(loaded.wait(20000));
    QCOMPARE(view.loadedCount(), 3);
    QVERIFY(view.plots().size() >= 4);  // loss, test accuracy, step time, samples/s
    for (LivePlot* p : view.plots()) {
      if (p->title() == QLatin1String("Step time")) QCOMPARE(p->curveCount(), 3);
    }
    view.setDifferencesOnly(true);
    QVERIFY(view.diffModel()->shownKeys().contains(QStringLiteral("amp")));
    QVERIFY(!view.diffModel()->shownKeys().contains(QStringLiteral("pin_memory")));
    view.setDifferencesOnly(false);
    QVERIFY(view.diffModel()->shownKeys().contains(QStringLiteral("pin_memory")));
    view.setBaseline(baseline_);
    QCOMPARE(view.speedupChart()->barCount(), 3);

    for (const QString& name : {QStringLiteral("report.md"), QStringLiteral("page.html")}) {
      const QString path = dir_.filePath(name);
      QString error;
      QVERIFY2(view.exportReport(path, &error), qPrintable(error));
      QFile f(path);
      QVERIFY(f.open(QIODevice::ReadOnly));
      const QString text = QString::fromUtf8(f.readAll());
      QVERIFY(text.contains(QLatin1String("amp bf16")));
      QVERIFY(text.contains(QLatin1String("200 %")));
      QVERIFY(text.contains(QLatin1String("bf16")));
      QVERIFY(!text.contains(QLatin1String("pin_memory")));  // reports list only the keys that differ
      const QString folder = dir_.filePath(QFileInfo(name).completeBaseName() + QStringLiteral("_plots"));
      if (name.endsWith(QLatin1String(".html"))) {
        // Self-contained: every plot (+ the speed-up chart) inside, no folder beside it.
        QVERIFY(text.startsWith(QLatin1String("<!DOCTYPE html>")));
        QCOMPARE(int(text.count(QLatin1String("<img src=\"data:image/png;base64,"))), int(view.plots().size()) + 1);
        const int at = int(text.indexOf(QLatin1String("base64,"))) + 7;
        const QByteArray png = QByteArray::fromBase64(text.mid(at, text.indexOf(QLatin1Char('"'), at) - at).toLatin1());
        QVERIFY(!QImage::fromData(png, "PNG").isNull());
        QVERIFY(!QFileInfo::exists(folder));
      } else {
        QVERIFY(text.contains(QLatin1String("| Run |")) && text.contains(QLatin1String("![")));
        const QStringList images = QDir(folder).entryList({QStringLiteral("*.png")});
        QCOMPARE(images.size(), view.plots().size() + 1);  // + the speed-up chart
        QVERIFY(images.contains(QStringLiteral("speedup.png")));
        QVERIFY(!QImage(QDir(folder).filePath(images.first())).isNull());
      }
    }
    QVERIFY(!view.diffModel()->differencesOnly());  // the table's own setting came back (all keys)
    QVERIFY(view.diffModel()->shownKeys().contains(QStringLiteral("pin_memory")));

    // Tables as CSV.
    const QString csv = TableExport::toCsv(view.summaryModel());
    const QStringList lines = csv.split(QLatin1Char('\n'), Qt::SkipEmptyParts);
    QCOMPARE(lines.size(), 4);
    QVERIFY(lines[0].startsWith(QLatin1String("Run,Batch,Peak memory")));
    QString error;
    QVERIFY(TableExport::writeCsv(view.diffModel(), dir_.filePath(QStringLiteral("diff.csv")), &error));
    QVERIFY(QFileInfo(dir_.filePath(QStringLiteral("diff.csv"))).size() > 100);
  }

  // Repeats of one configuration are grouped: mean with a min-max band in
  // the plots, the speed-up's spread in the summary; metrics can be chosen
  // among those the runs share, and runs hidden.
  void compareGroupsRepeatsAndChoosesMetrics() {
    const QString path = dir_.filePath(QStringLiteral("repeats.db"));
    QList<qint64> a, b;
    qint64 single = 0;
    {
      tb::RunStore store(path.toStdString());
      const double rateA[] = {100, 110, 90}, rateB[] = {200, 220};
      for (int i = 0; i < 3; ++i)
        a << addRun(store, QStringLiteral("base"), QStringLiteral("mlp"), QStringLiteral("finished"),
                    {{"model", "mlp"}, {"seed", i}}, 10.0, rateA[i], 0.8);
      for (int i = 0; i < 2; ++i)
        b << addRun(store, QStringLiteral("fused"), QStringLiteral("mlp"), QStringLiteral("finished"),
                    {{"model", "mlp"}, {"seed", i}, {"fuse_pointwise", true}}, 5.0, rateB[i], 0.8);
      single = addRun(store, QStringLiteral("big batch"), QStringLiteral("mlp"), QStringLiteral("finished"),
                      {{"model", "mlp"}, {"batch_size", 256}}, 20.0, 400, 0.7);
    }
    RunHistoryModel model;
    QVERIFY(model.reload(path));
    QList<RunSummary> runs;
    for (const RunSummary& r : model.runs()) runs << r;
    QCOMPARE(CompareView::repeatGroups(runs).size(), 3);
    {  // the same settings run in another place (AVX2 against AVX-512) are not repeats
      QList<RunSummary> placed = runs;
      for (RunSummary& r : placed) r.environment = {{"cpu_isa", "avx512"}, {"peaks", QJsonObject{{"x", double(r.id)}}}};
      QCOMPARE(CompareView::repeatGroups(placed).size(), 3);  // nested entries differ: still repeats
      placed[1].environment.insert("cpu_isa", "avx2");
      QCOMPARE(CompareView::repeatGroups(placed).size(), 4);
    }
    CompareView view;
    view.resize(1200, 800);
    QSignalSpy loaded(&view, &CompareView::allLoaded);
    view.setRuns(path, runs);
    QVERIFY(loaded.wait(20000));
    QVERIFY(view.groupsRepeats());
    CompareSummaryModel* summary = view.summaryModel();
    QCOMPARE(summary->rowCount(), 3);
    QVERIFY(summary->index(0, CompareSummaryModel::Name).data().toString().contains(QStringLiteral("×3")));
    QCOMPARE(summary->speedUp(1), 2.1);  // 210 / 100 samples/s
    QCOMPARE(summary->speedUpSpread(1), (220.0 / 90.0 - 200.0 / 110.0) / 2);
    QCOMPARE(summary->index(1, CompareSummaryModel::SpeedUp).data().toString(), QStringLiteral("210 % ± 31 %"));
    QCOMPARE(summary->index(2, CompareSummaryModel::SpeedUp).data().toString(), QStringLiteral("400 % ± 40 %"));
    // Plots: one curve per group, a band behind each group's mean.
    LivePlot* steps = nullptr;
    for (LivePlot* p : view.plots())
      if (p->title() == QLatin1String("Step time")) steps = p;
    QVERIFY(steps);
    QCOMPARE(steps->curveCount(), 3);
    QVERIFY(steps->curveLabels().first().contains(QLatin1String("mean of 3")));
    QCOMPARE(steps->customPlot()->graphCount(), 3 * 2 + 2 * 2);  // curves + two bands
    // Metrics: any shared series; the user's choice is what is drawn.
    const QStringList metrics = view.availableMetrics();
    for (const char* m : {"s:step_time_ms", "s:samples_per_s", "s:loss", "e:test_accuracy"})
      QVERIFY2(metrics.contains(QLatin1String(m)), m);
    view.setShownMetrics({QStringLiteral("s:samples_per_s")});
    QCOMPARE(view.plots().size(), 1);
    QCOMPARE(view.plots().first()->title(), QStringLiteral("Samples per second"));
    view.setRunHidden(single, true);
    QCOMPARE(view.plots().first()->curveCount(), 2);
    view.setRunHidden(single, false);
    view.setGroupRepeats(false);
    QCOMPARE(summary->rowCount(), 6);
    QCOMPARE(view.plots().first()->curveCount(), 6);
  }

  void historyOpensSavedRunDashboards() {
    MainWindow window(db_);
    QTRY_COMPARE(window.historyView()->model()->rowCount(), 3);
    window.openRun(amp_);
    QCOMPARE(window.dashboards()->count(), 1);
    auto* d = qobject_cast<RunDashboard*>(window.dashboards()->widget(0));
    QTRY_VERIFY_WITH_TIMEOUT(d->plot(QStringLiteral("Step time")) != nullptr, 10000);
    QCOMPARE(d->plot(QStringLiteral("Step time"))->curveCount(), 1);
    QVERIFY(d->plot(QStringLiteral("Step time"))->displayedPointCount() >= 50);
    QCOMPARE(d->series().runName, QStringLiteral("amp bf16"));
    window.openRun(amp_);  // already open: no second tab
    QCOMPARE(window.dashboards()->count(), 1);
    window.compareRuns({baseline_, amp_});
    QCOMPARE(window.compareView()->runs().size(), 2);
  }

  // Issue 26, item 1: run 1 of another database opened in the tab of the
  // first database's run 1 and kept its numbers, and the History side panel
  // kept describing the first database's run. A run is (store, id).
  void aRunIsItsStoreAndItsId() {
    const QString first = dir_.filePath(QStringLiteral("first.db")), second = dir_.filePath(QStringLiteral("second.db"));
    qint64 a = 0, b = 0;
    {
      tb::RunStore one(first.toStdString());
      a = addRun(one, QStringLiteral("first store's run"), QStringLiteral("fmnist-cnn"), QStringLiteral("finished"),
                 {{"cuda_graphs", true}}, 30.8, 16605.0, 0.89);
      tb::RunStore two(second.toStdString());
      b = addRun(two, QStringLiteral("second store's run"), QStringLiteral("fmnist-cnn"), QStringLiteral("finished"),
                 {}, 31.3, 16362.0, 0.88);
    }
    QCOMPARE(a, b);  // the same id in both
    MainWindow window(first);
    QTRY_COMPARE_WITH_TIMEOUT(window.historyView()->model()->rowCount(), 1, 10000);
    window.historyView()->selectRuns({a});
    auto sidePanelSays = [&window](const QString& words) {
      for (const QLabel* l : window.historyView()->findChildren<QLabel*>())
        if (l->text().contains(words)) return true;
      return false;
    };
    QVERIFY(sidePanelSays(QStringLiteral("first store&#39;s run")) || sidePanelSays(QStringLiteral("first store's run")));
    // The first step time a dashboard shows (stepMs + 1 in addRun).
    auto firstStepMs = [](RunDashboard* d) {
      auto it = d->series().step.find(QStringLiteral("step_time_ms"));
      return it == d->series().step.end() || it->second.isEmpty() ? 0.0 : it->second.value.first();
    };
    window.openRun(a);
    auto* one = qobject_cast<RunDashboard*>(window.dashboards()->widget(0));
    QTRY_COMPARE_WITH_TIMEOUT(firstStepMs(one), 31.8, 10000);

    window.setDatabasePath(second);
    QVERIFY(!sidePanelSays(QStringLiteral("first store")));
    QTRY_COMPARE_WITH_TIMEOUT(window.historyView()->model()->rowCount(), 1, 10000);
    QCOMPARE(window.historyView()->model()->runs().first().name, QStringLiteral("second store's run"));
    QVERIFY(!sidePanelSays(QStringLiteral("first store")));
    window.openRun(b);
    QCOMPARE(window.dashboards()->count(), 2);  // a tab of its own
    auto* two = qobject_cast<RunDashboard*>(window.dashboards()->currentWidget());
    QVERIFY(two && two != one);
    QTRY_COMPARE_WITH_TIMEOUT(firstStepMs(two), 32.3, 10000);
    QCOMPARE(two->series().runName, QStringLiteral("second store's run"));
    QVERIFY2(window.dashboards()->tabToolTip(1).contains(second), qPrintable(window.dashboards()->tabToolTip(1)));
    // Back to the first database: its run 1 is the first tab again.
    window.setDatabasePath(first);
    window.openRun(a);
    QCOMPARE(window.dashboards()->count(), 2);
    QCOMPARE(window.dashboards()->currentWidget(), one);
  }

  // Issue 26, item 9: at 1280x800 the summary's headers were cut
  // ("Median step (ms", "eed-up vs baseli"): every header fits its column.
  void compareHeadersFitAt1280() {
    MainWindow window(db_);
    window.resize(1280, 800);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    QTRY_COMPARE_WITH_TIMEOUT(window.historyView()->model()->rowCount(), 3, 10000);
    window.compareRuns({baseline_, amp_, broken_});
    QTRY_COMPARE_WITH_TIMEOUT(window.compareView()->runs().size(), 3, 10000);
    QTest::qWait(200);
    QTableView* summary = nullptr;
    for (QTableView* t : window.compareView()->findChildren<QTableView*>())
      if (qobject_cast<CompareSummaryModel*>(t->model())) summary = t;
    QVERIFY(summary);
    QHeaderView* header = summary->horizontalHeader();
    for (int c = 0; c < header->count(); ++c) {
      if (header->isSectionHidden(c)) continue;
      const QString text = summary->model()->headerData(c, Qt::Horizontal).toString();
      int needed = 0;
      for (const QString& line : text.split(QLatin1Char('\n')))
        needed = std::max(needed, header->fontMetrics().horizontalAdvance(line));
      QVERIFY2(header->sectionSize(c) >= needed,
               qPrintable(QStringLiteral("%1: %2 px for %3 px").arg(text).arg(header->sectionSize(c)).arg(needed)));
      // ...and is on screen: the table is not wider than its view.
      QVERIFY2(header->sectionViewportPosition(c) + header->sectionSize(c) <= summary->viewport()->width() + 1,
               qPrintable(QStringLiteral("%1 ends at %2 of %3 px").arg(text)
                              .arg(header->sectionViewportPosition(c) + header->sectionSize(c))
                              .arg(summary->viewport()->width())));
    }
  }

  // `trainbench --compare 1,2`: the window compares before its history has
  // read the store (a worker thread); the runs are compared once read, and
  // ids the store lacks are named.
  void compareBeforeTheHistoryIsRead() {
    // A window closed while it still asks the engine ends the probe quietly.
    QTest::failOnWarning(QRegularExpression(QStringLiteral("QProcess: Destroyed while process")));
    MainWindow window(db_);
    window.compareRuns({baseline_, amp_, 99999});
    QCOMPARE(window.compareView()->runs().size(), 0);  // not read yet
    QTRY_COMPARE_WITH_TIMEOUT(window.compareView()->runs().size(), 2, 10000);
    QVERIFY2(window.statusBar()->currentMessage().contains(QLatin1String("#99999")),
             qPrintable(window.statusBar()->currentMessage()));
  }

  // `trainbench --open-run 2` at start: the tab gets the run's name once the
  // dashboard has read it, though the history had not when the tab opened.
  void openRunBeforeTheHistoryIsRead() {
    MainWindow window(db_);
    window.openRun(amp_);
    QTRY_COMPARE_WITH_TIMEOUT(window.dashboards()->tabText(0), QStringLiteral("amp bf16 (#%1)").arg(amp_), 10000);
  }

  void seriesLoaderWorksOffTheGuiThread() {
    SeriesLoader loader;
    QSignalSpy loaded(&loader, &SeriesLoader::loaded);
    QSignalSpy failed(&loader, &SeriesLoader::failed);
    loader.request(db_, amp_);
    loader.request(db_, 99999);
    QTRY_COMPARE_WITH_TIMEOUT(loaded.count() + failed.count(), 2, 10000);
    QCOMPARE(loaded.count(), 1);
    QCOMPARE(failed.count(), 1);
    const RunSeries s = loaded.first().at(1).value<RunSeries>();
    QCOMPARE(s.runName, QStringLiteral("amp bf16"));
    QCOMPARE(s.step.at(QStringLiteral("step_time_ms")).size(), 50);
    QCOMPARE(s.stepsPerEpoch, 50);
    QCOMPARE(s.epoch.at(QStringLiteral("test_accuracy")).value.first(), 0.81);
  }

 private:
  QTemporaryDir dir_;
  QString db_;
  qint64 baseline_ = 0, amp_ = 0, broken_ = 0;
};

QTEST_MAIN(TestHistoryCompare)
#include "test_history_compare.moc"
