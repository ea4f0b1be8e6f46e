// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QList>
#include <QWidget>

#include "run_summary.h"

class QCustomPlot;

// Data-parallel scaling of the compared runs: training throughput (samples/s)
// against the number of processes that trained each run (its environment's
// world_size, 1 when absent), with the ideal line: the throughput of the
// fewest processes times the process ratio. Hidden until the runs span at
// least two process counts.
class ScalingChart : public QWidget {
  Q_OBJECT
 public:
  explicit ScalingChart(QWidget* parent = nullptr);

  void setRuns(const QList<RunSummary>& runs);
  int pointCount() const { return points_; }
  // Measured over ideal at the largest process count (NaN without two counts).
  double efficiencyAtLargest() const { return efficiency_; }
  bool exportPng(const QString& path, int width, int height);

  static int processesOf(const RunSummary& run);

 protected:
  void changeEvent(QEvent* event) override;

 private:
  void refresh();

  QCustomPlot* plot_;
  QList<RunSummary> runs_;
  int points_ = 0;
  double efficiency_;
};
