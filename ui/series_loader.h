// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QObject>
#include <QThread>
#include <map>
#include <string>

#include "series_data.h"

namespace tb {
class RunStore;
struct RunRecord;
}  // namespace tb

// Reads one run's series out of the store a piece at a time: every read()
// returns only what was committed since the previous one (points with a larger
// step or epoch per series, newer events), so following a running run costs
// one indexed query per series. SeriesLoader reads once; RunFollower repeats.
class RunSeriesReader {
 public:
  explicit RunSeriesReader(qint64 runId) : runId_(runId) {}

  // Throws tb::Error, or std::runtime_error when the run is not in the store.
  // *record (optional) receives the run's row as read before the points.
  RunSeries read(const tb::RunStore& store, tb::RunRecord* record = nullptr);
  qint64 runId() const { return runId_; }

 private:
  qint64 runId_;
  double startWallSeconds_ = 0;
  int stepsPerEpoch_ = 0;
  std::map<std::string, int64_t> lastStep_, lastEpoch_;
  int64_t lastEvent_ = 0;
};

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
