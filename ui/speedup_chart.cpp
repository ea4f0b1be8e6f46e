// SPDX-License-Identifier: GPL-3.0-or-later
#include "speedup_chart.h"

#include <qcustomplot.h>

#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "compare_summary_model.h"
#include "plot_style.h"

SpeedupChart::SpeedupChart(CompareSummaryModel* model, QWidget* parent) : QWidget(parent), model_(model) {
  plot_ = PlotStyle::addTitledPlot(this, tr("Speed-up vs baseline (samples/s)"), 200);
  plot_->xAxis->setLabel(tr("% of the baseline's throughput"));
  setToolTip(tr("Each run's training throughput relative to the chosen baseline (100 %)."));
  connect(model_, &QAbstractItemModel::modelReset, this, &SpeedupChart::refresh);
  connect(model_, &QAbstractItemModel::dataChanged, this, &SpeedupChart::refresh);
  refresh();
}

void SpeedupChart::refresh() {
  plot_->clearPlottables();
  plot_->clearItems();
  const QPalette pal = palette();
  const QColor fg = pal.color(QPalette::Text);
  PlotStyle::applyPalette(plot_, pal);

  auto* bars = new QCPBars(plot_->yAxis, plot_->xAxis);  // horizontal bars
  bars->setWidth(0.6);
  bars->setPen(Qt::NoPen);
  bars->setBrush(QColor(31, 119, 180));
  // Whiskers: the spread of repeated runs (CompareSummaryModel::speedUpSpread).
  auto* whiskers = new QCPErrorBars(plot_->yAxis, plot_->xAxis);
  whiskers->setErrorType(QCPErrorBars::etKeyError);
  whiskers->setPen(QPen(fg, 1.5));
  whiskers->setWhiskerWidth(8);
  whiskers->removeFromLegend();
  QVector<double> errorsMinus, errorsPlus;
  auto ticker = QSharedPointer<QCPAxisTickerText>::create();
  const int n = model_->rowCount();
  double hi = 100;
  bars_ = 0;
  for (int row = 0; row < n; ++row) {
    const double s = model_->speedUp(row);
    const double position = n - row;  // first run on top
    ticker->addTick(position, model_->index(row, CompareSummaryModel::Name).data().toString());
    if (std::isnan(s)) continue;
    bars->addData(position, s * 100.0);
    const double spread = model_->speedUpSpread(row);
    errorsMinus << (std::isnan(spread) ? 0.0 : spread * 100.0);
    errorsPlus << (std::isnan(spread) ? 0.0 : spread * 100.0);
    hi = std::max(hi, (s + (std::isnan(spread) ? 0.0 : spread)) * 100.0);
    ++bars_;
    auto* label = new QCPItemText(plot_);
    label->setClipToAxisRect(false);
    label->position->setAxes(plot_->xAxis, plot_->yAxis);
    label->position->setCoords(s * 100.0, position);
    label->setPositionAlignment(Qt::AlignLeft | Qt::AlignVCenter);
    label->setPadding(QMargins(4, 0, 0, 0));
    label->setText(std::isnan(spread) ? QStringLiteral("%1 %").arg(s * 100.0, 0, 'f', 0)
                                      : QStringLiteral("%1 % ± %2 %").arg(s * 100.0, 0, 'f', 0).arg(spread * 100.0, 0, 'f', 0));
    if (!std::isnan(spread)) label->position->setCoords((s + spread) * 100.0, position);
    label->setColor(fg);
  }
  whiskers->setDataPlottable(bars);
  // The horizontal bars' values run along the x axis: the errors are on the value.
  whiskers->setErrorType(QCPErrorBars::etValueError);
  // Bars keep their data sorted by position (last row first): errors likewise.
  std::reverse(errorsMinus.begin(), errorsMinus.end());
  std::reverse(errorsPlus.begin(), errorsPlus.end());
  whiskers->setData(errorsMinus, errorsPlus);
  plot_->yAxis->setTicker(ticker);
  plot_->yAxis->setRange(0.4, n + 0.6);
  plot_->yAxis->grid()->setVisible(false);
  plot_->xAxis->setRange(0, hi * 1.15);
  auto* baseline = new QCPItemStraightLine(plot_);
  baseline->point1->setCoords(100, 0);
  baseline->point2->setCoords(100, 1);
  baseline->setPen(QPen(QColor(214, 39, 40), 1.5, Qt::DashLine));
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

bool SpeedupChart::exportPng(const QString& path, int width, int height) {
  return plot_->savePng(path, width, height, 1.0);
}

void SpeedupChart::changeEvent(QEvent* event) {
  if (event->type() == QEvent::PaletteChange) refresh();
  QWidget::changeEvent(event);
}
