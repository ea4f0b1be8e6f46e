// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QAbstractTableModel>
#include <QList>

#include "run_summary.h"

// One row per compared run: batch size, peak memory, median step time,
// samples/s and the speed-up over a chosen baseline run (ratio of samples/s,
// as in an optimization ladder: 100 % = the baseline).
class CompareSummaryModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Name, Batch, PeakMemory, MedianStep, SamplesPerSecond, SpeedUp, TimeToTarget, FinalAccuracy, ColumnCount };
  explicit CompareSummaryModel(QObject* parent = nullptr);

  void setRuns(const QList<RunSummary>& runs);
  void setBaseline(qint64 runId);
  qint64 baseline() const { return baseline_; }
  // NaN when either samples/s is unknown.
  double speedUp(int row) const;
  // Runs of the same configuration (the ladder's repeats; names aside): the
  // rows of row's group, and its spread against the baseline's group as
  // "+12% ± 9%" (mean change, half the min-max range); empty for a single run.
  QList<int> sameConfiguration(int row) const;
  QString spreadText(int row) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  QList<RunSummary> runs_;
  qint64 baseline_ = 0;
};
