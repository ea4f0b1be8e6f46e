// SPDX-License-Identifier: GPL-3.0-or-later
#include "compare_summary_model.h"

#include <QFont>
#include <algorithm>
#include <cmath>
#include <limits>

#include "run_history_model.h"

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Stats {
  double mean = kNaN, min = kNaN, max = kNaN;
  int n = 0;
};

Stats stats(const QList<RunSummary>& runs, double RunSummary::*field) {
  Stats s;
  double sum = 0;
  for (const RunSummary& r : runs) {
    const double v = r.*field;
    if (std::isnan(v)) continue;
    s.min = s.n == 0 ? v : std::min(s.min, v);
    s.max = s.n == 0 ? v : std::max(s.max, v);
    sum += v;
    ++s.n;
  }
  if (s.n > 0) s.mean = sum / s.n;
  return s;
}

QString accuracyText(double a) {
  return std::isnan(a) ? QStringLiteral("—") : QStringLiteral("%1 %").arg(a * (a <= 1.0 ? 100.0 : 1.0), 0, 'f', 2);
}
}  // namespace

CompareSummaryModel::CompareSummaryModel(QObject* parent) : QAbstractTableModel(parent) {}

void CompareSummaryModel::setRuns(const QList<RunSummary>& runs) {
  QList<QList<RunSummary>> groups;
  for (const RunSummary& r : runs) groups.append({r});
  setGroups(groups);
}

void CompareSummaryModel::setGroups(const QList<QList<RunSummary>>& groups) {
  beginResetModel();
  groups_ = groups;
  if (!groups_.isEmpty() && baselineRow() < 0) baseline_ = groups_.first().first().id;
  endResetModel();
}

void CompareSummaryModel::setBaseline(qint64 runId) {
  baseline_ = runId;
  if (!groups_.isEmpty()) emit dataChanged(index(0, 0), index(groups_.size() - 1, ColumnCount - 1));
}

int CompareSummaryModel::baselineRow() const {
  for (int row = 0; row < groups_.size(); ++row)
    for (const RunSummary& r : groups_[row])
      if (r.id == baseline_) return row;
  return -1;
}

double CompareSummaryModel::speedUp(int row) const {
  const int base = baselineRow();
  if (base < 0 || row < 0 || row >= groups_.size()) return kNaN;
  const Stats rate = stats(groups_[row], &RunSummary::samplesPerSecond);
  const Stats baseRate = stats(groups_[base], &RunSummary::samplesPerSecond);
  if (rate.n > 0 && baseRate.n > 0 && baseRate.mean > 0) return rate.mean / baseRate.mean;
  // Without throughput, compare step times at equal batch.
  const Stats step = stats(groups_[row], &RunSummary::medianStepMs);
  const Stats baseStep = stats(groups_[base], &RunSummary::medianStepMs);
  if (step.n > 0 && baseStep.n > 0 && step.mean > 0 &&
      groups_[row].first().batchSize == groups_[base].first().batchSize)
    return baseStep.mean / step.mean;
  return kNaN;
}

double CompareSummaryModel::speedUpSpread(int row) const {
  const int base = baselineRow();
  if (base < 0 || row < 0 || row >= groups_.size()) return kNaN;
  const Stats rate = stats(groups_[row], &RunSummary::samplesPerSecond);
  const Stats baseRate = stats(groups_[base], &RunSummary::samplesPerSecond);
  if (rate.n == 0 || baseRate.n == 0 || (rate.n < 2 && baseRate.n < 2) || baseRate.min <= 0) return kNaN;
  if (row == base) return (baseRate.max - baseRate.min) / baseRate.mean / 2;  // the baseline's own noise
  return (rate.max / baseRate.min - rate.min / baseRate.max) / 2;
}

int CompareSummaryModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : groups_.size(); }

int CompareSummaryModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant CompareSummaryModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= groups_.size()) return {};
  const QList<RunSummary>& g = groups_[index.row()];
  const RunSummary& r = g.first();
  const bool isBaseline = index.row() == baselineRow();
  if (role == Qt::FontRole && isBaseline) {
    QFont f;
    f.setBold(true);
    return f;
  }
  if (role == Qt::TextAlignmentRole && index.column() != Name) return int(Qt::AlignRight | Qt::AlignVCenter);
  if (role == Qt::ToolTipRole && g.size() > 1) {
    QStringList lines{tr("Mean of %n repeated run(s); per run:", nullptr, int(g.size()))};
    for (const RunSummary& run : g)
      lines << tr("#%1: %2 samples/s, median step %3 ms, accuracy %4")
                   .arg(run.id)
                   .arg(RunHistoryModel::formatNumber(run.samplesPerSecond, 1),
                        RunHistoryModel::formatNumber(run.medianStepMs, 2), accuracyText(run.finalAccuracy));
    return lines.join(QLatin1Char('\n'));
  }
  if (role == Qt::ToolTipRole && index.column() == Name) return RunSummary::shownName(r.name);  // names are cut at 200 px
  if (role != Qt::DisplayRole) return {};
  switch (index.column()) {
    case Name: {
      const QString shown = RunSummary::shownName(r.name);
      QString name = g.size() > 1 ? tr("%1 (×%2)").arg(shown).arg(g.size()) : shown;
      return isBaseline ? tr("%1 (baseline)").arg(name) : name;
    }
    case Batch: return std::isnan(r.batchSize) ? QStringLiteral("—") : QString::number(qint64(r.batchSize));
    case PeakMemory: return RunHistoryModel::formatBytes(stats(g, &RunSummary::peakMemoryBytes).mean);
    case MedianStep: return RunHistoryModel::formatNumber(stats(g, &RunSummary::medianStepMs).mean, 2);
    case SamplesPerSecond: return RunHistoryModel::formatNumber(stats(g, &RunSummary::samplesPerSecond).mean, 1);
    case SpeedUp: {
      const double s = speedUp(index.row()), spread = speedUpSpread(index.row());
      if (std::isnan(s)) return QStringLiteral("—");
      QString text = QStringLiteral("%1 %").arg(s * 100.0, 0, 'f', 0);
      if (!std::isnan(spread)) text += QStringLiteral(" ± %1 %").arg(spread * 100.0, 0, 'f', 0);
      return text;
    }
    case TimeToTarget: {  // target_accuracy: training seconds to it (the mean over repeats that reached it)
      const double t = stats(g, &RunSummary::timeToTargetS).mean;
      return std::isnan(t) ? QStringLiteral("—") : QStringLiteral("%1 s").arg(t, 0, 'f', 1);
    }
    case FinalAccuracy: return accuracyText(stats(g, &RunSummary::finalAccuracy).mean);
  }
  return {};
}

QVariant CompareSummaryModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal) return {};
  if (role == Qt::ToolTipRole && section == TimeToTarget)
    return tr("Training time to target_accuracy (evaluations excluded): a speed-up that costs accuracy "
              "takes longer here.");
  if (role == Qt::ToolTipRole && section == SpeedUp)
    return tr("Samples/s relative to the baseline. For repeated runs: the ratio of the means ± half the range "
              "from the slowest run over the baseline's fastest to the fastest over the baseline's slowest.");
  if (role != Qt::DisplayRole) return {};
  switch (section) {
    case Name: return tr("Run");
    case Batch: return tr("Batch");
    // Two lines, so the summary fits beside the configuration at 1280 px
    // (exports join them: TableExport).
    case PeakMemory: return tr("Peak\nmemory");
    case MedianStep: return tr("Median step\n(ms)");
    case SamplesPerSecond: return tr("Samples/s");
    case SpeedUp: return tr("Speed-up\nvs baseline");
    case TimeToTarget: return tr("Time to\ntarget");
    case FinalAccuracy: return tr("Final\naccuracy");
  }
  return {};
}
