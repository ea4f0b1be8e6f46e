// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QAbstractTableModel>

#include <nlohmann/json.hpp>

// A run's per-layer table (docs/layers.md): one row per layer and pass, and
// the step's own parts, from the engine's layer_profile_table (the same rows
// `trainbench-engine layers --json` prints). DisplayRole is formatted text,
// Qt::UserRole the number to sort by (NaN where a figure is not known).
class LayerProfileModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Layer, Kind, Phase, TimeMs, Share, GflopsPerS, GbPerS, RooflinePct, Bound, ColumnCount };

  explicit LayerProfileModel(QObject* parent = nullptr);
  // table: layer_profile_table's object; anything else empties the model.
  void setTable(const nlohmann::json& table);
  const nlohmann::json& table() const { return table_; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  nlohmann::json table_ = nlohmann::json::object(), rows_ = nlohmann::json::array();
};
