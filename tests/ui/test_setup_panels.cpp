// SPDX-License-Identifier: GPL-3.0-or-later
// The Set-up page: every trick has a control and texts, toggles become the
// right configuration JSON, tricks the device cannot use are disabled with a
// reason, presets apply, configurations round-trip through JSON files.
#include <QCheckBox>
#include <QComboBox>
#include <QJsonArray>
#include <QLabel>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include "config_panel.h"
#include "engine_info.h"
#include "main_window.h"
#include "preset_library.h"
#include "run_config.h"
#include "run_dashboard.h"
#include "trick_catalog.h"
#include "trick_panel.h"

class TestSetupPanels : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    Q_INIT_RESOURCE(trainbench);
    QStandardPaths::setTestModeEnabled(true);
    qputenv("TRAINBENCH_ENGINE", "/nonexistent/trainbench-engine");  // no engine needed here
  }

  void catalogCoversEveryTrickKey() {
    // The trick keys of the engine contract (TRICKS.md).
    const QStringList keys{"amp", "workers", "pin_memory", "non_blocking", "h2d_uint8", "cudnn_benchmark",
                           "channels_last", "grad_set_to_none", "conv_bias_before_bn", "fuse_pointwise",
                           "optimizer_foreach", "accumulation_steps", "clip_grad_norm", "device_side_init",
                           "gpu_augment", "sync_every_step", "anomaly_check", "profiler", "eval_inference_mode",
                           "deterministic", "empty_cache_between_phases", "parallel", "pad_channels_to",
                           "cuda_graphs", "lr_scaling", "warmup_steps"};
    const TrickCatalog& catalog = TrickCatalog::instance();
    QCOMPARE(catalog.groups().size(), 7);
    for (const QString& key : keys) {
      const TrickInfo* t = catalog.find(key);
      QVERIFY2(t, qPrintable(key));
      QVERIFY2(!t->tooltip.isEmpty() && !t->what.isEmpty() && !t->why.isEmpty() && !t->whenNot.isEmpty() &&
                   !t->plot.isEmpty(),
               qPrintable(key));
      QVERIFY2(!t->backends.isEmpty(), qPrintable(key));
      const QString html = TrickCatalog::learnMoreHtml(*t);
      QVERIFY(html.contains(QLatin1String("Why it helps")) && html.contains(QLatin1String("Which plot should move")));
    }
    TrickPanel panel;
    for (const QString& key : keys) QVERIFY2(panel.control(key), qPrintable(key));
  }

  void togglesProduceConfigJson() {
    TrickPanel panel;
    panel.setDeviceContext(QStringLiteral("cuda"), 1);
    QSignalSpy changed(&panel, &TrickPanel::changed);
    auto* pin = qobject_cast<QCheckBox*>(panel.control(QStringLiteral("pin_memory")));
    QVERIFY(pin && pin->isEnabled());
    QCOMPARE(panel.values().value(QLatin1String("pin_memory")).toBool(), false);
    QTest::mouseClick(pin, Qt::LeftButton, {}, QPoint(5, pin->height() / 2));
    QCOMPARE(panel.values().value(QLatin1String("pin_memory")).toBool(), true);
    QVERIFY(changed.count() >= 1);

    auto* amp = qobject_cast<QComboBox*>(panel.control(QStringLiteral("amp")));
    amp->setCurrentIndex(amp->findText(QStringLiteral("bf16")));
    QCOMPARE(panel.values().value(QLatin1String("amp")).toString(), QStringLiteral("bf16"));
    auto* workers = qobject_cast<QSpinBox*>(panel.control(QStringLiteral("workers")));
    workers->setValue(6);
    QCOMPARE(panel.values().value(QLatin1String("workers")).toInt(), 6);
    auto* pad = qobject_cast<QComboBox*>(panel.control(QStringLiteral("pad_channels_to")));
    pad->setCurrentIndex(pad->findText(QStringLiteral("8")));
    QCOMPARE(panel.values().value(QLatin1String("pad_channels_to")).toInt(), 8);
    QVERIFY(panel.values().value(QLatin1String("pad_channels_to")).isDouble());  // a number, not "8"

    // Through the main window the tricks join the rest of the configuration.
    QTemporaryDir dir;
    MainWindow window(dir.filePath(QStringLiteral("runs.db")));
    window.configPanel()->setDevices({{QStringLiteral("cuda:0"), QStringLiteral("cuda:0 — test GPU")}});
    QCOMPARE(window.configPanel()->deviceBackend(), QStringLiteral("cuda"));
    auto* graphs = qobject_cast<QCheckBox*>(window.trickPanel()->control(QStringLiteral("cuda_graphs")));
    graphs->setChecked(true);
    const QJsonObject config = window.currentConfig();
    QCOMPARE(config.value(QLatin1String("cuda_graphs")).toBool(), true);
    QCOMPARE(config.value(QLatin1String("model")).toString(), QStringLiteral("fmnist-cnn"));
    QCOMPARE(config.value(QLatin1String("dataset")).toString(), QStringLiteral("fashion-mnist"));
    QVERIFY(config.value(QLatin1String("synthetic_shape")).isArray());
    for (const TrickInfo& t : TrickCatalog::instance().tricks()) QVERIFY2(config.contains(t.key), qPrintable(t.key));
  }

  void tricksThatDoNotApplyAreDisabledWithReason() {
    TrickPanel panel;
    panel.setDeviceContext(QStringLiteral("cuda"), 1);
    auto* pin = qobject_cast<QCheckBox*>(panel.control(QStringLiteral("pin_memory")));
    pin->setChecked(true);
    panel.setDeviceContext(QStringLiteral("cpu"), 0);
    QVERIFY(!pin->isEnabled());
    QVERIFY(!panel.disabledReason(QStringLiteral("pin_memory")).isEmpty());
    auto* reason = panel.findChild<QLabel*>(QStringLiteral("reason_pin_memory"));
    QVERIFY(reason && !reason->isHidden() && reason->text().contains(QLatin1String("CUDA")));
    // Disabled tricks send their neutral default; the choice comes back with a GPU.
    QCOMPARE(panel.values().value(QLatin1String("pin_memory")).toBool(), false);
    QVERIFY(panel.isTrickEnabled(QStringLiteral("workers")));
    panel.setDeviceContext(QStringLiteral("cuda"), 1);
    QCOMPARE(panel.values().value(QLatin1String("pin_memory")).toBool(), true);
    // Data parallel runs over processes: one GPU is enough (ddp over NCCL),
    // and on the CPU it follows the build's MPI (the schema's backends).
    QVERIFY(panel.isTrickEnabled(QStringLiteral("parallel")));
    panel.setDeviceContext(QStringLiteral("cpu"), 0);
    QCOMPARE(panel.isTrickEnabled(QStringLiteral("parallel")),
             TrickCatalog::instance().find(QStringLiteral("parallel"))->backends.contains(QLatin1String("cpu")));
    panel.setDeviceContext(QStringLiteral("cuda"), 2);
    QVERIFY(panel.isTrickEnabled(QStringLiteral("parallel")));
    // The engine's schema may narrow what a backend honours.
    panel.setBackendSupport({{QStringLiteral("workers"), {QStringLiteral("cuda")}}});
    panel.setDeviceContext(QStringLiteral("cpu"), 0);
    QVERIFY(!panel.isTrickEnabled(QStringLiteral("workers")));
  }

  void presetsApply() {
    const QList<Preset> presets = PresetLibrary::builtIn();
    QStringList names;
    for (const Preset& p : presets) names << p.name;
    QVERIFY(names.contains(QStringLiteral("Baseline")));
    QVERIFY(names.contains(QStringLiteral("All tricks")));
    QVERIFY(presets.size() >= 6);  // + one recipe per seed article (000, 001, 003, 004)
    // Recipes are named by what they do; the article is named in the tooltip.
    for (const Preset& p : presets) {
      QVERIFY2(!p.name.contains(QLatin1String("seed")) && !p.name.startsWith(QLatin1String("Recipe:")), qPrintable(p.name));
      if (!p.source.isEmpty()) QVERIFY(p.toolTip().contains(p.source));
    }
    QCOMPARE(std::count_if(presets.begin(), presets.end(), [](const Preset& p) { return p.source.contains(QLatin1String("seed")); }), 4);

    QTemporaryDir dir;
    MainWindow window(dir.filePath(QStringLiteral("runs.db")));
    window.configPanel()->setDevices({{QStringLiteral("cuda:0"), QStringLiteral("cuda:0 — test GPU")}});
    QCOMPARE(window.configPanel()->deviceBackend(), QStringLiteral("cuda"));
    QVERIFY(window.applyPreset(QStringLiteral("All tricks")));
    QJsonObject c = window.currentConfig();
    QCOMPARE(c.value(QLatin1String("amp")).toString(), QStringLiteral("bf16"));
    QCOMPARE(c.value(QLatin1String("pin_memory")).toBool(), true);
    QCOMPARE(c.value(QLatin1String("workers")).toInt(), 4);
    QCOMPARE(c.value(QLatin1String("conv_bias_before_bn")).toBool(), false);
    QVERIFY(window.applyPreset(QStringLiteral("Baseline")));
    c = window.currentConfig();
    QCOMPARE(c.value(QLatin1String("amp")).toString(), QStringLiteral("off"));
    QCOMPARE(c.value(QLatin1String("pin_memory")).toBool(), false);
    QCOMPARE(c.value(QLatin1String("workers")).toInt(), 0);
    QCOMPARE(c.value(QLatin1String("grad_set_to_none")).toBool(), false);  // the memset baseline
    QCOMPARE(c.value(QLatin1String("model")).toString(), QStringLiteral("fmnist-cnn"));  // kept
    QVERIFY(window.applyPreset(QStringLiteral("Memory-lean recipe: fp16, batch 128, uint8 copies")));
    c = window.currentConfig();
    QCOMPARE(c.value(QLatin1String("batch_size")).toInt(), 128);
    QCOMPARE(c.value(QLatin1String("h2d_uint8")).toBool(), true);
    QVERIFY(!window.applyPreset(QStringLiteral("no such preset")));
  }

  void configRoundTripsThroughJsonFile() {
    QTemporaryDir dir;
    MainWindow window(dir.filePath(QStringLiteral("runs.db")));
    window.configPanel()->setDevices({{QStringLiteral("cuda:0"), QStringLiteral("cuda:0 — test GPU")}});
    QCOMPARE(window.configPanel()->deviceBackend(), QStringLiteral("cuda"));
    QJsonObject c = window.currentConfig();
    c.insert(QStringLiteral("name"), QStringLiteral("round trip"));
    c.insert(QStringLiteral("dataset"), QStringLiteral("synthetic"));
    c.insert(QStringLiteral("synthetic_shape"), QJsonArray{3, 64, 48});
    c.insert(QStringLiteral("batch_size"), 256);
    c.insert(QStringLiteral("optimizer"), QStringLiteral("lamb"));
    c.insert(QStringLiteral("channels_last"), true);
    c.insert(QStringLiteral("clip_grad_norm"), 2.5);
    window.setConfig(c);
    const QString path = dir.filePath(QStringLiteral("config.json"));
    QString error;
    QVERIFY2(RunConfig::save(window.currentConfig(), path, &error), qPrintable(error));

    MainWindow other(dir.filePath(QStringLiteral("runs2.db")));
    other.configPanel()->setDevices({{QStringLiteral("cuda:0"), QStringLiteral("cuda:0 — test GPU")}});
    QJsonObject loaded;
    QVERIFY2(RunConfig::load(path, &loaded, &error), qPrintable(error));
    other.setConfig(loaded);
    QCOMPARE(other.currentConfig(), window.currentConfig());
    QCOMPARE(other.currentConfig().value(QLatin1String("synthetic_shape")).toArray(), (QJsonArray{3, 64, 48}));
    QCOMPARE(other.currentConfig().value(QLatin1String("optimizer")).toString(), QStringLiteral("lamb"));

    // A broken file is refused with a reason.
    QFile bad(dir.filePath(QStringLiteral("bad.json")));
    QVERIFY(bad.open(QIODevice::WriteOnly));
    bad.write("{ not json");
    bad.close();
    QVERIFY(!RunConfig::load(bad.fileName(), &loaded, &error));
    QVERIFY(!error.isEmpty());
  }

  void differingKeys() {
    QJsonObject a{{"x", 1}, {"y", true}, {"z", "s"}};
    QJsonObject b{{"x", 1}, {"y", false}, {"w", 2}};
    QCOMPARE(RunConfig::differingKeys({a, b}), (QStringList{"w", "y", "z"}));
    QCOMPARE(RunConfig::differingKeys({a, a}), QStringList());
  }

  void plotsNameTheTricksThatMoveThem() {
    const QString breakdown = RunDashboard::tricksThatMove(QStringLiteral("Step-time breakdown (stacked)"));
    QVERIFY2(breakdown.contains(QLatin1String("Pinned host memory")), qPrintable(breakdown));
    QVERIFY(breakdown.contains(QLatin1String("Data-loader workers")));
    const QString memory = RunDashboard::tricksThatMove(QStringLiteral("Memory"));
    QVERIFY2(memory.contains(QLatin1String("Mixed precision")), qPrintable(memory));
    QVERIFY(!memory.contains(QLatin1String("Data-loader workers")));
    QVERIFY(RunDashboard::tricksThatMove(QStringLiteral("no such plot")).isEmpty());
  }

  void engineSchemaParsing() {
    const QByteArray schema = R"({"version":1,"keys":[{"key":"pin_memory","backends":"cuda"},
      {"key":"workers","backends":"all"},{"key":"amp","backends":["cuda"]}]})";
    const auto support = EngineInfo::parseSchemaBackends(schema);
    QCOMPARE(support.value(QStringLiteral("pin_memory")), QStringList{QStringLiteral("cuda")});
    QCOMPARE(support.value(QStringLiteral("workers")), (QStringList{QStringLiteral("cpu"), QStringLiteral("cuda")}));
    QCOMPARE(support.value(QStringLiteral("amp")), QStringList{QStringLiteral("cuda")});
  }

};

QTEST_MAIN(TestSetupPanels)
#include "test_setup_panels.moc"
