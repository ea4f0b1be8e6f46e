// SPDX-License-Identifier: GPL-3.0-or-later
// Launching runs: the JSON-lines stream fills the dashboard's plots; Stop ends
// a run cleanly, Kill ends it at once; a crashed or killed engine leaves the
// GUI working, shows its last words and marks the run failed in the store.
// First against the fake engine (tests/ui/fake_engine.py), then through the
// real trainbench-engine.
#include <QDir>
#include <QFileInfo>
#include <QJsonObject>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>
#include <cmath>

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
    QVERIFY2(d->plot(QStringLiteral("my_custom_metric")), "unknown series get a plot of their own");
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
    QCOMPARE(window.historyView()->model()->rowCount(), 1);
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
    QCOMPARE(window.historyView()->model()->runs().first().status, QStringLiteral("failed"));
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
  QTemporaryDir dir_;
  QString db_;
};

QTEST_MAIN(TestEngineRuns)
#include "test_engine_runs.moc"
