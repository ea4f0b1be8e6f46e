// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QObject>
#include <QThread>

#include "series_data.h"

// Loads every metric series of a saved run from the store on a worker thread,
// so long runs never block the GUI. Each request opens the store read-only on
// the worker; results come back as queued signals.
class SeriesLoader : public QObject {
  Q_OBJECT
 public:
  explicit SeriesLoader(QObject* parent = nullptr);
  ~SeriesLoader() override;

  void request(const QString& databasePath, qint64 runId);  // any thread; returns at once

  // Synchronous form, used by the worker (and tests): throws tb::Error.
  static RunSeries load(const QString& databasePath, qint64 runId);

 signals:
  void loaded(qint64 runId, const RunSeries& series);
  void failed(qint64 runId, const QString& error);

 private:
  class Worker;
  QThread thread_;
  Worker* worker_ = nullptr;
};

Q_DECLARE_METATYPE(RunSeries)
