// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QJsonObject>
#include <QList>
#include <QObject>
#include <QPointer>

#include "engine_process.h"

// Runs configurations one after another through EngineProcess.
class RunQueue : public QObject {
  Q_OBJECT
 public:
  explicit RunQueue(QObject* parent = nullptr);

  void setEnginePath(const QString& path) { enginePath_ = path; }
  QString enginePath() const { return enginePath_; }
  void setDatabasePath(const QString& path) { databasePath_ = path; }
  QString databasePath() const { return databasePath_; }

  void enqueue(const QJsonObject& config);  // starts at once when idle
  void removePending(int index);
  void clearPending();
  const QList<QJsonObject>& pending() const { return pending_; }
  EngineProcess* current() const { return current_; }
  bool isBusy() const { return current_ != nullptr; }

  void stopCurrent();
  void killCurrent();

 signals:
  void launched(EngineProcess* process);  // the process is started; it stays owned by the queue
  void runEnded(EngineProcess* process, const QString& status, const QString& message);
  void pendingChanged();

 private:
  void startNext();

  QString enginePath_, databasePath_;
  QList<QJsonObject> pending_;
  QPointer<EngineProcess> current_;
};
