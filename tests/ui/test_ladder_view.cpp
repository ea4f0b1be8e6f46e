// SPDX-License-Identifier: GPL-3.0-or-later
// The Ladder view drives the real engine's `ladder` command and fills its
// table, chart and exports from the engine's events and the store; the
// advisor panel reads a stored run's series and has the engine re-run it with
// a recommendation, the pair linked. Set TRAINBENCH_SCREENSHOTS=DIR to keep
// screenshots of both.
#include <QtTest>

#include <qcustomplot.h>

#include <QComboBox>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QTabWidget>
#include <QTableWidget>

#include <nlohmann/json.hpp>

#include "advisor_panel.h"
#include "engine/backend/backend.h"
#include "engine/ladder/ladder.h"
#include "engine/ladder/rungs.h"
#include "engine/store/run_store.h"
#include "engine/train/config.h"
#include "ladder_view.h"
#include "run_config.h"
#include "main_window.h"
#include "run_summary.h"
#include "compare_summary_model.h"

using json = nlohmann::json;

namespace {

QJsonObject tinyBaseline() {
  return RunSummary::toQt(tb::validate_config(
      {{"device", "cpu"}, {"train_limit", 512}, {"test_limit", 64}, {"batch_size", 32},
       {"ladder_repeats", 2}, {"ladder_warmup_steps", 1}, {"ladder_measured_steps", 3},
       {"ladder_rungs", "workers"}, {"name", "tiny"}},
      "test"));
}

void screenshot(QWidget* w, const QString& name) {
  const QString dir = qEnvironmentVariable("TRAINBENCH_SCREENSHOTS");
  if (dir.isEmpty()) return;
  QVERIFY(w->grab().save(QDir(dir).filePath(name)));
}

// A stored run of batch 48 on device whose steps wait for data (the
// advisor's input_wait rule fires).
int64_t storeInputBoundRun(const QString& db, const std::string& device) {
  tb::RunStore store(db.toStdString());
  tb::RunRecord r;
  r.config = tb::validate_config({{"device", device}, {"batch_size", 48}}, "test");
  r.environment = {{"device", device}};
  const int64_t id = store.create_run(r);
  std::vector<tb::MetricPoint> points;
  for (int s = 1; s <= 20; ++s) {
    points.push_back({"step_time_ms", s, 0.02 * s, 20.0});
    points.push_back({"data_wait_ms", s, 0.02 * s, 6.0});
  }
  store.append_step_metrics(id, points);
  return id;
}

}  // namespace

class TestLadderView : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  QString db() const { return dir_.filePath(QStringLiteral("runs.db")); }

 private slots:
  void initTestCase() {
    Q_INIT_RESOURCE(trainbench);
    QStandardPaths::setTestModeEnabled(true);
    if (!QFile::exists(QStringLiteral("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")))
      QSKIP("Fashion-MNIST is not installed (Debian package dataset-fashion-mnist; scripts/setup.sh)");
  }

  // The Set-up page's configuration is the baseline; the ladder settings come
  // from the view's controls (made from the settings table).
  void baselineAndSettings() {
    LadderView view;
    view.setBaseline(tinyBaseline());
    const QJsonObject c = view.ladderConfig();
    QCOMPARE(c.value(QLatin1String("ladder_rungs")).toString(), QStringLiteral("workers"));
    QCOMPARE(c.value(QLatin1String("ladder_repeats")).toInt(), 2);
    QCOMPARE(c.value(QLatin1String("train_limit")).toInt(), 512);
    int checked = 0;
    for (int i = 0; i < view.rungList()->count(); ++i) checked += view.rungList()->item(i)->checkState() == Qt::Checked;
    QCOMPARE(checked, 1);
    QCOMPARE(view.rungList()->count(), 10);  // the engine's catalogue
  }

  // On a machine without a GPU the rungs that need one are marked before the
  // ladder starts, with the engine's own reason (tb::why_skipped, which the
  // ladder's plan records): a teacher's laptop showed ten checked rungs, six
  // of which the ladder then skipped. With a GPU none is marked.
  void rungsThisMachineSkipsAreMarked() {
    LadderView view;
    view.followBaseline(RunConfig::defaults(), QStringLiteral("test"));
    view.setDeviceBackend(QStringLiteral("cpu"));
    QListWidgetItem* amp = nullptr;
    QListWidgetItem* batch = nullptr;
    for (int i = 0; i < view.rungList()->count(); ++i) {
      QListWidgetItem* item = view.rungList()->item(i);
      if (item->data(Qt::UserRole).toString() == QLatin1String("amp")) amp = item;
      if (item->data(Qt::UserRole).toString() == QLatin1String("batch_x4")) batch = item;
    }
    QVERIFY(amp && batch);
    const QString why = view.rungSkipReason(QStringLiteral("amp"));
    QVERIFY2(why.startsWith(QLatin1String("amp: ")) && why.contains(QLatin1String("cpu")), qPrintable(why));
    QVERIFY2(amp->text().contains(QLatin1String("skipped here")), qPrintable(amp->text()));
    QVERIFY2(amp->toolTip().contains(why), qPrintable(amp->toolTip()));
    QCOMPARE(view.rungSkipReason(QStringLiteral("batch_x4")), QString());
    QVERIFY(!batch->text().contains(QLatin1String("skipped")));
    for (const char* id : {"h2d_uint8", "pinned", "channels_last", "cudnn_benchmark", "cuda_graphs"})
      QVERIFY2(!view.rungSkipReason(QString::fromLatin1(id)).isEmpty(), id);
    // The engine's plan for the same baseline skips the same rungs.
    json config = tb::validate_config(json::object(), "test");
    std::string all;
    for (const tb::RungDef& r : tb::rung_catalogue()) all += (all.empty() ? "" : ",") + r.id;
    config["ladder_rungs"] = all;
    for (const tb::PlannedRung& r : tb::plan_ladder(config, "cpu").rungs)
      if (!r.id.empty()) QCOMPARE(view.rungSkipReason(QString::fromStdString(r.id)).isEmpty(), r.skipped.empty());
    view.setDeviceBackend(QStringLiteral("cuda"));
    QVERIFY(view.rungSkipReason(QStringLiteral("amp")).isEmpty());
    QCOMPARE(amp->text(), QString::fromStdString(tb::find_rung("amp")->title));
  }

  void runsTheEnginesLadder() {
    LadderView view;
    view.resize(1400, 800);
    view.setDatabasePath(db());
    view.setEnginePath(QStringLiteral(TRAINBENCH_ENGINE_BIN));
    view.setBaseline(tinyBaseline());
    QSignalSpy done(&view, &LadderView::ladderFinished);
    QVERIFY(view.start());
    QVERIFY(!view.start());  // one at a time
    QVERIFY(done.wait(600000));
    QCOMPARE(done.at(0).at(1).toString(), QStringLiteral("finished"));
    const qint64 id = done.at(0).at(0).toLongLong();
    QVERIFY(id > 0);
    QCOMPARE(view.currentLadder(), id);
    QCOMPARE(view.tableWidget()->rowCount(), 2);
    QCOMPARE(view.tableWidget()->item(1, 0)->text(), QStringLiteral("+ 4 loader workers"));
    QVERIFY2(view.tableWidget()->item(1, 4)->text().contains(QLatin1Char('(')),
             qPrintable(view.tableWidget()->item(1, 4)->text()));  // samples/s with its min-max
    QCOMPARE(view.chart()->plottableCount(), 4);  // two bars, two error bars

    tb::RunStore store(db().toStdString());
    const auto ladder = store.get_ladder(id);
    QVERIFY(ladder);
    QCOMPARE(ladder->status, std::string("finished"));
    QCOMPARE(store.ladder_runs(id).size(), size_t(4));

    const QString csv = dir_.filePath(QStringLiteral("l.csv")), md = dir_.filePath(QStringLiteral("l.md")),
                  html = dir_.filePath(QStringLiteral("l.html"));
    QVERIFY(view.exportCsv(csv) && view.exportMarkdown(md) && view.exportHtml(html));
    auto text = [](const QString& p) {
      QFile f(p);
      return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString();
    };
    QVERIFY(text(csv).contains(QLatin1String("workers,\"+ 4 loader workers\",done")));
    QVERIFY(text(md).contains(QLatin1String("| + 4 loader workers | 32 |")));
    QVERIFY(QFile::exists(md + QStringLiteral(".png")));
    QVERIFY(text(html).contains(QLatin1String("data:image/png;base64,")));

    // A stored ladder comes back from the list.
    LadderView other;
    other.setDatabasePath(db());
    QVERIFY(other.showLadder(id));
    QCOMPARE(other.tableWidget()->rowCount(), 2);
    QVERIFY(!other.showLadder(id + 100));
  }

  // Issue 26, item 8: the empty accuracy plot had a -5..10 axis; "1
  // repeats"; "Cumulative (004's table)"; the verdict column was cut off at
  // 1366x768; the page did not say the baseline (it used the engine's
  // defaults, not the Set-up page's configuration).
  void ladderPageSaysWhatItMeasures() {
    auto labelsSay = [](QWidget* w, const QString& words) {
      for (const QLabel* l : w->findChildren<QLabel*>())
        if (l->text().contains(words)) return l->text();
      return QString();
    };
    {
      LadderView empty;
      const QCPRange y = empty.accuracyPlot()->yAxis->range();
      QVERIFY2(y.lower >= 0 && y.upper <= 1.05, qPrintable(QStringLiteral("%1..%2").arg(y.lower).arg(y.upper)));
    }
    // The ladder of runsTheEnginesLadder, stored again as a one-repeat ladder.
    qint64 one = 0;
    {
      tb::RunStore store(db().toStdString());
      const auto ladders = store.list_ladders();
      QVERIFY(!ladders.empty());
      tb::LadderRecord l = *store.get_ladder(ladders.front().id);
      l.result["repeats"] = 1;
      one = store.create_ladder(l);
      store.set_ladder_result(one, l.result);
      store.set_ladder_status(one, "finished");
    }
    MainWindow window(db());
    window.resize(1366, 768);
    QJsonObject c = window.currentConfig();
    c.insert(QStringLiteral("batch_size"), 96);
    window.setConfig(c);
    window.showPage(MainWindow::LadderPage);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    LadderView* view = window.ladderView();
    QVERIFY(view->showLadder(one));
    QTest::qWait(100);
    const QString status = labelsSay(view, QStringLiteral("Ladder #"));
    QVERIFY2(status.contains(QLatin1String("1 repeat of")), qPrintable(status));
    QVERIFY2(!status.contains(QLatin1String("004")), qPrintable(status));
    for (QComboBox* box : view->findChildren<QComboBox*>())
      for (int i = 0; i < box->count(); ++i) QVERIFY2(!box->itemText(i).contains(QLatin1String("004")), qPrintable(box->itemText(i)));
    const QCPRange y = view->accuracyPlot()->yAxis->range();  // no accuracy runs in this ladder
    QVERIFY2(y.lower >= 0 && y.upper <= 1.05, qPrintable(QStringLiteral("%1..%2").arg(y.lower).arg(y.upper)));
    QTableWidget* table = view->tableWidget();
    const int verdict = table->columnCount() - 1;
    QCOMPARE(table->horizontalHeaderItem(verdict)->text(), QStringLiteral("verdict"));
    QVERIFY2(table->columnViewportPosition(verdict) + table->columnWidth(verdict) <= table->viewport()->width(),
             qPrintable(QStringLiteral("the verdict ends at %1 of %2 px")
                            .arg(table->columnViewportPosition(verdict) + table->columnWidth(verdict))
                            .arg(table->viewport()->width())));
    // The baseline is the Set-up page's configuration, and the page says so.
    QCOMPARE(view->ladderConfig().value(QLatin1String("batch_size")).toInt(), 96);
    const QString baseline = labelsSay(view, QStringLiteral("Baseline"));
    QVERIFY2(baseline.contains(QLatin1String("Set-up page")) && baseline.contains(QLatin1String("96")),
             qPrintable(baseline));
    screenshot(&window, QStringLiteral("ladder-1366.png"));
  }

  // The Set-up page's "Queue ladder" is the front end: the Ladder page, started.
  void setupPageStartsTheEngineLadder() {
    MainWindow window(db());
    window.setEnginePath(QStringLiteral(TRAINBENCH_ENGINE_BIN));
    window.resize(1500, 950);
    window.setConfig(tinyBaseline());
    QSignalSpy done(window.ladderView(), &LadderView::ladderFinished);
    QVERIFY(window.queueLadder());
    QCOMPARE(window.findChild<QTabWidget*>()->currentWidget(), window.ladderView());
    QVERIFY(done.wait(600000));
    QCOMPARE(done.at(0).at(1).toString(), QStringLiteral("finished"));
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    screenshot(&window, QStringLiteral("ladder.png"));
  }

  // A run whose series show a debugging check gets that advice; applying it
  // re-runs through the engine and links the pair with the predicted bound.
  void advisorAppliesAndLinks() {
    std::string path = db().toStdString();
    int64_t before = 0;
    {
      tb::RunStore store(path);
      tb::RunRecord r;
      r.name = "checked";
      r.status = "finished";
      r.config = tb::validate_config({{"device", "cpu"}, {"train_limit", 256}, {"test_limit", 32},
                                      {"max_steps", 4}, {"batch_size", 32}, {"anomaly_check", true},
                                      {"name", "checked"}},
                                     "test");
      r.environment = {{"device", "cpu"}};
      r.summary = {{"samples_per_s", 100.0}};
      before = store.create_run(r);
      std::vector<tb::MetricPoint> points;
      for (int s = 1; s <= 20; ++s)
        for (auto [name, v] : std::vector<std::pair<const char*, double>>{
                 {"step_time_ms", 20}, {"data_wait_ms", 0.1}, {"forward_ms", 8}, {"backward_ms", 9},
                 {"optimizer_ms", 1.5}, {"other_ms", 1.4}})
          points.push_back({name, s, 0.02 * s, v});
      store.append_step_metrics(before, points);
    }
    AdvisorPanel panel;
    panel.resize(700, 500);
    panel.setDatabasePath(db());
    panel.setEnginePath(QStringLiteral(TRAINBENCH_ENGINE_BIN));
    QSignalSpy ready(&panel, &AdvisorPanel::adviceReady);
    panel.showRun(before);
    QVERIFY(ready.wait(60000));
    QCOMPARE(panel.rules(), QStringList{QStringLiteral("debug_checks")});
    QVERIFY(!panel.applyAndRerun(QStringLiteral("input_wait")));  // does not fire here
    QSignalSpy rerun(&panel, &AdvisorPanel::rerunFinished);
    QVERIFY(panel.applyAndRerun(QStringLiteral("debug_checks")));
    QVERIFY(rerun.wait(600000));
    QCOMPARE(rerun.at(0).at(1).toInt(), 0);
    QVERIFY(ready.wait(60000));  // refreshed with the outcome
    QCOMPARE(panel.reruns().size(), size_t(1));
    QCOMPARE(panel.reruns()[0]["rule"].get<std::string>(), std::string("debug_checks"));
    QVERIFY(panel.reruns()[0]["measured_speedup"].is_number());
    tb::RunStore store(path);
    const auto links = store.run_links(before);
    QCOMPARE(links.size(), size_t(1));
    const auto after = store.get_run(links[0].to_run);
    QVERIFY(after);
    QCOMPARE(after->config["anomaly_check"].get<bool>(), false);
    QCOMPARE(after->status, std::string("finished"));
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    screenshot(&panel, QStringLiteral("advisor.png"));
  }

  // Issue 26, item 5: "Apply and re-run" was offered for a CUDA run on a
  // machine without a GPU, and the re-run failed with
  // cudaErrorInsufficientDriver. The panel says the run needs a GPU.
  void advisorOffersNoRerunThisMachineCannotRun() {
    for (const auto& [id, name] : tb::available_devices())
      if (id.rfind("cuda", 0) == 0) QSKIP("this machine has a GPU: a CUDA run can be re-run here");
    const int64_t id = storeInputBoundRun(db(), "cuda:0");
    AdvisorPanel panel;
    panel.setDatabasePath(db());
    panel.setEnginePath(QStringLiteral(TRAINBENCH_ENGINE_BIN));
    QSignalSpy ready(&panel, &AdvisorPanel::adviceReady);
    panel.showRun(id);
    QVERIFY(ready.wait(60000));
    QVERIFY(panel.rules().contains(QStringLiteral("input_wait")));
    int offered = 0;
    for (const QPushButton* b : panel.findChildren<QPushButton*>())
      if (b->text() == QLatin1String("Apply and re-run")) {
        offered += b->isEnabled();
        QVERIFY2(b->toolTip().contains(QLatin1String("no GPU")), qPrintable(b->toolTip()));
      }
    QCOMPARE(offered, 0);
    bool said = false;
    for (const QLabel* l : panel.findChildren<QLabel*>()) said = said || l->text().contains(QLatin1String("cuda:0"));
    QVERIFY(said);
    QSignalSpy message(&panel, &AdvisorPanel::statusMessage);
    QVERIFY(!panel.applyAndRerun(QStringLiteral("input_wait")));
    QVERIFY(!panel.busy());
    QCOMPARE(message.size(), 1);
    QVERIFY2(message.at(0).at(0).toString().contains(QLatin1String("no GPU")), qPrintable(message.at(0).at(0).toString()));
  }

  // "Add to ladder": the run as the baseline, the rungs that make the advice.
  void advisorAddsToTheLadder() {
    const int64_t id = storeInputBoundRun(db(), "cpu");
    AdvisorPanel panel;
    panel.setDatabasePath(db());
    QSignalSpy ready(&panel, &AdvisorPanel::adviceReady);
    panel.showRun(id);
    QVERIFY(ready.wait(60000));
    QVERIFY(panel.rules().contains(QStringLiteral("input_wait")));
    const QJsonObject baseline = panel.ladderFor(QStringLiteral("input_wait"));
    QCOMPARE(baseline.value(QLatin1String("ladder_rungs")).toString(), QStringLiteral("workers"));
    QCOMPARE(baseline.value(QLatin1String("batch_size")).toInt(), 48);
    LadderView view;
    view.setBaseline(baseline);
    QCOMPARE(view.ladderConfig().value(QLatin1String("ladder_rungs")).toString(), QStringLiteral("workers"));
  }

  // Compare: time to target has a column (the repeats' spread is the compare view's own).
  void compareShowsTimeToTarget() {
    auto run = [](qint64 id, double ttt) {
      tb::RunRecord r;
      r.id = id;
      r.name = "run " + std::to_string(id);
      r.config = tb::validate_config({{"target_accuracy", 0.9}}, "test");
      r.summary = {{"samples_per_s", 100.0}};
      if (ttt > 0) r.summary["time_to_target_s"] = ttt;
      return RunSummary::fromRecord(r);
    };
    CompareSummaryModel model;
    model.setRuns({run(1, 12.5), run(2, 0)});
    QCOMPARE(model.headerData(CompareSummaryModel::TimeToTarget, Qt::Horizontal).toString().simplified(),
             QStringLiteral("Time to target"));
    QCOMPARE(model.index(0, CompareSummaryModel::TimeToTarget).data().toString(), QStringLiteral("12.5 s"));
    QCOMPARE(model.index(1, CompareSummaryModel::TimeToTarget).data().toString(), QStringLiteral("—"));
    model.setGroups({{run(3, 10.0), run(4, 12.0)}});  // repeats: the mean
    QCOMPARE(model.index(0, CompareSummaryModel::TimeToTarget).data().toString(), QStringLiteral("11.0 s"));
  }
};

QTEST_MAIN(TestLadderView)
#include "test_ladder_view.moc"
