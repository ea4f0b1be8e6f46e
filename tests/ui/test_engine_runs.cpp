// SPDX-License-Identifier: GPL-3.0-or-later
// Launching runs: the JSON-lines stream fills the dashboard's plots; Stop ends
// a run cleanly, Kill ends it at once; a crashed or killed engine leaves the
// GUI working, shows its last words and marks the run failed in the store.
// First against the fake engine (tests/ui/fake_engine.py), then through the
// real trainbench-engine.
#include <QDir>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QtTest>
#include <cmath>

#include "advisor_panel.h"
#include "engine/store/run_store.h"
#include "engine_process.h"
#include "live_plot.h"
#include "main_window.h"
#include "run_config.h"
#include "run_dashboard.h"
#include "run_history_model.h"
#include "run_history_view.h"
#include "run_queue.h"
#include "series_loader.h"

namespace {
struct Ended {
  EngineProcess* process = nullptr;
  QString status, message;
};

// Waits for the queue's next runEnded.
Ended waitForEnd(RunQueue* queue, int timeoutMs) {
  Ended result;
  QEventLoop loop;
  QTimer timer;
  timer.setSingleShot(true);
  QObject::connect(&timer, &QTimer::timeout, &loop, &QEventLoop::quit);
  auto c = QObject::connect(queue, &RunQueue::runEnded, &loop,
                            [&](EngineProcess* p, const QString& s, const QString& m) {
                              result = {p, s, m};
                              loop.quit();
                            });
  timer.start(timeoutMs);
  loop.exec();
  QObject::disconnect(c);
  return result;
}

int stepCount(RunDashboard* d, const QString& name) {
  auto it = d->series().step.find(name);
  return it == d->series().step.end() ? 0 : it->second.size();
}

QJsonObject shortRealConfig(const QString& name, int maxSteps) {
  QJsonObject c = RunConfig::defaults();
  c.insert(QStringLiteral("name"), name);
  c.insert(QStringLiteral("model"), QStringLiteral("fmnist-cnn"));
  c.insert(QStringLiteral("dataset"), QStringLiteral("fashion-mnist"));
  c.insert(QStringLiteral("data_dir"), QStringLiteral("/usr/share/datasets/fashion-mnist"));
  c.insert(QStringLiteral("train_limit"), maxSteps > 100 ? 0 : 512);
  c.insert(QStringLiteral("test_limit"), 256);
  c.insert(QStringLiteral("max_steps"), maxSteps);
  c.insert(QStringLiteral("batch_size"), 64);
  c.insert(QStringLiteral("device"), QStringLiteral("cpu"));
  return c;
}

// The last step the first run of db has in the store (0 while there is none yet).
qint64 storedSteps(const QString& db) {
  try {
    if (!QFileInfo::exists(db)) return 0;
    tb::RunStore store(db.toStdString(), tb::RunStore::Mode::ReadOnly);
    const auto runs = store.list_runs();
    if (runs.empty()) return 0;
    const auto points = store.step_series(runs.front().id, "step_time_ms");
    return points.empty() ? 0 : points.back().step;
  } catch (const std::exception&) {
    return 0;  // the engine is still creating the file
  }
}

tb::RunRecord storedRun(const QString& db, qint64 id) {
  tb::RunStore store(db.toStdString(), tb::RunStore::Mode::ReadOnly);
  auto run = store.get_run(id);
  return run ? *run : tb::RunRecord{};
}
}  // namespace

class TestEngineRuns : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    Q_INIT_RESOURCE(trainbench);
    QStandardPaths::setTestModeEnabled(true);
    QVERIFY(QFileInfo(QStringLiteral(TRAINBENCH_FAKE_ENGINE)).isExecutable());
  }

  void init() {
    qunsetenv("FAKE_MODE");
    qunsetenv("FAKE_STEPS");
    qunsetenv("FAKE_DELAY");
    QVERIFY(dir_.isValid());
    db_ = dir_.filePath(QStringLiteral("runs-%1.db").arg(QTest::currentTestFunction()));
  }

  // While a launched run goes on, its header says "step N of M" (M: the total
  // the engine announced at the start) and N follows the steps.
  void launchedRunShowsStepNOfM() {
    qputenv("FAKE_STEPS", "600");
    qputenv("FAKE_DELAY", "0.02");
    MainWindow window(db_);
    window.setEnginePath(QStringLiteral(TRAINBENCH_FAKE_ENGINE));
    window.launchNow();
    QTRY_COMPARE_WITH_TIMEOUT(window.dashboards()->count(), 1, 10000);
    auto* d = qobject_cast<RunDashboard*>(window.dashboards()->widget(0));
    const QRegularExpression progress(QStringLiteral("step (\\d+) of 600"));
    QTRY_VERIFY_WITH_TIMEOUT(progress.match(d->headerText()).captured(1).toInt() > 0, 10000);
    const int seen = progress.match(d->headerText()).captured(1).toInt();
    QCOMPARE(d->statusText(), QStringLiteral("running"));
    QTRY_VERIFY_WITH_TIMEOUT(progress.match(d->headerText()).captured(1).toInt() > seen, 10000);
    window.stopRun();
    QCOMPARE(waitForEnd(window.runQueue(), 20000).status, QStringLiteral("stopped"));
  }

  // A run that ended short of its planned steps says why in its header: the
  // target accuracy (the summary's target_reached) or an early end.
  void earlyEndIsExplainedInTheHeader() {
    for (const bool reached : {true, false}) {
      RunDashboard d;
      RunSeries series;
      series.runId = 7;
      for (int s = 1; s <= 40; ++s) series.step[QStringLiteral("step_time_ms")].append(s, 0, 0, 0, 1.0);
      d.setSeries(series);
      RunSummary run;
      run.id = 7;
      run.status = reached ? QStringLiteral("finished") : QStringLiteral("stopped");
      run.summary = QJsonObject{{QStringLiteral("total_steps"), 120}, {QStringLiteral("steps"), 40},
                                {QStringLiteral("target_reached"), reached}};
      d.setRun(run);
      QVERIFY2(d.headerText().contains(reached ? QLatin1String("target accuracy reached at step 40 of 120")
                                               : QLatin1String("ended at step 40 of 120")),
               qPrintable(d.headerText()));
    }
  }

  void fakeRunFillsTheDashboard() {
    MainWindow window(db_);
    window.setEnginePath(QStringLiteral(TRAINBENCH_FAKE_ENGINE));
    QJsonObject c = window.currentConfig();
    c.insert(QStringLiteral("name"), QStringLiteral("fake run"));
    window.setConfig(c);
    window.launchNow();
    QVERIFY(window.runQueue()->isBusy());
    const Ended end = waitForEnd(window.runQueue(), 20000);
    QCOMPARE(end.status, QStringLiteral("finished"));
    auto* d = qobject_cast<RunDashboard*>(window.dashboards()->widget(0));
    QVERIFY(d);
    d->refreshNow();
    QCOMPARE(stepCount(d, QStringLiteral("step_time_ms")), 20);
    QVERIFY(d->plot(QStringLiteral("Step time")));
    QCOMPARE(d->plot(QStringLiteral("Step time"))->curveCount(), 1);
    QCOMPARE(d->plot(QStringLiteral("Step-time breakdown (stacked)"))->curveCount(), 5);
    QCOMPARE(d->plot(QStringLiteral("Loss"))->curveCount(), 3);  // step loss + epoch train/test
    QVERIFY(d->plot(QStringLiteral("Accuracy")));
    QVERIFY(d->plot(QStringLiteral("Learning rate")));
    QVERIFY2(d->plot(QStringLiteral("My custom metric")), "unknown series get a plot of their own, titled in words");
    QVERIFY(!d->plot(QStringLiteral("Memory")));  // no such series: no empty plot
    QVERIFY(d->plot(QStringLiteral("Step time"))->displayedPointCount() >= 20);
    QCOMPARE(d->statusText(), QStringLiteral("finished"));
    QCOMPARE(d->series().stepsPerEpoch, 10);
    QCOMPARE(d->series().step.at(QStringLiteral("loss")).x(XAxis::Epoch).last(), 2.0);
    // Every plot exports in the three formats.
    QTemporaryDir out;
    QString error;
    QCOMPARE(d->exportPlots(out.path(), &error), 3 * int(d->plots().size()));
    QVERIFY2(error.isEmpty(), qPrintable(error));
    QCOMPARE(QDir(out.path()).entryList({QStringLiteral("*.svg")}).size(), int(d->plots().size()));  // step 20 of 10 per epoch
    // A second export into the same folder never overwrites the first.
    QCOMPARE(d->exportPlots(out.path(), &error), 3 * int(d->plots().size()));
    QCOMPARE(QDir(out.path()).entryList({QStringLiteral("*.svg")}).size(), 2 * int(d->plots().size()));
    // The result strip shows what the engine summarized.
    QVERIFY(d->hasResult());
    QVERIFY2(d->resultText().contains(QLatin1String("Median step: 11.0 ms")), qPrintable(d->resultText()));
  }

  // With eval_every_steps, the evaluations between epochs are curves of the
  // Loss and Accuracy panels while the run goes on, not plots of their own.
  void evaluationsBetweenEpochsArePlotted() {
    MainWindow window(db_);
    window.setEnginePath(QStringLiteral(TRAINBENCH_FAKE_ENGINE));
    QJsonObject c = window.currentConfig();
    c.insert(QStringLiteral("eval_every_steps"), 5);
    window.setConfig(c);
    window.launchNow();
    QCOMPARE(waitForEnd(window.runQueue(), 20000).status, QStringLiteral("finished"));
    auto* d = qobject_cast<RunDashboard*>(window.dashboards()->widget(0));
    QVERIFY(d);
    d->refreshNow();
    QCOMPARE(stepCount(d, QStringLiteral("test_accuracy")), 4);  // steps 5, 10, 15, 20
    for (const QString& panel : {QStringLiteral("Accuracy"), QStringLiteral("Loss")})
      QVERIFY2(d->plot(panel)->curveLabels().contains(QStringLiteral("test (evaluations)")),
               qPrintable(d->plot(panel)->curveLabels().join(QLatin1String(", "))));
    QVERIFY(!d->plot(QStringLiteral("Test accuracy")));
  }

  // Ended runs' tabs close all at once; a run still going keeps its tab.
  void endedRunsTabsCloseAtOnce() {
    MainWindow window(db_);
    window.setEnginePath(QStringLiteral(TRAINBENCH_FAKE_ENGINE));
    qputenv("FAKE_STEPS", "5");
    window.launchNow();
    window.launchNow();
    QCOMPARE(waitForEnd(window.runQueue(), 20000).status, QStringLiteral("finished"));
    QCOMPARE(waitForEnd(window.runQueue(), 20000).status, QStringLiteral("finished"));
    qputenv("FAKE_STEPS", "100000");
    window.launchNow();  // still running while we close
    QCOMPARE(window.dashboards()->count(), 3);
    QCOMPARE(window.closeDashboards(), 2);
    QCOMPARE(window.dashboards()->count(), 1);
    QVERIFY(!window.closeDashboard(0));  // a live run keeps its dashboard
    window.killRun();
    QCOMPARE(waitForEnd(window.runQueue(), 20000).status, QStringLiteral("failed"));
    QVERIFY(window.closeDashboard(0));
  }

  void queueRunsOneAfterAnother() {
    RunQueue queue;
    queue.setEnginePath(QStringLiteral(TRAINBENCH_FAKE_ENGINE));
    queue.setDatabasePath(db_);
    QSignalSpy launched(&queue, &RunQueue::launched);
    QSignalSpy ended(&queue, &RunQueue::runEnded);
    qputenv("FAKE_STEPS", "5");
    for (int i = 0; i < 3; ++i) queue.enqueue(QJsonObject{{"name", QStringLiteral("q%1").arg(i)}});
    QCOMPARE(launched.count(), 1);
    QCOMPARE(queue.pending().size(), 2);
    QTRY_COMPARE_WITH_TIMEOUT(ended.count(), 3, 30000);
    QCOMPARE(launched.count(), 3);
    for (const auto& args : ended) QCOMPARE(args.at(1).toString(), QStringLiteral("finished"));
  }

  void crashedEngineLeavesGuiWorkingAndRunFailed() {
    MainWindow window(db_);
    window.setEnginePath(QStringLiteral(TRAINBENCH_FAKE_ENGINE));
    qputenv("FAKE_MODE", "crash");
    window.launchNow();
    const Ended end = waitForEnd(window.runQueue(), 20000);
    QCOMPARE(end.status, QStringLiteral("failed"));
    QVERIFY2(end.message.contains(QLatin1String("illegal memory access")), qPrintable(end.message));
    QVERIFY2(end.message.contains(QLatin1String("crashed")), qPrintable(end.message));
    // The fake engine never wrote the run: the GUI recorded it as failed.
    QVERIFY(end.process->runId() > 0);
    const tb::RunRecord run = storedRun(db_, end.process->runId());
    QCOMPARE(QString::fromStdString(run.status), QStringLiteral("failed"));
    QVERIFY(QString::fromStdString(run.error).contains(QLatin1String("illegal memory access")));
    auto* d = qobject_cast<RunDashboard*>(window.dashboards()->widget(0));
    QCOMPARE(d->statusText(), QStringLiteral("failed"));
    QCOMPARE(stepCount(d, QStringLiteral("step_time_ms")), 10);  // what came before the crash stays
    // The GUI keeps working: the history shows the failure, the next run runs.
    window.historyView()->reload();
    QTRY_COMPARE(window.historyView()->model()->rowCount(), 1);
    qunsetenv("FAKE_MODE");
    window.launchNow();
    QCOMPARE(waitForEnd(window.runQueue(), 20000).status, QStringLiteral("finished"));
  }

  void stopEndsTheRunCleanly() {
    RunQueue queue;
    queue.setEnginePath(QStringLiteral(TRAINBENCH_FAKE_ENGINE));
    queue.setDatabasePath(db_);
    qputenv("FAKE_STEPS", "100000");
    qputenv("FAKE_DELAY", "0.01");
    int steps = 0;
    connect(&queue, &RunQueue::launched, this, [&](EngineProcess* p) {
      connect(p, &EngineProcess::stepReceived, this, [&] { ++steps; });
    });
    queue.enqueue(QJsonObject{{"name", "to stop"}});
    QTRY_VERIFY_WITH_TIMEOUT(steps >= 5, 10000);
    queue.stopCurrent();
    QCOMPARE(queue.current()->state(), EngineProcess::State::Stopping);
    const Ended end = waitForEnd(&queue, 10000);
    QCOMPARE(end.status, QStringLiteral("stopped"));
  }

  void killEndsAnEngineThatIgnoresStop() {
    RunQueue queue;
    queue.setEnginePath(QStringLiteral(TRAINBENCH_FAKE_ENGINE));
    queue.setDatabasePath(db_);
    qputenv("FAKE_MODE", "hang");
    qputenv("FAKE_STEPS", "100000");
    int steps = 0;
    connect(&queue, &RunQueue::launched, this, [&](EngineProcess* p) {
      connect(p, &EngineProcess::stepReceived, this, [&] { ++steps; });
    });
    queue.enqueue(QJsonObject{{"name", "stubborn"}});
    QTRY_VERIFY_WITH_TIMEOUT(steps >= 3, 10000);
    queue.stopCurrent();
    QTest::qWait(500);
    QVERIFY(queue.isBusy());  // SIGTERM ignored
    queue.killCurrent();
    const Ended end = waitForEnd(&queue, 10000);
    QCOMPARE(end.status, QStringLiteral("failed"));
    QVERIFY2(end.message.contains(QLatin1String("killed")), qPrintable(end.message));
    QCOMPARE(QString::fromStdString(storedRun(db_, end.process->runId()).status), QStringLiteral("failed"));
  }

  void missingEngineFailsWithReason() {
    RunQueue queue;
    queue.setEnginePath(dir_.filePath(QStringLiteral("no-such-engine")));
    queue.setDatabasePath(db_);
    queue.enqueue(QJsonObject{{"name", "nowhere"}});
    const Ended end = waitForEnd(&queue, 10000);
    QCOMPARE(end.status, QStringLiteral("failed"));
    QVERIFY(end.message.contains(QLatin1String("could not start")));
  }

  void realEngineShortRunFillsPlots() {
    if (!QFileInfo(QStringLiteral(TRAINBENCH_ENGINE_BIN)).isExecutable())
      QSKIP("trainbench-engine was not built (" TRAINBENCH_ENGINE_BIN ")");
    if (!QFileInfo::exists(QStringLiteral("/usr/share/datasets/fashion-mnist")))
      QSKIP("Fashion-MNIST is not installed (package dataset-fashion-mnist)");
    MainWindow window(db_);
    window.setEnginePath(QStringLiteral(TRAINBENCH_ENGINE_BIN));
    window.setConfig(shortRealConfig(QStringLiteral("real short run"), 8));
    window.launchNow();
    const Ended end = waitForEnd(window.runQueue(), 180000);
    QVERIFY2(end.status == QLatin1String("finished"), qPrintable(end.status + QLatin1Char(' ') + end.message));
    auto* d = qobject_cast<RunDashboard*>(window.dashboards()->widget(0));
    d->refreshNow();
    QCOMPARE(stepCount(d, QStringLiteral("step_time_ms")), 8);
    QCOMPARE(stepCount(d, QStringLiteral("loss")), 8);
    for (const char* title : {"Step time", "Samples per second", "Step-time breakdown (stacked)", "Loss", "Accuracy",
                              "Learning rate"}) {
      LivePlot* p = d->plot(QString::fromLatin1(title));
      QVERIFY2(p && p->displayedPointCount() > 0, title);
    }
    QVERIFY(d->series().epoch.count(QStringLiteral("test_accuracy")) == 1);
    QVERIFY(end.process->runId() > 0);
    // The result strip: the headline figures of the finished run.
    QVERIFY(d->hasResult());
    const QString result = d->resultText();
    for (const char* word : {"Test accuracy", " %", "Median step", " ms", "samples/s", "Peak memory", "MiB", "Wall time"})
      QVERIFY2(result.contains(QLatin1String(word)), qPrintable(result));
    QVERIFY2(!result.contains(QStringLiteral("—")), qPrintable(result));  // every figure known
    // Issue 26, item 4: the finished run has its Advisor tab at once (it
    // had one only when opened again from the history).
    AdvisorPanel* advisor = nullptr;
    for (int i = 0; i < d->bottomTabs()->count(); ++i)
      if (d->bottomTabs()->tabText(i) == QLatin1String("Advisor")) advisor = qobject_cast<AdvisorPanel*>(d->bottomTabs()->widget(i));
    QVERIFY(advisor);
    QCOMPARE(advisor->runId(), end.process->runId());
    QTRY_VERIFY_WITH_TIMEOUT(!advisor->busy(), 30000);
    // The store has the run, finished, with its series and summary.
    const tb::RunRecord run = storedRun(db_, end.process->runId());
    QCOMPARE(QString::fromStdString(run.status), QStringLiteral("finished"));
    const RunSeries loaded = SeriesLoader::load(db_, end.process->runId());
    QCOMPARE(loaded.step.at(QStringLiteral("step_time_ms")).size(), 8);
    RunHistoryModel model;
    QVERIFY(model.reload(db_));
    QCOMPARE(model.rowCount(), 1);
    QVERIFY(!std::isnan(model.runs().first().medianStepMs));
    QVERIFY(!std::isnan(model.runs().first().samplesPerSecond));
    QVERIFY(!std::isnan(model.runs().first().finalAccuracy));
  }

  // A run without a name is named by the engine (model and batch size); the
  // workbench shows the same name in the queue and the run's tab before the
  // engine reports it, from the same rule (tb::default_run_name). It used to
  // name every run "run".
  void unnamedRunIsNamedByModelAndBatch() {
    if (!QFileInfo(QStringLiteral(TRAINBENCH_ENGINE_BIN)).isExecutable())
      QSKIP("trainbench-engine was not built (" TRAINBENCH_ENGINE_BIN ")");
    if (!QFileInfo::exists(QStringLiteral("/usr/share/datasets/fashion-mnist")))
      QSKIP("Fashion-MNIST is not installed (package dataset-fashion-mnist)");
    QJsonObject c = shortRealConfig(QString(), 3);
    QCOMPARE(RunSummary::nameOf(c), QStringLiteral("fmnist-cnn b64"));
    c.insert(QStringLiteral("name"), QStringLiteral("  "));
    QCOMPARE(RunSummary::nameOf(c), QStringLiteral("fmnist-cnn b64"));
    MainWindow window(db_);
    window.setEnginePath(QStringLiteral(TRAINBENCH_ENGINE_BIN));
    window.setConfig(shortRealConfig(QString(), 3));
    window.launchNow();
    QVERIFY(window.runQueue()->current());
    QCOMPARE(window.runQueue()->current()->name(), QStringLiteral("fmnist-cnn b64"));
    const Ended end = waitForEnd(window.runQueue(), 180000);
    QVERIFY2(end.status == QLatin1String("finished"), qPrintable(end.status + QLatin1Char(' ') + end.message));
    QCOMPARE(QString::fromStdString(storedRun(db_, end.process->runId()).name), QStringLiteral("fmnist-cnn b64"));
    QCOMPARE(window.dashboards()->tabText(0), QStringLiteral("fmnist-cnn b64 (#%1)").arg(end.process->runId()));
  }

  // A run that fails before training (here: no data folder) is one attempt
  // and one row in the store, failed, with the engine's reason in words.
  void realEngineFailingBeforeTrainingIsStoredOnce() {
    if (!QFileInfo(QStringLiteral(TRAINBENCH_ENGINE_BIN)).isExecutable())
      QSKIP("trainbench-engine was not built (" TRAINBENCH_ENGINE_BIN ")");
    MainWindow window(db_);
    window.setEnginePath(QStringLiteral(TRAINBENCH_ENGINE_BIN));
    QJsonObject c = shortRealConfig(QStringLiteral("no data"), 8);
    const QString missing = dir_.filePath(QStringLiteral("no-such-folder"));
    c.insert(QStringLiteral("data_dir"), missing);
    window.setConfig(c);
    window.launchNow();
    QVERIFY(!window.runQueue()->isBusy());  // the Set up page refuses it (test_setup_page)
    // A queued run whose folder went away before its turn reaches the engine.
    window.runQueue()->enqueue(c);
    const Ended end = waitForEnd(window.runQueue(), 60000);
    QCOMPARE(end.status, QStringLiteral("failed"));
    tb::RunStore store(db_.toStdString(), tb::RunStore::Mode::ReadOnly);
    const auto runs = store.list_runs();
    QCOMPARE(int(runs.size()), 1);
    QCOMPARE(QString::fromStdString(runs.front().status), QStringLiteral("failed"));
    QVERIFY2(QString::fromStdString(runs.front().error).contains(missing), runs.front().error.c_str());
    QCOMPARE(end.process->runId(), qint64(runs.front().id));
    // The dashboard says why in words, once, in its header; no result strip.
    auto* d = qobject_cast<RunDashboard*>(window.dashboards()->widget(0));
    QCOMPARE(d->statusText(), QStringLiteral("failed"));
    QVERIFY2(d->failureReason().contains(missing), qPrintable(d->failureReason()));
    QCOMPARE(d->headerText().count(missing), 1);
    QVERIFY(!d->hasResult());
  }

  // Issue 26, item 9: a run the engine refused named the temporary file the
  // workbench wrote ("/tmp/trainbench-config-XXXX.json: ..."), and an
  // unnamed run read "Run '' failed" and "(#9)". An unnamed run is shown by
  // the name the engine would give it (model and batch size).
  void engineRefusalNamesNoTemporaryFile() {
    if (!QFileInfo(QStringLiteral(TRAINBENCH_ENGINE_BIN)).isExecutable())
      QSKIP("trainbench-engine was not built (" TRAINBENCH_ENGINE_BIN ")");
    MainWindow window(db_);
    window.setEnginePath(QStringLiteral(TRAINBENCH_ENGINE_BIN));
    QJsonObject c = shortRealConfig(QString(), 8);
    c.insert(QStringLiteral("unknown_key"), true);  // the Set-up page never sends one: queued directly
    window.runQueue()->enqueue(c);
    const Ended end = waitForEnd(window.runQueue(), 60000);
    QCOMPARE(end.status, QStringLiteral("failed"));
    auto* d = qobject_cast<RunDashboard*>(window.dashboards()->widget(0));
    QVERIFY2(d->failureReason().contains(QLatin1String("unknown key 'unknown_key'")), qPrintable(d->failureReason()));
    QVERIFY2(!d->failureReason().contains(QLatin1String("trainbench-config-")), qPrintable(d->failureReason()));
    QVERIFY2(d->failureReason().contains(QLatin1String("the run's configuration")), qPrintable(d->failureReason()));
    const QString message = window.statusBar()->currentMessage();
    QVERIFY2(message.startsWith(QLatin1String("Run 'fmnist-cnn b64' failed")), qPrintable(message));
    QVERIFY2(!message.contains(QLatin1String("trainbench-config-")), qPrintable(message));
    QVERIFY2(window.dashboards()->tabText(0).startsWith(QLatin1String("fmnist-cnn b64")),
             qPrintable(window.dashboards()->tabText(0)));
  }

  // A run started from the command line against the same store is followed
  // live: its plots keep growing, its true status shows, and Stop (SIGTERM to
  // the pid the store records) ends it as stopped.
  void commandLineRunIsFollowedLiveAndStopped() {
    if (!QFileInfo(QStringLiteral(TRAINBENCH_ENGINE_BIN)).isExecutable())
      QSKIP("trainbench-engine was not built (" TRAINBENCH_ENGINE_BIN ")");
    if (!QFileInfo::exists(QStringLiteral("/usr/share/datasets/fashion-mnist")))
      QSKIP("Fashion-MNIST is not installed (package dataset-fashion-mnist)");
    QProcess cli;  // not through the workbench: as a shell would start it
    QVERIFY(startFromCommandLine(&cli, QStringLiteral("from the command line")));
    QTRY_VERIFY_WITH_TIMEOUT(storedSteps(db_) >= 5, 120000);

    MainWindow window(db_);
    window.historyView()->reload();
    QTRY_COMPARE(window.historyView()->model()->rowCount(), 1);
    const qint64 id = window.historyView()->model()->runs().first().id;
    window.openRun(id);
    auto* d = qobject_cast<RunDashboard*>(window.dashboards()->widget(0));
    QTRY_VERIFY_WITH_TIMEOUT(stepCount(d, QStringLiteral("step_time_ms")) > 0, 10000);
    const int first = stepCount(d, QStringLiteral("step_time_ms"));
    // New metric rows keep arriving from SQLite: no frozen snapshot.
    QTRY_VERIFY_WITH_TIMEOUT(stepCount(d, QStringLiteral("step_time_ms")) > first + 10, 60000);
    QCOMPARE(d->statusText(), QStringLiteral("running"));
    // How far it is, with the total the engine stored at the start (max_steps here).
    const QRegularExpressionMatch progress =
        QRegularExpression(QStringLiteral("step (\\d+) of 20000")).match(d->headerText());
    QVERIFY2(progress.hasMatch() && progress.captured(1).toInt() > first, qPrintable(d->headerText()));
    QTRY_VERIFY_WITH_TIMEOUT(d->canStop(), 5000);
    d->requestStop();
    QVERIFY(cli.waitForFinished(60000));
    QCOMPARE(cli.exitCode(), 130);  // the engine saved and stopped
    QTRY_COMPARE_WITH_TIMEOUT(d->statusText(), QStringLiteral("stopped"), 10000);
    QVERIFY(d->hasResult());
    QVERIFY(!d->canStop());
    QCOMPARE(QString::fromStdString(storedRun(db_, id).status), QStringLiteral("stopped"));
    // Everything the engine stored is on the dashboard.
    tb::RunStore store(db_.toStdString(), tb::RunStore::Mode::ReadOnly);
    QCOMPARE(stepCount(d, QStringLiteral("step_time_ms")), int(store.step_series(id, "step_time_ms").size()));
  }

  // A followed run whose engine is gone from this host (killed) shows as
  // interrupted, not as a frozen "running".
  void followedRunWhoseEngineDiedIsInterrupted() {
    if (!QFileInfo(QStringLiteral(TRAINBENCH_ENGINE_BIN)).isExecutable())
      QSKIP("trainbench-engine was not built (" TRAINBENCH_ENGINE_BIN ")");
    if (!QFileInfo::exists(QStringLiteral("/usr/share/datasets/fashion-mnist")))
      QSKIP("Fashion-MNIST is not installed (package dataset-fashion-mnist)");
    QProcess cli;
    QVERIFY(startFromCommandLine(&cli, QStringLiteral("killed outside")));
    QTRY_VERIFY_WITH_TIMEOUT(storedSteps(db_) >= 5, 120000);
    MainWindow window(db_);
    window.openRun(1);
    auto* d = qobject_cast<RunDashboard*>(window.dashboards()->widget(0));
    QTRY_COMPARE_WITH_TIMEOUT(d->statusText(), QStringLiteral("running"), 10000);
    cli.kill();
    QVERIFY(cli.waitForFinished(10000));
    QTRY_COMPARE_WITH_TIMEOUT(d->statusText(), QStringLiteral("interrupted"), 10000);
    QVERIFY2(d->headerText().contains(QLatin1String("ended without recording the end of the run")), qPrintable(d->headerText()));
  }

  void realEngineKilledMidRunIsMarkedFailed() {
    if (!QFileInfo(QStringLiteral(TRAINBENCH_ENGINE_BIN)).isExecutable())
      QSKIP("trainbench-engine was not built (" TRAINBENCH_ENGINE_BIN ")");
    if (!QFileInfo::exists(QStringLiteral("/usr/share/datasets/fashion-mnist")))
      QSKIP("Fashion-MNIST is not installed (package dataset-fashion-mnist)");
    MainWindow window(db_);
    window.setEnginePath(QStringLiteral(TRAINBENCH_ENGINE_BIN));
    window.setConfig(shortRealConfig(QStringLiteral("real killed run"), 5000));
    int steps = 0;
    connect(window.runQueue(), &RunQueue::launched, this, [&](EngineProcess* p) {
      connect(p, &EngineProcess::stepReceived, this, [&] { ++steps; });
    });
    window.launchNow();
    QTRY_VERIFY_WITH_TIMEOUT(steps >= 2, 120000);
    const qint64 runId = window.runQueue()->current()->runId();
    QVERIFY(runId > 0);
    window.killRun();
    const Ended end = waitForEnd(window.runQueue(), 30000);
    QCOMPARE(end.status, QStringLiteral("failed"));
    const tb::RunRecord run = storedRun(db_, runId);
    QCOMPARE(QString::fromStdString(run.status), QStringLiteral("failed"));
    QVERIFY2(QString::fromStdString(run.error).contains(QLatin1String("killed")), run.error.c_str());
    auto* d = qobject_cast<RunDashboard*>(window.dashboards()->widget(0));
    QCOMPARE(d->statusText(), QStringLiteral("failed"));
    QVERIFY(stepCount(d, QStringLiteral("step_time_ms")) >= 2);
    // Still working: the history lists it as failed and a new run completes.
    window.historyView()->reload();
    QTRY_COMPARE(window.historyView()->model()->runs().value(0).status, QStringLiteral("failed"));
    window.setConfig(shortRealConfig(QStringLiteral("after the kill"), 3));
    window.launchNow();
    QCOMPARE(waitForEnd(window.runQueue(), 180000).status, QStringLiteral("finished"));
  }

  void realEngineStopIsSavedAsStopped() {
    if (!QFileInfo(QStringLiteral(TRAINBENCH_ENGINE_BIN)).isExecutable())
      QSKIP("trainbench-engine was not built (" TRAINBENCH_ENGINE_BIN ")");
    if (!QFileInfo::exists(QStringLiteral("/usr/share/datasets/fashion-mnist")))
      QSKIP("Fashion-MNIST is not installed (package dataset-fashion-mnist)");
    RunQueue queue;
    queue.setEnginePath(QStringLiteral(TRAINBENCH_ENGINE_BIN));
    queue.setDatabasePath(db_);
    int steps = 0;
    connect(&queue, &RunQueue::launched, this, [&](EngineProcess* p) {
      connect(p, &EngineProcess::stepReceived, this, [&] { ++steps; });
    });
    queue.enqueue(shortRealConfig(QStringLiteral("real stopped run"), 5000));
    QTRY_VERIFY_WITH_TIMEOUT(steps >= 2, 120000);
    const qint64 runId = queue.current()->runId();
    queue.stopCurrent();
    const Ended end = waitForEnd(&queue, 60000);
    QVERIFY2(end.status == QLatin1String("stopped"), qPrintable(end.status + QLatin1Char(' ') + end.message));
    QCOMPARE(QString::fromStdString(storedRun(db_, runId).status), QStringLiteral("stopped"));
  }

 private:
  // `trainbench-engine run` on db_ as a terminal would start it (a long run).
  bool startFromCommandLine(QProcess* cli, const QString& name) {
    QFile config(dir_.filePath(name + QStringLiteral(".json")));
    if (!config.open(QIODevice::WriteOnly)) return false;
    config.write(QJsonDocument(shortRealConfig(name, 20000)).toJson());
    config.close();
    cli->start(QStringLiteral(TRAINBENCH_ENGINE_BIN),
               {QStringLiteral("run"), QStringLiteral("--config"), config.fileName(), QStringLiteral("--db"), db_,
                QStringLiteral("--quiet")});
    return cli->waitForStarted();
  }

  QTemporaryDir dir_;
  QString db_;
};

QTEST_MAIN(TestEngineRuns)
#include "test_engine_runs.moc"
