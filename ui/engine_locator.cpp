// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine_locator.h"

#include <QDir>
#include <QFileInfo>
#include <QSettings>
#include <QStandardPaths>

#include "install_paths.h"

QString EngineLocator::enginePath() {
  const QString env = qEnvironmentVariable("TRAINBENCH_ENGINE");
  if (!env.isEmpty()) return env;
  const QString configured = QSettings().value(QStringLiteral("engine/path")).toString();
  if (!configured.isEmpty()) return configured;
  const QString beside = InstallPaths::besideExecutable(QStringLiteral("trainbench-engine"));
  if (QFileInfo::exists(beside)) return beside;
  // A GUI started from elsewhere (a copy, a wrapper) still finds an installed engine.
  const QString onPath = QStandardPaths::findExecutable(QStringLiteral("trainbench-engine"));
  return onPath.isEmpty() ? beside : onPath;
}

QString EngineLocator::defaultDatabasePath() {
  const QString dir = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation);
  QDir().mkpath(dir);
  return QDir(dir).filePath(QStringLiteral("runs.db"));
}
