// SPDX-License-Identifier: GPL-3.0-or-later
// Where the GUI finds its files: the data folder relative to the executable
// (the build tree mirrors the install tree), TRAINBENCH_DATA_DIR over it, a
// missing folder gives empty results instead of a crash, and the engine beside
// the executable. The installed layout itself is run by scripts/check-package.sh.
#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include "engine_locator.h"
#include "install_paths.h"
#include "preset_library.h"

class TestInstallPaths : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    qunsetenv("TRAINBENCH_DATA_DIR");
    qunsetenv("TRAINBENCH_ENGINE");
  }

  void dataBesideTheExecutable() {
    // build/bin/ui_test_install_paths -> build/share/trainbench, as bin -> share/trainbench.
    const QString expected =
        QDir::cleanPath(QCoreApplication::applicationDirPath() + QStringLiteral("/../share/trainbench"));
    QCOMPARE(InstallPaths::dataDir(), expected);
    QVERIFY2(QFileInfo(InstallPaths::dataFile(QStringLiteral("tricks/tricks.json"))).isFile(),
             qPrintable(InstallPaths::dataFile(QStringLiteral("tricks/tricks.json"))));
    QVERIFY(QFileInfo(InstallPaths::dataFile(QStringLiteral("presets"))).isDir());
  }

  void environmentOverrides() {
    QTemporaryDir dir;
    QVERIFY(QDir(dir.path()).mkpath(QStringLiteral("presets")));
    QFile preset(dir.filePath(QStringLiteral("presets/only.json")));
    QVERIFY(preset.open(QIODevice::WriteOnly));
    preset.write(R"({"name": "Only one", "description": "from TRAINBENCH_DATA_DIR", "overrides": {}})");
    preset.close();
    qputenv("TRAINBENCH_DATA_DIR", dir.path().toLocal8Bit());
    QCOMPARE(InstallPaths::dataDir(), QDir::cleanPath(dir.path()));
    const QList<Preset> presets = PresetLibrary::builtIn();
    QCOMPARE(presets.size(), 1);
    QCOMPARE(presets.first().name, QStringLiteral("Only one"));

    // A data folder that does not exist: no presets, no crash (and one warning).
    qputenv("TRAINBENCH_DATA_DIR", dir.filePath(QStringLiteral("missing")).toLocal8Bit());
    QVERIFY(PresetLibrary::builtIn().isEmpty());
    qunsetenv("TRAINBENCH_DATA_DIR");
  }

  void engineBesideTheExecutable() {
    // The test binaries sit in build/bin beside trainbench-engine, as installed programs in bin/.
    const QString beside = QDir(QCoreApplication::applicationDirPath()).filePath(QStringLiteral("trainbench-engine"));
    QVERIFY2(QFileInfo(beside).isExecutable(), qPrintable(beside));
    QCOMPARE(EngineLocator::enginePath(), beside);
    qputenv("TRAINBENCH_ENGINE", "/elsewhere/trainbench-engine");
    QCOMPARE(EngineLocator::enginePath(), QStringLiteral("/elsewhere/trainbench-engine"));
    qunsetenv("TRAINBENCH_ENGINE");
  }
};

QTEST_MAIN(TestInstallPaths)
#include "test_install_paths.moc"
