// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QString>

// The engine process that writes a run, as the store records it
// (runs.engine_pid, runs.engine_host): is it still alive, and may this user
// stop it? Only a process on this host, owned by this user, whose command line
// is a trainbench engine's `run` (so a reused pid is never signalled).
namespace EngineOwner {

enum class Liveness { Alive, Gone, Unknown };  // Unknown: another host, or no pid recorded

Liveness liveness(qint64 pid, const QString& host);
// Empty when Stop may send SIGTERM, else the reason in words.
QString whyNotStoppable(qint64 pid, const QString& host);
// SIGTERM: the engine finishes its step, saves and exits "stopped".
bool stop(qint64 pid, const QString& host, QString* error = nullptr);
QString thisHost();

}  // namespace EngineOwner
