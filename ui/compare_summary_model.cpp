// SPDX-License-Identifier: GPL-3.0-or-later
#include "compare_summary_model.h"

#include <QFont>
#include <cmath>
#include <limits>

#include "run_history_model.h"

CompareSummaryModel::CompareSummaryModel(QObject* parent) : QAbstractTableModel(parent) {}

void CompareSummaryModel::setRuns(const QList<RunSummary>& runs) {
  beginResetModel();
  runs_ = runs;
  if (!runs_.isEmpty()) {
    bool found = false;
    for (const RunSummary& r : runs_) found = found || r.id == baseline_;
    if (!found) baseline_ = runs_.first().id;
  }
  endResetModel();
}

void CompareSummaryModel::setBaseline(qint64 runId) {
  baseline_ = runId;
  if (!runs_.isEmpty()) emit dataChanged(index(0, 0), index(runs_.size() - 1, ColumnCount - 1));
}

double CompareSummaryModel::speedUp(int row) const {
  const RunSummary* base = nullptr;
  for (const RunSummary& r : runs_)
    if (r.id == baseline_) base = &r;
  if (!base || row < 0 || row >= runs_.size()) return std::numeric_limits<double>::quiet_NaN();
  const RunSummary& r = runs_[row];
  if (!std::isnan(r.samplesPerSecond) && !std::isnan(base->samplesPerSecond) && base->samplesPerSecond > 0)
    return r.samplesPerSecond / base->samplesPerSecond;
  // Without throughput, compare step times at equal batch.
  if (!std::isnan(r.medianStepMs) && !std::isnan(base->medianStepMs) && r.medianStepMs > 0 &&
      r.batchSize == base->batchSize)
    return base->medianStepMs / r.medianStepMs;
  return std::numeric_limits<double>::quiet_NaN();
}

QList<int> CompareSummaryModel::sameConfiguration(int row) const {
  QList<int> rows;
  if (row < 0 || row >= runs_.size()) return rows;
  auto key = [](QJsonObject c) {
    c.remove(QStringLiteral("name"));
    return c;
  };
  const QJsonObject mine = key(runs_[row].config);
  for (int i = 0; i < runs_.size(); ++i)
    if (key(runs_[i].config) == mine) rows << i;
  return rows;
}

QString CompareSummaryModel::spreadText(int row) const {
  const QList<int> group = sameConfiguration(row);
  int baseRow = -1;
  for (int i = 0; i < runs_.size(); ++i)
    if (runs_[i].id == baseline_) baseRow = i;
  if (group.size() < 2 || baseRow < 0) return {};
  double baseMean = 0;
  int n = 0;
  for (int i : sameConfiguration(baseRow))
    if (!std::isnan(runs_[i].samplesPerSecond)) baseMean += runs_[i].samplesPerSecond, ++n;
  if (n == 0 || baseMean <= 0) return {};
  baseMean /= n;
  double sum = 0, lo = INFINITY, hi = -INFINITY;
  int m = 0;
  for (int i : group) {
    const double change = runs_[i].samplesPerSecond / baseMean - 1.0;
    if (std::isnan(change)) continue;
    sum += change, lo = std::min(lo, change), hi = std::max(hi, change), ++m;
  }
  if (m < 2) return {};
  return QStringLiteral("%1% ± %2% (n=%3)")
      .arg(QString::asprintf("%+.0f", 100.0 * sum / m))
      .arg(100.0 * (hi - lo) / 2, 0, 'f', 0)
      .arg(m);
}

int CompareSummaryModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : runs_.size(); }

int CompareSummaryModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant CompareSummaryModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid()) return {};
  const RunSummary& r = runs_[index.row()];
  if (role == Qt::FontRole && r.id == baseline_) {
    QFont f;
    f.setBold(true);
    return f;
  }
  if (role == Qt::TextAlignmentRole && index.column() != Name) return int(Qt::AlignRight | Qt::AlignVCenter);
  if (role != Qt::DisplayRole) return {};
  switch (index.column()) {
    case Name: return r.id == baseline_ ? tr("%1 (baseline)").arg(r.name) : r.name;
    case Batch: return std::isnan(r.batchSize) ? QStringLiteral("—") : QString::number(qint64(r.batchSize));
    case PeakMemory: return RunHistoryModel::formatBytes(r.peakMemoryBytes);
    case MedianStep: return RunHistoryModel::formatNumber(r.medianStepMs, 2);
    case SamplesPerSecond: return RunHistoryModel::formatNumber(r.samplesPerSecond, 1);
    case SpeedUp: {
      const double s = speedUp(index.row());
      if (std::isnan(s)) return QStringLiteral("—");
      const QString spread = spreadText(index.row());
      return QStringLiteral("%1 %").arg(s * 100.0, 0, 'f', 0) + (spread.isEmpty() ? QString() : QStringLiteral("  (%1)").arg(spread));
    }
    case TimeToTarget:
      return std::isnan(r.timeToTargetS) ? QStringLiteral("—") : QStringLiteral("%1 s").arg(r.timeToTargetS, 0, 'f', 1);
    case FinalAccuracy:
      return std::isnan(r.finalAccuracy)
                 ? QStringLiteral("—")
                 : QStringLiteral("%1 %").arg(r.finalAccuracy * (r.finalAccuracy <= 1.0 ? 100.0 : 1.0), 0, 'f', 2);
  }
  return {};
}

QVariant CompareSummaryModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case Name: return tr("Run");
    case Batch: return tr("Batch");
    case PeakMemory: return tr("Peak memory");
    case MedianStep: return tr("Median step (ms)");
    case SamplesPerSecond: return tr("Samples/s");
    case SpeedUp: return tr("Speed-up vs baseline");
    case TimeToTarget: return tr("Time to target");
    case FinalAccuracy: return tr("Final accuracy");
  }
  return {};
}
