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
      return std::isnan(s) ? QStringLiteral("—") : QStringLiteral("%1 %").arg(s * 100.0, 0, 'f', 0);
    }
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
    case FinalAccuracy: return tr("Final accuracy");
  }
  return {};
}
