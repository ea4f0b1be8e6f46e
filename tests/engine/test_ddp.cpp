// SPDX-License-Identifier: GPL-3.0-or-later
// ddp across processes, on the CPU over MPI, started the way users start it
// (mpirun; the command line comes from engine/parallel/launch.h, so as root
// and on 2 cores it carries Open MPI's run-as-root and oversubscribe
// variables):
// - two ranks train fmnist-cnn and their parameters after every step equal a
//   single process's on the concatenated batch (within float rounding of a
//   different summation order), and equal each other bit for bit;
// - bucketed and unbucketed all-reduces give identical parameters;
// - `mpirun -np 2 trainbench-engine run` records one run, with the parallel
//   metrics, from rank 0 only;
// - a rank killed mid-run ends the job within seconds, the run is marked
//   failed and the store stays intact.
#include <QtTest>

#include <signal.h>
#include <sqlite3.h>
#include <sys/types.h>

#include <cmath>
#include <fstream>

#include "engine/parallel/launch.h"
#include "tests/engine/mpi_slot.h"
#include "engine/store/run_store.h"

using namespace tb;

namespace {

// A QProcess running `mpirun -np N program args...` with the variables
// mpirun_command asks for.
void start_mpirun(QProcess& p, int processes, const std::string& program,
                  const std::vector<std::string>& args) {
  const MpirunCommand c = mpirun_command(processes, program, args);
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  for (const auto& [k, v] : c.env) env.insert(QString::fromStdString(k), QString::fromStdString(v));
  p.setProcessEnvironment(env);
  QStringList a;
  for (size_t i = 1; i < c.argv.size(); ++i) a << QString::fromStdString(c.argv[i]);
  p.start(QString::fromStdString(c.argv[0]), a);
}

std::vector<float> read_floats(const QString& path) {
  std::ifstream in(path.toStdString(), std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

// The children of `parent` whose environment says they are rank `rank`.
QList<pid_t> ranks_of(qint64 parent, int rank) {
  QList<pid_t> out;
  const QString needle = QStringLiteral("OMPI_COMM_WORLD_RANK=%1").arg(rank);
  for (const QString& entry : QDir(QStringLiteral("/proc")).entryList(QDir::Dirs)) {
    bool ok = false;
    const pid_t pid = entry.toInt(&ok);
    if (!ok) continue;
    QFile stat(QStringLiteral("/proc/%1/stat").arg(pid));
    if (!stat.open(QIODevice::ReadOnly)) continue;
    const QString s = QString::fromLatin1(stat.readAll());
    const QStringList fields = s.mid(s.lastIndexOf(QLatin1Char(')')) + 2).split(QLatin1Char(' '));
    if (fields.size() < 2 || fields[1].toLongLong() != parent) continue;
    QFile environ(QStringLiteral("/proc/%1/environ").arg(pid));
    if (!environ.open(QIODevice::ReadOnly)) continue;
    for (const QByteArray& var : environ.readAll().split('\0'))
      if (QString::fromLatin1(var) == needle) out << pid;
  }
  return out;
}

std::string integrity(const QString& db) {
  sqlite3* h = nullptr;
  sqlite3_open_v2(db.toUtf8().constData(), &h, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(h, "PRAGMA integrity_check", -1, &st, nullptr);
  std::string r = sqlite3_step(st) == SQLITE_ROW ? (const char*)sqlite3_column_text(st, 0) : "no row";
  sqlite3_finalize(st);
  sqlite3_close(h);
  return r;
}

}  // namespace

class TestDdp : public QObject {
  Q_OBJECT

 private slots:
  void ddpEqualsSingleProcessOnTheConcatenatedBatch() {
    NEED_CPU_DDP();
    QTemporaryDir dir;
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    start_mpirun(p, 2, TRAINBENCH_DDP_RANK_CHECK_BIN, {dir.path().toStdString()});
    QVERIFY(p.waitForFinished(600000));
    const QByteArray log = p.readAll();
    QVERIFY2(p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0, log.constData());

    auto file = [&](const QString& name) { return read_floats(dir.filePath(name)); };
    const std::vector<float> reference = file(QStringLiteral("params_reference.bin"));
    const int steps = 4;
    QVERIFY(!reference.empty() && reference.size() % steps == 0);
    const size_t P = reference.size() / steps;
    for (const char* mode : {"bucketed", "unbucketed", "per_rank_bn"}) {
      const auto r0 = file(QStringLiteral("params_%1_rank0.bin").arg(QLatin1String(mode)));
      const auto r1 = file(QStringLiteral("params_%1_rank1.bin").arg(QLatin1String(mode)));
      QCOMPARE(r0.size(), reference.size());
      // Every rank applies the same step to the same all-reduced gradients.
      QVERIFY2(r0 == r1, mode);
    }
    const auto bucketed = file(QStringLiteral("params_bucketed_rank0.bin"));
    const auto unbucketed = file(QStringLiteral("params_unbucketed_rank0.bin"));
    // Two ranks: each element's sum is a + b whatever the bucket: identical.
    QVERIFY(bucketed == unbucketed);

    // Against one process on the concatenated batch: the same data and
    // arithmetic, summed in another order (per-rank partial sums, then the
    // all-reduce): float rounding only.
    const double tolerance = 2e-6;  // absolute, on parameters of magnitude <= ~0.5
    const auto per_rank = file(QStringLiteral("params_per_rank_bn_rank0.bin"));
    for (int s = 0; s < steps; ++s) {
      double worst = 0, worst_per_rank = 0, largest = 0;
      for (size_t i = s * P; i < (s + 1) * P; ++i) {
        worst = std::max(worst, double(std::abs(bucketed[i] - reference[i])));
        worst_per_rank = std::max(worst_per_rank, double(std::abs(per_rank[i] - reference[i])));
        largest = std::max(largest, double(std::abs(reference[i])));
      }
      qInfo("step %d: worst |ddp - single| %.3g (tolerance %.1g, largest parameter %.3g); "
            "per-rank batch norm differs by up to %.3g",
            s + 1, worst, tolerance, largest, worst_per_rank);
      QVERIFY2(worst <= tolerance, qPrintable(QString("step %1: %2").arg(s + 1).arg(worst)));
      // Per-rank statistics are a different computation: this comparison can fail.
      QVERIFY(worst_per_rank > 100 * tolerance);
    }
  }

  // The engine itself under mpirun: one run in the store, from rank 0, with
  // world_size and the parallel metric series; rank 1 prints nothing.
  void engineRecordsOneRunFromRankZero() {
    NEED_CPU_DDP();
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("runs.db"));
    QProcess p;
    start_mpirun(p, 2, TRAINBENCH_ENGINE_BIN,
                 {"--db", db.toStdString(), "run", "--device", "cpu", "--steps", "3", "-b", "8",
                  "--train-limit", "256", "--test-limit", "32", "--set", "parallel=ddp",
                  "--set", "bucket_mb=0.5", "--set", "processes=2"});
    QVERIFY(p.waitForFinished(300000));
    const QString out = QString::fromUtf8(p.readAllStandardOutput());
    const QString err = QString::fromUtf8(p.readAllStandardError());
    QVERIFY2(p.exitCode() == 0, qPrintable(out + err));
    QCOMPARE(out.count(QRegularExpression(QStringLiteral("^run \\d+:"), QRegularExpression::MultilineOption)), 1);
    QCOMPARE(out.count(QStringLiteral("finished:")), 1);
    QVERIFY2(!err.contains(QLatin1String("error")), qPrintable(err));

    RunStore store(db.toStdString(), RunStore::Mode::ReadOnly);
    const auto runs = store.list_runs();
    QCOMPARE(runs.size(), size_t(1));
    const RunRecord& r = runs[0];
    QCOMPARE(QString::fromStdString(r.status), QStringLiteral("finished"));
    QCOMPARE(r.environment.value("world_size", 0), 2);
    QCOMPARE(r.summary.value("world_size", 0), 2);
    QVERIFY(r.summary.value("allreduce_buckets", 0) >= 1);
    QVERIFY(r.tricks["parallel"]["applied"].get<bool>());
    const auto names = store.step_series_names(r.id);
    for (const char* n : {"rank0_step_time_ms", "rank1_step_time_ms", "allreduce_ms",
                          "allreduce_bytes", "exposed_comm_ms", "scaling_efficiency"})
      QVERIFY2(std::count(names.begin(), names.end(), n), n);
    const auto bytes = store.step_series(r.id, "allreduce_bytes");
    QCOMPARE(bytes.size(), size_t(3));
    // The whole gradient block, every step.
    QCOMPARE(bytes[0].value, r.summary.value("parameters", 0.0) * 4);
  }

  // A rank killed mid-run: mpirun ends the job, rank 0 records the failure,
  // within seconds, and the store stays intact.
  void killedRankFailsTheJob() {
    NEED_CPU_DDP();
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("runs.db"));
    QProcess p;
    start_mpirun(p, 2, TRAINBENCH_ENGINE_BIN,
                 {"--db", db.toStdString(), "run", "--device", "cpu", "--steps", "100000", "-b",
                  "8", "--train-limit", "512", "--test-limit", "32", "--epochs", "1000", "--set",
                  "parallel=ddp"});
    QVERIFY(p.waitForStarted());
    // Wait for rank 0 to record a few steps.
    QElapsedTimer t;
    t.start();
    int64_t steps = 0;
    while (steps < 3 && t.elapsed() < 120000 && p.state() == QProcess::Running) {
      QThread::msleep(200);
      if (!QFile::exists(db)) continue;
      try {
        RunStore store(db.toStdString(), RunStore::Mode::ReadOnly);
        const auto runs = store.list_runs();
        if (!runs.empty()) steps = int64_t(store.step_series(runs[0].id, "loss").size());
      } catch (const std::exception&) {
      }
    }
    QVERIFY2(steps >= 3, qPrintable(QString::fromUtf8(p.readAllStandardError())));
    const QList<pid_t> rank1 = ranks_of(p.processId(), 1);
    QCOMPARE(rank1.size(), 1);
    QElapsedTimer since_kill;
    since_kill.start();
    QCOMPARE(::kill(rank1[0], SIGKILL), 0);
    QVERIFY2(p.waitForFinished(30000), "the job outlived a killed rank by 30 s");
    const double seconds = since_kill.elapsed() / 1000.0;
    qInfo("the job ended %.2f s after rank 1 was killed (exit code %d)", seconds, p.exitCode());
    QVERIFY(p.exitCode() != 0);
    QVERIFY(seconds < 15);

    QCOMPARE(integrity(db), std::string("ok"));
    RunStore store(db.toStdString(), RunStore::Mode::ReadOnly);
    const auto runs = store.list_runs();
    QCOMPARE(runs.size(), size_t(1));
    QCOMPARE(QString::fromStdString(runs[0].status), QStringLiteral("failed"));
    QVERIFY2(runs[0].error.find("another rank failed or was killed") != std::string::npos,
             runs[0].error.c_str());
  }
};

QTEST_GUILESS_MAIN(TestDdp)
#include "test_ddp.moc"
