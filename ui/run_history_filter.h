// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QSortFilterProxyModel>

// Search text plus status, model and tag filters over RunHistoryModel; sorts
// numbers as numbers.
class RunHistoryFilter : public QSortFilterProxyModel {
  Q_OBJECT
 public:
  explicit RunHistoryFilter(QObject* parent = nullptr);

  void setSearchText(const QString& text);
  void setStatusFilter(const QString& status);  // empty = all
  void setModelFilter(const QString& model);
  void setTagFilter(const QString& tag);

 protected:
  bool filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const override;
  bool lessThan(const QModelIndex& left, const QModelIndex& right) const override;

 private:
  QString search_, status_, model_, tag_;
};
