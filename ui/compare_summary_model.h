// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QAbstractTableModel>
#include <QList>

#include "run_summary.h"

// One row per compared run, or per group of repeats (runs of one
// configuration): batch size, peak memory, median step time, samples/s and
// the speed-up over a chosen baseline (ratio of samples/s, as in an
// optimization ladder: 100 % = the baseline). A group shows its means and
// the speed-up's spread, "112 % ± 9 %": half the range from its slowest run
// over the baseline's fastest to its fastest over the baseline's slowest, so
// noise is not read as a speed-up.
class CompareSummaryModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Name, Batch, PeakMemory, MedianStep, SamplesPerSecond, SpeedUp, TimeToTarget, FinalAccuracy, ColumnCount };
  explicit CompareSummaryModel(QObject* parent = nullptr);

  void setRuns(const QList<RunSummary>& runs);             // one row per run
  void setGroups(const QList<QList<RunSummary>>& groups);  // one row per group
  void setBaseline(qint64 runId);                          // the row holding this run
  qint64 baseline() const { return baseline_; }
  const QList<RunSummary>& group(int row) const { return groups_[row]; }
  // NaN when either samples/s is unknown.
  double speedUp(int row) const;
  // Half-width of the speed-up's range over the repeats (NaN for single runs
  // compared with a single baseline).
  double speedUpSpread(int row) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  int baselineRow() const;

  QList<QList<RunSummary>> groups_;
  qint64 baseline_ = 0;
};
