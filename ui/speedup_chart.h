// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QWidget>

class CompareSummaryModel;
class QCustomPlot;

// The comparison's speed-up over the baseline as horizontal bars (one per run,
// 100 % = the baseline), like the chart of an optimization ladder. Redraws
// when the summary model changes.
class SpeedupChart : public QWidget {
  Q_OBJECT
 public:
  explicit SpeedupChart(CompareSummaryModel* model, QWidget* parent = nullptr);

  void refresh();
  int barCount() const { return bars_; }
  bool exportPng(const QString& path, int width, int height);

 protected:
  void changeEvent(QEvent* event) override;

 private:
  CompareSummaryModel* model_;
  QCustomPlot* plot_;
  int bars_ = 0;
};
