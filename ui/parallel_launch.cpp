// SPDX-License-Identifier: GPL-3.0-or-later
#include "parallel_launch.h"

#include <QObject>
#include <exception>

#include "engine/parallel/launch.h"

EngineLaunch engineLaunch(const QString& enginePath, const QStringList& engineArguments,
                          const QJsonObject& config) {
  EngineLaunch l;
  l.environment = QProcessEnvironment::systemEnvironment();
  const bool ddp = config.value(QLatin1String("parallel")).toString() == QLatin1String("ddp");
  l.processes = ddp ? config.value(QLatin1String("processes")).toInt(1) : 1;
  if (l.processes <= 1) {
    l.processes = 1;
    l.program = enginePath;
    l.arguments = engineArguments;
    return l;
  }
  std::vector<std::string> args;
  for (const QString& a : engineArguments) args.push_back(a.toStdString());
  try {
    const tb::MpirunCommand c = tb::mpirun_command(l.processes, enginePath.toStdString(), args);
    l.program = QString::fromStdString(c.argv[0]);
    for (size_t i = 1; i < c.argv.size(); ++i) l.arguments << QString::fromStdString(c.argv[i]);
    for (const auto& [k, v] : c.env) l.environment.insert(QString::fromStdString(k), QString::fromStdString(v));
  } catch (const std::exception& e) {
    l.error = QObject::tr("cannot start %1 processes for parallel: ddp: %2")
                  .arg(l.processes)
                  .arg(QString::fromUtf8(e.what()));
  }
  return l;
}
