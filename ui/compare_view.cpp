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
#include <QPushButton>
#include <QSaveFile>
#include <QScrollArea>
#include <QSettings>
#include <QSlider>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>

#include "compare_summary_model.h"
#include "config_diff_model.h"
#include "live_plot.h"
#include "plot_export_dialog.h"
#include "series_loader.h"
#include "scaling_chart.h"
#include "speedup_chart.h"
#include "table_export.h"

namespace {
struct OverlaySpec {
  const char* title;
  const char* unit;
  bool epochSeries;
  const char* name;
  double scale;
};
const OverlaySpec kOverlays[] = {
    {"Training loss", "loss", false, "loss", 1.0},
    {"Test accuracy", "accuracy", true, "test_accuracy", 1.0},
    {"Step time", "ms", false, "step_time_ms", 1.0},
    {"Samples per second", "samples/s", false, "samples_per_s", 1.0},
    {"GPU memory allocated", "MiB", false, "gpu_mem_allocated_bytes", 1.0 / (1024.0 * 1024.0)},
    {"Test loss", "loss", true, "test_loss", 1.0},
};
}  // namespace

CompareView::CompareView(QWidget* parent) : QWidget(parent) {
  loader_ = new SeriesLoader(this);
  diff_ = new ConfigDiffModel(this);
  summary_ = new CompareSummaryModel(this);

  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  title_ = new QLabel(tr("Select two or more runs in the history and choose Compare."), this);
  bar->addWidget(title_, 1);
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

  auto* tables = new QWidget(splitter);
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
  splitter->addWidget(tables);
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
  QList<QJsonObject> configs;
  {
    const QSignalBlocker block(baseline_);
    baseline_->clear();
    for (const RunSummary& r : runs) {
      names << QStringLiteral("%1 (#%2)").arg(r.name).arg(r.id);
      configs << r.config;
      baseline_->addItem(QStringLiteral("%1 (#%2)").arg(r.name).arg(r.id), r.id);
    }
  }
  diff_->setRuns(names, configs);
  summary_->setRuns(runs);
  scaling_->setRuns(runs);
  if (!runs.isEmpty()) summary_->setBaseline(runs.first().id);
  summaryTable_->resizeColumnsToContents();
  diffTable_->resizeColumnsToContents();
  title_->setText(tr("Comparing %n run(s)", nullptr, int(runs.size())));
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
  rebuildPlots();
  if (int(series_.size()) == runs_.size()) emit allLoaded();
}

void CompareView::rebuildPlots() {
  auto* grid = static_cast<QGridLayout*>(plotCanvas_->layout());
  for (LivePlot* p : plots_) {
    p->removeCurves();
    grid->removeWidget(p);
    p->deleteLater();
  }
  plots_.clear();
  for (const OverlaySpec& spec : kOverlays) {
    LivePlot* plot = nullptr;
    for (const RunSummary& r : runs_) {
      auto it = series_.find(r.id);
      if (it == series_.end()) continue;
      const auto& map = spec.epochSeries ? it->second->epoch : it->second->step;
      auto s = map.find(QString::fromLatin1(spec.name));
      if (s == map.end() || s->second.isEmpty()) continue;
      if (!plot) plot = new LivePlot(tr(spec.title), tr(spec.unit), plotCanvas_);
      plot->addCurve(QStringLiteral("%1 (#%2)").arg(r.name).arg(r.id), &s->second, spec.scale);
    }
    if (!plot) continue;
    plot->setXAxis(XAxis(xAxis_->currentData().toInt()));
    plot->setSmoothing(smoothing_->value() / 100.0);
    grid->addWidget(plot, 1 + plots_.size() / 2, plots_.size() % 2);
    plots_ << plot;
    plot->refresh();
  }
}

bool CompareView::exportReport(const QString& path, QString* error) {
  const QFileInfo info(path);
  const bool html = info.suffix().compare(QLatin1String("html"), Qt::CaseInsensitive) == 0 ||
                    info.suffix().compare(QLatin1String("htm"), Qt::CaseInsensitive) == 0;
  const QString folderName = info.completeBaseName() + QStringLiteral("_plots");
  QDir dir = info.absoluteDir();
  if (!dir.mkpath(folderName)) {
    if (error) *error = tr("cannot create %1").arg(dir.filePath(folderName));
    return false;
  }
  QStringList images, titles;
  if (speedup_->barCount() > 0) {
    const QString file = QStringLiteral("%1/speedup.png").arg(folderName);
    if (!speedup_->exportPng(dir.filePath(file), 1000, 120 + 60 * runs_.size())) {
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
    text += QStringLiteral("<h2>%1</h2>\n").arg(tr("Configuration keys that differ")) + TableExport::toHtml(diff_);
    text += QStringLiteral("<h2>%1</h2>\n").arg(tr("Plots"));
    for (int i = 0; i < images.size(); ++i)
      text += QStringLiteral("<h3>%1</h3>\n<img src=\"%2\" alt=\"%1\">\n").arg(titles[i].toHtmlEscaped(), images[i]);
    text += QStringLiteral("</body></html>\n");
  } else {
    text = QStringLiteral("# %1\n\n%2\n\n").arg(tr("Trainbench comparison"), stamp);
    text += QStringLiteral("## %1\n\n").arg(tr("Summary")) + TableExport::toMarkdown(summary_);
    text += QStringLiteral("\n## %1\n\n").arg(tr("Configuration keys that differ")) + TableExport::toMarkdown(diff_);
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
