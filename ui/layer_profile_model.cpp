// SPDX-License-Identifier: GPL-3.0-or-later
#include "layer_profile_model.h"

#include <QBrush>
#include <QColor>

#include <cmath>
#include <limits>

using json = nlohmann::json;

namespace {

double number(const json& row, const char* key, double scale = 1) {
  const json v = row.value(key, json());
  return v.is_number() ? v.get<double>() * scale : std::numeric_limits<double>::quiet_NaN();
}

QString text(const json& row, const char* key) {
  const json v = row.value(key, json());
  return v.is_string() ? QString::fromStdString(v.get<std::string>()) : QString();
}

QString fixed(double v, int decimals, const QString& suffix = {}) {
  return std::isfinite(v) ? QString::number(v, 'f', decimals) + suffix : QStringLiteral("–");
}

}  // namespace

LayerProfileModel::LayerProfileModel(QObject* parent) : QAbstractTableModel(parent) {}

void LayerProfileModel::setTable(const json& table) {
  beginResetModel();
  table_ = table.is_object() ? table : json::object();
  rows_ = table_.value("rows", json::array());
  if (!rows_.is_array()) rows_ = json::array();
  endResetModel();
}

int LayerProfileModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : int(rows_.size());
}

int LayerProfileModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant LayerProfileModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= int(rows_.size())) return {};
  const json& r = rows_[size_t(index.row())];
  const QString layer = text(r, "layer");
  const double values[ColumnCount] = {0, 0, 0, number(r, "time_ms"), number(r, "share", 100),
                                      number(r, "flops_per_s", 1e-9), number(r, "bytes_per_s", 1e-9),
                                      number(r, "roofline_pct"), 0};
  switch (role) {
    case Qt::DisplayRole:
      switch (index.column()) {
        case Layer: return layer.isEmpty() ? tr("(step)") : layer;
        case Kind: return text(r, "kind");
        case Phase: return text(r, "phase");
        case TimeMs: return fixed(values[TimeMs], 3);
        case Share: return fixed(values[Share], 1, QStringLiteral(" %"));
        case GflopsPerS: return fixed(values[GflopsPerS], 2);
        case GbPerS: return fixed(values[GbPerS], 2);
        case RooflinePct: return fixed(values[RooflinePct], 1, QStringLiteral(" %"));
        case Bound: return text(r, "bound").isEmpty() ? QStringLiteral("–") : text(r, "bound");
      }
      return {};
    case Qt::UserRole:
      if (index.column() >= TimeMs && index.column() <= RooflinePct) return values[index.column()];
      return data(index, Qt::DisplayRole);
    case Qt::TextAlignmentRole:
      if (index.column() >= TimeMs && index.column() <= RooflinePct)
        return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
      return {};
    case Qt::ForegroundRole:
      // The step's own parts have no counted work: shown as context, not as layers.
      if (layer.isEmpty()) return QBrush(QColor(Qt::gray));
      return {};
    case Qt::ToolTipRole:
      if (layer.isEmpty())
        return tr("%1: part of the step outside every layer (docs/layers.md); no counted work, "
                  "so no roofline figures").arg(text(r, "phase"));
      return tr("%1 (%2), %3: %4 FLOPs and %5 bytes counted from its shapes (docs/layers.md), "
                "%6 FLOPs a byte")
          .arg(layer, text(r, "kind"), text(r, "phase"))
          .arg(number(r, "flops"), 0, 'g', 4)
          .arg(number(r, "bytes"), 0, 'g', 4)
          .arg(number(r, "intensity"), 0, 'g', 3);
  }
  return {};
}

QVariant LayerProfileModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal) return {};
  if (role == Qt::DisplayRole) {
    switch (section) {
      case Layer: return tr("Layer");
      case Kind: return tr("Kind");
      case Phase: return tr("Phase");
      case TimeMs: return tr("Time (ms)");
      case Share: return tr("Of step");
      case GflopsPerS: return tr("GFLOP/s");
      case GbPerS: return tr("GB/s");
      case RooflinePct: return tr("Of roofline");
      case Bound: return tr("Bound");
    }
  }
  if (role == Qt::ToolTipRole) {
    switch (section) {
      case Layer: return tr("The layer, by its path in the model (a residual block's inner layers under its name)");
      case Phase: return tr("forward or backward for a layer; the step's own parts: loss, optimizer, data_wait, "
                            "step_end (read-backs, measurements, events), unattributed (in no scope)");
      case TimeMs: return tr("Mean time of the row over the sampled steps, on the host clock");
      case Share: return tr("The row's time over the step's; the rows add up to the step");
      case GflopsPerS: return tr("Counted FLOPs (matrix and pointwise) over the row's time");
      case GbPerS: return tr("Counted bytes (each tensor an op reads or writes, once) over the row's time: "
                             "a lower bound of what the memory moved");
      case RooflinePct: return tr("The share of the attainable rate at the row's arithmetic intensity: of the "
                                  "bandwidth when memory-bound, of the FMA rate when compute-bound (the peaks "
                                  "probed once on this machine). Above 100 %: the row's tensors came from the "
                                  "caches, faster than the probed memory bandwidth, which is the roof");
      case Bound: return tr("memory below the ridge point (peak FLOP/s over bandwidth), compute above it");
    }
  }
  return {};
}
