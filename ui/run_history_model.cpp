// SPDX-License-Identifier: GPL-3.0-or-later
#include "run_history_model.h"

#include "palette_colors.h"

#include <QBrush>
#include <QColor>
#include <QDateTime>
#include <QGuiApplication>
#include <QJsonArray>
#include <QJsonDocument>
#include <QSet>
#include <cmath>
#include <exception>

RunHistoryModel::RunHistoryModel(QObject* parent) : QAbstractTableModel(parent) {}

void RunHistoryModel::setRuns(const QList<RunSummary>& runs) {
  beginResetModel();
  runs_ = runs;
  endResetModel();
}

bool RunHistoryModel::reload(const QString& databasePath, QString* error, bool* changed) {
  try {
    // Runs whose engine is gone read as "interrupted" (RunStore derives it).
    tb::RunStore store(databasePath.toStdString());
    QList<RunSummary> runs;
    for (const tb::RunRecord& r : store.list_runs()) runs.append(RunSummary::fromRecord(r));
    // Only reset (which loses the view's scroll position) when something changed.
    bool same = runs.size() == runs_.size();
    for (int i = 0; same && i < runs.size(); ++i) {
      const RunSummary &a = runs[i], &b = runs_[i];
      same = a.id == b.id && a.name == b.name && a.status == b.status && a.tags == b.tags && a.notes == b.notes &&
             a.summary == b.summary && a.error == b.error && a.finishedAt == b.finishedAt;
    }
    if (!same) setRuns(runs);
    if (changed) *changed = !same;
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
    if (changed) *changed = !runs_.isEmpty();
    setRuns({});
    return false;
  }
}

const RunSummary* RunHistoryModel::run(qint64 id) const {
  for (const RunSummary& r : runs_)
    if (r.id == id) return &r;
  return nullptr;
}

void RunHistoryModel::setNotes(qint64 id, const QString& notes) {
  for (int row = 0; row < runs_.size(); ++row)
    if (runs_[row].id == id) {
      runs_[row].notes = notes;
      emit dataChanged(index(row, 0), index(row, ColumnCount - 1));
    }
}

QStringList RunHistoryModel::models() const {
  QSet<QString> set;
  for (const RunSummary& r : runs_)
    if (!r.model.isEmpty()) set.insert(r.model);
  QStringList out(set.begin(), set.end());
  out.sort();
  return out;
}

QStringList RunHistoryModel::statuses() const {
  QStringList out;
  for (const char* s : {"finished", "stopped", "failed", "interrupted", "running", "queued"})
    for (const RunSummary& r : runs_)
      if (r.status == QLatin1String(s)) {
        out << r.status;
        break;
      }
  for (const RunSummary& r : runs_)
    if (!out.contains(r.status) && !r.status.isEmpty()) out << r.status;
  return out;
}

QStringList RunHistoryModel::tags() const {
  QSet<QString> set;
  for (const RunSummary& r : runs_)
    for (const QString& t : r.tags.split(QLatin1Char(','), Qt::SkipEmptyParts)) set.insert(t.trimmed());
  QStringList out(set.begin(), set.end());
  out.sort();
  return out;
}

int RunHistoryModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : runs_.size(); }

int RunHistoryModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QString RunHistoryModel::formatNumber(double v, int decimals) {
  return std::isnan(v) ? QStringLiteral("—") : QString::number(v, 'f', decimals);
}

QString RunHistoryModel::formatDuration(double seconds) {
  if (std::isnan(seconds) || seconds < 0) return QStringLiteral("—");
  const qint64 s = qint64(std::llround(seconds));
  if (s < 60) return tr("%1 s").arg(s);
  if (s < 3600) return tr("%1 min %2 s").arg(s / 60).arg(s % 60, 2, 10, QLatin1Char('0'));
  return tr("%1 h %2 min").arg(s / 3600).arg((s % 3600) / 60, 2, 10, QLatin1Char('0'));
}

namespace {
QString valueText(const QJsonValue& v) {
  if (v.isString()) return v.toString();
  if (v.isBool()) return v.toBool() ? QStringLiteral("true") : QStringLiteral("false");
  if (v.isDouble()) return QString::number(v.toDouble());
  if (v.isArray()) return QString::fromUtf8(QJsonDocument(v.toArray()).toJson(QJsonDocument::Compact));
  if (v.isObject()) return QString::fromUtf8(QJsonDocument(v.toObject()).toJson(QJsonDocument::Compact));
  return {};
}
}  // namespace

QStringList RunHistoryModel::configValues(const QJsonObject& config) {
  QStringList out;
  for (auto it = config.begin(); it != config.end(); ++it) out << valueText(it.value());
  return out;
}

QString RunHistoryModel::configPairs(const QJsonObject& config) {
  QStringList out;
  for (auto it = config.begin(); it != config.end(); ++it) out << it.key() + QLatin1Char('=') + valueText(it.value());
  return out.join(QLatin1Char('\n'));
}

QString RunHistoryModel::formatBytes(double bytes) {
  if (std::isnan(bytes)) return QStringLiteral("—");
  return QStringLiteral("%1 MiB").arg(bytes / (1024.0 * 1024.0), 0, 'f', 1);
}

static QString localDate(const QString& iso) {
  const QDateTime t = QDateTime::fromString(iso, Qt::ISODateWithMs);
  return t.isValid() ? t.toLocalTime().toString(QStringLiteral("yyyy-MM-dd hh:mm")) : iso;
}

QVariant RunHistoryModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= runs_.size()) return {};
  const RunSummary& r = runs_[index.row()];
  switch (role) {
    case RunIdRole: return r.id;
    case StatusRole: return r.status;
    case ModelRole: return r.model;
    case TagsRole: return r.tags;
    case SearchTextRole:
      return (QStringList{QStringLiteral("#%1").arg(r.id), r.name, r.model, r.dataset, r.device, r.status, r.tags,
                          r.notes} +
              configValues(r.config))
          .join(QLatin1Char('\n'));
    case ConfigPairsRole: return configPairs(r.config);
    case Qt::ToolTipRole:
      if (!r.error.isEmpty()) return tr("Error: %1").arg(r.error);
      if (!r.notes.isEmpty()) return r.notes;
      return {};
    case Qt::ForegroundRole:
      if (index.column() == Status) return QBrush(PaletteColors::status(r.status, QGuiApplication::palette()));
      return {};
    case Qt::TextAlignmentRole:
      if (index.column() == Id || (index.column() >= Batch && index.column() <= FinalAccuracy))
        return int(Qt::AlignRight | Qt::AlignVCenter);
      return {};
    case SortRole:
      switch (index.column()) {
        case MedianStep: return std::isnan(r.medianStepMs) ? -1.0 : r.medianStepMs;
        case SamplesPerSecond: return std::isnan(r.samplesPerSecond) ? -1.0 : r.samplesPerSecond;
        case PeakMemory: return std::isnan(r.peakMemoryBytes) ? -1.0 : r.peakMemoryBytes;
        case FinalAccuracy: return std::isnan(r.finalAccuracy) ? -1.0 : r.finalAccuracy;
        case Date: return r.createdAt;
        case Id: return double(r.id);
        case Batch: return std::isnan(r.batchSize) ? -1.0 : r.batchSize;
        case Duration: return std::isnan(r.wallSeconds) ? -1.0 : r.wallSeconds;
        default: break;
      }
      return data(index, Qt::DisplayRole);
    case Qt::DisplayRole:
      switch (index.column()) {
        case Id: return QString::number(r.id);
        case Name: return r.name;
        case Date: return localDate(r.createdAt);
        case Batch: return std::isnan(r.batchSize) ? QStringLiteral("—") : QString::number(qint64(r.batchSize));
        case Duration: return formatDuration(r.wallSeconds);
        case Model: return r.model;
        case Dataset: return r.dataset;
        case Device: return r.device;
        case Status: return r.status;
        case MedianStep: return formatNumber(r.medianStepMs, 2);
        case SamplesPerSecond: return formatNumber(r.samplesPerSecond, 1);
        case PeakMemory: return formatBytes(r.peakMemoryBytes);
        case FinalAccuracy:
          return std::isnan(r.finalAccuracy) ? QStringLiteral("—")
                                             : QStringLiteral("%1 %").arg(r.finalAccuracy * (r.finalAccuracy <= 1.0 ? 100.0 : 1.0), 0, 'f', 2);
        case Tags: return r.tags;
      }
      return {};
    default: return {};
  }
}

QVariant RunHistoryModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal) return {};
  if (role == Qt::DisplayRole) {
    switch (section) {
      case Id: return tr("Run");
      case Batch: return tr("Batch");
      case Duration: return tr("Duration");
      case Name: return tr("Name");
      case Date: return tr("Date");
      case Model: return tr("Model");
      case Dataset: return tr("Data set");
      case Device: return tr("Device");
      case Status: return tr("Status");
      case MedianStep: return tr("Step (ms)");
      case SamplesPerSecond: return tr("Samples/s");
      case PeakMemory: return tr("Peak mem.");
      case FinalAccuracy: return tr("Accuracy");
      case Tags: return tr("Tags");
    }
  }
  if (role == Qt::ToolTipRole) {
    switch (section) {
      case Id: return tr("The run's number in the database (the engine's run id).");
      case Duration: return tr("Wall time from the start of the run to its end.");
      case MedianStep: return tr("Median time of one training step (robust to the slow first steps).");
      case SamplesPerSecond: return tr("Training throughput over the run.");
      case PeakMemory: return tr("Highest memory of the run: allocated on the GPU, or the engine's resident memory on the CPU.");
      case FinalAccuracy: return tr("Final test accuracy (after the last evaluation).");
      default: break;
    }
  }
  return {};
}
