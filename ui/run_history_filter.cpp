// SPDX-License-Identifier: GPL-3.0-or-later
#include "run_history_filter.h"

#include "run_history_model.h"

RunHistoryFilter::RunHistoryFilter(QObject* parent) : QSortFilterProxyModel(parent) {
  setSortRole(RunHistoryModel::SortRole);
}

void RunHistoryFilter::setSearchText(const QString& text) {
  search_ = text.trimmed();
  invalidateFilter();
}

void RunHistoryFilter::setStatusFilter(const QString& status) {
  status_ = status;
  invalidateFilter();
}

void RunHistoryFilter::setModelFilter(const QString& model) {
  model_ = model;
  invalidateFilter();
}

void RunHistoryFilter::setTagFilter(const QString& tag) {
  tag_ = tag;
  invalidateFilter();
}

bool RunHistoryFilter::filterAcceptsRow(int row, const QModelIndex& parent) const {
  const QModelIndex index = sourceModel()->index(row, 0, parent);
  if (!status_.isEmpty() && index.data(RunHistoryModel::StatusRole).toString() != status_) return false;
  if (!model_.isEmpty() && index.data(RunHistoryModel::ModelRole).toString() != model_) return false;
  if (!tag_.isEmpty()) {
    const QStringList tags = index.data(RunHistoryModel::TagsRole).toString().split(QLatin1Char(','), Qt::SkipEmptyParts);
    bool found = false;
    for (const QString& t : tags) found = found || t.trimmed() == tag_;
    if (!found) return false;
  }
  if (!search_.isEmpty()) {
    // A word matches the run's texts and configuration values; "key=value"
    // (or a prefix such as "lr=0.") matches one setting.
    const QString text = index.data(RunHistoryModel::SearchTextRole).toString();
    const QString pairs = QLatin1Char('\n') + index.data(RunHistoryModel::ConfigPairsRole).toString();
    for (const QString& word : search_.split(QLatin1Char(' '), Qt::SkipEmptyParts)) {
      const bool found = word.contains(QLatin1Char('=')) ? pairs.contains(QLatin1Char('\n') + word, Qt::CaseInsensitive)
                                                        : text.contains(word, Qt::CaseInsensitive);
      if (!found) return false;
    }
  }
  return true;
}

bool RunHistoryFilter::lessThan(const QModelIndex& left, const QModelIndex& right) const {
  const QVariant a = left.data(sortRole()), b = right.data(sortRole());
  if (a.typeId() == QMetaType::Double && b.typeId() == QMetaType::Double) return a.toDouble() < b.toDouble();
  return QString::localeAwareCompare(a.toString(), b.toString()) < 0;
}
