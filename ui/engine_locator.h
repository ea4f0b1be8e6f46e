// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QString>

// Where the engine binary and the default run database are.
class EngineLocator {
 public:
  // $TRAINBENCH_ENGINE, else the QSettings key engine/path, else
  // trainbench-engine next to this executable (installed or build tree), else
  // the one on PATH.
  static QString enginePath();
  // QStandardPaths::AppDataLocation + "/runs.db" (the folder is created).
  static QString defaultDatabasePath();
};
