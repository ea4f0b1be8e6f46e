// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine_owner.h"

#include <QCoreApplication>
#include <QFile>
#include <QFileInfo>
#include <cerrno>
#include <csignal>
#include <sys/types.h>
#include <unistd.h>

#include "engine/store/run_store.h"

namespace EngineOwner {
namespace {
QString tr(const char* text) { return QCoreApplication::translate("EngineOwner", text); }

// argv of a process of this host (empty when it is gone or unreadable).
QStringList commandLine(qint64 pid) {
  QFile f(QStringLiteral("/proc/%1/cmdline").arg(pid));
  if (!f.open(QIODevice::ReadOnly)) return {};
  QStringList args;
  for (const QByteArray& a : f.readAll().split('\0'))
    if (!a.isEmpty()) args << QString::fromLocal8Bit(a);
  return args;
}

// A trainbench engine's run: some argument names a trainbench engine binary
// (itself or a script it runs), followed later by the `run` command.
bool isEngineRun(const QStringList& args) {
  for (int i = 0; i < args.size(); ++i)
    if (QFileInfo(args[i]).fileName().contains(QLatin1String("engine"), Qt::CaseInsensitive) &&
        args.mid(i + 1).contains(QLatin1String("run")))
      return true;
  return false;
}
}  // namespace

QString thisHost() { return QString::fromStdString(tb::this_host_name()); }

Liveness liveness(qint64 pid, const QString& host) {
  if (pid <= 0 || host.isEmpty() || host != thisHost()) return Liveness::Unknown;
  if (::kill(pid_t(pid), 0) == 0 || errno == EPERM) return Liveness::Alive;
  return errno == ESRCH ? Liveness::Gone : Liveness::Unknown;
}

QString whyNotStoppable(qint64 pid, const QString& host) {
  if (pid <= 0) return tr("the store does not say which process writes this run");
  if (host != thisHost()) return tr("its engine runs on another machine (%1)").arg(host);
  if (::kill(pid_t(pid), 0) != 0)
    return errno == EPERM ? tr("its engine (pid %1) belongs to another user").arg(pid)
                          : tr("its engine (pid %1) is no longer running").arg(pid);
  if (!isEngineRun(commandLine(pid))) return tr("pid %1 is no longer a trainbench engine").arg(pid);
  return {};
}

bool stop(qint64 pid, const QString& host, QString* error) {
  const QString why = whyNotStoppable(pid, host);
  if (!why.isEmpty()) {
    if (error) *error = why;
    return false;
  }
  if (::kill(pid_t(pid), SIGTERM) != 0) {
    if (error) *error = tr("could not signal pid %1: %2").arg(pid).arg(QString::fromLocal8Bit(strerror(errno)));
    return false;
  }
  return true;
}

}  // namespace EngineOwner
