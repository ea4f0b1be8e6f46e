// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QObject>
#include <QThread>

#include "run_summary.h"
#include "series_data.h"

// Watching the run store written by engines in other processes, without ever
// blocking the GUI thread: a worker thread keeps one read-only connection and
// polls SQLite's PRAGMA data_version, which changes only when another
// connection committed, so an idle store costs one tiny query per poll.

// The whole store: `changed` after any other process committed to it (a run
// started from the command line, a metric batch, a status).
class StoreWatcher : public QObject {
  Q_OBJECT
 public:
  explicit StoreWatcher(QObject* parent = nullptr);
  ~StoreWatcher() override;
  // Watches path (empty: nothing); polls every pollMs.
  void watch(const QString& databasePath, int pollMs = 500);

 signals:
  void changed();

 private:
  class Worker;
  QThread thread_;
  Worker* worker_ = nullptr;
};

// One run, followed live until it ends: the first `updated` carries everything
// stored so far, later ones only the newer points and events, with the run's
// row each time (status, error, summary). The row is also re-read every few
// polls when nothing was committed, and a run whose engine is gone from this
// host while the row still says running is reported "interrupted" (the
// store's derived status for a dead writer; nothing is written).
class RunFollower : public QObject {
  Q_OBJECT
 public:
  RunFollower(const QString& databasePath, qint64 runId, QObject* parent = nullptr);
  ~RunFollower() override;
  void start(int pollMs = 500);
  qint64 runId() const { return runId_; }

 signals:
  void updated(const RunSeries& newer, const RunSummary& run);
  void ended(const RunSummary& run);  // after the last `updated`
  void failed(const QString& error);

 private:
  class Worker;
  qint64 runId_;
  QThread thread_;
  Worker* worker_ = nullptr;
};
