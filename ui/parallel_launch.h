// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QJsonObject>
#include <QProcessEnvironment>
#include <QString>
#include <QStringList>

// How the GUI starts a run: the engine itself, or, for `parallel: ddp` with
// `processes` above 1, mpirun starting that many engines (the command line
// and its Open MPI variables come from engine/parallel/launch.h, as for the
// tests). error is set, and nothing should start, when mpirun is missing.
struct EngineLaunch {
  QString program;
  QStringList arguments;
  QProcessEnvironment environment;
  int processes = 1;
  QString error;
};

EngineLaunch engineLaunch(const QString& enginePath, const QStringList& engineArguments,
                          const QJsonObject& config);
