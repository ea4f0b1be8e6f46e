// SPDX-License-Identifier: GPL-3.0-or-later
// `trainbench --help` and `--version` answer anywhere, without a display
// (issue 26, item 10: they aborted with Qt's "could not connect to display").
#include <QProcess>
#include <QtTest>

namespace {
struct Answer {
  int exitCode = -1;
  QProcess::ExitStatus exitStatus = QProcess::CrashExit;
  QString out, err;
};

// The workbench with no display of any kind: no X, no Wayland, no platform chosen.
Answer runWithoutDisplay(const QStringList& arguments) {
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  for (const char* name : {"DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"}) env.remove(QLatin1String(name));
  QProcess p;
  p.setProcessEnvironment(env);
  p.start(QStringLiteral(TRAINBENCH_GUI_BIN), arguments);
  Answer a;
  if (!p.waitForFinished(30000)) {
    p.kill();
    p.waitForFinished();
    return a;
  }
  a.exitCode = p.exitCode();
  a.exitStatus = p.exitStatus();
  a.out = QString::fromUtf8(p.readAllStandardOutput());
  a.err = QString::fromUtf8(p.readAllStandardError());
  return a;
}
}  // namespace

class TestCommandLine : public QObject {
  Q_OBJECT
 private slots:
  void helpWithoutDisplay() {
    const Answer a = runWithoutDisplay({QStringLiteral("--help")});
    QVERIFY2(a.exitStatus == QProcess::NormalExit && a.exitCode == 0, qPrintable(a.err));
    QVERIFY2(a.out.contains(QLatin1String("--db <PATH>")) && a.out.contains(QLatin1String("--open-run <ID>")),
             qPrintable(a.out));
  }

  void versionWithoutDisplay() {
    const Answer a = runWithoutDisplay({QStringLiteral("--version")});
    QVERIFY2(a.exitStatus == QProcess::NormalExit && a.exitCode == 0, qPrintable(a.err));
    QVERIFY2(a.out.contains(QLatin1String("trainbench " TRAINBENCH_VERSION)), qPrintable(a.out));
  }
};

QTEST_GUILESS_MAIN(TestCommandLine)
#include "test_command_line.moc"
