// SPDX-License-Identifier: GPL-3.0-or-later
#include "scaling_chart.h"

#include "plot_style.h"

#include <qcustomplot.h>

#include <QEvent>
#include <QVBoxLayout>
#include <cmath>
#include <limits>
#include <map>

ScalingChart::ScalingChart(QWidget* parent)
    : QWidget(parent), efficiency_(std::numeric_limits<double>::quiet_NaN()) {
  plot_ = PlotStyle::addTitledPlot(this, tr("Scaling (ddp)"), 200);
  plot_->xAxis->setLabel(tr("processes"));
  plot_->yAxis->setLabel(tr("samples/s"));
  plot_->legend->setVisible(true);
  setToolTip(tr("Throughput against the number of processes that trained each run. The dashed "
                "line is ideal scaling from the run with the fewest processes; the gap to it is "
                "communication and imbalance. Compare runs of one model and per-process batch."));
  setVisible(false);
}

int ScalingChart::processesOf(const RunSummary& run) {
  const int w = run.environment.value(QLatin1String("world_size")).toInt(1);
  return w >= 1 ? w : 1;
}

void ScalingChart::setRuns(const QList<RunSummary>& runs) {
  runs_ = runs;
  refresh();
}

void ScalingChart::changeEvent(QEvent* event) {
  if (event->type() == QEvent::PaletteChange) refresh();
  QWidget::changeEvent(event);
}

void ScalingChart::refresh() {
  plot_->clearGraphs();
  points_ = 0;
  efficiency_ = std::numeric_limits<double>::quiet_NaN();
  // The best throughput per process count (reruns of one count: the fastest).
  std::map<int, double> best;
  for (const RunSummary& r : runs_) {
    if (!std::isfinite(r.samplesPerSecond) || r.samplesPerSecond <= 0) continue;
    double& b = best[processesOf(r)];
    b = std::max(b, r.samplesPerSecond);
  }
  setVisible(best.size() >= 2);
  if (best.size() < 2) return;

  const QPalette pal = palette();
  PlotStyle::applyPalette(plot_, pal);
  plot_->legend->setBrush(pal.color(QPalette::Base));
  plot_->legend->setTextColor(pal.color(QPalette::Text));

  const int p0 = best.begin()->first;
  const double base = best.begin()->second;
  QCPGraph* ideal = plot_->addGraph();
  ideal->setName(tr("ideal"));
  ideal->setPen(QPen(QColor(127, 127, 127), 1.5, Qt::DashLine));
  QCPGraph* measured = plot_->addGraph();
  measured->setName(tr("measured"));
  measured->setPen(QPen(QColor(31, 119, 180), 2));
  measured->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 7));
  double hi = 0;
  for (const auto& [p, sps] : best) {
    const double want = base * double(p) / double(p0);
    ideal->addData(p, want);
    measured->addData(p, sps);
    hi = std::max({hi, want, sps});
    ++points_;
  }
  efficiency_ = best.rbegin()->second / (base * double(best.rbegin()->first) / double(p0));
  auto ticker = QSharedPointer<QCPAxisTickerFixed>::create();
  ticker->setTickStep(1);
  ticker->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
  plot_->xAxis->setTicker(ticker);
  plot_->xAxis->setRange(0, best.rbegin()->first + 1);
  plot_->yAxis->setRange(0, hi * 1.1);
  plot_->replot(QCustomPlot::rpQueuedReplot);
}

bool ScalingChart::exportPng(const QString& path, int width, int height) {
  return plot_->savePng(path, width, height, 1.0);
}
