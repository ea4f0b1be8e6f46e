// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QList>
#include <QWidget>

#include "run_summary.h"

class LayerCompareModel;
class QComboBox;
class QLabel;
class QTableView;

// The Compare page's "Layers, A against B": two of the compared runs' per-layer
// profiles side by side (LayerCompareModel), sortable: which layers a trick
// made faster, and which rows only one run has. Each run's profile is read
// from the store on a worker thread; a run without one says why.
class LayerComparePanel : public QWidget {
  Q_OBJECT
 public:
  explicit LayerComparePanel(QWidget* parent = nullptr);

  // The runs to choose A and B from: A the first, B the second.
  void setRuns(const QString& databasePath, const QList<RunSummary>& runs);
  void compare(qint64 runA, qint64 runB);  // asynchronous: comparisonReady
  qint64 runA() const { return runA_; }
  qint64 runB() const { return runB_; }
  bool loading() const { return loading_; }
  QString headerText() const;
  LayerCompareModel* model() const { return model_; }
  QTableView* view() const { return view_; }

 signals:
  void comparisonReady(qint64 runA, qint64 runB);

 private:
  QString runLabel(qint64 id) const;

  QString databasePath_;
  QList<RunSummary> runs_;
  qint64 runA_ = 0, runB_ = 0;
  bool loading_ = false;
  QComboBox *pickA_, *pickB_;
  QLabel* header_;
  QTableView* view_;
  LayerCompareModel* model_;
};
