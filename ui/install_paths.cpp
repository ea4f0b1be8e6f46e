// SPDX-License-Identifier: GPL-3.0-or-later
#include "install_paths.h"

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>

#ifndef TRAINBENCH_BIN_TO_DATA
#error "TRAINBENCH_BIN_TO_DATA (bin -> share/trainbench, relative) is set by ui/CMakeLists.txt"
#endif

namespace InstallPaths {

QString dataDir() {
  const QString env = qEnvironmentVariable("TRAINBENCH_DATA_DIR");
  const QString dir = !env.isEmpty()
                          ? QDir::cleanPath(env)
                          : QDir::cleanPath(QDir(QCoreApplication::applicationDirPath())
                                                .filePath(QStringLiteral(TRAINBENCH_BIN_TO_DATA)));
  static bool warned = false;
  if (!warned && !QFileInfo(dir).isDir()) {
    warned = true;
    qWarning("trainbench: the data folder %s (presets, trick texts) does not exist; "
             "reinstall, or set TRAINBENCH_DATA_DIR",
             qPrintable(dir));
  }
  return dir;
}

QString dataFile(const QString& relative) { return QDir(dataDir()).filePath(relative); }

QString besideExecutable(const QString& name) {
  return QDir(QCoreApplication::applicationDirPath()).filePath(name);
}

}  // namespace InstallPaths
