// SPDX-License-Identifier: GPL-3.0-or-later
// A configuration reaches the Set-up page only as the engine's settings table
// accepts it (issue 26, items 2 and 3): a loaded file's unknown key or bad
// value is refused with the key, the value and the reason, the setting keeps
// its value, and nothing refused is saved; what QSettings restores is checked
// the same way, so a saved configuration can never fail every later run.
#include <QFile>
#include <QJsonDocument>
#include <QSettings>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTemporaryDir>
#include <QtTest>

#include "engine/train/config.h"
#include "main_window.h"
#include "run_config.h"

namespace {
// Whether the engine would start a run with this configuration (what
// `trainbench-engine run --config` checks first); the reason when not.
QString engineRefusal(const QJsonObject& config) {
  try {
    tb::validate_config(nlohmann::json::parse(QJsonDocument(config).toJson().toStdString()), "config");
  } catch (const std::exception& e) {
    return QString::fromUtf8(e.what());
  }
  return {};
}

QString writeJson(const QTemporaryDir& dir, const QString& name, const QByteArray& text) {
  const QString path = dir.filePath(name);
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly)) return {};
  f.write(text);
  return path;
}

// The refusal that names key, or empty.
QString refusalOf(const QStringList& refused, const QString& key) {
  for (const QString& r : refused)
    if (r.contains(QStringLiteral("'%1'").arg(key))) return r;
  return {};
}
}  // namespace

class TestConfigRefusals : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    Q_INIT_RESOURCE(trainbench);
    QStandardPaths::setTestModeEnabled(true);
    qputenv("TRAINBENCH_ENGINE", "/nonexistent/trainbench-engine");  // no engine needed here
    QVERIFY(dir_.isValid());
  }

  void init() { QSettings().clear(); }

  // Item 2: {"unknown_key": true} was taken silently and failed every run
  // after, through presets, defaults and restarts.
  void unknownKeyIsRefusedAndNeverSaved() {
    const QString path = writeJson(dir_, QStringLiteral("unknown.json"),
                                   R"({"unknown_key": true, "batch_size": 128, "name": "from file"})");
    {
      MainWindow window(dir_.filePath(QStringLiteral("runs.db")));
      QJsonObject loaded;
      QString error;
      QVERIFY2(RunConfig::load(path, &loaded, &error), qPrintable(error));
      window.setConfig(RunConfig::merged(window.currentConfig(), loaded));
      QVERIFY2(window.statusBar()->currentMessage().contains(QLatin1String("unknown key 'unknown_key'")),
               qPrintable(window.statusBar()->currentMessage()));
      // The rest of the file is taken; the run it makes is one the engine starts.
      const QJsonObject c = window.currentConfig();
      QVERIFY(!c.contains(QLatin1String("unknown_key")));
      QCOMPARE(c.value(QLatin1String("batch_size")).toInt(), 128);
      QCOMPARE(c.value(QLatin1String("name")).toString(), QStringLiteral("from file"));
      QCOMPARE(engineRefusal(c), QString());
      QVERIFY(window.applyPreset(QStringLiteral("Baseline")));
      QCOMPARE(engineRefusal(window.currentConfig()), QString());
      window.close();  // saves the configuration to QSettings
    }
    const QJsonObject saved =
        QJsonDocument::fromJson(QSettings().value(QStringLiteral("setup/config")).toByteArray()).object();
    QVERIFY(!saved.isEmpty());
    QVERIFY(!saved.contains(QLatin1String("unknown_key")));
  }

  // File > Load configuration: the refused entries are listed, each with the
  // file, key, value and reason; the status bar does not say "Loaded".
  void loadingListsWhatWasRefused() {
    const QString path = writeJson(dir_, QStringLiteral("listed.json"), R"({"unknown_key": true, "lr": 0.2})");
    MainWindow window(dir_.filePath(QStringLiteral("runs.db")));
    QStringList refused;
    QString error;
    QVERIFY2(window.loadConfigFile(path, &refused, &error), qPrintable(error));
    QCOMPARE(refused.size(), 1);
    QVERIFY2(refused.first().startsWith(QLatin1String("listed.json: unknown key 'unknown_key'")),
             qPrintable(refused.first()));
    QVERIFY(!window.statusBar()->currentMessage().startsWith(QLatin1String("Loaded")));
    QCOMPARE(window.currentConfig().value(QLatin1String("lr")).toDouble(), 0.2);
    // A file that is all good says "Loaded".
    const QString good = writeJson(dir_, QStringLiteral("good.json"), R"({"lr": 0.3})");
    QVERIFY(window.loadConfigFile(good, &refused, &error));
    QVERIFY(refused.isEmpty());
    QVERIFY(window.statusBar()->currentMessage().startsWith(QLatin1String("Loaded")));
  }

  // Item 2: settings saved by an older build (or edited by hand) that the
  // engine refuses are dropped with a warning when restored.
  void restoredSettingsAreChecked() {
    QSettings().setValue(QStringLiteral("setup/config"),
                         QByteArray(R"({"unknown_key": true, "batch_size": "lots", "epochs": 3, "lr": 0.2})"));
    QTest::ignoreMessage(QtWarningMsg, QRegularExpression(QStringLiteral("unknown key 'unknown_key'.*dropped")));
    QTest::ignoreMessage(QtWarningMsg, QRegularExpression(QStringLiteral("'batch_size'.*lots.*dropped")));
    MainWindow window(dir_.filePath(QStringLiteral("runs.db")));
    const QJsonObject c = window.currentConfig();
    QVERIFY(!c.contains(QLatin1String("unknown_key")));
    QCOMPARE(c.value(QLatin1String("batch_size")), RunConfig::defaults().value(QLatin1String("batch_size")));
    QCOMPARE(c.value(QLatin1String("epochs")).toInt(), 3);  // what is valid is kept
    QCOMPARE(c.value(QLatin1String("lr")).toDouble(), 0.2);
    QCOMPARE(engineRefusal(c), QString());
  }

  // Item 3: "lots" became 1, -3 became 0, an unknown model was ignored, and
  // the status bar said "Loaded". Each is refused with key, value and reason
  // (the engine's `config --validate` words), and the setting keeps its value.
  void badValuesAreRefusedWithKeyValueAndReason() {
    MainWindow window(dir_.filePath(QStringLiteral("runs.db")));
    QJsonObject before = window.currentConfig();
    before.insert(QStringLiteral("batch_size"), 96);
    before.insert(QStringLiteral("epochs"), 2);
    window.setConfig(before);
    QCOMPARE(window.currentConfig().value(QLatin1String("batch_size")).toInt(), 96);
    const QString model = window.currentConfig().value(QLatin1String("model")).toString();
    const QString path = writeJson(dir_, QStringLiteral("values.json"),
                                   R"({"batch_size": "lots", "epochs": -3, "model": "no-such-model", "lr": 0.3})");
    QStringList refused;
    QString error;
    QVERIFY2(window.loadConfigFile(path, &refused, &error), qPrintable(error));
    QCOMPARE(refused.size(), 3);
    const QString batch = refusalOf(refused, QStringLiteral("batch_size"));
    QVERIFY2(batch.contains(QLatin1String("\"lots\"")) && batch.contains(QLatin1String("expected an integer")),
             qPrintable(batch));
    const QString epochs = refusalOf(refused, QStringLiteral("epochs"));
    QVERIFY2(epochs.contains(QLatin1String("-3")) && epochs.contains(QLatin1String("range")), qPrintable(epochs));
    const QString models = refusalOf(refused, QStringLiteral("model"));
    QVERIFY2(models.contains(QLatin1String("no-such-model")) && models.contains(QLatin1String("is not one of")),
             qPrintable(models));
    const QJsonObject c = window.currentConfig();
    QCOMPARE(c.value(QLatin1String("batch_size")).toInt(), 96);
    QCOMPARE(c.value(QLatin1String("epochs")).toInt(), 2);
    QCOMPARE(c.value(QLatin1String("model")).toString(), model);
    QCOMPARE(c.value(QLatin1String("lr")).toDouble(), 0.3);  // the valid entry is taken
  }

  // The same through setConfig (presets, --config, the saved settings): the
  // bad values never reach the controls.
  void setConfigKeepsValuesItRefuses() {
    MainWindow window(dir_.filePath(QStringLiteral("runs.db")));
    QJsonObject c = window.currentConfig();
    const QJsonValue batch = c.value(QLatin1String("batch_size")), epochs = c.value(QLatin1String("epochs"));
    c.insert(QStringLiteral("batch_size"), QStringLiteral("lots"));
    c.insert(QStringLiteral("epochs"), -3);
    window.setConfig(c);
    QCOMPARE(window.currentConfig().value(QLatin1String("batch_size")), batch);
    QCOMPARE(window.currentConfig().value(QLatin1String("epochs")), epochs);
    QVERIFY2(window.statusBar()->currentMessage().contains(QLatin1String("'batch_size'")),
             qPrintable(window.statusBar()->currentMessage()));
  }

  // The rules between keys are the engine's too: a file that sets both epochs
  // and max_steps to 0 is refused as a whole, naming the rule.
  void crossKeyRuleRefusesTheFile() {
    MainWindow window(dir_.filePath(QStringLiteral("runs.db")));
    const QJsonObject before = window.currentConfig();
    const QString path = writeJson(dir_, QStringLiteral("nothing.json"), R"({"epochs": 0, "max_steps": 0, "lr": 0.3})");
    QStringList refused;
    QString error;
    QVERIFY2(window.loadConfigFile(path, &refused, &error), qPrintable(error));
    QCOMPARE(refused.size(), 1);
    QVERIFY2(refused.first().contains(QLatin1String("epochs and max_steps are both 0")), qPrintable(refused.first()));
    QCOMPARE(window.currentConfig(), before);
    // Both set to something that runs is fine, in one file.
    const QString ok = writeJson(dir_, QStringLiteral("steps.json"), R"({"epochs": 0, "max_steps": 40})");
    QVERIFY(window.loadConfigFile(ok, &refused, &error));
    QVERIFY2(refused.isEmpty(), qPrintable(refused.join(QLatin1Char('\n'))));
    QCOMPARE(window.currentConfig().value(QLatin1String("max_steps")).toInt(), 40);
  }

 private:
  QTemporaryDir dir_;
};

QTEST_MAIN(TestConfigRefusals)
#include "test_config_refusals.moc"
