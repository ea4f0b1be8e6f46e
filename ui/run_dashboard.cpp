// SPDX-License-Identifier: GPL-3.0-or-later
#include "run_dashboard.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDateTime>
#include <QDir>
#include <QFileDialog>
#include <QMessageBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QJsonDocument>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QSlider>
#include <QSplitter>
#include <QTabWidget>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <limits>

#include "live_plot.h"
#include "run_config.h"
#include "trick_catalog.h"

namespace {
double metricValue(const QJsonValue& v) {
  return v.isDouble() ? v.toDouble() : std::numeric_limits<double>::quiet_NaN();
}
}  // namespace

RunDashboard::RunDashboard(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* controls = new QHBoxLayout;
  header_ = new QLabel(this);
  header_->setTextFormat(Qt::RichText);
  controls->addWidget(header_, 1);

  controls->addWidget(new QLabel(tr("X axis:"), this));
  xAxisBox_ = new QComboBox(this);
  xAxisBox_->addItem(tr("Step"), int(XAxis::Step));
  xAxisBox_->addItem(tr("Epoch"), int(XAxis::Epoch));
  xAxisBox_->addItem(tr("Relative time"), int(XAxis::RelativeTime));
  xAxisBox_->addItem(tr("Wall time"), int(XAxis::WallTime));
  xAxisBox_->setToolTip(tr("What the x axis of every plot on this dashboard shows."));
  controls->addWidget(xAxisBox_);

  controls->addWidget(new QLabel(tr("Smoothing:"), this));
  smoothing_ = new QSlider(Qt::Horizontal, this);
  smoothing_->setRange(0, 99);
  smoothing_->setFixedWidth(120);
  smoothing_->setToolTip(tr("Exponential moving average weight (0 = off). The raw curve stays drawn faintly behind."));
  controls->addWidget(smoothing_);
  logScale_ = new QCheckBox(tr("Log y"), this);
  logScale_->setToolTip(tr("Logarithmic y axis on every plot (useful for the loss)."));
  controls->addWidget(logScale_);
  auto* exportAll = new QPushButton(tr("Export plots…"), this);
  exportAll->setToolTip(tr("Save every plot of this dashboard as PNG, SVG and PDF (with legends) into a folder."));
  controls->addWidget(exportAll);
  auto* reset = new QPushButton(tr("Reset zoom"), this);
  reset->setToolTip(tr("Show all data again on every plot and follow new points."));
  controls->addWidget(reset);
  layout->addLayout(controls);

  auto* splitter = new QSplitter(Qt::Vertical, this);
  auto* scroll = new QScrollArea(splitter);
  scroll->setWidgetResizable(true);
  auto* canvas = new QWidget(scroll);
  grid_ = new QGridLayout(canvas);
  grid_->setSpacing(6);
  scroll->setWidget(canvas);
  splitter->addWidget(scroll);

  auto* bottom = bottom_ = new QTabWidget(splitter);
  tricks_ = new QLabel(tr("The engine has not reported its tricks yet."), bottom);
  tricks_->setTextFormat(Qt::RichText);
  tricks_->setAlignment(Qt::AlignTop | Qt::AlignLeft);
  tricks_->setWordWrap(true);
  auto* tricksScroll = new QScrollArea(bottom);
  tricksScroll->setWidgetResizable(true);
  tricksScroll->setWidget(tricks_);
  bottom->addTab(tricksScroll, tr("Tricks applied"));
  log_ = new QPlainTextEdit(bottom);
  log_->setReadOnly(true);
  log_->setMaximumBlockCount(5000);
  bottom->addTab(log_, tr("Engine log"));
  splitter->addWidget(bottom);
  splitter->setStretchFactor(0, 5);
  splitter->setStretchFactor(1, 1);
  splitter->setSizes({800, 150});
  layout->addWidget(splitter, 1);

  connect(xAxisBox_, &QComboBox::currentIndexChanged, this,
          [this] { setXAxis(XAxis(xAxisBox_->currentData().toInt())); });
  connect(smoothing_, &QSlider::valueChanged, this, [this](int v) {
    for (LivePlot* p : plots()) p->setSmoothing(v / 100.0);
  });
  connect(logScale_, &QCheckBox::toggled, this, [this](bool on) {
    for (LivePlot* p : plots()) p->setLogScale(on);
  });
  connect(exportAll, &QPushButton::clicked, this, [this] {
    const QString folder = QFileDialog::getExistingDirectory(this, tr("Folder for the plots"));
    if (folder.isEmpty()) return;
    QString error;
    const int written = exportPlots(folder, &error);
    if (!error.isEmpty()) QMessageBox::warning(this, tr("Export failed"), error);
    else appendLog(QStringLiteral("export"), tr("%1 files written to %2").arg(written).arg(folder));
  });
  connect(reset, &QPushButton::clicked, this, [this] {
    for (LivePlot* p : plots()) p->resetView();
  });

  refreshTimer_ = new QTimer(this);
  refreshTimer_->setInterval(250);
  connect(refreshTimer_, &QTimer::timeout, this, [this] {
    if (dirty_) refreshNow();
  });
  refreshTimer_->start();

  const QString ms = tr("ms");
  auto makePanel = [](const QString& title, const QString& unit, const QList<PanelCurve>& curves,
                      bool stacked = false, double yScale = 1.0) {
    Panel p;
    p.title = title;
    p.unit = unit;
    p.curves = curves;
    p.stacked = stacked;
    p.yScale = yScale;
    return p;
  };
  panels_ = {
      makePanel(tr("Step time"), ms, {{false, QStringLiteral("step_time_ms"), tr("step time")}}),
      makePanel(tr("Samples per second"), tr("samples/s"), {{false, QStringLiteral("samples_per_s"), tr("samples/s")}}),
      makePanel(tr("Step-time breakdown (stacked)"), ms,
       {{false, QStringLiteral("data_wait_ms"), tr("data wait")},
        {false, QStringLiteral("h2d_ms"), tr("host→device")},
        {false, QStringLiteral("forward_ms"), tr("forward")},
        {false, QStringLiteral("backward_ms"), tr("backward")},
        {false, QStringLiteral("optimizer_ms"), tr("optimizer")},
        {false, QStringLiteral("other_ms"), tr("other")}},
       true),
      makePanel(tr("Memory"), tr("MiB"),
       {{false, QStringLiteral("gpu_mem_allocated_bytes"), tr("allocated")},
        {false, QStringLiteral("gpu_mem_reserved_bytes"), tr("reserved")},
        {false, QStringLiteral("gpu_mem_peak_bytes"), tr("peak")},
        {false, QStringLiteral("gpu_mem_used_bytes"), tr("device used")},
        {false, QStringLiteral("host_rss_bytes"), tr("host resident (RSS)")}},
       false, 1.0 / (1024.0 * 1024.0)),
      makePanel(tr("Tensor Core utilization"), tr("%"),
       {{false, QStringLiteral("tensor_core_share"), tr("share of kernel time"), 100.0},
        {false, QStringLiteral("tensor_pipe_active_pct"), tr("tensor pipe active")}}),
      makePanel(tr("Loss"), tr("loss"),
       {{false, QStringLiteral("loss"), tr("train (step)")},
        {true, QStringLiteral("train_loss"), tr("train (epoch)")},
        {true, QStringLiteral("test_loss"), tr("test (epoch)")}}),
      makePanel(tr("Accuracy"), tr("accuracy"),
       {{false, QStringLiteral("train_accuracy"), tr("train (step)")},
        {false, QStringLiteral("accuracy"), tr("train (step)")},
        {true, QStringLiteral("train_accuracy"), tr("train (epoch)")},
        {true, QStringLiteral("test_accuracy"), tr("test (epoch)")}}),
      makePanel(tr("Learning rate"), tr("lr"), {{false, QStringLiteral("lr"), tr("learning rate")}}),
  };
  for (const Panel& p : panels_)
    for (const PanelCurve& c : p.curves)
      claimed_.insert((c.epochSeries ? QStringLiteral("e:") : QStringLiteral("s:")) + c.name);
  setStatus(status_);
}

QList<LivePlot*> RunDashboard::plots() const {
  QList<LivePlot*> out;
  for (const Panel& p : panels_)
    if (p.plot) out << p.plot;
  return out;
}

LivePlot* RunDashboard::plot(const QString& title) const {
  for (const Panel& p : panels_)
    if (p.plot && p.title == title) return p.plot;
  return nullptr;
}

QString RunDashboard::statusText() const { return status_; }

void RunDashboard::handleRunStarted(const QJsonObject& event) {
  series_.runId = event.value(QLatin1String("run_id")).toInteger();
  series_.runName = event.value(QLatin1String("name")).toString(series_.runName);
  series_.stepsPerEpoch = event.value(QLatin1String("steps_per_epoch")).toInt();
  totalSteps_ = event.value(QLatin1String("total_steps")).toInteger();
  series_.startWallSeconds =
      QDateTime::currentMSecsSinceEpoch() / 1000.0 - event.value(QLatin1String("t")).toDouble();
  setTricks(event.value(QLatin1String("tricks")).toObject());
  setStatus(QStringLiteral("running"));
}

void RunDashboard::setTricks(const QJsonObject& tricks) {
  // Which tricks the engine applied, and why not where it did not: the ones
  // changed from their default first.
  if (!tricks.isEmpty()) {
    QString html = QStringLiteral("<table cellspacing='4'><tr><th align='left'>%1</th><th align='left'>%2</th>"
                                  "<th align='left'>%3</th><th align='left'>%4</th></tr>")
                       .arg(tr("Trick"), tr("Requested"), tr("Applied"), tr("Reason"));
    QStringList keys = tricks.keys();
    std::stable_sort(keys.begin(), keys.end(), [&tricks](const QString& a, const QString& b) {
      return tricks.value(a).toObject().value(QLatin1String("changed")).toBool() &&
             !tricks.value(b).toObject().value(QLatin1String("changed")).toBool();
    });
    for (const QString& key : keys) {
      const auto it = tricks.constFind(key);
      const QJsonObject t = it.value().toObject();
      const TrickInfo* info = TrickCatalog::instance().find(it.key());
      const QString requested = RunConfig::valueText(t.value(QLatin1String("requested")));
      const QString applied = RunConfig::valueText(t.value(QLatin1String("applied")));
      html += QStringLiteral("<tr><td>%1</td><td>%2</td><td>%3</td><td>%4</td></tr>")
                  .arg((info ? info->label : it.key()).toHtmlEscaped(), requested.toHtmlEscaped(),
                       applied.toHtmlEscaped(), t.value(QLatin1String("reason")).toString().toHtmlEscaped());
    }
    tricks_->setText(html + QStringLiteral("</table>"));
  }
}

SeriesPoints& RunDashboard::stepSeries(const QString& name) { return series_.step[name]; }

void RunDashboard::handleStep(const QJsonObject& event) {
  const double step = event.value(QLatin1String("step")).toDouble();
  const double epoch = event.value(QLatin1String("epoch")).toDouble();
  const double t = event.value(QLatin1String("t")).toDouble();
  if (series_.startWallSeconds == 0) series_.startWallSeconds = QDateTime::currentMSecsSinceEpoch() / 1000.0 - t;
  const double epochX = series_.epochOfStep(step, epoch);
  const QJsonObject metrics = event.value(QLatin1String("metrics")).toObject();
  for (auto it = metrics.begin(); it != metrics.end(); ++it)
    stepSeries(it.key()).append(step, epochX, t, series_.startWallSeconds + t, metricValue(it.value()));
  lastStep_ = qint64(step);
  scheduleRefresh();
}

void RunDashboard::handleEpoch(const QJsonObject& event) {
  const double step = event.value(QLatin1String("step")).toDouble();
  const double epoch = event.value(QLatin1String("epoch")).toDouble();
  const double t = event.value(QLatin1String("t")).toDouble();
  if (series_.startWallSeconds == 0) series_.startWallSeconds = QDateTime::currentMSecsSinceEpoch() / 1000.0 - t;
  const double epochX = series_.stepsPerEpoch > 0 ? step / series_.stepsPerEpoch : epoch;
  const QJsonObject metrics = event.value(QLatin1String("metrics")).toObject();
  for (auto it = metrics.begin(); it != metrics.end(); ++it)
    series_.epoch[it.key()].append(step, epochX, t, series_.startWallSeconds + t, metricValue(it.value()));
  scheduleRefresh();
}

void RunDashboard::appendLog(const QString& level, const QString& message) {
  log_->appendPlainText(QStringLiteral("[%1] %2").arg(level, message));
}

void RunDashboard::setStatus(const QString& status, const QString& message) {
  status_ = status;
  if (status == QLatin1String("failed") && !message.isEmpty())
    lastWords_ = message.trimmed().section(QLatin1Char('\n'), -1);
  QString progress;
  if (totalSteps_ > 0) progress = tr(" — step %1 of %2").arg(lastStep_).arg(totalSteps_);
  else if (lastStep_ > 0) progress = tr(" — step %1").arg(lastStep_);
  QString html = QStringLiteral("<b>%1</b> &nbsp; %2%3")
                     .arg(series_.runName.toHtmlEscaped(), status.toHtmlEscaped(), progress.toHtmlEscaped());
  if (status == QLatin1String("failed") && !lastWords_.isEmpty())
    html += QStringLiteral(" &nbsp; <span style='color:#c83232'>%1</span>").arg(lastWords_.left(200).toHtmlEscaped());
  header_->setText(html);
  header_->setToolTip(status == QLatin1String("failed") ? tr("The engine's last words are in the Engine log tab.") : QString());
  if (!message.isEmpty()) appendLog(status, message);
}

void RunDashboard::setSeries(const RunSeries& series) {
  for (Panel& p : panels_) {
    if (p.plot) p.plot->removeCurves();
    p.attached.clear();
  }
  series_ = series;
  for (const QString& line : series_.events) log_->appendPlainText(line);
  lastStep_ = 0;
  for (const auto& [name, points] : series_.step)
    if (!points.isEmpty()) lastStep_ = std::max(lastStep_, qint64(points.step.last()));
  setStatus(status_);
  refreshNow();
}

void RunDashboard::scheduleRefresh() { dirty_ = true; }

void RunDashboard::placePlot(LivePlot* plot) {
  const int index = grid_->count();
  grid_->addWidget(plot, index / 2, index % 2);
  plot->setXAxis(XAxis(xAxisBox_->currentData().toInt()));
  plot->setSmoothing(smoothing_->value() / 100.0);
  plot->setLogScale(logScale_->isChecked());
}

void RunDashboard::attachCurves(Panel& panel) {
  for (const PanelCurve& c : panel.curves) {
    const QString id = (c.epochSeries ? QStringLiteral("e:") : QStringLiteral("s:")) + c.name;
    if (panel.attached.contains(id)) continue;
    const auto& map = c.epochSeries ? series_.epoch : series_.step;
    auto it = map.find(c.name);
    if (it == map.end() || it->second.isEmpty()) continue;
    if (!panel.plot) {
      panel.plot = new LivePlot(panel.title, panel.unit, this);
      const QString movers = tricksThatMove(panel.title);
      if (!movers.isEmpty())
        panel.plot->setToolTip(panel.plot->toolTip() + QStringLiteral("\n\n") +
                               tr("Tricks that should move this plot: %1").arg(movers));
      panel.plot->setStacked(panel.stacked);
      placePlot(panel.plot);
    }
    panel.plot->addCurve(c.label, &it->second, panel.yScale * c.scale);
    panel.attached.insert(id);
  }
}

QString RunDashboard::tricksThatMove(const QString& title) {
  // Words of a plot's title as they appear in the tricks' "which plot should
  // move" texts (resources/tricks/tricks.json).
  static const QList<QPair<QString, QStringList>> words = {
      {QStringLiteral("Step time"), {QStringLiteral("step time")}},
      {QStringLiteral("Samples per second"), {QStringLiteral("samples/s")}},
      {QStringLiteral("Step-time breakdown (stacked)"), {QStringLiteral("breakdown"), QStringLiteral("slice")}},
      {QStringLiteral("Memory"), {QStringLiteral("memory")}},
      {QStringLiteral("Tensor Core utilization"), {QStringLiteral("tensor core")}},
      {QStringLiteral("Loss"), {QStringLiteral("loss")}},
      {QStringLiteral("Accuracy"), {QStringLiteral("accuracy")}},
      {QStringLiteral("Learning rate"), {QStringLiteral("learning-rate"), QStringLiteral("learning rate")}},
  };
  QStringList labels;
  for (const auto& [plotTitle, keys] : words) {
    if (plotTitle != title) continue;
    for (const TrickInfo& t : TrickCatalog::instance().tricks())
      for (const QString& k : keys)
        if (t.plot.contains(k, Qt::CaseInsensitive) && !labels.contains(t.label)) labels << t.label;
  }
  return labels.join(QStringLiteral(", "));
}

void RunDashboard::ensurePanels() {
  // Series nobody claimed get a plot of their own (plots are generic over names).
  auto addGeneric = [this](bool epochSeries, const QString& name) {
    const QString id = (epochSeries ? QStringLiteral("e:") : QStringLiteral("s:")) + name;
    if (claimed_.contains(id)) return;
    claimed_.insert(id);
    Panel p;
    p.title = epochSeries ? tr("%1 (per epoch)").arg(name) : name;
    p.curves = {{epochSeries, name, name}};
    panels_.append(p);
  };
  for (const auto& [name, points] : series_.step) addGeneric(false, name);
  for (const auto& [name, points] : series_.epoch) addGeneric(true, name);
  for (Panel& p : panels_) attachCurves(p);
}

void RunDashboard::refreshNow() {
  dirty_ = false;
  ensurePanels();
  for (LivePlot* p : plots()) p->refresh();
  if (status_ == QLatin1String("running")) setStatus(status_);
}

int RunDashboard::exportPlots(const QString& folder, QString* error) {
  int written = 0;
  QString base = series_.runName.isEmpty() ? QStringLiteral("run") : series_.runName;
  for (QChar& c : base)
    if (!c.isLetterOrNumber() && c != QLatin1Char('-')) c = QLatin1Char('_');
  for (LivePlot* p : plots()) {
    QString title = p->title();
    for (QChar& c : title)
      if (!c.isLetterOrNumber() && c != QLatin1Char('-')) c = QLatin1Char('_');
    for (const char* suffix : {"png", "svg", "pdf"}) {
      const QString path = QDir(folder).filePath(QStringLiteral("%1-%2.%3").arg(base, title, QLatin1String(suffix)));
      if (!p->exportImage(path, 1200, 700, error)) return written;
      ++written;
    }
  }
  return written;
}

void RunDashboard::setXAxis(XAxis axis) {
  const int index = xAxisBox_->findData(int(axis));
  if (index != xAxisBox_->currentIndex()) xAxisBox_->setCurrentIndex(index);
  for (LivePlot* p : plots()) p->setXAxis(axis);
}

void RunDashboard::setSmoothing(double alpha) { smoothing_->setValue(int(std::lround(alpha * 100))); }

void RunDashboard::setLogScale(bool on) { logScale_->setChecked(on); }
