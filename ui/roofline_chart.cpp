// SPDX-License-Identifier: GPL-3.0-or-later
#include "roofline_chart.h"

#include <qcustomplot.h>

#include <QEvent>
#include <QHelpEvent>
#include <QLabel>
#include <QToolTip>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <limits>

#include "plot_style.h"

using json = nlohmann::json;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kGiga = 1e9;  // the axes and texts read GFLOP/s and GB/s
constexpr double kHoverPixels = 8;

double number(const json& j, const char* key) {
  const json v = j.is_object() ? j.value(key, json()) : json();
  return v.is_number() ? v.get<double>() : kNaN;
}

QString text(const json& j, const char* key) {
  const json v = j.is_object() ? j.value(key, json()) : json();
  return v.is_string() ? QString::fromStdString(v.get<std::string>()) : QString();
}

const QColor kForward(31, 119, 180), kBackward(255, 127, 14);

}  // namespace

RooflineChart::RooflineChart(QWidget* parent)
    : QWidget(parent), computeRoof_(kNaN), memoryRoof_(kNaN) {
  plot_ = PlotStyle::addTitledPlot(this, tr("Roofline"), 160);
  plot_->setToolTip(QString());  // the points' own tooltips (eventFilter)
  plot_->installEventFilter(this);
  for (QCPAxis* axis : {plot_->xAxis, plot_->yAxis}) {
    axis->setScaleType(QCPAxis::stLogarithmic);
    auto ticker = QSharedPointer<QCPAxisTickerLog>::create();
    axis->setTicker(ticker);
    axis->setNumberFormat(QStringLiteral("g"));
  }
  plot_->xAxis->setLabel(tr("FLOPs a byte (counted)"));
  plot_->yAxis->setLabel(tr("achieved GFLOP/s"));
  // The markers' key is in the caption: a legend inside the axes would cover points.
  plot_->legend->setVisible(false);
  caption_ = new QLabel(this);
  caption_->setWordWrap(true);
  caption_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  auto* column = static_cast<QVBoxLayout*>(layout());
  column->addWidget(caption_);
  column->setStretchFactor(plot_, 1);  // the plot takes the height, the caption its lines
  setToolTip(tr("Each layer's forward (disc) and backward (triangle): how many FLOPs it does per byte it "
                "moves (x) against the FLOP/s it achieved (y). The roof is what the device can attain at "
                "that intensity: the memory bandwidth's slope left of the ridge, the FMA rate right of it. "
                "A point far under its roof leaves the device idle; hover a point for its figures."));
  refresh();
}

void RooflineChart::setTable(const json& table) {
  table_ = table.is_object() ? table : json::object();
  refresh();
}

double RooflineChart::attainable(double intensity) const {
  return std::min(computeRoof_, intensity * memoryRoof_);
}

void RooflineChart::refresh() {
  points_.clear();
  notDrawn_ = 0;
  const json peaks = table_.value("peaks", json::object());
  computeRoof_ = number(peaks, "flops_per_s");
  memoryRoof_ = number(peaks, "bytes_per_s");
  if (!(computeRoof_ > 0 && memoryRoof_ > 0)) computeRoof_ = memoryRoof_ = kNaN;
  peaksDtype_ = text(peaks, "dtype");
  peaksDevice_ = text(peaks, "device");
  peaksSource_ = text(peaks, "source");
  for (const json& r : table_.value("rows", json::array())) {
    const QString layer = text(r, "layer");
    if (layer.isEmpty()) continue;  // the step's own parts: no counted work
    Point p;
    p.layer = layer;
    p.kind = text(r, "kind");
    p.phase = text(r, "phase");
    p.bound = text(r, "bound");
    p.intensity = number(r, "intensity");
    p.flopsPerS = number(r, "flops_per_s");
    p.bytesPerS = number(r, "bytes_per_s");
    p.share = number(r, "share");
    p.timeMs = number(r, "time_ms");
    p.rooflinePct = number(r, "roofline_pct");
    // A log axis has no place for 0: a layer without FLOPs (flatten) or bytes is left out, and counted.
    if (!(p.intensity > 0) || !(p.flopsPerS > 0)) {
      ++notDrawn_;
      continue;
    }
    points_.append(p);
  }

  plot_->clearGraphs();
  plot_->clearItems();
  highlight_ = nullptr;
  const QPalette pal = palette();
  const QColor fg = pal.color(QPalette::Text);
  PlotStyle::applyPalette(plot_, pal);
  caption_->setText(caption());
  caption_->setToolTip(peaksSource_.isEmpty() ? QString() : tr("How the peaks were measured: %1").arg(peaksSource_));
  if (points_.isEmpty()) {
    plot_->replot(QCustomPlot::rpQueuedReplot);
    return;
  }
  double xLo = points_[0].intensity, xHi = xLo, yLo = points_[0].flopsPerS, yHi = yLo;
  for (const Point& p : points_) {
    xLo = std::min(xLo, p.intensity), xHi = std::max(xHi, p.intensity);
    yLo = std::min(yLo, p.flopsPerS), yHi = std::max(yHi, p.flopsPerS);
  }
  const bool roofs = std::isfinite(computeRoof_);
  if (roofs) {
    const double ridge = computeRoof_ / memoryRoof_;
    xLo = std::min(xLo, ridge), xHi = std::max(xHi, ridge);
    yHi = std::max(yHi, computeRoof_);
  }
  xLo /= 3, xHi *= 3, yLo /= 3, yHi *= 3;
  if (roofs) {
    // The roof: the bandwidth's slope up to the ridge, the FMA rate after it.
    QCPGraph* roof = plot_->addGraph();
    roof->setName(peaksDtype_.isEmpty() ? tr("roofline") : tr("roofline (%1)").arg(peaksDtype_));
    roof->setPen(QPen(fg, 2));
    const double ridge = computeRoof_ / memoryRoof_;
    roof->addData(xLo, xLo * memoryRoof_ / kGiga);
    roof->addData(ridge, computeRoof_ / kGiga);
    roof->addData(xHi, computeRoof_ / kGiga);
    yLo = std::min(yLo, xLo * memoryRoof_);
    auto label = [&](double x, double y, const QString& s, Qt::Alignment align) {
      auto* t = new QCPItemText(plot_);
      t->position->setCoords(x, y / kGiga);
      t->setPositionAlignment(align);
      t->setText(s);
      t->setColor(fg);
      t->setPadding(QMargins(2, 2, 2, 2));
    };
    // Under the roofs, where no point can be above them.
    label(xHi, computeRoof_, tr("%1 GFLOP/s %2").arg(computeRoof_ / kGiga, 0, 'f', 1).arg(peaksDtype_),
          Qt::AlignRight | Qt::AlignTop);
    const double slopeX = std::sqrt(xLo * ridge);  // halfway up the slope, on the log axis
    label(slopeX, slopeX * memoryRoof_, tr("%1 GB/s").arg(memoryRoof_ / kGiga, 0, 'f', 1),
          Qt::AlignLeft | Qt::AlignTop);
  }
  QCPGraph* phases[2];
  const QString names[2] = {tr("forward"), tr("backward")};
  const QColor colors[2] = {kForward, kBackward};
  const QCPScatterStyle::ScatterShape shapes[2] = {QCPScatterStyle::ssDisc, QCPScatterStyle::ssTriangle};
  for (int i = 0; i < 2; ++i) {
    phases[i] = plot_->addGraph();
    phases[i]->setName(names[i]);
    phases[i]->setLineStyle(QCPGraph::lsNone);
    phases[i]->setScatterStyle(QCPScatterStyle(shapes[i], colors[i], colors[i], 8));
  }
  for (const Point& p : points_)
    phases[p.phase == QLatin1String("backward") ? 1 : 0]->addData(p.intensity, p.flopsPerS / kGiga);
  highlight_ = plot_->addGraph();
  highlight_->setLineStyle(QCPGraph::lsNone);
  highlight_->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, QPen(fg, 2), Qt::NoBrush, 16));
  plot_->xAxis->setRange(xLo, xHi);
  plot_->yAxis->setRange(yLo / kGiga, yHi / kGiga);
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

QString RooflineChart::caption() const {
  if (!table_.contains("rows")) return QString();
  if (points_.isEmpty()) return tr("No layer has counted work to draw.");
  QString s = tr("<span style=\"color:%1\">&#9679;</span> forward <span style=\"color:%2\">&#9650;</span> "
                 "backward. ")
                  .arg(kForward.name(), kBackward.name());
  if (std::isfinite(computeRoof_))
    s += tr("Roofs: %1 FMA rate %2 GFLOP/s, copy bandwidth %3 GB/s, probed on %4.")
             .arg(peaksDtype_.isEmpty() ? tr("(dtype not recorded)") : peaksDtype_)
             .arg(computeRoof_ / kGiga, 0, 'f', 1)
             .arg(memoryRoof_ / kGiga, 0, 'f', 1)
             .arg(peaksDevice_.isEmpty() ? tr("this run's device") : peaksDevice_.toHtmlEscaped());
  else
    s += tr("<b>No roofs</b>: the run's device peaks are not known (%1).")
             .arg((peaksSource_.isEmpty() ? tr("not recorded") : peaksSource_).toHtmlEscaped());
  if (notDrawn_ > 0) s += QLatin1Char(' ') + tr("%n row(s) without counted work not drawn.", nullptr, notDrawn_);
  return s;
}

QPointF RooflineChart::pixelOf(int point) const {
  const Point& p = points_.at(point);
  return {plot_->xAxis->coordToPixel(p.intensity), plot_->yAxis->coordToPixel(p.flopsPerS / kGiga)};
}

int RooflineChart::pointAt(const QPointF& pixel) const {
  int best = -1;
  double bestDistance = kHoverPixels;
  for (int i = 0; i < points_.size(); ++i) {
    const double d = QLineF(pixelOf(i), pixel).length();
    if (d <= bestDistance) best = i, bestDistance = d;
  }
  return best;
}

QString RooflineChart::pointToolTip(int point) const {
  const Point& p = points_.at(point);
  QString s = tr("<b>%1</b> (%2), %3<br>%4 % of the step (%5 ms)<br>%6 GFLOP/s, %7 GB/s at %8 FLOPs a byte")
                  .arg(p.layer.toHtmlEscaped(), p.kind.toHtmlEscaped(), p.phase)
                  .arg(p.share * 100, 0, 'f', 1)
                  .arg(p.timeMs, 0, 'f', 3)
                  .arg(p.flopsPerS / kGiga, 0, 'f', 2)
                  .arg(p.bytesPerS / kGiga, 0, 'f', 2)
                  .arg(p.intensity, 0, 'g', 3);
  if (std::isfinite(computeRoof_))
    s += tr("<br><b>%1-bound</b>: %2 % of the roofline (%3 GFLOP/s attainable at this intensity)")
             .arg(p.bound)
             .arg(p.rooflinePct, 0, 'f', 1)
             .arg(attainable(p.intensity) / kGiga, 0, 'f', 1);
  else
    s += tr("<br>bound not known: the run has no device peaks");
  return s;
}

void RooflineChart::highlight(const QString& layer, const QString& phase) {
  if (!highlight_) return;
  highlight_->data()->clear();
  for (const Point& p : points_)
    if (p.layer == layer && p.phase == phase) highlight_->addData(p.intensity, p.flopsPerS / kGiga);
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

bool RooflineChart::eventFilter(QObject* watched, QEvent* event) {
  if (watched == plot_ && event->type() == QEvent::ToolTip) {
    auto* help = static_cast<QHelpEvent*>(event);
    const int i = pointAt(help->pos());
    if (i >= 0)
      QToolTip::showText(help->globalPos(), pointToolTip(i), plot_);
    else
      QToolTip::showText(help->globalPos(), toolTip(), plot_);
    return true;
  }
  return QWidget::eventFilter(watched, event);
}

void RooflineChart::changeEvent(QEvent* event) {
  if (event->type() == QEvent::PaletteChange) refresh();
  QWidget::changeEvent(event);
}
