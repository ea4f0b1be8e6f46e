// SPDX-License-Identifier: GPL-3.0-or-later
// One truth per setting: the GUI's controls, ranges and defaults are the
// engine's settings table (`config --schema`), tricks.json holds only the
// teaching texts and agrees with the table key for key, and the same choices
// give the same configuration JSON through the GUI and through the CLI.
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QJsonArray>
#include <QJsonDocument>
#include <QLineEdit>
#include <QProcess>
#include <QSettings>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include "config_panel.h"
#include "engine/train/config.h"
#include "install_paths.h"
#include "main_window.h"
#include "run_config.h"
#include "trick_catalog.h"
#include "trick_panel.h"

using json = nlohmann::json;

namespace {
json toJson(const QJsonObject& o) {
  return json::parse(QJsonDocument(o).toJson(QJsonDocument::Compact).toStdString());
}
QByteArray readFile(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}
QByteArray engineSchema() { return QByteArray::fromStdString(tb::config_schema_json().dump()); }
}  // namespace

class TestSettingsTruth : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    Q_INIT_RESOURCE(trainbench);
    QStandardPaths::setTestModeEnabled(true);
    qputenv("TRAINBENCH_ENGINE", "/nonexistent/trainbench-engine");  // the built-in table only
    QSettings().remove(QStringLiteral("setup/config"));  // start from the defaults
  }

  // Every trick of the table has its texts, and every text names a trick.
  void teachingTextsMatchTheTable() {
    const TrickCatalog& catalog = TrickCatalog::instance();
    QVERIFY2(catalog.problems().isEmpty(), qPrintable(catalog.problems().join(QLatin1Char('\n'))));
    int tricks = 0;
    for (const tb::ConfigKey& k : tb::config_schema())
      for (const tb::ConfigGroup& g : tb::config_groups())
        if (g.id == k.group && g.tricks) ++tricks;
    QCOMPARE(catalog.tricks().size(), tricks);
    QCOMPARE(catalog.settings().size(), int(tb::config_schema().size()));

    // The check itself: a missing text and a text for no key are both reported.
    const QJsonObject texts = QJsonDocument::fromJson(readFile(InstallPaths::dataFile(QStringLiteral("tricks/tricks.json")))).object();
    QJsonObject byKey = texts.value(QLatin1String("texts")).toObject();
    byKey.remove(QStringLiteral("amp"));
    byKey.insert(QStringLiteral("amp_typo"), texts.value(QLatin1String("texts")).toObject().value(QLatin1String("amp")));
    QJsonObject broken = texts;
    broken.insert(QStringLiteral("texts"), byKey);
    const TrickCatalog bad(engineSchema(), QJsonDocument(broken).toJson());
    const QString problems = bad.problems().join(QLatin1Char('\n'));
    QVERIFY2(problems.contains(QLatin1String("'amp' has no teaching text")), qPrintable(problems));
    QVERIFY2(problems.contains(QLatin1String("'amp_typo', which is no trick key")), qPrintable(problems));
  }

  // Each measurement mode's control says what the mode was measured to cost
  // (issue 24), read from the installed measurement/costs.json that
  // bench/tables.py writes from bench/results/ (ctest bench_tables fails when
  // the two drift); a key the file lists without figures says "not measured".
  void measurementControlsShowTheirMeasuredCost() {
    const QJsonObject costs =
        QJsonDocument::fromJson(readFile(InstallPaths::dataFile(QStringLiteral("measurement/costs.json")))).object();
    const QJsonObject byKey = costs.value(QLatin1String("costs")).toObject();
    QVERIFY2(byKey.contains(QLatin1String("profiler")) && byKey.contains(QLatin1String("measure_every")),
             "measurement/costs.json is not installed in the data folder, or lists neither mode");
    QVERIFY(TrickCatalog::instance().problems().isEmpty());

    QTemporaryDir dir;
    MainWindow window(dir.filePath(QStringLiteral("runs.db")));
    TrickPanel panel;
    panel.setDeviceContext(QStringLiteral("cuda"), 1);
    for (auto it = byKey.begin(); it != byKey.end(); ++it) {
      QWidget* control = panel.control(it.key());
      if (!control) control = window.configPanel()->control(it.key());
      QVERIFY2(control, qPrintable(it.key()));
      const QString tip = control->toolTip();
      const QJsonArray figures = it.value().toArray();
      if (figures.isEmpty()) QVERIFY2(tip.contains(QLatin1String("not measured yet")), qPrintable(tip));
      for (const QJsonValue& f : figures) {
        // The figure itself, with where it was measured (HTML-escaped in a trick's rich tooltip).
        const QString text = f.toObject().value(QLatin1String("text")).toString();
        QVERIFY2(tip.contains(text) || tip.contains(text.toHtmlEscaped()), qPrintable(it.key() + QLatin1String(": ") + tip));
      }
    }

    // A cost for a key the table does not have is reported, not dropped.
    QJsonObject typo = byKey;
    typo.insert(QStringLiteral("profilr"), QJsonArray());
    QJsonObject broken = costs;
    broken.insert(QStringLiteral("costs"), typo);
    const TrickCatalog bad(engineSchema(), readFile(InstallPaths::dataFile(QStringLiteral("tricks/tricks.json"))),
                           QJsonDocument(broken).toJson());
    QVERIFY2(bad.problems().join(QLatin1Char('\n')).contains(QLatin1String("'profilr', which is no setting")),
             qPrintable(bad.problems().join(QLatin1Char('\n'))));
  }

  // The catalogue the GUI builds at start-up is the engine binary's own
  // `config --schema` answer.
  void builtInSchemaIsTheEngineBinarysSchema() {
    QProcess p;
    p.start(QStringLiteral(TRAINBENCH_ENGINE_BIN), {QStringLiteral("config"), QStringLiteral("--schema")});
    QVERIFY(p.waitForFinished(60000));
    QCOMPARE(p.exitCode(), 0);
    QCOMPARE(json::parse(p.readAllStandardOutput().toStdString()), tb::config_schema_json());
  }

  // The drift bugs: defaults, ranges and groups were copied into the GUI and
  // had drifted (schedule constant vs cosine, workers max 64 vs 256, ...).
  void guiDefaultsRangesAndGroupsAreTheEngines() {
    QCOMPARE(toJson(RunConfig::defaults()), tb::default_config());
    QTemporaryDir dir;
    MainWindow window(dir.filePath(QStringLiteral("runs.db")));
    QCOMPARE(toJson(window.currentConfig()), tb::default_config());
    QCOMPARE(window.currentConfig().value(QLatin1String("schedule")).toString(), QStringLiteral("cosine"));

    TrickPanel panel;
    panel.setDeviceContext(QStringLiteral("cuda"), 2);
    for (const tb::ConfigKey& k : tb::config_schema()) {
      const TrickInfo* t = TrickCatalog::instance().find(QString::fromStdString(k.key));
      if (!t) continue;
      QCOMPARE(t->group, QString::fromStdString(k.group));
      QWidget* control = panel.control(t->key);
      QVERIFY2(control, k.key.c_str());
      if (auto* spin = qobject_cast<QSpinBox*>(control)) {
        QCOMPARE(double(spin->minimum()), k.min);
        QCOMPARE(double(spin->maximum()), std::min(k.max, 2147483647.0));
      }
      if (auto* spin = qobject_cast<QDoubleSpinBox*>(control)) QCOMPARE(spin->maximum(), k.max);
      if (auto* combo = qobject_cast<QComboBox*>(control)) QCOMPARE(combo->count(), int(k.choices.size()));
    }
    auto* workers = qobject_cast<QSpinBox*>(panel.control(QStringLiteral("workers")));
    QCOMPARE(workers->maximum(), 256);
    auto* accumulation = qobject_cast<QSpinBox*>(panel.control(QStringLiteral("accumulation_steps")));
    QCOMPARE(accumulation->maximum(), 4096);
    auto* clip = qobject_cast<QDoubleSpinBox*>(panel.control(QStringLiteral("clip_grad_norm")));
    QCOMPARE(clip->maximum(), 1e9);

    // The run settings panel: choice lists are the engine's (mnist was missing).
    auto* dataset = qobject_cast<QComboBox*>(window.configPanel()->control(QStringLiteral("dataset")));
    QVERIFY(dataset && dataset->findData(QStringLiteral("mnist")) >= 0);
  }

  // The same choices through the GUI's controls and through `trainbench-engine
  // run --set ...` give the same configuration JSON (the CLI's is the one the
  // engine stores with the run, read from its run_started event).
  void cliAndGuiMakeTheSameConfiguration() {
    QTemporaryDir dir;
    MainWindow window(dir.filePath(QStringLiteral("runs.db")));
    window.configPanel()->setDevices({{QStringLiteral("cuda:0"), QStringLiteral("cuda:0 — test GPU")}});
    ConfigPanel* config = window.configPanel();
    TrickPanel* tricks = window.trickPanel();
    qobject_cast<QLineEdit*>(config->control(QStringLiteral("name")))->setText(QStringLiteral("same"));
    auto* dataset = qobject_cast<QComboBox*>(config->control(QStringLiteral("dataset")));
    dataset->setCurrentIndex(dataset->findData(QStringLiteral("synthetic")));
    qobject_cast<QSpinBox*>(config->control(QStringLiteral("synthetic_size")))->setValue(64);
    qobject_cast<QSpinBox*>(config->control(QStringLiteral("test_limit")))->setValue(32);
    qobject_cast<QSpinBox*>(config->control(QStringLiteral("max_steps")))->setValue(1);
    qobject_cast<QSpinBox*>(config->control(QStringLiteral("batch_size")))->setValue(32);
    auto* optimizer = qobject_cast<QComboBox*>(config->control(QStringLiteral("optimizer")));
    optimizer->setCurrentIndex(optimizer->findData(QStringLiteral("adamw")));
    qobject_cast<QDoubleSpinBox*>(config->control(QStringLiteral("lr")))->setValue(0.002);
    auto* schedule = qobject_cast<QComboBox*>(config->control(QStringLiteral("schedule")));
    schedule->setCurrentIndex(schedule->findData(QStringLiteral("step")));
    qobject_cast<QCheckBox*>(tricks->control(QStringLiteral("pin_memory")))->setChecked(true);
    qobject_cast<QCheckBox*>(tricks->control(QStringLiteral("channels_last")))->setChecked(true);
    auto* amp = qobject_cast<QComboBox*>(tricks->control(QStringLiteral("amp")));
    amp->setCurrentIndex(amp->findText(QStringLiteral("bf16")));
    qobject_cast<QSpinBox*>(tricks->control(QStringLiteral("workers")))->setValue(2);
    qobject_cast<QDoubleSpinBox*>(tricks->control(QStringLiteral("clip_grad_norm")))->setValue(2.5);
    qobject_cast<QCheckBox*>(tricks->control(QStringLiteral("grad_set_to_none")))->setChecked(false);
    const json gui = toJson(window.currentConfig());

    QProcess p;
    p.start(QStringLiteral(TRAINBENCH_ENGINE_BIN),
            {"run", "--db", dir.filePath(QStringLiteral("cli.db")), "--events", "jsonl", "--set", "name=same",
             "--set", "dataset=synthetic", "--set", "synthetic_size=64", "--set", "test_limit=32", "--set",
             "max_steps=1", "--set", "batch_size=32", "--set", "optimizer=adamw", "--set", "lr=0.002", "--set",
             "schedule=step", "--set", "pin_memory=true", "--set", "channels_last=true", "--set", "amp=bf16",
             "--set", "workers=2", "--set", "clip_grad_norm=2.5", "--set", "grad_set_to_none=false"});
    QVERIFY(p.waitForFinished(120000));
    QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
    json cli;
    for (const QByteArray& line : p.readAllStandardOutput().split('\n')) {
      if (line.trimmed().isEmpty()) continue;
      const json event = json::parse(line.toStdString());
      if (event.value("type", "") == "run_started") cli = event.at("config");
    }
    QVERIFY2(!cli.is_null(), "no run_started event on stdout");
    for (const auto& [key, value] : cli.items())
      QVERIFY2(gui.contains(key) && gui[key] == value,
               qPrintable(QStringLiteral("%1: cli %2, gui %3")
                              .arg(QString::fromStdString(key), QString::fromStdString(value.dump()),
                                   QString::fromStdString(gui.value(key, json()).dump()))));
    QCOMPARE(gui, cli);
  }
};

QTEST_MAIN(TestSettingsTruth)
#include "test_settings_truth.moc"
