// SPDX-License-Identifier: GPL-3.0-or-later
#include "config_diff_model.h"

#include <QBrush>
#include <QColor>
#include <QFont>
#include <QSet>

#include <algorithm>

#include "run_config.h"
#include "trick_catalog.h"

ConfigDiffModel::ConfigDiffModel(QObject* parent) : QAbstractTableModel(parent) {}

void ConfigDiffModel::setRuns(const QStringList& names, const QList<QJsonObject>& configs,
                              const QList<QJsonObject>& environments) {
  names_ = names;
  configs_ = configs;
  for (int i = 0; i < configs_.size() && i < environments.size(); ++i)
    for (auto it = environments[i].begin(); it != environments[i].end(); ++it)
      configs_[i].insert(QLatin1String(kEnvironmentPrefix) + it.key(), it.value());
  rebuild();
}

void ConfigDiffModel::setDifferencesOnly(bool on) {
  differencesOnly_ = on;
  rebuild();
}

void ConfigDiffModel::rebuild() {
  beginResetModel();
  if (differencesOnly_) {
    keys_ = RunConfig::differingKeys(configs_);
  } else {
    QSet<QString> all;
    for (const QJsonObject& c : configs_)
      for (const QString& k : c.keys()) all.insert(k);
    keys_ = QStringList(all.begin(), all.end());
    keys_.sort();
  }
  // The configuration first, then the environment (both sorted).
  std::stable_partition(keys_.begin(), keys_.end(), [](const QString& k) {
    return !k.startsWith(QLatin1String(kEnvironmentPrefix));
  });
  endResetModel();
}

int ConfigDiffModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : keys_.size(); }

int ConfigDiffModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : configs_.size() + 1; }

QVariant ConfigDiffModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid()) return {};
  const QString& key = keys_[index.row()];
  if (index.column() == 0) {
    if (role == Qt::DisplayRole) return key;
    if (role == Qt::ToolTipRole) {
      if (key.startsWith(QLatin1String(kEnvironmentPrefix)))
        return tr("Recorded by the engine where the run ran, not a setting (the run's Environment tab "
                  "has all of it): runs that differ here can differ in speed with the same settings.");
      const TrickInfo* t = TrickCatalog::instance().find(key);
      return t ? t->tooltip : QVariant();
    }
    return {};
  }
  const QJsonObject& c = configs_[index.column() - 1];
  const bool differs = index.column() > 1 && (c.value(key) != configs_[0].value(key) || c.contains(key) != configs_[0].contains(key));
  switch (role) {
    case Qt::DisplayRole: return c.contains(key) ? RunConfig::valueText(c.value(key)) : QStringLiteral("—");
    case Qt::BackgroundRole: return differs ? QBrush(QColor(255, 200, 60, 90)) : QVariant();
    case Qt::FontRole:
      if (differs) {
        QFont f;
        f.setBold(true);
        return f;
      }
      return {};
    default: return {};
  }
}

QVariant ConfigDiffModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  return section == 0 ? tr("Key") : names_.value(section - 1);
}
