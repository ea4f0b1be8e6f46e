// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QAbstractTableModel>
#include <QJsonObject>
#include <QList>
#include <QStringList>

// The configurations of several runs side by side: one row per key, one column
// per run. With differencesOnly, keys whose value is the same in every run are
// hidden. Cells that differ from the first run are highlighted.
class ConfigDiffModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  explicit ConfigDiffModel(QObject* parent = nullptr);

  void setRuns(const QStringList& names, const QList<QJsonObject>& configs);
  void setDifferencesOnly(bool on);
  bool differencesOnly() const { return differencesOnly_; }
  QStringList shownKeys() const { return keys_; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  void rebuild();

  QStringList names_, keys_;
  QList<QJsonObject> configs_;
  bool differencesOnly_ = false;
};
