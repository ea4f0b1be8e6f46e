// SPDX-License-Identifier: GPL-3.0-or-later
#include "live_plot.h"

#include "plot_style.h"

#include <qcustomplot.h>

#include <QDateTime>
#include <QFileInfo>
#include <QHelpEvent>
#include <QLocale>
#include <QMenu>
#include <QToolTip>
#include <QSaveFile>
#include <QSvgGenerator>
#include <QTextStream>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "plot_export_dialog.h"
#include "series_downsampler.h"

namespace {
const QColor kCurveColors[] = {QColor(31, 119, 180), QColor(255, 127, 14), QColor(44, 160, 44),
                               QColor(214, 39, 40),  QColor(148, 103, 189), QColor(140, 86, 75),
                               QColor(227, 119, 194), QColor(127, 127, 127), QColor(188, 189, 34),
                               QColor(23, 190, 207)};
}  // namespace

LivePlot::LivePlot(const QString& title, const QString& yLabel, QWidget* parent)
    : QWidget(parent), title_(title), yLabel_(yLabel) {
  plot_ = PlotStyle::addTitledPlot(this, title_, 220);
  plot_->setPlottingHint(QCP::phFastPolylines, true);
  plot_->yAxis->setLabel(yLabel_);
  plot_->xAxis->setLabel(xAxisTitle(xAxis_));
  plot_->legend->setVisible(true);
  QFont small = font();
  small.setPointSizeF(std::max(6.0, small.pointSizeF() * 0.85));
  plot_->legend->setFont(small);
  // The legend goes under the axes, in rows, so it never covers data.
  // (In a row of its own beside an empty filler: an empty legend would
  // otherwise cap the column's width and squeeze the axes.)
  plot_->axisRect()->insetLayout()->take(plot_->legend);
  auto* legendRow = new QCPLayoutGrid;
  plot_->plotLayout()->addElement(2, 0, legendRow);
  legendRow->addElement(0, 0, plot_->legend);
  legendRow->addElement(0, 1, new QCPLayoutElement(plot_));
  legendRow->setColumnStretchFactor(0, 0.001);
  legendRow->setMargins(QMargins(40, 0, 0, 0));
  plot_->plotLayout()->setRowStretchFactor(2, 0.001);
  plot_->plotLayout()->setRowSpacing(2);
  plot_->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
  plot_->legend->setWrap(4);
  plot_->legend->setMargins(QMargins(4, 1, 4, 1));
  plot_->legend->setRowSpacing(0);
  plot_->legend->setColumnSpacing(10);
  plot_->legend->setBorderPen(Qt::NoPen);
  plot_->legend->setSelectableParts(QCPLegend::spNone);
  // A quick second click arrives as a double click: it toggles back.
  connect(plot_, &QCustomPlot::legendDoubleClick, this, [this](QCPLegend* l, QCPAbstractLegendItem* item, QMouseEvent* e) {
    emit plot_->legendClick(l, item, e);
  });
  connect(plot_, &QCustomPlot::legendClick, this, [this](QCPLegend*, QCPAbstractLegendItem* item, QMouseEvent*) {
    auto* entry = qobject_cast<QCPPlottableLegendItem*>(item);
    if (!entry) return;
    for (int i = 0; i < curves_.size(); ++i)
      if (entry->plottable() == curves_[i].raw || entry->plottable() == curves_[i].smooth)
        setCurveVisible(i, !curves_[i].visible);
  });

  // Zoom and pan along x; y follows the visible data.
  plot_->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  plot_->axisRect()->setRangeDrag(Qt::Horizontal);
  plot_->axisRect()->setRangeZoom(Qt::Horizontal);

  trackerLine_ = new QCPItemStraightLine(plot_);
  trackerLine_->setVisible(false);
  trackerLine_->setPen(QPen(QColor(128, 128, 128), 1, Qt::DashLine));
  trackerLabel_ = new QCPItemText(plot_);
  trackerLabel_->setVisible(false);
  trackerLabel_->setPositionAlignment(Qt::AlignTop | Qt::AlignLeft);
  trackerLabel_->setTextAlignment(Qt::AlignLeft);
  trackerLabel_->position->setType(QCPItemPosition::ptAbsolute);  // pixels: placed beside the cursor
  trackerLabel_->setPadding(QMargins(3, 1, 3, 1));
  trackerLabel_->setFont(small);
  trackerLabel_->setClipToAxisRect(true);

  // After the tracker's items (tests find those as items 0 and 1).
  // Warm-up: a shaded band over its steps, labelled at the top.
  warmupRect_ = new QCPItemRect(plot_);
  warmupRect_->setVisible(false);
  warmupRect_->setLayer(QStringLiteral("grid"));
  warmupRect_->setPen(Qt::NoPen);
  for (QCPItemPosition* p : {warmupRect_->topLeft, warmupRect_->bottomRight}) {
    p->setTypeX(QCPItemPosition::ptPlotCoords);
    p->setTypeY(QCPItemPosition::ptAxisRectRatio);
  }
  warmupLabel_ = new QCPItemText(plot_);
  warmupLabel_->setVisible(false);
  warmupLabel_->setPositionAlignment(Qt::AlignTop | Qt::AlignLeft);
  warmupLabel_->position->setTypeX(QCPItemPosition::ptPlotCoords);
  warmupLabel_->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
  warmupLabel_->setPadding(QMargins(3, 1, 3, 1));
  warmupLabel_->setFont(small);
  warmupLabel_->setClipToAxisRect(true);

  rangeTimer_ = new QTimer(this);
  rangeTimer_->setSingleShot(true);
  rangeTimer_->setInterval(30);
  connect(rangeTimer_, &QTimer::timeout, this, &LivePlot::redraw);
  connect(plot_->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this, [this] {
    if (redrawing_) return;
    follow_ = false;
    rangeTimer_->start();
    emit viewChanged();
  });
  connect(plot_, &QCustomPlot::mouseDoubleClick, this, [this](QMouseEvent* e) {
    if (plot_->axisRect()->rect().contains(e->position().toPoint())) resetView();
  });
  plot_->setContextMenuPolicy(Qt::CustomContextMenu);
  connect(plot_, &QWidget::customContextMenuRequested, this, &LivePlot::showContextMenu);
  plot_->setMouseTracking(true);
  plot_->installEventFilter(this);
  setHelpText(QString());
  applyPalette();
}

void LivePlot::addCurve(const QString& label, const SeriesPoints* points, double yScale) {
  Curve c;
  c.label = label;
  c.points = points;
  c.yScale = yScale;
  c.color = kCurveColors[curves_.size() % (sizeof(kCurveColors) / sizeof(kCurveColors[0]))];
  curves_.append(c);
  rebuildGraphs();
}

void LivePlot::setMissingText(int index, const QString& text) {
  if (index >= 0 && index < curves_.size()) curves_[index].missingText = text;
}

void LivePlot::setCurveHatched(int index, bool hatched) {
  if (index < 0 || index >= curves_.size()) return;
  curves_[index].hatched = hatched;
  rebuildGraphs();
}

void LivePlot::setStackTotal(const SeriesPoints* total, const QString& label, const QString& excessText) {
  total_ = total;
  totalLabel_ = label;
  excessText_ = excessText;
  rebuildGraphs();
}

QVector<double> LivePlot::excessSteps() const { return excessSteps_; }

void LivePlot::setStepDomain(double firstStep, double lastStep) {
  if (firstStep == domainFirst_ && lastStep == domainLast_) return;
  domainFirst_ = firstStep;
  domainLast_ = lastStep;
  redraw();
}

void LivePlot::setWarmupSteps(double lastWarmupStep) {
  if (lastWarmupStep == warmupStep_) return;
  warmupStep_ = lastWarmupStep;
  redraw();
}

void LivePlot::setFitWarmup(bool on) {
  if (on == fitWarmup_) return;
  fitWarmup_ = on;
  redraw();
}

QString LivePlot::warmupMarkText() const { return warmupLabel_->visible() ? warmupLabel_->text() : QString(); }

void LivePlot::setHelpText(const QString& text) {
  help_ = tr("Wheel: zoom the x axis. Drag: pan. Double-click: show everything again. Click a legend "
             "entry: hide or show that curve. Right-click: export, log scale, legend.");
  if (!text.isEmpty()) help_ = text + QStringLiteral("\n\n") + help_;
}

void LivePlot::setBand(int index, const SeriesPoints* low, const SeriesPoints* high) {
  if (index < 0 || index >= curves_.size()) return;
  curves_[index].bandLow = low;
  curves_[index].bandHigh = high;
  rebuildGraphs();
}

void LivePlot::setZeroBased(bool on) {
  zeroBased_ = on;
  redraw();
}

void LivePlot::setCurveVisible(int index, bool visible) {
  if (index < 0 || index >= curves_.size() || curves_[index].visible == visible) return;
  curves_[index].visible = visible;
  rebuildGraphs();
}

bool LivePlot::curveVisible(int index) const {
  return index >= 0 && index < curves_.size() && curves_[index].visible;
}

void LivePlot::setLegendVisible(bool on) {
  plot_->legend->setVisible(on);
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

bool LivePlot::legendVisible() const { return plot_->legend->visible(); }

void LivePlot::updateLegendItem(int index) {
  const Curve& c = curves_[index];
  QCPGraph* shown = (alpha_ > 0 && !stacked_) ? c.smooth : c.raw;
  if (auto* item = plot_->legend->itemWithPlottable(shown)) {
    QColor text = palette().color(QPalette::Text);
    if (!c.visible) text.setAlpha(90);
    item->setTextColor(text);
    QFont f = plot_->legend->font();
    f.setStrikeOut(!c.visible);
    item->setFont(f);
  }
}

void LivePlot::removeCurves() {
  curves_.clear();
  rebuildGraphs();
}

QStringList LivePlot::curveLabels() const {
  QStringList out;
  for (const Curve& c : curves_) out << c.label;
  return out;
}

void LivePlot::setStacked(bool stacked) {
  stacked_ = stacked;
  rebuildGraphs();
}

void LivePlot::setXAxis(XAxis axis) {
  if (axis == xAxis_) return;
  xAxis_ = axis;
  plot_->xAxis->setLabel(xAxisTitle(axis));
  if (axis == XAxis::WallTime) {
    auto ticker = QSharedPointer<QCPAxisTickerDateTime>::create();
    ticker->setDateTimeFormat(QStringLiteral("hh:mm:ss"));
    plot_->xAxis->setTicker(ticker);
  } else {
    plot_->xAxis->setTicker(QSharedPointer<QCPAxisTicker>::create());
  }
  follow_ = true;
  redraw();
}

void LivePlot::setSmoothing(double alpha) {
  alpha = std::clamp(alpha, 0.0, 0.999);
  if (alpha == alpha_) return;
  const bool modeChanged = (alpha > 0) != (alpha_ > 0);
  alpha_ = alpha;
  if (modeChanged) rebuildGraphs();
  else redraw();
}

void LivePlot::setLogScale(bool on) {
  log_ = on;
  if (on) {
    plot_->yAxis->setScaleType(QCPAxis::stLogarithmic);
    plot_->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>::create());
  } else {
    plot_->yAxis->setScaleType(QCPAxis::stLinear);
    plot_->yAxis->setTicker(QSharedPointer<QCPAxisTicker>::create());
  }
  redraw();
}

void LivePlot::refresh() { redraw(); }

double LivePlot::lastDrawMs() const { return plot_->replotTime(false); }

void LivePlot::resetView() {
  follow_ = true;
  redraw();
  emit viewChanged();
}

int LivePlot::displayedPointCount() const {
  int n = 0;
  for (int i = 0; i < plot_->graphCount(); ++i)
    if (plot_->graph(i)->visible()) n += plot_->graph(i)->data()->size();
  return n;
}

void LivePlot::rebuildGraphs() {
  plot_->clearGraphs();
  QCPGraph* previous = nullptr;
  for (int i = 0; i < curves_.size(); ++i) {
    Curve& c = curves_[i];
    c.raw = plot_->addGraph();
    c.smooth = plot_->addGraph();
    c.raw->setName(c.label);
    c.smooth->setName(c.label);
    if (stacked_) {
      // Fills only, in steps over shared x: a phase's spike is a column of
      // that phase's colour (outlines of the layers above would paint it in
      // theirs).
      c.raw->setPen(Qt::NoPen);
      QColor fill = c.color;
      fill.setAlpha(c.hatched ? 255 : 200);
      c.raw->setBrush(QBrush(fill, c.hatched ? Qt::BDiagPattern : Qt::SolidPattern));
      c.raw->setLineStyle(QCPGraph::lsStepCenter);
      c.raw->setChannelFillGraph(c.visible ? previous : nullptr);
      c.smooth->setVisible(false);
      c.smooth->removeFromLegend();
      if (c.visible) previous = c.raw;
    } else if (alpha_ > 0) {
      QColor faint = c.color;
      faint.setAlpha(60);
      c.raw->setPen(QPen(faint, 1));
      c.raw->removeFromLegend();
      c.smooth->setPen(QPen(c.color, 1.8));
      c.smooth->setVisible(true);
    } else {
      c.raw->setPen(QPen(c.color, 1.5));
      c.smooth->setVisible(false);
      c.smooth->removeFromLegend();
    }
    if (!c.visible) {
      // Drawn nowhere, still listed (struck out) so a click brings it back.
      c.raw->setVisible(false);
      c.smooth->setVisible(false);
    }
    updateLegendItem(i);
  }
  // Bands after every curve's own graphs (curve i keeps graphs 2i and 2i+1),
  // drawn below them.
  for (Curve& c : curves_) {
    c.bandLowGraph = c.bandHighGraph = nullptr;
    if (!c.bandLow || !c.bandHigh || stacked_) continue;
    c.bandLowGraph = plot_->addGraph();
    c.bandHighGraph = plot_->addGraph();
    for (QCPGraph* g : {c.bandLowGraph, c.bandHighGraph}) {
      g->removeFromLegend();
      g->setPen(Qt::NoPen);
      g->setVisible(c.visible);
      g->setLayer(QStringLiteral("grid"));
    }
    QColor fill = c.color;
    fill.setAlpha(50);
    c.bandHighGraph->setBrush(fill);
    c.bandHighGraph->setChannelFillGraph(c.bandLowGraph);
  }
  totalGraph_ = excessGraph_ = nullptr;
  if (stacked_ && total_) {
    totalGraph_ = plot_->addGraph();
    totalGraph_->setName(totalLabel_);
    totalGraph_->setPen(QPen(palette().color(QPalette::Text), 1.6));
    totalGraph_->setLineStyle(QCPGraph::lsStepCenter);
    excessGraph_ = plot_->addGraph();
    excessGraph_->setName(tr("parts > %1").arg(totalLabel_));
    excessGraph_->setLineStyle(QCPGraph::lsNone);
    excessGraph_->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssTriangleInverted, QPen(QColor(200, 0, 0), 1.5),
                                                  QBrush(QColor(255, 80, 80)), 8));
  }
  // A long legend in fewer columns, so it never widens the plot's column.
  plot_->legend->setWrap(plot_->legend->itemCount() > 8 ? 3 : 4);
  plot_->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst, true);
  redraw();
}

void LivePlot::updateEma(Curve& c) {
  if (c.emaAlpha != alpha_ || c.ema.size() > c.points->size()) {
    c.ema.clear();
    c.emaState = 0;
    c.emaWeight = 0;
    c.emaAlpha = alpha_;
  }
  const QVector<double>& v = c.points->value;
  c.ema.reserve(v.size());
  for (int i = c.ema.size(); i < v.size(); ++i) {
    if (std::isnan(v[i])) {
      c.ema.append(c.emaWeight > 0 ? c.emaState / c.emaWeight : v[i]);
      continue;
    }
    // Exponential moving average, corrected for its start at zero.
    c.emaState = alpha_ * c.emaState + (1 - alpha_) * v[i];
    c.emaWeight = alpha_ * c.emaWeight + (1 - alpha_);
    c.ema.append(c.emaState / c.emaWeight);
  }
}

QVector<double> LivePlot::displayValues(const Curve& c, int n) const {
  const QVector<double>& src = alpha_ > 0 ? c.ema : c.points->value;
  if (c.yScale == 1.0 && src.size() == n) return src;
  QVector<double> out(n);
  for (int i = 0; i < n && i < src.size(); ++i) out[i] = src[i] * c.yScale;
  return out;
}

double LivePlot::warmupX(const SeriesPoints& points) const {
  double x = -std::numeric_limits<double>::infinity();
  if (warmupStep_ <= 0) return x;
  const QVector<double>& xs = points.x(xAxis_);
  for (int i = 0; i < points.size() && points.step[i] <= warmupStep_; ++i) x = xs[i];
  return x;
}

bool LivePlot::dataRange(double* xMin, double* xMax) const {
  bool any = false;
  for (const Curve& c : curves_) {
    if (!c.points || c.points->isEmpty()) continue;
    const QVector<double>& x = c.points->x(xAxis_);
    if (x.isEmpty()) continue;
    if (!any) {
      *xMin = x.first();
      *xMax = x.last();
    } else {
      *xMin = std::min(*xMin, x.first());
      *xMax = std::max(*xMax, x.last());
    }
    any = true;
  }
  return any;
}

void LivePlot::redraw() {
  // Plots on a hidden tab of a shown window, or scrolled out of its view,
  // wait until they are seen: a live run's dashboard refreshes four times a
  // second, and on a machine whose cores the engine fills every plot drawn
  // is time taken from its step.
  // (The plot's region: this widget's own is empty, its opaque children cover it.)
  if (window()->isVisible() && (!isVisible() || plot_->visibleRegion().isEmpty())) {
    redrawPending_ = true;
    return;
  }
  draw();
}

void LivePlot::draw() {
  redrawPending_ = false;
  redrawing_ = true;
  double lo = 0, hi = 1;
  if (follow_ && dataRange(&lo, &hi)) {
    if (xAxis_ == XAxis::Step && std::isfinite(domainFirst_) && std::isfinite(domainLast_)) {
      lo = std::min(lo, domainFirst_);
      hi = std::max(hi, domainLast_);
    }
    if (hi <= lo) {
      lo -= 0.5;
      hi += 0.5;
    } else {
      // A little room at both ends, so a point on the edge (the one point of
      // a per-epoch series) is drawn whole.
      const double pad = (hi - lo) * 0.015;
      lo -= pad;
      hi += pad;
    }
    plot_->xAxis->setRange(lo, hi);
  }
  const QCPRange r = plot_->xAxis->range();
  const int columns = std::max(50, plot_->axisRect()->width());
  double yMin = std::numeric_limits<double>::infinity(), yMax = -yMin;
  // Warm-up points left out of the y range: the largest, to mark it.
  double clippedY = -std::numeric_limits<double>::infinity(), clippedX = 0;
  auto account = [&](const QVector<double>& xs, const QVector<double>& ys, double lastWarmupX) {
    for (int i = 0; i < ys.size(); ++i) {
      if (xs[i] < r.lower || xs[i] > r.upper) continue;
      if (log_ && ys[i] <= 0) continue;
      if (!fitWarmup_ && xs[i] <= lastWarmupX) {
        if (ys[i] > clippedY) clippedY = ys[i], clippedX = xs[i];
        continue;
      }
      yMin = std::min(yMin, ys[i]);
      yMax = std::max(yMax, ys[i]);
    }
  };
  QVector<double> dx, dy;
  if (stacked_) {
    // Cumulative sums of the visible layers over the first one's x, thinned
    // at indices chosen jointly from every layer's own values.
    QList<QVector<double>> values, sums;
    const QVector<double>* xs = nullptr;
    const SeriesPoints* first = nullptr;
    int n = std::numeric_limits<int>::max();
    for (Curve& c : curves_) {
      if (!c.points || !c.visible) continue;
      if (!xs) xs = &c.points->x(xAxis_), first = c.points;
      n = std::min(n, c.points->size());
    }
    const double stackWarmupX = first ? warmupX(*first) : -std::numeric_limits<double>::infinity();
    if (!xs) n = 0;
    for (Curve& c : curves_) {
      if (!c.points || !c.visible) continue;
      QVector<double> v = displayValues(c, c.points->size()).mid(0, n);
      QVector<double> sum = sums.isEmpty() ? QVector<double>(n, 0.0) : sums.last();
      for (int i = 0; i < n; ++i)
        if (!std::isnan(v[i])) sum[i] += v[i];
      values << v;
      sums << sum;
    }
    QList<const QVector<double>*> ys;
    for (const QVector<double>& v : values) ys << &v;
    const QVector<int> picks = xs ? SeriesDownsampler::jointIndices(*xs, ys, r.lower, r.upper, columns) : QVector<int>();
    int layer = 0;
    for (Curve& c : curves_) {
      c.raw->setScatterStyle(QCPScatterStyle::ssNone);
      if (!c.points || !c.visible) {
        c.raw->data()->clear();
        continue;
      }
      dx.resize(picks.size());
      dy.resize(picks.size());
      for (int k = 0; k < picks.size(); ++k) {
        dx[k] = (*xs)[picks[k]];
        dy[k] = sums[layer][picks[k]];
      }
      c.raw->setData(dx, dy, true);
      account(dx, dy, stackWarmupX);
      ++layer;
    }
    // The total over the layers, and the steps whose layers exceed it (every
    // step, not only the thinned ones: one such step is the point).
    excessSteps_.clear();
    if (totalGraph_ && total_ && first) {
      const double scale = curves_.first().yScale;
      QVector<double> totalValues = total_->value;
      for (double& v : totalValues) v *= scale;
      const QVector<double>& tx = total_->x(xAxis_);
      SeriesDownsampler::downsample(tx, totalValues, r.lower, r.upper, columns, &dx, &dy);
      totalGraph_->setData(dx, dy, true);
      account(dx, dy, total_->isEmpty() ? stackWarmupX : warmupX(*total_));
      QVector<double> ex, ey;
      for (int i = 0; i < n && !sums.isEmpty(); ++i) {
        const double top = sums.last()[i];
        const auto at = std::lower_bound(total_->step.begin(), total_->step.end(), first->step[i]);
        if (at == total_->step.end() || *at != first->step[i]) continue;
        const double t = totalValues[int(at - total_->step.begin())];
        // Beyond rounding (1 % and 0.05 of the unit): parts that overlap.
        if (!(top > t * 1.01 + 0.05)) continue;
        excessSteps_ << first->step[i];
        if ((*xs)[i] < r.lower || (*xs)[i] > r.upper) continue;
        ex << (*xs)[i];
        ey << top;
      }
      excessGraph_->setData(ex, ey, true);
    }
  }
  for (Curve& c : curves_) {
    if (!c.points || stacked_) continue;
    const int n = c.points->size();
    const QVector<double>& x = c.points->x(xAxis_);
    if (alpha_ > 0) updateEma(c);
    // Few points (epoch metrics, sparse series): mark each one.
    const QCPScatterStyle marks(n <= 30 ? QCPScatterStyle::ssDisc : QCPScatterStyle::ssNone, n == 1 ? 7 : 5);
    c.raw->setScatterStyle(marks);
    c.smooth->setScatterStyle(marks);
    if (alpha_ > 0) {
      QVector<double> rawScaled = c.points->value;
      if (c.yScale != 1.0)
        for (double& v : rawScaled) v *= c.yScale;
      SeriesDownsampler::downsample(x, rawScaled, r.lower, r.upper, columns, &dx, &dy);
      c.raw->setData(dx, dy, true);
      SeriesDownsampler::downsample(x, displayValues(c, n), r.lower, r.upper, columns, &dx, &dy);
      c.smooth->setData(dx, dy, true);
    } else {
      SeriesDownsampler::downsample(x, displayValues(c, n), r.lower, r.upper, columns, &dx, &dy);
      c.raw->setData(dx, dy, true);
    }
    const double curveWarmupX = warmupX(*c.points);
    if (c.visible) account(dx, dy, curveWarmupX);
    if (c.bandLowGraph) {
      for (auto [band, graph] : {std::pair{c.bandLow, c.bandLowGraph}, std::pair{c.bandHigh, c.bandHighGraph}}) {
        QVector<double> v = band->value;
        if (c.yScale != 1.0)
          for (double& y : v) y *= c.yScale;
        SeriesDownsampler::downsample(band->x(xAxis_), v, r.lower, r.upper, columns, &dx, &dy);
        graph->setData(dx, dy, true);
        if (c.visible) account(dx, dy, curveWarmupX);
      }
    }
  }
  if (yMin <= yMax) {
    if (log_) {
      plot_->yAxis->setRange(yMin / 1.3, yMax * 1.3);
    } else if (stacked_ || (zeroBased_ && yMin >= 0)) {
      plot_->yAxis->setRange(0, yMax > 0 ? yMax * 1.08 : 1.0);
    } else {
      // Padded, and never narrower than 2 % of the values' size: a flat but
      // noisy curve stays flat instead of filling the plot with jumps.
      const double span = std::max(yMax - yMin, 0.02 * std::max(std::abs(yMax), std::abs(yMin)));
      const double mid = (yMax + yMin) / 2;
      double half = span / 2 * 1.12;
      if (half == 0) half = 1e-9;
      plot_->yAxis->setRange(mid - half, mid + half);
    }
  } else if (clippedY > -std::numeric_limits<double>::infinity() && !log_) {
    plot_->yAxis->setRange(0, clippedY > 0 ? clippedY * 1.08 : 1.0);  // nothing but warm-up
  }
  placeWarmupMark(clippedY > plot_->yAxis->range().upper ? clippedY : NAN, clippedX);
  plot_->replot(QCustomPlot::rpQueuedReplot);
  redrawing_ = false;
}

void LivePlot::placeWarmupMark(double clippedValue, double clippedX) {
  // The band: from before the first point to halfway to the first steady one.
  const SeriesPoints* points = nullptr;
  for (const Curve& c : curves_)
    if (c.points && c.visible && !c.points->isEmpty()) {
      points = c.points;
      break;
    }
  int last = -1;
  if (points && warmupStep_ > 0)
    while (last + 1 < points->size() && points->step[last + 1] <= warmupStep_) ++last;
  if (last < 0) {
    warmupRect_->setVisible(false);
    warmupLabel_->setVisible(false);
    return;
  }
  const QVector<double>& xs = points->x(xAxis_);
  const double right = last + 1 < xs.size() ? (xs[last] + xs[last + 1]) / 2 : xs[last];
  const double left = std::min(plot_->xAxis->range().lower, xs.first()) - 1;
  warmupRect_->topLeft->setCoords(left, 0);
  warmupRect_->bottomRight->setCoords(right, 1);
  QColor shade = palette().color(QPalette::Text);
  shade.setAlpha(22);
  warmupRect_->setBrush(shade);
  warmupRect_->setVisible(true);
  // Above the range: an arrow and the value, so the clipped point still reads.
  const bool clipped = !std::isnan(clippedValue);
  warmupLabel_->setText(clipped ? tr("warm-up ↑ %1").arg(formatValue(clippedValue)) : tr("warm-up"));
  warmupLabel_->position->setCoords(clipped ? clippedX : xs.first(), 0);
  warmupLabel_->setColor(palette().color(QPalette::Text));
  warmupLabel_->setVisible(true);
}

static QString formatX(XAxis axis, double x) {
  switch (axis) {
    case XAxis::Step: return QObject::tr("step %1").arg(qint64(std::llround(x)));
    case XAxis::Epoch: return QObject::tr("epoch %1").arg(x, 0, 'f', 3);
    case XAxis::RelativeTime: return QObject::tr("t = %1 s").arg(x, 0, 'f', 2);
    case XAxis::WallTime:
      return QDateTime::fromMSecsSinceEpoch(qint64(x * 1000)).toString(QStringLiteral("yyyy-MM-dd hh:mm:ss"));
  }
  return {};
}

QString LivePlot::formatValue(double v) const {
  if (std::isnan(v)) return QStringLiteral("—");
  const double a = std::abs(v);
  QString number;
  if (a != 0 && (a < 1e-3 || a >= 1e7)) number = QString::number(v, 'e', 2);
  else if (a >= 1000) number = QLocale().toString(v, 'f', 0);
  else number = QString::number(v, 'f', a >= 100 ? 1 : a >= 10 ? 2 : a >= 1 ? 3 : 4);
  if (yLabel_.isEmpty() || yLabel_ == title_.toLower()) return number;
  return yLabel_ == QLatin1String("%") ? number + QStringLiteral(" %") : number + QLatin1Char(' ') + yLabel_;
}

QString LivePlot::trackerText(double x) const {
  QStringList lines{formatX(xAxis_, x)};
  for (const Curve& c : curves_) {
    if (!c.points || c.points->isEmpty() || !c.visible) continue;
    const QVector<double>& xs = c.points->x(xAxis_);
    int i = int(std::lower_bound(xs.begin(), xs.end(), x) - xs.begin());
    if (i >= xs.size()) i = xs.size() - 1;
    if (i > 0 && std::abs(xs[i - 1] - x) < std::abs(xs[i] - x)) --i;
    const double v = (alpha_ > 0 && i < c.ema.size() ? c.ema[i] : c.points->value[i]) * c.yScale;
    if (std::isnan(v) && !c.missingText.isEmpty()) lines << QStringLiteral("%1: %2").arg(c.label, c.missingText);
    else lines << QStringLiteral("%1: %2").arg(c.label, formatValue(v));
  }
  if (stacked_ && total_ && !total_->isEmpty() && !curves_.isEmpty()) {
    const QVector<double>& xs = total_->x(xAxis_);
    int i = int(std::lower_bound(xs.begin(), xs.end(), x) - xs.begin());
    if (i >= xs.size()) i = xs.size() - 1;
    if (i > 0 && std::abs(xs[i - 1] - x) < std::abs(xs[i] - x)) --i;
    const double step = total_->step[i], t = total_->value[i] * curves_.first().yScale;
    lines << QStringLiteral("%1: %2").arg(totalLabel_, formatValue(t));
    if (excessSteps_.contains(step)) {
      double sum = 0;
      for (const Curve& c : curves_) {
        if (!c.points || !c.visible) continue;
        const auto at = std::lower_bound(c.points->step.begin(), c.points->step.end(), step);
        if (at == c.points->step.end() || *at != step) continue;
        const double v = c.points->value[int(at - c.points->step.begin())] * c.yScale;
        if (!std::isnan(v)) sum += v;
      }
      lines << tr("⚠ the parts add up to %1, more than the %2 of %3: %4")
                   .arg(formatValue(sum), totalLabel_, formatValue(t), excessText_);
    }
  }
  if (warmupStep_ > 0 && xAxis_ == XAxis::Step && x <= warmupStep_ + 0.5)
    lines << (fitWarmup_ ? tr("warm-up step (autotuning, first allocations)")
                         : tr("warm-up step (autotuning, first allocations): left out of the y range"));
  return lines.join(QLatin1Char('\n'));
}

void LivePlot::updateTracker(double pixelX, double pixelY) {
  const QRect rect = plot_->axisRect()->rect();
  if (curves_.isEmpty() || pixelX < rect.left() || pixelX > rect.right() || pixelY < rect.top() ||
      pixelY > rect.bottom()) {
    if (!trackerLine_->visible()) return;
    trackerLine_->setVisible(false);
    trackerLabel_->setVisible(false);
  } else {
    const double x = plot_->xAxis->pixelToCoord(pixelX);
    trackerLine_->point1->setCoords(x, 0);
    trackerLine_->point2->setCoords(x, 1);
    trackerLine_->setVisible(true);
    trackerLabel_->setText(trackerText(x));
    // Beside the cursor, on the side with room, inside the axes.
    const QFontMetrics fm(trackerLabel_->font());
    const QSize size = fm.size(0, trackerLabel_->text()) + QSize(8, 4);
    double left = pixelX + 12 + size.width() > rect.right() ? pixelX - 12 - size.width() : pixelX + 12;
    double top = pixelY + 14 + size.height() > rect.bottom() ? pixelY - 8 - size.height() : pixelY + 14;
    left = std::max(double(rect.left()), left);
    top = std::max(double(rect.top()), top);
    trackerLabel_->position->setCoords(left, top);
    trackerLabel_->setVisible(true);
  }
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

bool LivePlot::trackerVisible() const { return trackerLabel_->visible(); }

bool LivePlot::eventFilter(QObject* watched, QEvent* event) {
  if (watched == plot_) {
    if (event->type() == QEvent::Paint && redrawPending_) {
      // Scrolled into view: drawn right after this (stale) frame.
      QMetaObject::invokeMethod(this, [this] { if (redrawPending_) redraw(); }, Qt::QueuedConnection);
    } else if (event->type() == QEvent::MouseMove) {
      const QPointF p = static_cast<QMouseEvent*>(event)->position();
      updateTracker(p.x(), p.y());
    } else if (event->type() == QEvent::Leave) {
      updateTracker(-1e9, -1e9);
    } else if (event->type() == QEvent::ToolTip) {
      // Help only over the title: nothing large ever covers the data.
      auto* help = static_cast<QHelpEvent*>(event);
      if (help->pos().y() < plot_->axisRect()->rect().top() - 4 && !help_.isEmpty())
        QToolTip::showText(help->globalPos(), help_, plot_);
      else
        QToolTip::hideText();
      return true;
    }
  }
  return QWidget::eventFilter(watched, event);
}

void LivePlot::changeEvent(QEvent* event) {
  if (event->type() == QEvent::PaletteChange || event->type() == QEvent::StyleChange) applyPalette();
  QWidget::changeEvent(event);
}

void LivePlot::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  if (redrawPending_) redraw();
}

void LivePlot::applyPalette() {
  const QPalette pal = palette();
  const QColor bg = pal.color(QPalette::Base), fg = pal.color(QPalette::Text);
  QColor grid = fg;
  grid.setAlpha(40);
  PlotStyle::applyPalette(plot_, pal);
  for (QCPAxis* axis : {plot_->xAxis, plot_->yAxis, plot_->xAxis2, plot_->yAxis2})
    axis->grid()->setPen(QPen(grid, 1, Qt::DotLine));
  QColor legendBg = bg;
  legendBg.setAlpha(200);
  plot_->legend->setBrush(legendBg);
  plot_->legend->setTextColor(fg);
  plot_->legend->setBorderPen(Qt::NoPen);
  trackerLabel_->setColor(fg);
  for (int i = 0; i < curves_.size(); ++i) updateLegendItem(i);
  trackerLabel_->setBrush(legendBg);
  trackerLabel_->setPen(QPen(grid));
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

void LivePlot::showContextMenu(const QPoint& pos) {
  QMenu menu(this);
  menu.addAction(tr("Show everything"), this, &LivePlot::resetView);
  QAction* legendAction = menu.addAction(tr("Legend"));
  legendAction->setCheckable(true);
  legendAction->setChecked(legendVisible());
  connect(legendAction, &QAction::toggled, this, &LivePlot::setLegendVisible);
  if (!curves_.isEmpty()) {
    QMenu* curves = menu.addMenu(tr("Curves"));
    for (int i = 0; i < curves_.size(); ++i) {
      QAction* a = curves->addAction(curves_[i].label);
      a->setCheckable(true);
      a->setChecked(curves_[i].visible);
      connect(a, &QAction::toggled, this, [this, i](bool on) { setCurveVisible(i, on); });
    }
  }
  if (warmupStep_ > 0) {
    QAction* fit = menu.addAction(tr("Fit the warm-up steps in the y range"));
    fit->setCheckable(true);
    fit->setChecked(fitWarmup_);
    connect(fit, &QAction::toggled, this, &LivePlot::setFitWarmup);
  }
  QAction* logAction = menu.addAction(tr("Logarithmic y axis"));
  logAction->setCheckable(true);
  logAction->setChecked(log_);
  connect(logAction, &QAction::toggled, this, &LivePlot::setLogScale);
  menu.addSeparator();
  menu.addAction(tr("Export image (PNG, SVG, PDF)…"), this, [this] { PlotExportDialog::exportPlotImage(this); });
  menu.addAction(tr("Export data as CSV…"), this, [this] { PlotExportDialog::exportPlotCsv(this); });
  menu.exec(plot_->mapToGlobal(pos));
}

bool LivePlot::exportImage(const QString& path, int width, int height, QString* error) {
  if (redrawPending_) draw();  // a plot out of view has not drawn its latest data
  const bool trackerWasVisible = trackerLabel_->visible(), legendWasVisible = plot_->legend->visible();
  trackerLine_->setVisible(false);
  trackerLabel_->setVisible(false);
  plot_->legend->setVisible(true);
  const QString suffix = QFileInfo(path).suffix().toLower();
  bool ok = false;
  if (suffix == QLatin1String("png")) {
    ok = plot_->savePng(path, width, height, 1.0);
  } else if (suffix == QLatin1String("pdf")) {
    ok = plot_->savePdf(path, width, height);
  } else if (suffix == QLatin1String("svg")) {
    QSvgGenerator generator;
    generator.setFileName(path);
    generator.setSize(QSize(width, height));
    generator.setViewBox(QRect(0, 0, width, height));
    generator.setTitle(title_);
    generator.setDescription(tr("Trainbench plot"));
    QCPPainter painter;
    if (painter.begin(&generator)) {
      plot_->toPainter(&painter, width, height);
      ok = painter.end();
    }
  } else if (error) {
    *error = tr("unknown image type '%1' (use .png, .svg or .pdf)").arg(suffix);
    return false;
  }
  trackerLine_->setVisible(trackerWasVisible);
  trackerLabel_->setVisible(trackerWasVisible);
  plot_->legend->setVisible(legendWasVisible);
  if (!ok && error) *error = tr("could not write %1").arg(path);
  return ok;
}

bool LivePlot::exportCsv(const QString& path, QString* error) const {
  QSaveFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Text)) {
    if (error) *error = f.errorString();
    return false;
  }
  QTextStream out(&f);
  out << "series,step,epoch,time_s,wall_time_unix_s,value\n";
  for (const Curve& c : curves_) {
    if (!c.points) continue;
    QString label = c.label;
    if (label.contains(QLatin1Char(',')) || label.contains(QLatin1Char('"')))
      label = QLatin1Char('"') + label.replace(QLatin1Char('"'), QStringLiteral("\"\"")) + QLatin1Char('"');
    const SeriesPoints& p = *c.points;
    const QVector<double> epochs = p.x(XAxis::Epoch);  // a copy: the cache is shared by axes
    for (int i = 0; i < p.size(); ++i)
      out << label << ',' << p.step[i] << ',' << epochs[i] << ',' << p.time[i] << ','
          << QString::number(p.time[i] + p.wallOffset(), 'f', 3) << ','
          << QString::number(p.value[i] * c.yScale, 'g', 10) << '\n';
  }
  out.flush();
  if (!f.commit()) {
    if (error) *error = f.errorString();
    return false;
  }
  return true;
}
