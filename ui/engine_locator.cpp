// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine_locator.h"

#include <QCoreApplication>
#include <QDir>
#include <QSettings>
#include <QStandardPaths>

QString EngineLocator::enginePath() {
  const QString env = qEnvironmentVariable("TRAINBENCH_ENGINE");
  if (!env.isEmpty()) return env;
  const QString configured = QSettings().value(QStringLiteral("engine/path")).toString();
  if (!configured.isEmpty()) return configured;
  return QDir(QCoreApplication::applicationDirPath()).filePath(QStringLiteral("trainbench-engine"));
}

QString EngineLocator::defaultDatabasePath() {
  const QString dir = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation);
  QDir().mkpath(dir);
  return QDir(dir).filePath(QStringLiteral("runs.db"));
}
