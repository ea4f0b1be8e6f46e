// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QAbstractTableModel>
#include <QJsonObject>
#include <QList>
#include <QStringList>

// The configurations of several runs side by side: one row per key, one column
// per run. With differencesOnly, keys whose value is the same in every run are
// hidden. Cells that differ from the first run are highlighted. After the
// configuration's keys come the environment's plain entries (where and how
// each run ran: processor or GPU, instruction set, threads, library
// versions), as "environment: KEY": runs with the same settings can differ
// there, and their speed with it. Nested entries (kernel paths, probed peaks)
// stay in each run's Environment tab.
class ConfigDiffModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  static constexpr const char* kEnvironmentPrefix = "environment: ";

  explicit ConfigDiffModel(QObject* parent = nullptr);

  // environments: each run's RunSummary::environmentFacts().
  void setRuns(const QStringList& names, const QList<QJsonObject>& configs,
               const QList<QJsonObject>& environments = {});
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
