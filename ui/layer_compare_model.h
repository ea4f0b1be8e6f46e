// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QAbstractTableModel>

#include <vector>

#include "engine/metrics/layer_profile.h"

// Two runs' per-layer profiles side by side (Compare): one row per layer and
// phase, matched by the engine (compare_layer_profiles): the time of each
// run, B's over A's, and whether B got faster; a row only one run has is
// shown as such. DisplayRole is formatted text, Qt::UserRole the number to
// sort by (a row B lacks sorts as ratio 0: its time vanished; one A lacks as
// infinity).
class LayerCompareModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Layer, Phase, Kind, TimeA, TimeB, Ratio, Change, ColumnCount };

  explicit LayerCompareModel(QObject* parent = nullptr);
  // runA, runB: the runs' names as the Compare page shows them ("name (#id)").
  void setComparison(std::vector<tb::LayerComparisonRow> rows, const QString& runA, const QString& runB);
  const tb::LayerComparisonRow& comparison(int row) const { return rows_.at(size_t(row)); }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  QString toolTip(const tb::LayerComparisonRow& r, int column) const;

  std::vector<tb::LayerComparisonRow> rows_;
  QString runA_, runB_;
};
