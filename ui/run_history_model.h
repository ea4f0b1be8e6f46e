// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QAbstractTableModel>
#include <QList>

#include "run_summary.h"

// The run store's runs as a table: one row per run.
class RunHistoryModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Id, Name, Date, Model, Dataset, Device, Status, Batch, Duration, MedianStep, SamplesPerSecond,
                PeakMemory, FinalAccuracy, Tags, ColumnCount };
  enum Role { RunIdRole = Qt::UserRole + 1, SortRole, StatusRole, ModelRole, TagsRole, SearchTextRole, ConfigPairsRole };

  explicit RunHistoryModel(QObject* parent = nullptr);

  void setRuns(const QList<RunSummary>& runs);
  // Reads every run from the store (small query); returns false and sets
  // *error when the database cannot be read. The model is reset only when
  // the runs changed (*changed says whether).
  bool reload(const QString& databasePath, QString* error = nullptr, bool* changed = nullptr);

  const QList<RunSummary>& runs() const { return runs_; }
  const RunSummary* run(qint64 id) const;
  void setNotes(qint64 id, const QString& notes);  // after they were saved to the store
  QStringList models() const;
  QStringList statuses() const;  // every status the runs have, the usual ones first
  QStringList tags() const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

  static QString formatNumber(double v, int decimals);
  static QString formatBytes(double bytes);
  static QString formatDuration(double seconds);  // "42 s", "3 min 05 s", "1 h 02 min"
  // Every configuration value as text, and "key=value" per key (one a line),
  // for searching.
  static QStringList configValues(const QJsonObject& config);
  static QString configPairs(const QJsonObject& config);

 private:
  QList<RunSummary> runs_;
};
