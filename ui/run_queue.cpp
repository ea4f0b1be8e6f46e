// SPDX-License-Identifier: GPL-3.0-or-later
#include "run_queue.h"

#include <QTimer>

RunQueue::RunQueue(QObject* parent) : QObject(parent) {}

void RunQueue::enqueue(const QJsonObject& config) {
  pending_.append(config);
  emit pendingChanged();
  if (!current_) startNext();
}

void RunQueue::removePending(int index) {
  if (index < 0 || index >= pending_.size()) return;
  pending_.removeAt(index);
  emit pendingChanged();
}

void RunQueue::clearPending() {
  pending_.clear();
  emit pendingChanged();
}

void RunQueue::stopCurrent() {
  if (current_) current_->stop();
}

void RunQueue::killCurrent() {
  if (current_) current_->kill();
}

void RunQueue::startNext() {
  if (current_ || pending_.isEmpty()) return;
  const QJsonObject config = pending_.takeFirst();
  emit pendingChanged();
  auto* process = new EngineProcess(enginePath_, databasePath_, config, this);
  current_ = process;
  connect(process, &EngineProcess::ended, this, [this, process](const QString& status, const QString& message) {
    if (current_ == process) current_ = nullptr;
    emit runEnded(process, status, message);
    // Start the next one from the event loop, after every slot saw this end.
    QTimer::singleShot(0, this, &RunQueue::startNext);
  });
  emit launched(process);
  process->start();
}
