// SPDX-License-Identifier: GPL-3.0-or-later
// The workbench's side of ddp: runs with parallel: ddp and processes > 1
// start through mpirun (with a clear failure when it is missing), and
// Compare's scaling view plots samples/s against processes with the ideal
// line.
#include <QtTest>

#include <unistd.h>

#include "engine/parallel/launch.h"
#include "engine/store/run_store.h"
#include "tests/engine/mpi_slot.h"
#include "compare_view.h"
#include "engine_process.h"
#include "parallel_launch.h"
#include "scaling_chart.h"

namespace {

RunSummary run(qint64 id, int processes, double samplesPerSecond) {
  RunSummary r;
  r.id = id;
  r.name = QStringLiteral("fmnist-cnn x%1").arg(processes);
  r.samplesPerSecond = samplesPerSecond;
  if (processes > 0) r.environment.insert(QStringLiteral("world_size"), processes);
  return r;
}

}  // namespace

class TestParallelUi : public QObject {
  Q_OBJECT

 private slots:
  void withoutDdpTheEngineStartsItself() {
    const QStringList args{QStringLiteral("run"), QStringLiteral("--config"), QStringLiteral("c.json")};
    for (const QJsonObject& config :
         {QJsonObject{}, QJsonObject{{"processes", 4}}, QJsonObject{{"parallel", "ddp"}, {"processes", 1}}}) {
      const EngineLaunch l = engineLaunch(QStringLiteral("/x/trainbench-engine"), args, config);
      QVERIFY(l.error.isEmpty());
      QCOMPARE(l.program, QStringLiteral("/x/trainbench-engine"));
      QCOMPARE(l.arguments, args);
      QCOMPARE(l.processes, 1);
    }
  }

  void ddpStartsThroughMpirun() {
    qputenv("TRAINBENCH_MPIRUN", "/bin/true");
    const EngineLaunch l = engineLaunch(QStringLiteral("/x/trainbench-engine"), {QStringLiteral("run")},
                                        QJsonObject{{"parallel", "ddp"}, {"processes", 3}});
    qunsetenv("TRAINBENCH_MPIRUN");
    QVERIFY(l.error.isEmpty());
    QCOMPARE(l.program, QStringLiteral("/bin/true"));
    QCOMPARE(l.arguments, (QStringList{"-np", "3", "/x/trainbench-engine", "run"}));
    QCOMPARE(l.environment.contains(QStringLiteral("OMPI_ALLOW_RUN_AS_ROOT")), geteuid() == 0);
  }

  // No mpirun: the run fails at once with a message that says what to install.
  void missingMpirunFailsTheRunClearly() {
    const QByteArray path = qgetenv("PATH");
    qputenv("PATH", "/nonexistent");
    QTemporaryDir dir;
    EngineProcess p(QStringLiteral(TRAINBENCH_ENGINE_BIN), dir.filePath(QStringLiteral("runs.db")),
                    QJsonObject{{"parallel", "ddp"}, {"processes", 2}});
    QSignalSpy ended(&p, &EngineProcess::ended);
    p.start();
    qputenv("PATH", path);
    QCOMPARE(ended.size(), 1);
    QCOMPARE(ended[0][0].toString(), QStringLiteral("failed"));
    QVERIFY2(ended[0][1].toString().contains(QLatin1String("mpirun was not found on PATH")),
             qPrintable(ended[0][1].toString()));
  }

  // The real engine, two processes through mpirun, from the workbench.
  void ddpRunFromTheWorkbench() {
    NEED_CPU_DDP();
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("runs.db"));
    EngineProcess p(QStringLiteral(TRAINBENCH_ENGINE_BIN), db,
                    QJsonObject{{"parallel", "ddp"}, {"processes", 2}, {"device", "cpu"},
                                {"max_steps", 3}, {"batch_size", 8}, {"train_limit", 256},
                                {"test_limit", 32}});
    QSignalSpy ended(&p, &EngineProcess::ended);
    QSignalSpy started(&p, &EngineProcess::runStarted);
    p.start();
    QVERIFY(ended.wait(120000));
    QCOMPARE(ended[0][0].toString(), QStringLiteral("finished"));
    QCOMPARE(started.size(), 1);  // one run_started: rank 0's
    tb::RunStore store(db.toStdString(), tb::RunStore::Mode::ReadOnly);
    const auto runs = store.list_runs();
    QCOMPARE(runs.size(), size_t(1));
    QCOMPARE(runs[0].environment.value("world_size", 0), 2);
  }

  // Stop from the workbench: SIGTERM to mpirun reaches every rank, they agree
  // on the last step, and the run ends "stopped" (mpirun itself exits 1).
  void stoppingADdpRunFromTheWorkbench() {
    NEED_CPU_DDP();
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("runs.db"));
    EngineProcess p(QStringLiteral(TRAINBENCH_ENGINE_BIN), db,
                    QJsonObject{{"parallel", "ddp"}, {"processes", 2}, {"device", "cpu"},
                                {"max_steps", 100000}, {"epochs", 1000}, {"batch_size", 8},
                                {"train_limit", 512}, {"test_limit", 32}});
    QSignalSpy ended(&p, &EngineProcess::ended);
    QSignalSpy steps(&p, &EngineProcess::stepReceived);
    p.start();
    QVERIFY(steps.wait(120000));
    p.stop();
    QVERIFY(ended.wait(60000));
    tb::RunStore store(db.toStdString(), tb::RunStore::Mode::ReadOnly);
    QVERIFY2(ended[0][0].toString() == QLatin1String("stopped"),
             qPrintable(ended[0][1].toString() + QStringLiteral(" | store: ") +
                        QString::fromStdString(store.list_runs().at(0).status + " " +
                                               store.list_runs().at(0).error)));
    QCOMPARE(QString::fromStdString(store.list_runs().at(0).status), QStringLiteral("stopped"));
  }

  void scalingChartPlotsThroughputAgainstProcesses() {
    ScalingChart chart;
    chart.setRuns({run(1, 1, 1000), run(2, 2, 1800), run(3, 4, 3000), run(4, 2, 1700)});
    QVERIFY(!chart.isHidden());
    QCOMPARE(chart.pointCount(), 3);  // the best run per process count
    QCOMPARE(chart.efficiencyAtLargest(), 0.75);
    // One process count (or runs recorded before ddp: world_size absent) shows nothing.
    chart.setRuns({run(5, 0, 900), run(6, 1, 1000)});
    QVERIFY(chart.isHidden());
    QCOMPARE(ScalingChart::processesOf(run(7, 0, 1)), 1);
    QTemporaryDir dir;
    chart.setRuns({run(1, 1, 1000), run(3, 4, 3000)});
    QVERIFY(chart.exportPng(dir.filePath(QStringLiteral("scaling.png")), 400, 300));
  }

  void compareShowsTheScalingView() {
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("runs.db"));
    { tb::RunStore store(db.toStdString()); }  // an empty store for the series loader
    CompareView view;
    view.setRuns(db, {run(1, 1, 1000), run(2, 2, 1900)});
    QVERIFY(view.scalingChart() && !view.scalingChart()->isHidden());
    view.setRuns(db, {run(1, 1, 1000), run(2, 1, 1900)});
    QVERIFY(view.scalingChart()->isHidden());
  }
};

QTEST_MAIN(TestParallelUi)
#include "test_parallel_ui.moc"
