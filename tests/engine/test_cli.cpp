// SPDX-License-Identifier: GPL-3.0-or-later
// trainbench-engine end to end: real short runs on a Fashion-MNIST subset, then
// list/show/compare/export; invalid configurations; corrupt data; SIGTERM and
// SIGKILL in the middle of a run.
#include <QtTest>

#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>

#include <nlohmann/json.hpp>

#include "engine/store/run_store.h"

using json = nlohmann::json;

namespace {

struct Result {
  int code = -1;
  QString out, err;
};

Result engine(const QStringList& args, int timeout_ms = 300000,
              const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment()) {
  QProcess p;
  p.setProcessEnvironment(env);
  p.start(TRAINBENCH_ENGINE_BIN, args);
  if (!p.waitForFinished(timeout_ms)) {
    p.kill();
    p.waitForFinished();
  }
  return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1,
          QString::fromUtf8(p.readAllStandardOutput()), QString::fromUtf8(p.readAllStandardError())};
}

const char* kFmnist = "/usr/share/datasets/fashion-mnist";

// Another process's connection to the store holding its write lock.
class WriteLock {
 public:
  explicit WriteLock(const QString& path) {
    sqlite3_open(path.toUtf8().constData(), &db_);
    sqlite3_busy_timeout(db_, 10000);
    held_ = sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK;
  }
  ~WriteLock() {
    if (held_) sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr);
    sqlite3_close(db_);
  }
  bool held() const { return held_; }
  void exec(const char* sql) { sqlite3_exec(db_, sql, nullptr, nullptr, nullptr); }

 private:
  sqlite3* db_ = nullptr;
  bool held_ = false;
};

// The engine with its stdout read as events until `until` says enough.
struct LiveRun {
  QProcess p;
  QByteArray out;
  explicit LiveRun(const QStringList& args) { p.start(TRAINBENCH_ENGINE_BIN, args); }
  ~LiveRun() {
    if (p.state() != QProcess::NotRunning) {
      p.kill();
      p.waitForFinished();
    }
  }
  bool wait_for(const char* needle, int count, int timeout_ms = 120000) {
    QElapsedTimer t;
    t.start();
    while (out.count(needle) < count && t.elapsed() < timeout_ms) {
      p.waitForReadyRead(1000);
      out += p.readAllStandardOutput();
      if (p.state() == QProcess::NotRunning) break;
    }
    return out.count(needle) >= count;
  }
};

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
                              "optimizer_ms", "step_end_ms", "other_ms", "samples_per_s", "lr", "loss"})
          QVERIFY2(m.contains(k), k);
        const double parts = m["data_wait_ms"].get<double>() + m["forward_ms"].get<double>() +
                             m["backward_ms"].get<double>() + m["optimizer_ms"].get<double>() +
                             m["step_end_ms"].get<double>() + m["other_ms"].get<double>();
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

  // The CPU backend's threads: the cpu_threads setting, else what the
  // process may use (OMP_NUM_THREADS here), recorded with what decided it.
  void cpuThreadsAreRecordedWithTheirSource() {
    QTemporaryDir dir;
    const QString db = dir.filePath("threads.db");
    const QStringList run{"run", "--db", db, "--device", "cpu", "--train-limit", "128",
                          "--test-limit", "64", "--steps", "2", "--quiet"};
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("OMP_NUM_THREADS", "1");
    Result r = engine(run + QStringList{"--set", "cpu_threads=3"}, 300000, env);
    QVERIFY2(r.code == 0, qPrintable(r.err));
    r = engine(run, 300000, env);
    QVERIFY2(r.code == 0, qPrintable(r.err));
    tb::RunStore store(db.toStdString(), tb::RunStore::Mode::ReadOnly);
    const auto runs = store.list_runs();  // by id
    QCOMPARE(runs.size(), size_t(2));
    const json set = store.get_run(runs[0].id)->environment;
    QCOMPARE(set["threads"].get<int>(), 3);
    QCOMPARE(set["threads_source"].get<std::string>(), std::string("cpu_threads setting"));
    const json omp = store.get_run(runs[1].id)->environment;
    QCOMPARE(omp["threads"].get<int>(), 1);
    const std::string source = omp["threads_source"].get<std::string>();
    // OMP_NUM_THREADS decides unless the process may use one CPU anyway.
    QVERIFY2(source.rfind("OMP_NUM_THREADS (1 of ", 0) == 0 || source.find("(1 CPUs)") != std::string::npos,
             source.c_str());

    // OMP_PROC_BIND (as PyTorch's CPU tuning guides advise) binds the first
    // thread to one place before the engine starts: the count stays the
    // CPUs the process was given, not that one place's.
    QProcessEnvironment plain = QProcessEnvironment::systemEnvironment();
    for (const char* k : {"OMP_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES"}) plain.remove(k);
    QProcessEnvironment bound = plain;
    bound.insert("OMP_PROC_BIND", "close");
    bound.insert("OMP_PLACES", "cores");
    const QString db2 = dir.filePath("bind.db");
    QVERIFY2((r = engine({"run", "--db", db2, "--device", "cpu", "--train-limit", "128", "--test-limit",
                          "64", "--steps", "1", "--quiet"}, 300000, plain)).code == 0, qPrintable(r.err));
    QVERIFY2((r = engine({"run", "--db", db2, "--device", "cpu", "--train-limit", "128", "--test-limit",
                          "64", "--steps", "1", "--quiet"}, 300000, bound)).code == 0, qPrintable(r.err));
    {
      tb::RunStore s2(db2.toStdString(), tb::RunStore::Mode::ReadOnly);
      const auto both = s2.list_runs();
      QCOMPARE(both.size(), size_t(2));
      const json free_env = s2.get_run(both[0].id)->environment;
      const json bound_env = s2.get_run(both[1].id)->environment;
      QCOMPARE(bound_env["threads"].get<int>(), free_env["threads"].get<int>());
      const std::string why = bound_env["threads_source"].get<std::string>();
      if (free_env["threads"].get<int>() > 1)
        QVERIFY2(why.rfind("OpenMP places (", 0) == 0 || why.rfind("cgroup", 0) == 0, why.c_str());
    }

    env.insert("OMP_NUM_THREADS", "many");
    r = engine({"run", "--db", dir.filePath("bad.db"), "--device", "cpu", "--steps", "1", "--quiet"},
               300000, env);
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("OMP_NUM_THREADS='many'"), qPrintable(r.err));
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
    QVERIFY2(c.out.contains("where they ran (environment entries that differ)"), qPrintable(c.out));
  }

  // The same settings run in another place (here: the loops' baseline copy
  // forced) differ in where they ran, not in their configuration.
  void compareShowsWhereTheRunsRan() {
    QTemporaryDir dir;
    const QString db = dir.filePath("where.db");
    const QStringList run{"run", "--db", db, "--device", "cpu", "--train-limit", "128",
                          "--test-limit", "64", "--steps", "2", "--quiet", "--name", "same"};
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove("TRAINBENCH_CPU_ISA");
    Result r = engine(run, 300000, env);
    QVERIFY2(r.code == 0, qPrintable(r.err));
    env.insert("TRAINBENCH_CPU_ISA", "default");
    QVERIFY2((r = engine(run, 300000, env)).code == 0, qPrintable(r.err));
    const Result c = engine({"compare", "1", "2", "--db", db});
    QCOMPARE(c.code, 0);
    QVERIFY2(c.out.contains("(none: identical configurations)"), qPrintable(c.out));
    QVERIFY2(c.out.contains("\n  cpu_isa_source "), qPrintable(c.out));
    QVERIFY2(c.out.contains("\"TRAINBENCH_CPU_ISA\""), qPrintable(c.out));
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
    tb::RunStore store(db_.toStdString(), tb::RunStore::Mode::ReadOnly);
    QCOMPARE(QString::fromStdString(store.integrity_check()), QString("ok"));
    auto run = store.list_runs().back();
    QCOMPARE(QString::fromStdString(run.recorded_status), QString("running"));
    // The store names the process that wrote the run, so a reader can check it:
    // that process is gone, so every reader shows the run interrupted at once.
    QCOMPARE(run.engine_pid, pid);
    QCOMPARE(run.engine_host, tb::this_host_name());
    QCOMPARE(QString::fromStdString(run.status), QString("interrupted"));
    const json listed = json::parse(engine({"list", "--json", "--db", db_}).out.toStdString());
    QCOMPARE(QString::fromStdString(listed.back()["status"]), QString("interrupted"));
    QVERIFY(QString::fromStdString(listed.back()["error"]).contains(QString::number(pid)));
    QVERIFY(!listed.back()["heartbeat_at"].get<std::string>().empty());
    Result show = engine({"show", QString::number(run.id), "--db", db_});
    QVERIFY2(show.out.contains("status    interrupted"), qPrintable(show.out));
  }

  // Defect: the default store path was worked out (and its folder made) for
  // the help text, so every command aborted (134) without a usable HOME.
  void commandsWorkWithoutHome() {
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove("HOME");
    env.remove("XDG_DATA_HOME");
    env.remove("TRAINBENCH_DB");
    QCOMPARE(engine({"--version"}, 30000, env).code, 0);
    QCOMPARE(engine({"--help"}, 30000, env).code, 0);
    QCOMPARE(engine({"run", "--help"}, 30000, env).code, 0);
    Result listed = engine({"--db", dir_.filePath("none.db"), "list"}, 30000, env);
    QCOMPARE(listed.code, 0);
    QVERIFY(!QFile::exists(dir_.filePath("none.db")));
    Result no_db = engine({"list"}, 30000, env);
    QCOMPARE(no_db.code, 2);
    QVERIFY2(no_db.err.contains("HOME") && no_db.err.contains("--db"), qPrintable(no_db.err));
    // A HOME that cannot be written: the read commands do not care.
    env.insert("HOME", "/proc/no-such-home");
    QCOMPARE(engine({"list"}, 30000, env).code, 0);
    QCOMPARE(engine({"config", "--defaults"}, 30000, env).code, 0);
  }

  // Defect: negative numbers given to flags were ignored (exit 0, --steps -1
  // ran a whole epoch); they go through the same validation as --set.
  void flagsAreValidatedLikeSet_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("message");
    QTest::newRow("steps") << QStringList{"--steps", "-1"} << "key 'max_steps': -1 is out of range";
    QTest::newRow("lr") << QStringList{"--lr", "-0.5"} << "key 'lr': -0.5 is out of range";
    QTest::newRow("seed") << QStringList{"--seed", "-3"} << "key 'seed': -3 is out of range";
    QTest::newRow("epochs") << QStringList{"--epochs", "-2"} << "key 'epochs': -2 is out of range";
    QTest::newRow("batch") << QStringList{"--batch-size", "-5"} << "key 'batch_size': -5 is out of range";
    QTest::newRow("workers") << QStringList{"--workers", "-1"} << "key 'workers': -1 is out of range";
    QTest::newRow("text") << QStringList{"--steps", "ten"} << "key 'max_steps': expected an integer";
    QTest::newRow("same as --set") << QStringList{"--set", "batch_size=-5"}
                                   << "key 'batch_size': -5 is out of range";
  }
  void flagsAreValidatedLikeSet() {
    QFETCH(QStringList, args);
    QFETCH(QString, message);
    Result r = engine(QStringList{"run", "--db", db_, "--device", "cpu"} + args, 60000);
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains(message), qPrintable(r.err));
  }

  // Found by fuzz/config_fuzzer.cpp: a value that is not UTF-8 made validation
  // throw a JSON exception (exit 1, "[json.exception.type_error.316] ...").
  void invalidUtf8ValueIsAClearError() {
    QProcess p;
    p.start("bash", {"-c", QString("'%1' run --db '%2' --set \"$(printf 'batch_size=\\xff')\"")
                               .arg(TRAINBENCH_ENGINE_BIN, db_)});
    QVERIFY(p.waitForFinished(60000));
    const QString err = QString::fromUtf8(p.readAllStandardError());
    QCOMPARE(p.exitCode(), 2);
    QVERIFY2(err.contains("key 'batch_size': expected an integer"), qPrintable(err));
  }

  // Defect: usage errors left with CLI11's codes (104-114), a huge id became
  // INT64_MAX, and --db DIR gave SQLite's bare message.
  void usageErrorsExitTwo() {
    QCOMPARE(engine({"list", "--no-such-flag"}).code, 2);
    QCOMPARE(engine({"show"}).code, 2);
    QCOMPARE(engine({"compare", "1"}).code, 2);
    QCOMPARE(engine({"export", "1", "--format", "xml", "--db", db_}).code, 2);
    QCOMPARE(engine({"trace", "1", "--steps", "0", "--db", db_}).code, 2);
    for (const char* id : {"99999999999999999999", "-1", "0", "1x", "abc"}) {
      Result r = engine({"show", id, "--db", db_});
      QVERIFY2(r.code == 2, id);
      QVERIFY2(r.err.contains("is not a run id"), qPrintable(r.err));
    }
    Result folder = engine({"list", "--db", dir_.path()});
    QCOMPARE(folder.code, 1);
    QVERIFY2(folder.err.contains("it is a folder"), qPrintable(folder.err));
    Result run_folder = engine({"run", "--db", dir_.path(), "--steps", "1"});
    QCOMPARE(run_folder.code, 1);
    QVERIFY2(run_folder.err.contains("it is a folder"), qPrintable(run_folder.err));
  }

  // Defects (issue 26): a number past a double's range came out as nlohmann's
  // raw out_of_range.406 (exit 1, neither file nor key); a flag over a key hid
  // the file's invalid value; an unknown or empty rung list was taken (the
  // whole default ladder ran); a folder read as "unexpected end of input".
  void configFilesAreCheckedAsWritten_data() {
    QTest::addColumn<QString>("file_text");  // FOLDER: a folder stands there
    QTest::addColumn<QStringList>("args");   // FILE stands for the file's path
    QTest::addColumn<QString>("message");
    QTest::newRow("1e400") << R"({"batch_size": 1e400})" << QStringList{"run", "--config", "FILE"}
                           << "FILE: key 'batch_size': 1e400 is beyond the range of a number";
    QTest::newRow("1e400, validate") << R"({"lr": 0.1, "batch_size": -1e400})"
                                     << QStringList{"config", "--validate", "FILE"}
                                     << "FILE: key 'batch_size': -1e400 is beyond the range of a number";
    QTest::newRow("flag over a bad value")
        << R"({"batch_size": -5})" << QStringList{"run", "--config", "FILE", "-b", "16"}
        << "FILE: key 'batch_size': -5 is out of range";
    QTest::newRow("ladder flag over a bad value")
        << R"({"ladder_repeats": 0})" << QStringList{"ladder", "--config", "FILE", "--repeats", "2"}
        << "FILE: key 'ladder_repeats': 0 is out of range";
    QTest::newRow("folder") << "FOLDER" << QStringList{"config", "--validate", "FILE"}
                            << "FILE: is a folder";
    QTest::newRow("folder, run") << "FOLDER" << QStringList{"run", "--config", "FILE"}
                                 << "FILE: is a folder";
    QTest::newRow("empty file") << "" << QStringList{"config", "--validate", "FILE"}
                                << "FILE: the file is empty";
  }
  void configFilesAreCheckedAsWritten() {
    QFETCH(QString, file_text);
    QFETCH(QStringList, args);
    QFETCH(QString, message);
    const QString path = dir_.filePath(QString("config-%1").arg(QTest::currentDataTag()).replace(' ', '_'));
    if (file_text == "FOLDER") {
      QVERIFY(QDir().mkpath(path));
    } else {
      QFile f(path);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(file_text.toUtf8());
    }
    args.replaceInStrings("FILE", path);
    Result r = engine(args + QStringList{"--db", dir_.filePath("config-files.db")}, 60000);
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains(QString(message).replace("FILE", path)), qPrintable(r.err));
    QVERIFY2(!r.err.contains("json.exception"), qPrintable(r.err));
    QVERIFY(!QFile::exists(dir_.filePath("config-files.db")));  // nothing ran
  }

  void rungListsNameKnownRungs_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("message");
    QTest::newRow("run --set") << QStringList{"run", "--set", "ladder_rungs=nosuch"}
                               << "key 'ladder_rungs': unknown rung 'nosuch'; the rungs are: ";
    QTest::newRow("ladder --rungs") << QStringList{"ladder", "--rungs", "amp,nosuch"}
                                    << "unknown rung 'nosuch'; the rungs are: ";
    QTest::newRow("ladder --rungs ,") << QStringList{"ladder", "--rungs", ","}
                                      << "',' has an empty rung name";
    QTest::newRow("ladder --rungs amp,,workers") << QStringList{"ladder", "--rungs", "amp,,workers"}
                                                 << "'amp,,workers' has an empty rung name";
  }
  void rungListsNameKnownRungs() {
    QFETCH(QStringList, args);
    QFETCH(QString, message);
    const QString db = dir_.filePath("rungs.db");
    Result r = engine(args + QStringList{"--db", db, "--device", "cpu"}, 60000);
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains(message), qPrintable(r.err));
    QVERIFY2(r.err.contains("amp"), qPrintable(r.err));  // the known rungs are listed
    QVERIFY(!QFile::exists(db));  // nothing ran
  }

  // Defect (issue 26): CLI11's "Value 0 not in range 0.000000 to 1797693...".
  void numberOptionsNameTheirBound_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("message");
    QTest::newRow("trace --steps") << QStringList{"trace", "1", "--steps", "0"}
                                   << "--steps: must be at least 1, got 0";
    QTest::newRow("ladder --measured-steps") << QStringList{"ladder", "--measured-steps", "0"}
                                             << "--measured-steps: must be at least 1, got 0";
    QTest::newRow("ladder --warmup-steps") << QStringList{"ladder", "--warmup-steps", "-1"}
                                           << "--warmup-steps: must be at least 0, got -1";
    QTest::newRow("ladder --show") << QStringList{"ladder", "--show", "0"}
                                   << "--show: must be at least 1, got 0";
    QTest::newRow("not a number") << QStringList{"trace", "1", "--steps", "2x"}
                                  << "--steps: '2x' is not a whole number";
  }
  void numberOptionsNameTheirBound() {
    QFETCH(QStringList, args);
    QFETCH(QString, message);
    Result r = engine(args + QStringList{"--db", db_}, 60000);
    QCOMPARE(r.code, 2);
    QVERIFY2(r.err.contains(message), qPrintable(r.err));
    QVERIFY2(!r.err.contains("not in range"), qPrintable(r.err));
  }

  // Defect (issue 26): advise on a failed run exited 0 with a blank device
  // and "no rule fires".
  void adviseOnAFailedRunSaysItFailed() {
    const QString db = dir_.filePath("advise-failed.db");
    Result run = engine({"run", "--db", db, "--device", "cpu", "--data-dir",
                         dir_.filePath("no-such-data"), "--steps", "2", "--quiet"});
    QCOMPARE(run.code, 1);
    Result r = engine({"advise", "1", "--db", db});
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("run 1 failed") && r.err.contains("no-such-data"), qPrintable(r.err));
    QVERIFY2(!r.out.contains("no rule fires"), qPrintable(r.out));
    QCOMPARE(engine({"advise", "1", "--json", "--db", db}).code, 1);
  }

  // Defect (issue 26): SQLite's bare "unable to open database file". As root
  // the folder's mode does not stop a write, so the fault tests check the same
  // as nobody; here a folder that is read-only to everyone (a file in the path).
  void storeInAnUnwritableFolderNamesTheFolder() {
    if (geteuid() == 0) QSKIP("root writes in any folder; tests/faults/fault_tests.py (readonly) checks this as nobody");
    const QString locked = dir_.filePath("locked");
    QVERIFY(QDir().mkdir(locked));
    QFile::setPermissions(locked, QFileDevice::ReadOwner | QFileDevice::ExeOwner);
    Result r = engine({"run", "--db", locked + "/runs.db", "--steps", "1", "--quiet"});
    QFile::setPermissions(locked, QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner);
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("the folder '" + locked + "' is not writable (Permission denied)"),
             qPrintable(r.err));
  }

  // Defect: `export ... -o runs.db` truncated the store and wiped every run.
  void exportOntoTheStoreIsRefused() {
    const QString link = dir_.filePath("alias.db");
    QVERIFY(QFile::link(db_, link));
    const qint64 size = QFileInfo(db_).size();
    for (const QString& target : {db_, link, db_ + "-wal"}) {
      if (!QFile::exists(target)) continue;
      Result r = engine({"export", "1", "-o", target, "--db", db_});
      QCOMPARE(r.code, 1);
      QVERIFY2(r.err.contains("this is the run store"), qPrintable(r.err));
    }
    QCOMPARE(QFileInfo(db_).size(), size);
    QVERIFY(json::parse(engine({"list", "--json", "--db", db_}).out.toStdString()).size() >= 2);
    // An export replaces its target whole, and leaves no temporary file behind.
    const QString out = dir_.filePath("export.csv");
    QFile old(out);
    QVERIFY(old.open(QIODevice::WriteOnly));
    old.write("old contents that are much longer than nothing at all\n");
    old.close();
    QCOMPARE(engine({"export", "1", "-o", out, "--db", db_}).code, 0);
    QFile fresh(out);
    QVERIFY(fresh.open(QIODevice::ReadOnly));
    QVERIFY(fresh.readAll().startsWith("step,wall_time"));
    QCOMPARE(QDir(dir_.path()).entryList({"export.csv.tmp*"}).size(), 0);
  }

  // Defect: one bad row (invalid UTF-8 name, corrupt JSON) broke list --json,
  // list, show and compare for the whole store.
  void damagedRowsDoNotBreakListing() {
    const QString db = dir_.filePath("damaged.db");
    QVERIFY(QFile::copy(db_, db));
    {
      WriteLock raw(db);
      raw.exec("UPDATE runs SET name = CAST(X'6261640AFF' AS TEXT), config_json = '{oops' "
               "WHERE id = 1");
      raw.exec("UPDATE runs SET summary_json = 'null', tricks_json = '[' WHERE id = 2");
    }
    Result lj = engine({"list", "--json", "--db", db});
    QCOMPARE(lj.code, 0);
    const json runs = json::parse(lj.out.toStdString());  // valid JSON, every run in it
    QVERIFY(runs.size() >= 2);
    QVERIFY(runs[0].contains("problems"));
    QVERIFY2(lj.err.contains("run 1: config_json: not valid JSON"), qPrintable(lj.err));
    QVERIFY2(lj.err.contains("run 2: summary_json"), qPrintable(lj.err));
    Result l = engine({"list", "--db", db});
    QCOMPARE(l.code, 0);
    QVERIFY(l.out.contains("batch 256"));
    Result sh = engine({"show", "1", "--db", db});
    QCOMPARE(sh.code, 0);
    QVERIFY2(sh.out.contains("damaged   config_json"), qPrintable(sh.out));
    QCOMPARE(engine({"compare", "1", "2", "--db", db}).code, 0);
    QCOMPARE(engine({"export", "2", "--format", "json", "--db", db}).code, 0);
  }

  // Defect: `list` opened read-write and waited for the write lock ("upgrading
  // the schema: database is locked"); it also turned an empty file into a store.
  // And a run whose store stayed locked past the busy timeout failed.
  void lockedStoreNeitherBlocksReadersNorFailsTheRun() {
    const QString db = dir_.filePath("locked.db");
    QVERIFY(QFile::copy(db_, db));
    LiveRun run({"run", "--db", db, "--device", "cpu", "--train-limit", "640", "--test-limit",
                 "200", "--batch-size", "64", "--steps", "10", "--events", "jsonl", "--name",
                 "under lock"});
    QVERIFY(run.wait_for("\"type\":\"run_started\"", 1));
    int64_t steps = 0;
    {
      WriteLock lock(db);
      QVERIFY(lock.held());
      QElapsedTimer t;
      t.start();
      Result listed = engine({"list", "--db", db}, 30000);
      QCOMPARE(listed.code, 0);
      QVERIFY2(t.elapsed() < 5000, qPrintable(QString::number(t.elapsed())));
      // The run trains to its end while the store stays locked for 12 s (the
      // busy timeout is 10 s).
      QVERIFY(run.wait_for("\"type\":\"finished\"", 1, 60000));
      steps = run.out.count("\"type\":\"step\"");
      QThread::msleep(12000 - std::min<qint64>(t.elapsed(), 12000));
    }
    QVERIFY(run.p.waitForFinished(60000));
    QVERIFY2(run.p.exitCode() == 0, run.p.readAllStandardError().constData());
    QCOMPARE(steps, 10);
    tb::RunStore store(db.toStdString(), tb::RunStore::Mode::ReadOnly);
    const auto rec = store.list_runs().back();
    QCOMPARE(QString::fromStdString(rec.name), QString("under lock"));
    QCOMPARE(QString::fromStdString(rec.status), QString("finished"));
    QCOMPARE(store.step_series(rec.id, "loss").size(), size_t(10));

    const QString empty = dir_.filePath("empty.db");
    QFile f(empty);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.close();
    for (const QStringList& args : {QStringList{"list", "--db", empty},
                                    QStringList{"run", "--db", empty, "--steps", "1"}}) {
      Result r = engine(args, 60000);
      QCOMPARE(r.code, 1);
      QVERIFY2(r.err.contains("exists but is empty"), qPrintable(r.err));
    }
    QCOMPARE(QFileInfo(empty).size(), 0);
  }

  // Defect: a reader of --events that went away killed the engine with
  // SIGPIPE (141) and left the run "running".
  void closedEventStreamDoesNotKillTheRun() {
    const QString db = dir_.filePath("pipe.db");
    QProcess p;
    p.start("bash", {"-c", QString("'%1' run --db '%2' --device cpu --train-limit 640 --test-limit 200 "
                                   "--batch-size 64 --steps 10 --events jsonl | head -3 >/dev/null; "
                                   "echo \"engine exit ${PIPESTATUS[0]}\" >&2")
                               .arg(TRAINBENCH_ENGINE_BIN, db)});
    QVERIFY(p.waitForFinished(120000));
    const QString err = QString::fromUtf8(p.readAllStandardError());
    QVERIFY2(err.contains("engine exit 0"), qPrintable(err));
    QVERIFY2(err.contains("reader went away"), qPrintable(err));
    tb::RunStore store(db.toStdString(), tb::RunStore::Mode::ReadOnly);
    const auto run = store.list_runs().back();
    QCOMPARE(QString::fromStdString(run.status), QString("finished"));
    QCOMPARE(store.step_series(run.id, "loss").size(), size_t(10));
  }

  // Defect: on a full disk the store sink threw first and the final event never
  // reached the stream. Here the file size limit stands in for the full disk
  // once the store exists; it lets the run start (the store's room probe
  // fits) and stops the WAL a little past that.
  void fullDiskStillEndsTheStream() {
    const QString db = dir_.filePath("full.db");
    QCOMPARE(engine({"run", "--db", db, "--device", "cpu", "--train-limit", "640", "--test-limit",
                     "200", "--batch-size", "64", "--steps", "1", "--quiet"})
                 .code,
             0);
    QProcess p;
    p.start("bash", {"-c", QString("trap '' XFSZ; ulimit -f %3; exec '%1' run --db '%2' --device cpu "
                                   "--train-limit 6400 --test-limit 200 --batch-size 16 --steps 120 "
                                   "--events jsonl")
                               .arg(TRAINBENCH_ENGINE_BIN, db)
                               .arg(std::max<qint64>(QFileInfo(db).size() + QFileInfo(db + "-wal").size(),
                                                     tb::RunStore::kRoomProbeBytes) / 1024 + 8)});
    QVERIFY(p.waitForFinished(180000));
    const QByteArray out = p.readAllStandardOutput();
    const QString err = QString::fromUtf8(p.readAllStandardError());
    QVERIFY2(err.contains("run store"), qPrintable(err));
    QVERIFY2(out.contains("\"type\":\"finished\""), qPrintable(err));  // the end reached the stream
    QCOMPARE(out.count("\"type\":\"step\""), 120);
    // The end could not be recorded: the stream, the exit code and readers say so.
    QCOMPARE(p.exitCode(), 1);
    QVERIFY2(out.contains("could not record the end of run"), out.constData());
    tb::RunStore store(db.toStdString(), tb::RunStore::Mode::ReadOnly);
    QCOMPARE(QString::fromStdString(store.integrity_check()), QString("ok"));
    QCOMPARE(QString::fromStdString(store.list_runs().back().status), QString("interrupted"));
  }

  // Defect: a stop signal during evaluation waited for the whole evaluation.
  void stopDuringEvaluationIsPrompt() {
    const QString db = dir_.filePath("eval.db");
    // One step, then an evaluation over 200 000 synthetic samples (minutes).
    LiveRun run({"run", "--db", db, "--device", "cpu", "--dataset", "synthetic", "--set",
                 "synthetic_size=200000", "--set", "synthetic_shape=[1,28,28]", "--train-limit",
                 "64", "--batch-size", "64", "--steps", "1", "--events", "jsonl"});
    QVERIFY(run.wait_for("\"type\":\"step\"", 1));
    QThread::msleep(300);  // into the evaluation
    QElapsedTimer t;
    t.start();
    ::kill(run.p.processId(), SIGTERM);
    QVERIFY(run.p.waitForFinished(30000));
    QVERIFY2(t.elapsed() < 2000, qPrintable(QString::number(t.elapsed()) + " ms"));
    QCOMPARE(run.p.exitCode(), 130);
    tb::RunStore store(db.toStdString(), tb::RunStore::Mode::ReadOnly);
    QCOMPARE(QString::fromStdString(store.list_runs().back().status), QString("stopped"));
  }

  // Defect: a second signal close behind the first killed the engine at once
  // and left the run "running".
  void twoSignalsLeaveTheRunMarked() {
    const QString db = dir_.filePath("twice.db");
    LiveRun run({"run", "--db", db, "--device", "cpu", "--events", "jsonl", "--epochs", "50",
                 "--train-limit", "2048", "--test-limit", "100"});
    QVERIFY(run.wait_for("\"type\":\"step\"", 3));
    ::kill(run.p.processId(), SIGINT);
    QThread::msleep(20);  // the first one handled, the step not yet ended
    ::kill(run.p.processId(), SIGINT);
    QVERIFY(run.p.waitForFinished(30000));
    QCOMPARE(run.p.exitCode(), 130);
    tb::RunStore store(db.toStdString(), tb::RunStore::Mode::ReadOnly);
    const auto rec = store.list_runs().back();
    QCOMPARE(QString::fromStdString(rec.recorded_status), QString("stopped"));
    QVERIFY(!rec.finished_at.empty());
  }
};

QTEST_GUILESS_MAIN(TestCli)
#include "test_cli.moc"
