// SPDX-License-Identifier: GPL-3.0-or-later
#include "layer_compare_model.h"

#include <QBrush>
#include <QColor>

#include <cmath>
#include <limits>

namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

QString ms(double v) { return std::isfinite(v) ? QString::number(v, 'f', 3) : QStringLiteral("–"); }

QString kindText(const tb::LayerComparisonRow& r) {
  if (r.kind_a.empty() || r.kind_b.empty() || r.kind_a == r.kind_b) return qs(r.kind_a.empty() ? r.kind_b : r.kind_a);
  return qs(r.kind_a) + QStringLiteral(" → ") + qs(r.kind_b);
}

}  // namespace

LayerCompareModel::LayerCompareModel(QObject* parent) : QAbstractTableModel(parent) {}

void LayerCompareModel::setComparison(std::vector<tb::LayerComparisonRow> rows, const QString& runA,
                                      const QString& runB) {
  beginResetModel();
  rows_ = std::move(rows);
  runA_ = runA;
  runB_ = runB;
  endResetModel();
}

int LayerCompareModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : int(rows_.size());
}

int LayerCompareModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

QVariant LayerCompareModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= int(rows_.size())) return {};
  const tb::LayerComparisonRow& r = rows_[size_t(index.row())];
  const tb::LayerChange change = r.change();
  switch (role) {
    case Qt::DisplayRole:
      switch (index.column()) {
        case Layer: return r.layer.empty() ? tr("(step)") : qs(r.layer);
        case Phase: return qs(r.phase);
        case Kind: return kindText(r);
        case TimeA: return ms(r.time_a_ms);
        case TimeB: return ms(r.time_b_ms);
        case Ratio: return std::isfinite(r.ratio()) ? QStringLiteral("%1×").arg(r.ratio(), 0, 'f', 2) : QStringLiteral("–");
        case Change: return tr(tb::layer_change_name(change));
      }
      return {};
    case Qt::UserRole:
      switch (index.column()) {
        case TimeA: return std::isfinite(r.time_a_ms) ? r.time_a_ms : 0.0;
        case TimeB: return std::isfinite(r.time_b_ms) ? r.time_b_ms : 0.0;
        case Ratio:
          if (change == tb::LayerChange::OnlyA) return 0.0;  // its time vanished in B
          if (change == tb::LayerChange::OnlyB) return std::numeric_limits<double>::infinity();
          return r.ratio();
        case Change: return int(change);
      }
      return data(index, Qt::DisplayRole);
    case Qt::TextAlignmentRole:
      if (index.column() >= TimeA && index.column() <= Ratio) return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
      return {};
    case Qt::ForegroundRole:
      if (index.column() == Change || index.column() == Ratio) {
        if (change == tb::LayerChange::Faster) return QBrush(QColor(0, 128, 0));
        if (change == tb::LayerChange::Slower) return QBrush(QColor(192, 0, 0));
      }
      if (r.layer.empty() || change == tb::LayerChange::OnlyA || change == tb::LayerChange::OnlyB)
        return QBrush(QColor(Qt::gray));
      return {};
    case Qt::ToolTipRole: return toolTip(r, index.column());
  }
  return {};
}

QString LayerCompareModel::toolTip(const tb::LayerComparisonRow& r, int column) const {
  const QString what = r.layer.empty() ? tr("the step's %1 part").arg(qs(r.phase))
                                       : tr("%1 %2").arg(qs(r.layer), qs(r.phase));
  switch (r.change()) {
    case tb::LayerChange::OnlyA:
      return tr("Only in A (%1): B (%2) has no %3 row. Its model lacks the layer, or folded it into the layer "
                "before it (fuse_pointwise runs a ReLU inside batch norm): its time in B is in that layer's row.")
          .arg(runA_, runB_, what);
    case tb::LayerChange::OnlyB:
      return tr("Only in B (%1): A (%2) has no %3 row; its model lacks the layer, or folded it into another.")
          .arg(runB_, runA_, what);
    default: break;
  }
  if (column == Kind && r.kind_a != r.kind_b)
    return tr("The layer changed kind: %1 in A, %2 in B (a fused layer does the work of two; its time "
              "includes the pass the other run spent in a row of its own)")
        .arg(qs(r.kind_a), qs(r.kind_b));
  return tr("%1: %2 ms in A (%3), %4 ms in B (%5): B takes %6× A's time, %7 (a change within %8 % either "
            "way counts as about the same: sampled steps differ by that much)")
      .arg(what, ms(r.time_a_ms), runA_, ms(r.time_b_ms), runB_)
      .arg(r.ratio(), 0, 'f', 2)
      .arg(tr(tb::layer_change_name(r.change())))
      .arg(tb::kLayerSameWithin * 100, 0, 'f', 0);
}

QVariant LayerCompareModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal) return {};
  if (role == Qt::DisplayRole) {
    switch (section) {
      case Layer: return tr("Layer");
      case Phase: return tr("Phase");
      case Kind: return tr("Kind");
      case TimeA: return tr("A (ms)");
      case TimeB: return tr("B (ms)");
      case Ratio: return tr("B / A");
      case Change: return tr("Change");
    }
  }
  if (role == Qt::ToolTipRole) {
    switch (section) {
      case Layer: return tr("The layer, by its path in the model; rows are matched by layer and phase");
      case Phase: return tr("forward or backward for a layer; the step's own parts (data_wait, loss, optimizer, "
                            "step_end, unattributed) are matched by name too");
      case Kind: return tr("The layer's kind; \"a → b\" where the runs' models differ (a fused layer)");
      case TimeA: return tr("Mean time of the row over A's sampled steps: %1").arg(runA_);
      case TimeB: return tr("Mean time of the row over B's sampled steps: %1").arg(runB_);
      case Ratio: return tr("B's time over A's: under 1, B is faster. Sorting puts rows B lacks first (their "
                            "time vanished) and rows only B has last");
      case Change: return tr("faster or slower beyond %1 % either way, about the same within it (sampled steps "
                             "on a busy machine differ by that much), or only in one run")
          .arg(tb::kLayerSameWithin * 100, 0, 'f', 0);
    }
  }
  return {};
}
