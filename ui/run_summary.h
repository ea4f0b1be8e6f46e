// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QJsonObject>
#include <QMetaType>
#include <QString>

#include "engine/store/run_store.h"

// The numbers the history and comparison tables show for one run, read from a
// store record (its summary, config and environment), tolerant of summaries
// that lack some of them (NaN then).
struct RunSummary {
  qint64 id = 0;
  QString name, createdAt, startedAt, finishedAt, model, dataset, device, status, tags, notes, error;
  double medianStepMs, samplesPerSecond, peakMemoryBytes, finalAccuracy;
  double timeToTargetS;  // training seconds to target_accuracy; NaN when not set or not reached
  double batchSize;
  double wallSeconds;  // started_at to finished_at (NaN while running or unknown)
  qint64 enginePid = 0;  // the process that writes the run, on engineHost
  QString engineHost;
  QJsonObject config, summary, environment, tricks;

  RunSummary();
  static RunSummary fromRecord(const tb::RunRecord& record);
  // A run's name as tabs and messages show it ("unnamed run" for "").
  static QString shownName(const QString& name);
  // A configuration's run name, or the one the engine gives a run without
  // one (tb::default_run_name: model and batch size).
  static QString nameOf(const QJsonObject& config);
  static QJsonObject toQt(const nlohmann::json& json);  // object or {}
  bool isTerminal() const;  // finished, failed, stopped, interrupted: nothing more will be written
  // Where and how the run ran (tb::environment_facts): the environment's
  // plain entries. Runs that differ here are not repeats of each other.
  QJsonObject environmentFacts() const;
};

Q_DECLARE_METATYPE(RunSummary)
