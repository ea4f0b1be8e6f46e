// SPDX-License-Identifier: GPL-3.0-or-later
#include "compare_view.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDateTime>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMessageBox>
#include <QJsonDocument>
#include <QMenu>
#include <QPushButton>
#include <QToolButton>
#include <QSaveFile>
#include <QScrollArea>
#include <QSettings>
#include <QSlider>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>
#include <QTemporaryDir>
#include <QVBoxLayout>

#include "compare_summary_model.h"
#include "config_diff_model.h"
#include "layer_compare_model.h"
#include "layer_compare_panel.h"
#include "live_plot.h"
#include "plot_export_dialog.h"
#include "series_loader.h"
#include "scaling_chart.h"
#include "speedup_chart.h"
#include "table_export.h"

namespace {
// Shown at first where the runs have them.
const char* const kDefaultMetrics[] = {"s:loss", "e:test_accuracy", "s:step_time_ms", "s:samples_per_s",
                                       "s:gpu_mem_allocated_bytes", "e:test_loss"};

QString metricTitle(const QString& key) {
  const QString name = key.mid(2);
  if (name == QLatin1String("loss")) return QObject::tr("Training loss");
  const QString title = seriesTitleAndUnit(name).first;
  return key.startsWith(QLatin1String("e:")) ? QObject::tr("%1 (per epoch)").arg(title) : title;
}

QString metricUnit(const QString& key) {
  const QString name = key.mid(2);
  if (name.contains(QLatin1String("accuracy"))) return QStringLiteral("%");
  if (name.contains(QLatin1String("loss"))) return QObject::tr("loss");
  return seriesTitleAndUnit(name).second;
}

double metricScale(const QString& key) {
  return key.mid(2).contains(QLatin1String("accuracy")) ? 100.0 : seriesScale(key.mid(2));
}

// Mean, lowest and highest of several runs' series, step by step (steps that
// only some runs reached use those runs).
void aggregate(const QList<const SeriesPoints*>& runs, SeriesPoints* mean, SeriesPoints* low, SeriesPoints* high) {
  struct At {
    double epoch = 0, time = 0, wall = 0, sum = 0, lo = 0, hi = 0;
    int n = 0;
  };
  std::map<double, At> byStep;
  for (const SeriesPoints* s : runs) {
    const QVector<double>& epochs = s->x(XAxis::Epoch);
    const QVector<double> e = epochs;  // the cache is shared by axes
    const QVector<double>& walls = s->x(XAxis::WallTime);
    for (int i = 0; i < s->size(); ++i) {
      const double v = s->value[i];
      if (std::isnan(v)) continue;
      At& at = byStep[s->step[i]];
      if (at.n == 0) {
        at.epoch = e[i];
        at.time = s->time[i];
        at.wall = walls[i];
        at.lo = at.hi = v;
      }
      at.sum += v;
      at.lo = std::min(at.lo, v);
      at.hi = std::max(at.hi, v);
      ++at.n;
    }
  }
  for (const auto& [step, at] : byStep) {
    mean->append(step, at.epoch, at.time, at.wall, at.sum / at.n);
    low->append(step, at.epoch, at.time, at.wall, at.lo);
    high->append(step, at.epoch, at.time, at.wall, at.hi);
  }
}
}  // namespace

CompareView::CompareView(QWidget* parent) : QWidget(parent) {
  loader_ = new SeriesLoader(this);
  diff_ = new ConfigDiffModel(this);
  summary_ = new CompareSummaryModel(this);

  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  title_ = new QLabel(tr("Select two or more runs in the history and choose Compare."), this);
  bar->addWidget(title_, 1);
  metricsButton_ = new QToolButton(this);
  metricsButton_->setText(tr("Metrics"));
  metricsButton_->setToolTip(tr("Which metrics to overlay: any series the compared runs share."));
  metricsButton_->setPopupMode(QToolButton::InstantPopup);
  metricsButton_->setMenu(new QMenu(metricsButton_));
  bar->addWidget(metricsButton_);
  runsButton_ = new QToolButton(this);
  runsButton_->setText(tr("Runs"));
  runsButton_->setToolTip(tr("Hide or show runs in the plots."));
  runsButton_->setPopupMode(QToolButton::InstantPopup);
  runsButton_->setMenu(new QMenu(runsButton_));
  bar->addWidget(runsButton_);
  groupRepeats_ = new QCheckBox(tr("Group repeats"), this);
  groupRepeats_->setChecked(true);
  groupRepeats_->setToolTip(tr("Runs of the same configuration (all settings but name and seed) are drawn as "
                               "their mean with a min–max band, and the summary shows the spread of the "
                               "speed-up: differences inside the band are noise, not a speed-up."));
  bar->addWidget(groupRepeats_);
  bar->addWidget(new QLabel(tr("Baseline:"), this));
  baseline_ = new QComboBox(this);
  baseline_->setToolTip(tr("The run the speed-up column is measured against."));
  bar->addWidget(baseline_);
  bar->addWidget(new QLabel(tr("X axis:"), this));
  xAxis_ = new QComboBox(this);
  xAxis_->addItem(tr("Step"), int(XAxis::Step));
  xAxis_->addItem(tr("Epoch"), int(XAxis::Epoch));
  xAxis_->addItem(tr("Relative time"), int(XAxis::RelativeTime));
  bar->addWidget(xAxis_);
  bar->addWidget(new QLabel(tr("Smoothing:"), this));
  smoothing_ = new QSlider(Qt::Horizontal, this);
  smoothing_->setRange(0, 99);
  smoothing_->setFixedWidth(100);
  bar->addWidget(smoothing_);
  auto* report = new QPushButton(tr("Export report…"), this);
  report->setToolTip(tr("Write the comparison as a Markdown or HTML report with its plots."));
  bar->addWidget(report);
  layout->addLayout(bar);

  auto* splitter = new QSplitter(Qt::Vertical, this);
  auto* scroll = new QScrollArea(splitter);
  scroll->setWidgetResizable(true);
  plotCanvas_ = new QWidget(scroll);
  auto* plotGrid = new QGridLayout(plotCanvas_);
  speedup_ = new SpeedupChart(summary_, plotCanvas_);
  scaling_ = new ScalingChart(plotCanvas_);  // shown when the runs span several process counts
  auto* charts = new QHBoxLayout;
  charts->addWidget(speedup_, 1);
  charts->addWidget(scaling_, 1);
  plotGrid->addLayout(charts, 0, 0, 1, 2);
  scroll->setWidget(plotCanvas_);
  splitter->addWidget(scroll);

  tableTabs_ = new QTabWidget(splitter);
  tableTabs_->setDocumentMode(true);
  auto* tables = new QWidget(tableTabs_);
  auto* tablesLayout = new QHBoxLayout(tables);
  tablesLayout->setContentsMargins(0, 0, 0, 0);
  auto* summaryBox = new QVBoxLayout;
  auto* summaryHead = new QHBoxLayout;
  summaryHead->addWidget(new QLabel(tr("<b>Summary</b>"), tables), 1);
  auto* summaryCsv = new QPushButton(tr("CSV…"), tables);
  summaryHead->addWidget(summaryCsv);
  summaryBox->addLayout(summaryHead);
  summaryTable_ = new QTableView(tables);
  summaryTable_->setModel(summary_);
  summaryTable_->verticalHeader()->hide();
  summaryTable_->horizontalHeader()->setStretchLastSection(true);
  summaryBox->addWidget(summaryTable_);
  tablesLayout->addLayout(summaryBox, 3);

  auto* diffBox = new QVBoxLayout;
  auto* diffHead = new QHBoxLayout;
  diffHead->addWidget(new QLabel(tr("<b>Configuration</b>"), tables), 1);
  diffOnly_ = new QCheckBox(tr("Only keys that differ"), tables);
  diffOnly_->setChecked(true);
  diffOnly_->setToolTip(tr("Hide the settings that are the same in every run (Ctrl+D)."));
  diffOnly_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_D));
  diffHead->addWidget(diffOnly_);
  auto* diffCsv = new QPushButton(tr("CSV…"), tables);
  diffHead->addWidget(diffCsv);
  diffBox->addLayout(diffHead);
  diffTable_ = new QTableView(tables);
  diffTable_->setModel(diff_);
  diffTable_->verticalHeader()->hide();
  diffTable_->horizontalHeader()->setStretchLastSection(true);
  diffBox->addWidget(diffTable_);
  tablesLayout->addLayout(diffBox, 2);
  tableTabs_->addTab(tables, tr("Summary and configuration"));
  layers_ = new LayerComparePanel(tableTabs_);
  tableTabs_->addTab(layers_, tr("Layers, A against B"));
  tableTabs_->setTabToolTip(1, tr("Two runs' per-layer profiles side by side: which layers got faster, and "
                                  "which exist in one run only (docs/layers.md)"));
  splitter->addWidget(tableTabs_);
  splitter->setStretchFactor(0, 3);
  splitter->setStretchFactor(1, 2);
  splitter->setSizes({620, 260});
  layout->addWidget(splitter, 1);
  diff_->setDifferencesOnly(true);

  connect(loader_, &SeriesLoader::loaded, this, &CompareView::onLoaded);
  connect(loader_, &SeriesLoader::failed, this, [this](qint64 id, const QString& error) {
    emit statusMessage(tr("Could not load run %1: %2").arg(id).arg(error));
  });
  connect(diffOnly_, &QCheckBox::toggled, this, &CompareView::setDifferencesOnly);
  connect(baseline_, &QComboBox::currentIndexChanged, this,
          [this] { summary_->setBaseline(baseline_->currentData().toLongLong()); });
  connect(xAxis_, &QComboBox::currentIndexChanged, this, [this] {
    for (LivePlot* p : plots_) p->setXAxis(XAxis(xAxis_->currentData().toInt()));
  });
  connect(smoothing_, &QSlider::valueChanged, this, [this](int v) {
    for (LivePlot* p : plots_) p->setSmoothing(v / 100.0);
  });
  connect(groupRepeats_, &QCheckBox::toggled, this, [this] {
    updateSummary();
    rebuildPlots();
  });
  connect(report, &QPushButton::clicked, this, &CompareView::exportReportDialog);
  connect(summaryCsv, &QPushButton::clicked, this,
          [this] { PlotExportDialog::exportTableCsv(this, summary_, QStringLiteral("comparison-summary")); });
  connect(diffCsv, &QPushButton::clicked, this,
          [this] { PlotExportDialog::exportTableCsv(this, diff_, QStringLiteral("comparison-config")); });
}

CompareView::~CompareView() {
  for (LivePlot* p : plots_) p->removeCurves();
}

void CompareView::setRuns(const QString& databasePath, const QList<RunSummary>& runs) {
  for (LivePlot* p : plots_) p->removeCurves();
  series_.clear();
  runs_ = runs;
  QStringList names;
  QList<QJsonObject> configs, environments;
  {
    const QSignalBlocker block(baseline_);
    baseline_->clear();
    for (const RunSummary& r : runs) {
      names << QStringLiteral("%1 (#%2)").arg(r.name).arg(r.id);
      configs << r.config;
      environments << r.environmentFacts();
      baseline_->addItem(QStringLiteral("%1 (#%2)").arg(r.name).arg(r.id), r.id);
    }
  }
  diff_->setRuns(names, configs, environments);
  hidden_.clear();
  metricsChosen_ = false;
  metrics_.clear();
  updateSummary();
  scaling_->setRuns(runs);
  if (!runs.isEmpty()) summary_->setBaseline(runs.first().id);
  groupRepeats_->setVisible(repeatGroups(runs).size() < runs.size());
  rebuildMenus();
  fitSummaryColumns();
  diffTable_->resizeColumnsToContents();
  title_->setText(tr("Comparing %n run(s)", nullptr, int(runs.size())));
  layers_->setRuns(databasePath, runs);
  rebuildPlots();
  for (const RunSummary& r : runs) loader_->request(databasePath, r.id);
}

void CompareView::setDifferencesOnly(bool on) {
  if (diffOnly_->isChecked() != on) diffOnly_->setChecked(on);
  diff_->setDifferencesOnly(on);
  diffTable_->resizeColumnsToContents();
}

void CompareView::setBaseline(qint64 runId) {
  const int i = baseline_->findData(runId);
  if (i >= 0) baseline_->setCurrentIndex(i);
  summary_->setBaseline(runId);
}

void CompareView::onLoaded(qint64 runId, const RunSeries& series) {
  bool wanted = false;
  for (const RunSummary& r : runs_) wanted = wanted || r.id == runId;
  if (!wanted) return;
  series_[runId] = std::make_unique<RunSeries>(series);
  rebuildMenus();
  rebuildPlots();
  if (int(series_.size()) == runs_.size()) emit allLoaded();
}

QList<QList<RunSummary>> CompareView::repeatGroups(const QList<RunSummary>& runs) {
  QList<QList<RunSummary>> groups;
  QStringList keys;
  for (const RunSummary& r : runs) {
    // Repeats: the same settings (but for name and seed), run in the same place.
    QJsonObject config = r.config;
    config.remove(QStringLiteral("name"));
    config.remove(QStringLiteral("seed"));
    const QString key = QString::fromUtf8(QJsonDocument(config).toJson(QJsonDocument::Compact)) +
                        QString::fromUtf8(QJsonDocument(r.environmentFacts()).toJson(QJsonDocument::Compact));
    const int i = int(keys.indexOf(key));
    if (i < 0 || config.isEmpty()) {
      keys << key;
      groups.append({r});
    } else {
      groups[i].append(r);
    }
  }
  return groups;
}

bool CompareView::groupsRepeats() const { return groupRepeats_->isChecked() && !groupRepeats_->isHidden(); }

void CompareView::setGroupRepeats(bool on) { groupRepeats_->setChecked(on); }

void CompareView::fitSummaryColumns() {
  summaryTable_->resizeColumnsToContents();
  // A long run name does not push the numbers off screen (its tooltip has it whole).
  summaryTable_->setColumnWidth(CompareSummaryModel::Name,
                                std::min(summaryTable_->columnWidth(CompareSummaryModel::Name), 200));
}

void CompareView::updateSummary() {
  if (groupsRepeats()) summary_->setGroups(repeatGroups(runs_));
  else summary_->setRuns(runs_);
  fitSummaryColumns();
}

QStringList CompareView::availableMetrics() const {
  // Series that at least two loaded runs have (or the one run's own).
  std::map<QString, int> count;
  for (const auto& [id, s] : series_) {
    for (const auto& [name, points] : s->step)
      if (!points.isEmpty()) ++count[QStringLiteral("s:") + name];
    for (const auto& [name, points] : s->epoch)
      if (!points.isEmpty()) ++count[QStringLiteral("e:") + name];
  }
  const int need = std::min(2, int(series_.size()));
  QStringList out;
  for (const auto& [key, n] : count)
    if (n >= need) out << key;
  return out;
}

void CompareView::setShownMetrics(const QStringList& metrics) {
  metricsChosen_ = true;
  metrics_ = metrics;
  rebuildMenus();
  rebuildPlots();
}

void CompareView::setRunHidden(qint64 runId, bool hidden) {
  if (hidden) hidden_.insert(runId);
  else hidden_.remove(runId);
  rebuildMenus();
  rebuildPlots();
}

void CompareView::rebuildMenus() {
  const QStringList available = availableMetrics();
  if (!metricsChosen_) {
    metrics_.clear();
    for (const char* m : kDefaultMetrics)
      if (available.contains(QString::fromLatin1(m))) metrics_ << QString::fromLatin1(m);
  }
  QMenu* menu = metricsButton_->menu();
  menu->clear();
  for (const QString& key : available) {
    QAction* a = menu->addAction(metricTitle(key));
    a->setToolTip(key.mid(2));
    a->setCheckable(true);
    a->setChecked(metrics_.contains(key));
    connect(a, &QAction::toggled, this, [this, key](bool on) {
      QStringList m = metrics_;
      if (on && !m.contains(key)) m << key;
      if (!on) m.removeAll(key);
      setShownMetrics(m);
    });
  }
  metricsButton_->setText(tr("Metrics (%1 of %2)").arg(metrics_.size()).arg(available.size()));
  QMenu* runsMenu = runsButton_->menu();
  runsMenu->clear();
  for (const RunSummary& r : runs_) {
    QAction* a = runsMenu->addAction(QStringLiteral("%1 (#%2)").arg(r.name).arg(r.id));
    a->setCheckable(true);
    a->setChecked(!hidden_.contains(r.id));
    connect(a, &QAction::toggled, this, [this, id = r.id](bool on) { setRunHidden(id, !on); });
  }
  runsButton_->setText(hidden_.isEmpty() ? tr("Runs") : tr("Runs (%1 hidden)").arg(hidden_.size()));
}

void CompareView::rebuildPlots() {
  auto* grid = static_cast<QGridLayout*>(plotCanvas_->layout());
  for (LivePlot* p : plots_) {
    p->removeCurves();
    grid->removeWidget(p);
    p->deleteLater();
  }
  plots_.clear();
  aggregates_.clear();
  QList<QList<RunSummary>> rows;
  if (groupsRepeats()) rows = repeatGroups(runs_);
  else
    for (const RunSummary& r : runs_) rows.append({r});
  // As on a run's dashboard: every plot spans the runs' steps, and the timing
  // plots leave out the warm-up of the slowest-starting run.
  double firstStep = std::numeric_limits<double>::infinity(), lastStep = -firstStep, warmup = 0;
  for (const auto& [id, run] : series_) {
    if (hidden_.contains(id)) continue;
    for (const auto& [name, points] : run->step)
      if (!points.isEmpty())
        firstStep = std::min(firstStep, points.step.first()), lastStep = std::max(lastStep, points.step.last());
    if (auto it = run->step.find(QStringLiteral("step_time_ms")); it != run->step.end())
      warmup = std::max(warmup, lastWarmupStep(it->second));
  }
  for (const QString& key : metrics_) {
    const bool epochSeries = key.startsWith(QLatin1String("e:"));
    const QString name = key.mid(2);
    LivePlot* plot = nullptr;
    for (const QList<RunSummary>& row : rows) {
      QList<const SeriesPoints*> found;
      for (const RunSummary& r : row) {
        if (hidden_.contains(r.id)) continue;
        auto it = series_.find(r.id);
        if (it == series_.end()) continue;
        const auto& map = epochSeries ? it->second->epoch : it->second->step;
        auto s = map.find(name);
        if (s != map.end() && !s->second.isEmpty()) found << &s->second;
      }
      if (found.isEmpty()) continue;
      if (!plot) {
        plot = new LivePlot(metricTitle(key), metricUnit(key), plotCanvas_);
        const bool amount = name.endsWith(QLatin1String("_ms")) || name.endsWith(QLatin1String("_bytes")) ||
                            name.endsWith(QLatin1String("_per_s"));
        plot->setZeroBased(amount);
      }
      const RunSummary& first = row.first();
      if (found.size() == 1) {
        plot->addCurve(QStringLiteral("%1 (#%2)").arg(first.name).arg(first.id), found.first(), metricScale(key));
        continue;
      }
      aggregates_.emplace_back();
      SeriesPoints* mean = &aggregates_.back();
      aggregates_.emplace_back();
      SeriesPoints* low = &aggregates_.back();
      aggregates_.emplace_back();
      SeriesPoints* high = &aggregates_.back();
      aggregate(found, mean, low, high);
      plot->addCurve(tr("%1, mean of %2").arg(first.name).arg(found.size()), mean, metricScale(key));
      plot->setBand(plot->curveCount() - 1, low, high);
    }
    if (!plot) continue;
    plot->setXAxis(XAxis(xAxis_->currentData().toInt()));
    plot->setSmoothing(smoothing_->value() / 100.0);
    if (firstStep <= lastStep) plot->setStepDomain(firstStep, lastStep);
    if (key == QLatin1String("s:step_time_ms") || key == QLatin1String("s:samples_per_s")) plot->setWarmupSteps(warmup);
    grid->addWidget(plot, 1 + plots_.size() / 2, plots_.size() % 2);
    plots_ << plot;
    plot->refresh();
  }
}

bool CompareView::exportReport(const QString& path, QString* error) {
  const QFileInfo info(path);
  const bool html = info.suffix().compare(QLatin1String("html"), Qt::CaseInsensitive) == 0 ||
                    info.suffix().compare(QLatin1String("htm"), Qt::CaseInsensitive) == 0;
  // HTML carries its plots inside (data: URLs), so it can be mailed or moved
  // alone; Markdown links PNGs in a folder named after the report, so reports
  // written into one folder never overwrite each other's plots.
  QTemporaryDir scratch;
  const QString folderName = info.completeBaseName() + QStringLiteral("_plots");
  QDir dir = html ? QDir(scratch.path()) : info.absoluteDir();
  if (html ? !scratch.isValid() : !dir.mkpath(folderName)) {
    if (error) *error = tr("cannot create %1").arg(html ? scratch.path() : dir.filePath(folderName));
    return false;
  }
  QStringList images, titles;
  if (speedup_->barCount() > 0) {
    const QString file = QStringLiteral("%1/speedup.png").arg(folderName);
    dir.mkpath(folderName);
    if (!speedup_->exportPng(dir.filePath(file), 1000, 120 + 60 * summary_->rowCount())) {
      if (error) *error = tr("cannot write %1").arg(dir.filePath(file));
      return false;
    }
    images << file;
    titles << tr("Speed-up vs baseline");
  }
  for (int i = 0; i < plots_.size(); ++i) {
    const QString file = QStringLiteral("%1/plot%2.png").arg(folderName).arg(i + 1);
    if (!plots_[i]->exportImage(dir.filePath(file), 1000, 560, error)) return false;
    images << file;
    titles << plots_[i]->title();
  }
  const bool wasDiffOnly = diff_->differencesOnly();
  diff_->setDifferencesOnly(true);
  const QString stamp = QDateTime::currentDateTime().toString(Qt::ISODate);
  QString text;
  if (html) {
    text = QStringLiteral("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>%1</title>"
                          "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
                          "td,th{border:1px solid #aaa;padding:3px 8px}img{max-width:100%}</style></head><body>\n")
               .arg(tr("Trainbench comparison"));
    text += QStringLiteral("<h1>%1</h1>\n<p>%2</p>\n").arg(tr("Trainbench comparison"), stamp);
    text += QStringLiteral("<h2>%1</h2>\n").arg(tr("Summary")) + TableExport::toHtml(summary_);
    text += QStringLiteral("<h2>%1</h2>\n").arg(tr("Configuration and environment keys that differ")) + TableExport::toHtml(diff_);
    if (layers_->model()->rowCount() > 0)
      text += QStringLiteral("<h2>%1</h2>\n<p>%2</p>\n").arg(tr("Layers, A against B"), layers_->headerText().toHtmlEscaped()) +
              TableExport::toHtml(layers_->model());
    text += QStringLiteral("<h2>%1</h2>\n").arg(tr("Plots"));
    for (int i = 0; i < images.size(); ++i) {
      QFile png(dir.filePath(images[i]));
      if (!png.open(QIODevice::ReadOnly)) {
        if (error) *error = tr("cannot read back %1").arg(png.fileName());
        diff_->setDifferencesOnly(wasDiffOnly);
        return false;
      }
      text += QStringLiteral("<h3>%1</h3>\n<img src=\"data:image/png;base64,%2\" alt=\"%1\">\n")
                  .arg(titles[i].toHtmlEscaped(), QString::fromLatin1(png.readAll().toBase64()));
    }
    text += QStringLiteral("</body></html>\n");
  } else {
    text = QStringLiteral("# %1\n\n%2\n\n").arg(tr("Trainbench comparison"), stamp);
    text += QStringLiteral("## %1\n\n").arg(tr("Summary")) + TableExport::toMarkdown(summary_);
    text += QStringLiteral("\n## %1\n\n").arg(tr("Configuration and environment keys that differ")) + TableExport::toMarkdown(diff_);
    if (layers_->model()->rowCount() > 0)
      text += QStringLiteral("\n## %1\n\n%2\n\n").arg(tr("Layers, A against B"), layers_->headerText()) +
              TableExport::toMarkdown(layers_->model());
    text += QStringLiteral("\n## %1\n\n").arg(tr("Plots"));
    for (int i = 0; i < images.size(); ++i)
      text += QStringLiteral("### %1\n\n![%1](%2)\n\n").arg(titles[i], images[i]);
  }
  diff_->setDifferencesOnly(wasDiffOnly);
  QSaveFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Text)) {
    if (error) *error = f.errorString();
    return false;
  }
  f.write(text.toUtf8());
  if (!f.commit()) {
    if (error) *error = f.errorString();
    return false;
  }
  return true;
}

void CompareView::exportReportDialog() {
  QSettings settings;
  const QString path = QFileDialog::getSaveFileName(
      this, tr("Export comparison report"),
      settings.value(QStringLiteral("export/folder"), QDir::homePath()).toString() + QStringLiteral("/comparison.md"),
      tr("Markdown (*.md);;HTML (*.html)"));
  if (path.isEmpty()) return;
  settings.setValue(QStringLiteral("export/folder"), QFileInfo(path).absolutePath());
  QString error;
  if (exportReport(path, &error)) emit statusMessage(tr("Report written to %1").arg(path));
  else QMessageBox::warning(this, tr("Export failed"), error);
}
