// SPDX-License-Identifier: GPL-3.0-or-later
#include "run_dashboard.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDateTime>
#include <QDir>
#include <QElapsedTimer>
#include <QEvent>
#include <QFileDialog>
#include <QFrame>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QJsonArray>
#include <QJsonDocument>
#include <QLabel>
#include <QLoggingCategory>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QSlider>
#include <QSplitter>
#include <QTabWidget>
#include <QTextDocument>
#include <QTimer>
#include <QTreeView>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/advise/advisor.h"
#include "engine_owner.h"
#include "live_plot.h"
#include "palette_colors.h"
#include "run_config.h"
#include "run_environment_model.h"
#include "store_follower.h"
#include "trick_catalog.h"

namespace {
double metricValue(const QJsonValue& v) {
  return v.isDouble() ? v.toDouble() : std::numeric_limits<double>::quiet_NaN();
}

QString formatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return QStringLiteral("—");
  if (seconds < 60) return QObject::tr("%1 s").arg(seconds, 0, 'f', seconds < 10 ? 1 : 0);
  const qint64 s = qint64(std::llround(seconds));
  if (s < 3600) return QObject::tr("%1 min %2 s").arg(s / 60).arg(s % 60);
  return QObject::tr("%1 h %2 min").arg(s / 3600).arg((s % 3600) / 60);
}

// A view-only layer of the breakdown (never an engine series name).
const QString kGraphReplaySeries = QStringLiteral("graph replay (view)");
const QStringList kReplayedPhases = {QStringLiteral("forward_ms"), QStringLiteral("backward_ms"),
                                     QStringLiteral("optimizer_ms"), QStringLiteral("other_ms")};

double number(const QJsonObject& o, const char* key) {
  const QJsonValue v = o.value(QLatin1String(key));
  return v.isDouble() ? v.toDouble() : std::numeric_limits<double>::quiet_NaN();
}
}  // namespace

RunDashboard::RunDashboard(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);

  // Header: who, how it is going, why it failed, Stop.
  auto* top = new QHBoxLayout;
  header_ = new QLabel(this);
  header_->setTextFormat(Qt::RichText);
  header_->setWordWrap(true);
  top->addWidget(header_, 1);
  stopButton_ = new QPushButton(tr("Stop"), this);
  stopButton_->setToolTip(tr("Ask the engine to finish its step, save and stop (SIGTERM)."));
  stopButton_->setVisible(false);
  top->addWidget(stopButton_);
  layout->addLayout(top);
  reasonLabel_ = new QLabel(this);
  reasonLabel_->setWordWrap(true);
  reasonLabel_->setTextFormat(Qt::RichText);
  reasonLabel_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  reasonLabel_->setVisible(false);
  layout->addWidget(reasonLabel_);

  // The result: headline figures once the run ended, on one line so the
  // plots keep the height (the tricks in effect are a count; the list is its
  // tooltip and the Tricks applied tab).
  resultStrip_ = new QFrame(this);
  resultStrip_->setFrameShape(QFrame::StyledPanel);
  resultStrip_->setVisible(false);
  auto* strip = new QHBoxLayout(resultStrip_);
  strip->setContentsMargins(8, 2, 8, 2);
  const QStringList captions{tr("Test accuracy"), tr("Median step"), tr("Throughput"), tr("Peak memory"),
                             tr("Wall time"), tr("Tricks in effect")};
  for (const QString& caption : captions) {
    auto* figure = new QLabel(resultStrip_);
    figure->setTextFormat(Qt::RichText);
    figure->setProperty("caption", caption);
    figure->setTextInteractionFlags(Qt::TextSelectableByMouse);
    strip->addWidget(figure);
    resultLabels_ << figure;
  }
  strip->addStretch(1);
  layout->addWidget(resultStrip_);

  auto* controls = new QHBoxLayout;
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
  smoothing_->setFixedWidth(110);
  smoothing_->setToolTip(tr("Exponential moving average weight (0 = off). The raw curve stays drawn faintly behind."));
  controls->addWidget(smoothing_);
  smoothingValue_ = new QLabel(this);
  smoothingValue_->setMinimumWidth(QFontMetrics(font()).horizontalAdvance(QStringLiteral("0.00 ")));
  controls->addWidget(smoothingValue_);
  logScale_ = new QCheckBox(tr("Log y"), this);
  logScale_->setToolTip(tr("Logarithmic y axis on every plot (useful for the loss)."));
  controls->addWidget(logScale_);
  fitWarmup_ = new QCheckBox(tr("Fit warm-up"), this);
  fitWarmup_->setToolTip(tr("The first steps (cuDNN autotuning, first allocations, CUDA graph capture) can take many "
                            "times a steady step. The time plots shade them and scale to the steady steps, marking a "
                            "warm-up value above the plot with ↑ and its value; check to fit them in the y range."));
  controls->addWidget(fitWarmup_);
  controls->addStretch(1);
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
  auto* canvasLayout = new QVBoxLayout(canvas);
  emptyHint_ = new QLabel(canvas);
  emptyHint_->setAlignment(Qt::AlignCenter);
  emptyHint_->setWordWrap(true);
  canvasLayout->addWidget(emptyHint_);
  grid_ = new QGridLayout;
  grid_->setSpacing(6);
  canvasLayout->addLayout(grid_);
  canvasLayout->addStretch(1);
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
  environment_ = new RunEnvironmentModel(this);
  auto* environmentView = new QTreeView(bottom);
  environmentView->setObjectName(QStringLiteral("environmentView"));
  environmentView->setModel(environment_);
  environmentView->setUniformRowHeights(true);
  environmentView->setAlternatingRowColors(true);
  environmentView->header()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
  const int environmentTab = bottom->addTab(environmentView, tr("Environment"));
  bottom->setTabToolTip(environmentTab,
                        tr("Where and how this run ran, as the engine recorded it: the device, the "
                           "instruction set of its CPU loops, its threads and what decided them, the "
                           "activation layout and why, library versions, and the kernels each "
                           "convolution shape ran. Two runs can differ here with the same settings: "
                           "compare this before their speed."));
  splitter->addWidget(bottom);
  splitter->setStretchFactor(0, 5);
  splitter->setStretchFactor(1, 1);
  splitter->setSizes({800, 130});
  layout->addWidget(splitter, 1);

  connect(xAxisBox_, &QComboBox::currentIndexChanged, this,
          [this] { setXAxis(XAxis(xAxisBox_->currentData().toInt())); });
  connect(smoothing_, &QSlider::valueChanged, this, [this](int v) {
    smoothingValue_->setText(v == 0 ? tr("off") : QString::number(v / 100.0, 'f', 2));
    for (LivePlot* p : plots()) p->setSmoothing(v / 100.0);
  });
  smoothingValue_->setText(tr("off"));
  connect(logScale_, &QCheckBox::toggled, this, [this](bool on) {
    for (LivePlot* p : plots()) p->setLogScale(on);
  });
  connect(fitWarmup_, &QCheckBox::toggled, this, [this](bool on) {
    for (LivePlot* p : plots()) p->setFitWarmup(on);
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
  connect(stopButton_, &QPushButton::clicked, this, &RunDashboard::requestStop);

  refreshTimer_ = new QTimer(this);
  refreshTimer_->setInterval(250);
  connect(refreshTimer_, &QTimer::timeout, this, [this] {
    if (dirty_) refreshNow();
  });
  refreshTimer_->start();

  const QString ms = tr("ms");
  auto makePanel = [](const QString& title, const QString& unit, const QList<PanelCurve>& curves,
                      bool stacked = false, double yScale = 1.0, bool zeroBased = false) {
    Panel p;
    p.title = title;
    p.unit = unit;
    p.curves = curves;
    p.stacked = stacked;
    p.yScale = yScale;
    p.zeroBased = zeroBased;
    return p;
  };
  auto catalogPanel = [&](const QString& series, const QString& label, const QString& help) {
    const auto [title, unit] = seriesTitleAndUnit(series);
    Panel p = makePanel(title, unit, {{false, series, label, seriesScale(series)}}, false, 1.0, true);
    p.help = help;
    return p;
  };
  panels_ = {
      makePanel(tr("Step time"), ms, {{false, QStringLiteral("step_time_ms"), tr("step time")}}, false, 1.0, true),
      makePanel(tr("Samples per second"), tr("samples/s"), {{false, QStringLiteral("samples_per_s"), tr("samples/s")}},
                false, 1.0, true),
      makePanel(tr("Step-time breakdown (stacked)"), ms,
       {{false, QStringLiteral("data_wait_ms"), tr("data wait")},
        {false, QStringLiteral("h2d_ms"), tr("host→device")},
        {false, QStringLiteral("forward_ms"), tr("forward")},
        {false, QStringLiteral("backward_ms"), tr("backward")},
        {false, QStringLiteral("optimizer_ms"), tr("optimizer")},
        {false, QStringLiteral("step_end_ms"), tr("end of step")},
        {false, QStringLiteral("other_ms"), tr("other")}},
       true),
      makePanel(tr("Memory"), tr("MiB"),
       {{false, QStringLiteral("gpu_mem_allocated_bytes"), tr("allocated")},
        {false, QStringLiteral("gpu_mem_reserved_bytes"), tr("reserved")},
        {false, QStringLiteral("gpu_mem_peak_bytes"), tr("peak")},
        {false, QStringLiteral("gpu_mem_used_bytes"), tr("device used")},
        {false, QStringLiteral("host_rss_bytes"), tr("host resident (RSS)")}},
       false, 1.0 / (1024.0 * 1024.0), true),
      // Two quantities, two plots: neither is "the" utilization.
      catalogPanel(QStringLiteral("tensor_core_share"), tr("Tensor Core kernels' share of kernel time"),
                   tr("The summed duration of the kernels that use Tensor Cores over all kernel time of the step, "
                      "from the kernel census (CUPTI) on sampled steps only: each point is one sampled step. A "
                      "kernel is counted whole by its name or the library's choice, so this says where the time "
                      "went, not how busy the Tensor Cores were (that is the tensor pipe plot). Recorded only when "
                      "the run asked for it (cupti_sampling, or profiler): CUPTI costs more than a small step. "
                      "See docs/metrics.md.")),
      catalogPanel(QStringLiteral("tensor_pipe_active_pct"), tr("tensor pipe active cycles / SM active cycles"),
                   tr("Hardware counters (CUPTI range profiler) over one whole sampled step: the tensor pipe's "
                      "active cycles over the SMs' active cycles. Each point is one sampled step. Nsight Compute's "
                      "figure differs by what it covers (it replays every kernel alone, caches flushed): see "
                      "docs/metrics.md. Recorded only when the run asked for it (cupti_sampling, or profiler).")),
      makePanel(tr("Loss"), tr("loss"),
       {{false, QStringLiteral("loss"), tr("train (step)")},
        {true, QStringLiteral("train_loss"), tr("train (epoch)")},
        {true, QStringLiteral("test_loss"), tr("test (epoch)")},
        {false, QStringLiteral("test_loss"), tr("test (evaluations)")}}),
      makePanel(tr("Accuracy"), tr("%"),
       {{false, QStringLiteral("train_accuracy"), tr("train (step)")},
        {false, QStringLiteral("accuracy"), tr("train (step)")},
        {true, QStringLiteral("train_accuracy"), tr("train (epoch)")},
        {true, QStringLiteral("test_accuracy"), tr("test (epoch)")},
        // eval_every_steps / target_accuracy: the evaluations between epochs
        {false, QStringLiteral("test_accuracy"), tr("test (evaluations)")}}, false, 100.0),
      makePanel(tr("Learning rate"), tr("lr"), {{false, QStringLiteral("lr"), tr("learning rate")}}),
  };
  for (Panel& p : panels_) {
    p.warmupMarked = p.title == tr("Step time") || p.title == tr("Samples per second") || p.stacked;
    for (const PanelCurve& c : p.curves)
      claimed_.insert((c.epochSeries ? QStringLiteral("e:") : QStringLiteral("s:")) + c.name);
    if (p.stacked) p.curves.append({false, kGraphReplaySeries, tr("graph replay (phases not timed)")});
  }
  updateHeader();
}

RunDashboard::~RunDashboard() {
  // Plots point into series_: let go of them first.
  for (LivePlot* p : plots()) {
    p->setStackTotal(nullptr, QString(), QString());
    p->removeCurves();
  }
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

QString RunDashboard::headerText() const {
  QTextDocument doc;
  doc.setHtml(header_->text());
  QString text = doc.toPlainText();
  if (reasonLabel_->isVisibleTo(this)) {
    doc.setHtml(reasonLabel_->text());
    text += QLatin1Char('\n') + doc.toPlainText();
  }
  return text;
}

bool RunDashboard::hasResult() const { return resultStrip_->isVisibleTo(this); }

QString RunDashboard::resultText() const {
  QStringList parts;
  QTextDocument doc;
  for (const QLabel* l : resultLabels_) {
    doc.setHtml(l->text());
    parts << doc.toPlainText().simplified();
  }
  return parts.join(QStringLiteral(" | "));
}

namespace {
// A setting as the settings table names it, and its value in words.
QPair<QString, QString> settingInWords(const QString& key, const QJsonValue& value) {
  const SettingInfo* s = TrickCatalog::instance().setting(key);
  return {s ? s->label : key, s ? s->valueText(value) : RunConfig::valueText(value)};
}

bool inEffect(const QJsonObject& trick) {
  // Changed from the baseline's value, and honoured by the engine.
  return trick.value(QLatin1String("changed")).toBool() && trick.value(QLatin1String("applied")).toBool();
}
}  // namespace

QStringList RunDashboard::tricksInEffect() const {
  QStringList out;
  for (auto it = tricksReport_.begin(); it != tricksReport_.end(); ++it) {
    const QJsonObject t = it.value().toObject();
    if (!inEffect(t)) continue;
    const auto [label, value] = settingInWords(it.key(), t.value(QLatin1String("requested")));
    out << QStringLiteral("%1: %2").arg(label, value);
  }
  return out;
}

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
  if (tricks.isEmpty()) return;
  tricksReport_ = tricks;
  // "In effect": changed from the baseline's value and honoured by the
  // engine, a trick at work; "baseline": the default value; "not applied":
  // asked for, but the engine could not (the reason says why).
  QString html = QStringLiteral("<table cellspacing='4' cellpadding='3'><tr><th align='left'>%1</th><th align='left'>%2</th>"
                                "<th align='left'>%3</th><th align='left'>%4</th></tr>")
                     .arg(tr("Setting"), tr("Value"), tr("In effect"), tr("Reason"));
  QStringList keys = tricks.keys();
  std::stable_sort(keys.begin(), keys.end(), [&tricks](const QString& a, const QString& b) {
    return tricks.value(a).toObject().value(QLatin1String("changed")).toBool() &&
           !tricks.value(b).toObject().value(QLatin1String("changed")).toBool();
  });
  for (const QString& key : keys) {
    const QJsonObject t = tricks.value(key).toObject();
    const auto [label, value] = settingInWords(key, t.value(QLatin1String("requested")));
    const QString effect = !t.value(QLatin1String("changed")).toBool() ? tr("baseline")
                           : inEffect(t)                                ? tr("yes")
                                                                        : tr("not applied");
    html += QStringLiteral("<tr><td>%1</td><td>%2</td><td>%3</td><td>%4</td></tr>")
                .arg(label.toHtmlEscaped(), value.toHtmlEscaped(), effect.toHtmlEscaped(),
                     t.value(QLatin1String("reason")).toString().toHtmlEscaped());
  }
  tricks_->setText(html + QStringLiteral("</table>"));
  if (hasResult()) showResult(lastSummary_);
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

void RunDashboard::setStatus(const QString& status, const QString& reason) {
  status_ = status;
  if (!reason.trimmed().isEmpty()) reason_ = reason.trimmed();
  const bool over = status == QLatin1String("finished") || status == QLatin1String("stopped") ||
                    status == QLatin1String("failed") || status == QLatin1String("interrupted");
  if (over) setStoppable(false);
  if (over && tricksReport_.isEmpty())
    tricks_->setText(tr("The run ended before the engine reported its tricks (it reports them when training "
                        "starts); the Engine log tab has its output."));
  updateHeader();
}

void RunDashboard::updateHeader() {
  const bool over = status_ == QLatin1String("finished") || status_ == QLatin1String("stopped") ||
                    status_ == QLatin1String("failed") || status_ == QLatin1String("interrupted");
  QString progress;
  if (totalSteps_ > 0 && over && lastStep_ < totalSteps_) {
    // An ended run short of its planned steps says why it ended there.
    progress = lastSummary_.value(QLatin1String("target_reached")).toBool()
                   ? tr("target accuracy reached at step %1 of %2").arg(lastStep_).arg(totalSteps_)
                   : tr("ended at step %1 of %2").arg(lastStep_).arg(totalSteps_);
  } else if (totalSteps_ > 0) {
    progress = tr("step %1 of %2").arg(lastStep_).arg(totalSteps_);
  } else if (lastStep_ > 0) {
    progress = tr("step %1").arg(lastStep_);
  }
  const QPalette pal = palette();
  QString html = QStringLiteral("<b>%1</b>").arg(RunSummary::shownName(series_.runName).toHtmlEscaped());
  if (series_.runId > 0) html += QStringLiteral(" (#%1)").arg(series_.runId);
  html += QStringLiteral(" &nbsp; ") + PaletteColors::span(status_, PaletteColors::status(status_, pal), true);
  if (!progress.isEmpty()) html += QStringLiteral(" &nbsp;·&nbsp; ") + progress.toHtmlEscaped();
  if (followed_ && !followedRun_.isTerminal() && followedRun_.id > 0)
    html += QStringLiteral(" &nbsp;·&nbsp; ") +
            PaletteColors::span(followedRun_.engineHost.isEmpty()
                                    ? tr("followed from the run database")
                                    : tr("followed from the run database (engine pid %1 on %2)")
                                          .arg(followedRun_.enginePid)
                                          .arg(followedRun_.engineHost),
                                PaletteColors::hint(pal));
  header_->setText(html);
  // Until the first plot: what to expect, or why there will be none.
  emptyHint_->setVisible(plots().isEmpty());
  emptyHint_->setText(PaletteColors::span(over ? tr("No metrics were recorded: the run ended before its first step.")
                                               : tr("The plots appear with the first training step."),
                                          PaletteColors::hint(pal)));
  const bool showReason = !reason_.isEmpty() && (status_ == QLatin1String("failed") || status_ == QLatin1String("interrupted"));
  reasonLabel_->setVisible(showReason);
  if (showReason)
    reasonLabel_->setText(PaletteColors::span(status_ == QLatin1String("failed") ? tr("Failed:") : tr("Interrupted:"),
                                              PaletteColors::error(pal), true) +
                          QStringLiteral(" ") + reason_.left(1000).toHtmlEscaped().replace(QLatin1Char('\n'), QLatin1String("<br>")));
  reasonLabel_->setToolTip(showReason ? tr("The engine's full output is in the Engine log tab.") : QString());
}

void RunDashboard::showResult(const QJsonObject& summary) {
  lastSummary_ = summary;
  updateHeader();  // an early end's reason (target_reached) is in the summary
  const qint64 steps = summary.value(QLatin1String("steps")).toInteger();
  if (summary.isEmpty() || steps <= 0) {
    resultStrip_->setVisible(false);
    return;
  }
  const QPalette pal = palette();
  auto figure = [&](int i, const QString& value, const QString& tip = QString()) {
    resultLabels_[i]->setText(QStringLiteral("%1 <b>%2</b> &nbsp;")
                                  .arg(PaletteColors::span(resultLabels_[i]->property("caption").toString() +
                                                               QLatin1Char(':'),
                                                           PaletteColors::hint(pal)),
                                       value.toHtmlEscaped()));
    resultLabels_[i]->setToolTip(tip);
  };
  double accuracy = number(summary, "final_test_accuracy");
  if (std::isnan(accuracy)) {
    auto it = series_.epoch.find(QStringLiteral("test_accuracy"));
    if (it != series_.epoch.end() && !it->second.isEmpty()) accuracy = it->second.value.last();
  }
  figure(0, std::isnan(accuracy) ? QStringLiteral("—") : QStringLiteral("%1 %").arg(accuracy * 100, 0, 'f', 2),
         tr("Test accuracy after the last evaluation."));
  const double median = number(summary, "median_step_time_ms");
  figure(1, std::isnan(median) ? QStringLiteral("—") : tr("%1 ms").arg(median, 0, 'f', median < 10 ? 2 : 1),
         tr("Median time of one training step (robust to the slow first steps)."));
  const double rate = number(summary, "samples_per_s");
  figure(2, std::isnan(rate) ? QStringLiteral("—") : tr("%1 samples/s").arg(QLocale().toString(rate, 'f', 0)),
         tr("Training samples per second at the median step time."));
  const double peak = number(summary, "peak_memory_bytes");
  const QString kind = summary.value(QLatin1String("peak_memory_kind")).toString();
  QString peakTip = kind == QLatin1String("host_peak_rss") ? tr("Peak resident memory of the engine process (CPU run).")
                                                          : tr("Peak memory allocated on the device.");
  const double activations = number(summary, "activation_memory_bytes");
  const double live = number(summary, "activation_peak_live_bytes");
  if (!std::isnan(activations) && !std::isnan(live))
    peakTip += QLatin1Char('\n') +
               tr("Of it, activations and their gradients: %1 MiB, at most %2 MiB of them in use at once "
                  "(each is freed at its last use and its memory reused; bigger batches grow this part).")
                   .arg(activations / (1024.0 * 1024.0), 0, 'f', 0)
                   .arg(live / (1024.0 * 1024.0), 0, 'f', 0);
  figure(3, std::isnan(peak) ? QStringLiteral("—") : tr("%1 MiB").arg(peak / (1024.0 * 1024.0), 0, 'f', 0),
         peakTip);
  double wall = number(summary, "total_time_s");
  if (std::isnan(wall)) wall = followedRun_.wallSeconds;
  figure(4, formatDuration(wall), tr("From the start of the run to its end, %n step(s).", nullptr, int(steps)));
  const QStringList inEffect = tricksInEffect();
  figure(5, inEffect.isEmpty() ? tr("none (baseline)") : QString::number(inEffect.size()),
         inEffect.isEmpty() ? tr("Every trick setting had the baseline's value, or the engine could not honour it.")
                            : tr("Settings changed from the baseline that the engine honoured (the Tricks applied "
                                 "tab below has every setting and why):\n%1")
                                  .arg(inEffect.join(QLatin1Char('\n'))));
  resultStrip_->setVisible(true);
}

void RunDashboard::follow(const QString& databasePath, qint64 runId) {
  followed_ = true;
  series_.runId = runId;
  delete follower_;
  follower_ = new RunFollower(databasePath, runId, this);
  connect(follower_, &RunFollower::updated, this, [this](const RunSeries& newer, const RunSummary& run) {
    appendSeries(newer);
    setRun(run);
  });
  connect(follower_, &RunFollower::ended, this, [this](const RunSummary& run) {
    refreshNow();
    emit runEnded(run.status);
  });
  connect(follower_, &RunFollower::failed, this, [this](const QString& error) {
    appendLog(QStringLiteral("workbench"), tr("Could not read the run from the database: %1").arg(error));
    setStoppable(false);
    if (status_ == QLatin1String("loading") || status_ == QLatin1String("waiting")) setStatus(tr("unreadable"), error);
  });
  follower_->start();
}

bool RunDashboard::isFollowing() const { return follower_ && !followedRun_.isTerminal(); }

void RunDashboard::setRun(const RunSummary& run) {
  followedRun_ = run;
  series_.runId = run.id;
  if (!run.name.isEmpty()) series_.runName = run.name;
  if (!run.name.isEmpty() && run.name != announcedName_) {
    announcedName_ = run.name;
    emit runNamed(run.name);
  }
  setTricks(run.tricks);
  environment_->setEnvironment(run.environment);
  const qint64 total = run.summary.value(QLatin1String("total_steps")).toInteger();
  if (total > 0) totalSteps_ = total;
  if (run.isTerminal()) {
    setStatus(run.status, run.error);
    showResult(run.summary);
  } else {
    const QString why = EngineOwner::whyNotStoppable(run.enginePid, run.engineHost);
    setStoppable(status_ != QLatin1String("stopping"), why);
    if (status_ != QLatin1String("stopping")) setStatus(run.status);
    else updateHeader();
  }
}

void RunDashboard::appendSeries(const RunSeries& newer) {
  const bool hadRunId = series_.runId > 0;
  const qint64 keepId = series_.runId;
  series_.appendAll(newer);
  if (hadRunId) series_.runId = keepId;
  for (const QString& line : newer.events) log_->appendPlainText(line);
  for (const auto& [name, points] : series_.step)
    if (!points.isEmpty()) lastStep_ = std::max(lastStep_, qint64(points.step.last()));
  scheduleRefresh();
  updateHeader();
}

void RunDashboard::setSeries(const RunSeries& series) {
  for (Panel& p : panels_) {
    if (p.plot) {
      p.plot->setStackTotal(nullptr, QString(), QString());
      p.plot->removeCurves();
    }
    p.attached.clear();
    p.totalSet = false;
  }
  breakdownView_.clear();  // no plot points into it any more
  replayScan_ = 0;
  series_ = series;
  for (const QString& line : series_.events) log_->appendPlainText(line);
  lastStep_ = 0;
  for (const auto& [name, points] : series_.step)
    if (!points.isEmpty()) lastStep_ = std::max(lastStep_, qint64(points.step.last()));
  updateHeader();
  refreshNow();
}

void RunDashboard::setStoppable(bool on, const QString& whyNot) {
  stopButton_->setVisible(on || !whyNot.isEmpty());
  stopButton_->setEnabled(on && whyNot.isEmpty());
  stopButton_->setToolTip(whyNot.isEmpty() ? tr("Ask the engine to finish its step, save and stop (SIGTERM).")
                                           : tr("Cannot stop this run from here: %1.").arg(whyNot));
  if (!on && whyNot.isEmpty()) stopButton_->setVisible(false);
}

bool RunDashboard::canStop() const { return stopButton_->isEnabled() && stopButton_->isVisibleTo(this); }

void RunDashboard::requestStop() {
  if (!followed_) {
    emit stopRequested();
    return;
  }
  QString error;
  if (!EngineOwner::stop(followedRun_.enginePid, followedRun_.engineHost, &error)) {
    appendLog(QStringLiteral("workbench"), tr("Stop failed: %1").arg(error));
    setStoppable(false, error);
    return;
  }
  appendLog(QStringLiteral("workbench"), tr("Sent SIGTERM to the engine (pid %1): it saves and stops after this step.")
                                             .arg(followedRun_.enginePid));
  stopButton_->setEnabled(false);
  setStatus(QStringLiteral("stopping"));
}

void RunDashboard::scheduleRefresh() { dirty_ = true; }

void RunDashboard::placePlot(LivePlot* plot) {
  const int index = grid_->count();
  grid_->addWidget(plot, index / 2, index % 2);
  plot->setXAxis(XAxis(xAxisBox_->currentData().toInt()));
  plot->setSmoothing(smoothing_->value() / 100.0);
  plot->setLogScale(logScale_->isChecked());
  plot->setFitWarmup(fitWarmup_->isChecked());
}

void RunDashboard::attachCurves(Panel& panel) {
  for (const PanelCurve& c : panel.curves) {
    const QString id = (c.epochSeries ? QStringLiteral("e:") : QStringLiteral("s:")) + c.name;
    if (panel.attached.contains(id)) continue;
    const auto& map = c.epochSeries ? series_.epoch : series_.step;
    auto it = map.find(c.name);
    const bool viewed = panel.stacked && breakdownView_.count(c.name);
    if (viewed) it = breakdownView_.find(c.name);
    else if (it == map.end() || it->second.isEmpty()) continue;
    if (!panel.plot) {
      panel.plot = new LivePlot(panel.title, panel.unit, this);
      panel.plot->setStacked(panel.stacked);
      panel.plot->setZeroBased(panel.zeroBased);
      placePlot(panel.plot);
    }
    panel.plot->addCurve(c.label, &it->second, panel.yScale * c.scale);
    const int index = panel.plot->curveCount() - 1;
    if (c.name == kGraphReplaySeries) panel.plot->setCurveHatched(index, true);
    else if (viewed) panel.plot->setMissingText(index, tr("not measured (CUDA graph replay)"));
    panel.attached.insert(id);
  }
  if (!panel.plot) return;
  panel.plot->setHelpText(panel.stacked ? breakdownHelp(panel) : [&] {
    const QString movers = tricksThatMove(panel.title);
    QStringList parts;
    if (!panel.help.isEmpty()) parts << panel.help;
    if (!movers.isEmpty()) parts << tr("Tricks that should move this plot: %1").arg(movers);
    return parts.join(QStringLiteral("\n\n"));
  }());
  auto stepTime = series_.step.find(QStringLiteral("step_time_ms"));
  if (panel.stacked && !panel.totalSet && stepTime != series_.step.end()) {
    panel.plot->setStackTotal(&stepTime->second, tr("step time"),
                              tr("the parts were timed on different clocks: the data wait is the host's wait for "
                                 "the loader, which overlapped the GPU work of the previous step that the step "
                                 "time (GPU events) counts already"));
    panel.totalSet = true;
  }
}

QString RunDashboard::breakdownHelp(const Panel& panel) const {
  QStringList parts{tr("Where each step's time went, stacked; the line is the measured step time. A step whose "
                       "parts add up to more than the step is marked ▼ (the hover tracker says why).")};
  if (breakdownView_.count(kGraphReplaySeries))
    parts << tr("Hatched: steps where %1. The plot draws that time as a layer of its own, and the hover tracker "
                "says \"not measured\" for those phases: they are not 0 ms.")
                 .arg(QString::fromUtf8(tb::kGraphReplayUnmeasured));
  const QString movers = tricksThatMove(panel.title);
  if (!movers.isEmpty()) parts << tr("Tricks that should move this plot: %1").arg(movers);
  return parts.join(QStringLiteral("\n\n"));
}

void RunDashboard::updateBreakdownView() {
  auto detachBreakdown = [this] {  // its layers change: attached again by ensurePanels()
    for (Panel& p : panels_)
      if (p.stacked && p.plot) {
        p.plot->removeCurves();
        p.attached.clear();
      }
  };
  auto series = [this](const QString& name) -> const SeriesPoints* {
    auto it = series_.step.find(name);
    return it == series_.step.end() || it->second.isEmpty() ? nullptr : &it->second;
  };
  const bool graphs = tricksReport_.value(QLatin1String("cuda_graphs")).toObject().value(QLatin1String("applied")).toBool(false);
  const SeriesPoints *forward = series(QStringLiteral("forward_ms")), *backward = series(QStringLiteral("backward_ms")),
                     *optimizer = series(QStringLiteral("optimizer_ms")), *other = series(QStringLiteral("other_ms"));
  if (!graphs || !forward || !backward || !optimizer || !other) {
    if (!breakdownView_.empty()) {
      detachBreakdown();
      breakdownView_.clear();
    }
    replayScan_ = 0;
    return;
  }
  // A step's value of another series: at the same index as a rule, else searched.
  auto valueAt = [](const SeriesPoints* s, int hint, double step) {
    if (hint < s->size() && s->step[hint] == step) return s->value[hint];
    const auto at = std::lower_bound(s->step.begin(), s->step.end(), step);
    return at == s->step.end() || *at != step ? std::numeric_limits<double>::quiet_NaN()
                                              : s->value[int(at - s->step.begin())];
  };
  auto replayedAt = [&](int i) {
    return tb::phases_unmeasured_at(true, forward->value[i], valueAt(backward, i, forward->step[i]),
                                    valueAt(optimizer, i, forward->step[i]));
  };
  // Only steps every phase has arrived for (a followed run's newest step may be partial).
  const double complete = std::min({forward->step.last(), backward->step.last(), optimizer->step.last(),
                                    other->step.last()});
  if (breakdownView_.empty()) {
    // Until the first replayed step the breakdown is the engine's own.
    while (replayScan_ < forward->size() && forward->step[replayScan_] <= complete && !replayedAt(replayScan_))
      ++replayScan_;
    if (replayScan_ >= forward->size() || forward->step[replayScan_] > complete) return;
    detachBreakdown();
    for (const QString& name : kReplayedPhases) breakdownView_[name];
    breakdownView_[kGraphReplaySeries];
  }
  // Appended step by step (a step's values never change); the plot keeps
  // pointers to these entries.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  SeriesPoints& replay = breakdownView_[kGraphReplaySeries];
  const QVector<double>& epochs = forward->x(XAxis::Epoch);
  for (int i = replay.size(); i < forward->size() && forward->step[i] <= complete; ++i) {
    const double step = forward->step[i], t = forward->time[i], wall = t + forward->wallOffset();
    const bool replayed = replayedAt(i);
    for (const QString& name : kReplayedPhases)
      breakdownView_[name].append(step, epochs[i], t, wall, replayed ? nan : valueAt(series(name), i, step));
    replay.append(step, epochs[i], t, wall, replayed ? valueAt(other, i, step) : nan);
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
      {seriesTitleAndUnit(QStringLiteral("tensor_core_share")).first, {QStringLiteral("tensor core")}},
      {seriesTitleAndUnit(QStringLiteral("tensor_pipe_active_pct")).first, {QStringLiteral("tensor core")}},
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

QPair<QString, QString> RunDashboard::readableName(const QString& series) { return seriesTitleAndUnit(series); }

void RunDashboard::ensurePanels() {
  // Series nobody claimed get a plot of their own (plots are generic over
  // names), titled in words with the unit their name ends in.
  auto addGeneric = [this](bool epochSeries, const QString& name) {
    const QString id = (epochSeries ? QStringLiteral("e:") : QStringLiteral("s:")) + name;
    if (claimed_.contains(id)) return;
    claimed_.insert(id);
    const auto [title, unit] = readableName(name);
    Panel p;
    p.title = epochSeries ? tr("%1 (per epoch)").arg(title) : title;
    p.unit = unit;
    p.curves = {{epochSeries, name, unit.isEmpty() ? title : QStringLiteral("%1 (%2)").arg(title, unit)}};
    p.yScale = seriesScale(name);
    p.zeroBased = !unit.isEmpty();
    panels_.append(p);
  };
  for (const auto& [name, points] : series_.step) addGeneric(false, name);
  for (const auto& [name, points] : series_.epoch) addGeneric(true, name);
  for (Panel& p : panels_) attachCurves(p);
}

// QT_LOGGING_RULES="trainbench.refresh.debug=true": each live refresh's cost.
Q_LOGGING_CATEGORY(lcRefresh, "trainbench.refresh", QtWarningMsg)

int RunDashboard::refreshIntervalMs(double cost_ms) {
  return int(std::clamp(std::ceil(cost_ms / kLiveViewShare), 250.0, 5000.0));
}

int RunDashboard::refreshInterval() const { return refreshTimer_->interval(); }

void RunDashboard::refreshNow() {
  QElapsedTimer cost;
  cost.start();
  dirty_ = false;
  updateBreakdownView();
  ensurePanels();
  // Every plot spans the run's steps (a sampled series of one point too), and
  // the timing plots mark the warm-up that the step times show.
  double first = std::numeric_limits<double>::infinity(), last = -first, warmup = 0;
  for (const auto& [name, points] : series_.step)
    if (!points.isEmpty()) first = std::min(first, points.step.first()), last = std::max(last, points.step.last());
  if (auto it = series_.step.find(QStringLiteral("step_time_ms")); it != series_.step.end())
    warmup = lastWarmupStep(it->second);
  for (const Panel& p : panels_) {
    if (!p.plot) continue;
    if (first <= last) p.plot->setStepDomain(first, last);
    p.plot->setWarmupSteps(p.warmupMarked ? warmup : 0);
    p.plot->refresh();
  }
  updateHeader();
  // The plots draw after this returns (queued replots): their last drawings
  // stand for this refresh's.
  double cost_ms = double(cost.nsecsElapsed()) / 1e6;
  for (const Panel& p : panels_)
    if (p.plot && !p.plot->redrawPending()) cost_ms += p.plot->lastDrawMs();
  refreshTimer_->setInterval(refreshIntervalMs(cost_ms));
  qCDebug(lcRefresh, "refresh: %.1f ms, next in %d ms", cost_ms, refreshTimer_->interval());
}

int RunDashboard::exportPlots(const QString& folder, QString* error) {
  int written = 0;
  QString base = series_.runName.isEmpty() ? QStringLiteral("run") : series_.runName;
  if (series_.runId > 0) base += QStringLiteral("-%1").arg(series_.runId);
  for (QChar& c : base)
    if (!c.isLetterOrNumber() && c != QLatin1Char('-')) c = QLatin1Char('_');
  for (LivePlot* p : plots()) {
    QString title = p->title();
    for (QChar& c : title)
      if (!c.isLetterOrNumber() && c != QLatin1Char('-')) c = QLatin1Char('_');
    // A run without an id (it never reached the store) still never overwrites.
    QString stem = QDir(folder).filePath(QStringLiteral("%1-%2").arg(base, title));
    for (int n = 2; QFileInfo::exists(stem + QStringLiteral(".png")); ++n)
      stem = QDir(folder).filePath(QStringLiteral("%1-%2-%3").arg(base, title).arg(n));
    for (const char* suffix : {"png", "svg", "pdf"}) {
      if (!p->exportImage(stem + QLatin1Char('.') + QLatin1String(suffix), 1200, 700, error)) return written;
      ++written;
    }
  }
  return written;
}

void RunDashboard::changeEvent(QEvent* event) {
  QWidget::changeEvent(event);
  if (event->type() == QEvent::PaletteChange) {
    updateHeader();
    if (hasResult()) showResult(lastSummary_);
  }
}

void RunDashboard::setXAxis(XAxis axis) {
  const int index = xAxisBox_->findData(int(axis));
  if (index != xAxisBox_->currentIndex()) xAxisBox_->setCurrentIndex(index);
  for (LivePlot* p : plots()) p->setXAxis(axis);
}

void RunDashboard::setSmoothing(double alpha) { smoothing_->setValue(int(std::lround(alpha * 100))); }

void RunDashboard::setLogScale(bool on) { logScale_->setChecked(on); }
