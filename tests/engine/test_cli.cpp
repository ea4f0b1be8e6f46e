// SPDX-License-Identifier: GPL-3.0-or-later
// trainbench-engine end to end: real short runs on a Fashion-MNIST subset, then
// list/show/compare/export; invalid configurations; corrupt data; SIGTERM and
// SIGKILL in the middle of a run.
#include <QtTest>

#include <signal.h>
#include <zlib.h>

#include <nlohmann/json.hpp>

#include "engine/store/run_store.h"

using json = nlohmann::json;

namespace {

struct Result {
  int code = -1;
  QString out, err;
};

Result engine(const QStringList& args, int timeout_ms = 300000) {
  QProcess p;
  p.start(TRAINBENCH_ENGINE_BIN, args);
  if (!p.waitForFinished(timeout_ms)) {
    p.kill();
    p.waitForFinished();
  }
  return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1,
          QString::fromUtf8(p.readAllStandardOutput()), QString::fromUtf8(p.readAllStandardError())};
}

const char* kFmnist = "/usr/share/datasets/fashion-mnist";

}  // namespace

class TestCli : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  QString db_;

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    db_ = dir_.filePath("runs.db");
    if (!QFile::exists(QString(kFmnist) + "/train-images-idx3-ubyte.gz"))
      QSKIP("Fashion-MNIST is not installed (Debian package dataset-fashion-mnist; scripts/setup.sh)");
  }

  void helpDocumentsEverySubcommand() {
    Result r = engine({"--help"});
    QCOMPARE(r.code, 0);
    for (const char* sub : {"run", "list", "show", "compare", "export", "config", "devices"})
      QVERIFY2(r.out.contains(sub), sub);
    QVERIFY(engine({"run", "--help"}).out.contains("--events"));
  }

  void runStreamsEventsAndRecordsTheRun() {
    Result r = engine({"run", "--db", db_, "--device", "cpu", "--train-limit", "640",
                       "--test-limit", "200", "--batch-size", "64", "--steps", "10", "--events",
                       "jsonl", "--name", "batch 64"});
    QVERIFY2(r.code == 0, qPrintable(r.err));
    QStringList types;
    int steps = 0;
    for (const QString& line : r.out.split('\n', Qt::SkipEmptyParts)) {
      json e = json::parse(line.toStdString());  // every stdout line is one JSON object
      QCOMPARE(e["v"].get<int>(), 1);
      types << QString::fromStdString(e["type"]);
      if (e["type"] == "step") {
        ++steps;
        const json& m = e["metrics"];
        for (const char* k : {"step_time_ms", "data_wait_ms", "forward_ms", "backward_ms",
                              "optimizer_ms", "other_ms", "samples_per_s", "lr", "loss"})
          QVERIFY2(m.contains(k), k);
        const double parts = m["data_wait_ms"].get<double>() + m["forward_ms"].get<double>() +
                             m["backward_ms"].get<double>() + m["optimizer_ms"].get<double>() +
                             m["other_ms"].get<double>();
        QVERIFY(std::abs(parts - m["step_time_ms"].get<double>()) < 1e-6 + 1e-9 * parts);
      }
    }
    QCOMPARE(steps, 10);
    QVERIFY(types.contains("run_started"));
    QVERIFY(types.indexOf("run_started") < types.indexOf("step"));
    QVERIFY(types.contains("epoch"));
    QCOMPARE(types.last(), QString("finished"));

    tb::RunStore store(db_.toStdString(), tb::RunStore::Mode::ReadOnly);
    auto runs = store.list_runs();
    QCOMPARE(runs.size(), size_t(1));
    QCOMPARE(QString::fromStdString(runs[0].status), QString("finished"));
    QCOMPARE(store.step_series(runs[0].id, "step_time_ms").size(), size_t(10));
    QVERIFY(runs[0].summary["final_test_accuracy"].get<double>() > 0.1);
    QCOMPARE(QString::fromStdString(store.integrity_check()), QString("ok"));
  }

  void compareShowsARealDifference() {
    Result r = engine({"run", "--db", db_, "--device", "cpu", "--train-limit", "2560",
                       "--test-limit", "200", "--batch-size", "256", "--steps", "8", "--quiet",
                       "--name", "batch 256"});
    QVERIFY2(r.code == 0, qPrintable(r.err));
    Result c = engine({"compare", "1", "2", "--db", db_});
    QCOMPARE(c.code, 0);
    QVERIFY2(c.out.contains("batch_size") && c.out.contains("256"), qPrintable(c.out));
    QVERIFY(c.out.contains("speed-up"));
    QVERIFY(c.out.contains("1.00x"));  // the first run against itself
    QVERIFY(!c.out.contains("\n  model "));  // equal keys are not listed
  }

  void listShowExport() {
    Result l = engine({"list", "--db", db_});
    QCOMPARE(l.code, 0);
    QVERIFY(l.out.contains("batch 64") && l.out.contains("batch 256"));
    QVERIFY(l.out.contains("finished"));
    json lj = json::parse(engine({"list", "--json", "--db", db_}).out.toStdString());
    QCOMPARE(lj.size(), size_t(2));

    Result s = engine({"show", "1", "--db", db_});
    QCOMPARE(s.code, 0);
    QVERIFY(s.out.contains("tricks") && s.out.contains("pin_memory"));
    QVERIFY(s.out.contains("not applicable on the cpu backend") ||
            s.out.contains("needs the cuda backend"));
    QVERIFY(s.out.contains("test_accuracy"));

    Result csv = engine({"export", "1", "--format", "csv", "--db", db_});
    QCOMPARE(csv.code, 0);
    const QStringList rows = csv.out.split('\n', Qt::SkipEmptyParts);
    QCOMPARE(rows.size(), 11);  // header + 10 steps
    QVERIFY(rows[0].startsWith("step,wall_time,"));
    QVERIFY(rows[0].contains("step_time_ms"));
    const int columns = rows[0].count(',');
    for (const QString& row : rows) QCOMPARE(row.count(','), columns);

    const QString out = dir_.filePath("run1.json");
    QCOMPARE(engine({"export", "1", "--format", "json", "-o", out, "--db", db_}).code, 0);
    QFile f(out);
    QVERIFY(f.open(QIODevice::ReadOnly));
    json j = json::parse(f.readAll().toStdString());
    QCOMPARE(j["step_series"]["loss"].size(), size_t(10));
    QCOMPARE(j["config"]["batch_size"].get<int>(), 64);

    QCOMPARE(engine({"show", "99", "--db", db_}).code, 1);
    QVERIFY(engine({"show", "99", "--db", db_}).err.contains("no run with id 99"));
  }

  void invalidConfigurationsAreClearErrors_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("message");
    QTest::newRow("unknown key") << QStringList{"--set", "batchsize=64"}
                                 << "unknown key 'batchsize' (did you mean 'batch_size'?)";
    QTest::newRow("wrong type") << QStringList{"--set", "batch_size=\"big\""}
                                << "key 'batch_size': expected an integer";
    QTest::newRow("out of range") << QStringList{"--set", "batch_size=0"}
                                  << "key 'batch_size': 0 is out of range";
    QTest::newRow("bad choice") << QStringList{"--set", "optimizer=adam"}
                                << "'adam' is not one of: sgd, adamw, rmsprop, lars, lamb";
    QTest::newRow("bad device") << QStringList{"--device", "gpu"} << "'gpu' is not auto, cpu";
    QTest::newRow("nothing to run") << QStringList{"--epochs", "0"}
                                    << "epochs and max_steps are both 0";
    QTest::newRow("bad bool") << QStringList{"--set", "pin_memory=yes"}
                              << "key 'pin_memory': expected true or false";
    QTest::newRow("missing file") << QStringList{"--config", "/nonexistent/run.json"}
                                  << "/nonexistent/run.json: cannot open";
  }

  void invalidConfigurationsAreClearErrors() {
    QFETCH(QStringList, args);
    QFETCH(QString, message);
    Result r = engine(QStringList{"run", "--db", db_} + args);
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains(message), qPrintable(r.err));
  }

  void invalidJsonFileNamesTheFile() {
    const QString path = dir_.filePath("broken.json");
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("{\"batch_size\": 64,,}");
    f.close();
    Result r = engine({"run", "--db", db_, "--config", path});
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains("broken.json: not valid JSON"), qPrintable(r.err));
    QVERIFY(engine({"config", "--validate", path}).code == 2);
  }

  void corruptDataFailsTheRunAndNamesTheFile() {
    // A copy of Fashion-MNIST whose training labels are cut short.
    QDir d(dir_.path());
    d.mkdir("fmnist-bad");
    const QString bad = dir_.filePath("fmnist-bad");
    for (const char* f : {"train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                          "t10k-labels-idx1-ubyte.gz"})
      QVERIFY(QFile::copy(QString(kFmnist) + "/" + f, bad + "/" + f));
    gzFile out = gzopen((bad + "/train-labels-idx1-ubyte.gz").toLocal8Bit().constData(), "wb");
    const unsigned char header[8] = {0, 0, 8, 1, 0, 0, 0xea, 0x60};  // 60000 labels promised
    gzwrite(out, header, 8);
    gzwrite(out, "\x01\x02\x03", 3);  // three delivered
    gzclose(out);
    Result r = engine({"run", "--db", db_, "--device", "cpu", "--data-dir", bad, "--steps", "2"});
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("train-labels-idx1-ubyte.gz") && r.err.contains("truncated"),
             qPrintable(r.err));
    tb::RunStore store(db_.toStdString(), tb::RunStore::Mode::ReadOnly);
    auto run = store.list_runs().back();
    QCOMPARE(QString::fromStdString(run.status), QString("failed"));
    QVERIFY(QString::fromStdString(run.error).contains("truncated"));
    QCOMPARE(QString::fromStdString(store.integrity_check()), QString("ok"));
  }

  void sigtermStopsCleanly() {
    QProcess p;
    p.start(TRAINBENCH_ENGINE_BIN, {"run", "--db", db_, "--device", "cpu", "--events", "jsonl",
                                    "--epochs", "50", "--train-limit", "2048", "--test-limit",
                                    "100", "--name", "to be stopped"});
    int steps = 0;
    QByteArray buffer;
    while (steps < 3 && p.waitForReadyRead(60000)) {
      buffer += p.readAllStandardOutput();
      steps = buffer.count("\"type\":\"step\"");
    }
    QVERIFY(steps >= 3);
    ::kill(p.processId(), SIGTERM);
    QVERIFY(p.waitForFinished(60000));
    QCOMPARE(p.exitCode(), 130);
    buffer += p.readAllStandardOutput();
    QVERIFY(buffer.contains("\"status\":\"stopped\""));
    tb::RunStore store(db_.toStdString(), tb::RunStore::Mode::ReadOnly);
    auto run = store.list_runs().back();
    QCOMPARE(QString::fromStdString(run.status), QString("stopped"));
    QVERIFY(!run.finished_at.empty());
    QVERIFY(store.step_series(run.id, "step_time_ms").size() >= 3);  // nothing lost
  }

  void sigkillLeavesAnIntactStore() {
    QProcess p;
    p.start(TRAINBENCH_ENGINE_BIN, {"run", "--db", db_, "--device", "cpu", "--events", "jsonl",
                                    "--epochs", "50", "--train-limit", "2048", "--test-limit",
                                    "100", "--name", "to be killed"});
    QByteArray buffer;
    while (buffer.count("\"type\":\"step\"") < 5 && p.waitForReadyRead(60000))
      buffer += p.readAllStandardOutput();
    const int64_t pid = p.processId();
    ::kill(pid, SIGKILL);
    QVERIFY(p.waitForFinished(60000));
    tb::RunStore store(db_.toStdString(), tb::RunStore::Mode::ReadWrite);
    QCOMPARE(QString::fromStdString(store.integrity_check()), QString("ok"));
    auto run = store.list_runs().back();
    QCOMPARE(QString::fromStdString(run.status), QString("running"));
    // The store names the process that wrote the run, so a reader can check it.
    QCOMPARE(run.engine_pid, pid);
    QCOMPARE(run.engine_host, tb::this_host_name());
    QCOMPARE(store.mark_interrupted_runs(std::chrono::milliseconds(0)), 1);
    run = *store.get_run(run.id);
    QCOMPARE(QString::fromStdString(run.status), QString("failed"));
  }
};

QTEST_GUILESS_MAIN(TestCli)
#include "test_cli.moc"
