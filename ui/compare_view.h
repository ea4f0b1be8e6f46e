// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QList>
#include <QMap>
#include <QWidget>
#include <memory>

#include "run_summary.h"
#include "series_data.h"

class CompareSummaryModel;
class ConfigDiffModel;
class LivePlot;
class QCheckBox;
class QComboBox;
class QLabel;
class QSlider;
class QTableView;
class SeriesLoader;
class ScalingChart;
class SpeedupChart;

// Two or more saved runs side by side: overlaid plots (loss, test accuracy,
// step time, samples/s, GPU memory), a summary table with the speed-up over a
// chosen baseline run, and a configuration table that can hide equal keys.
// Series are loaded on a worker thread.
class CompareView : public QWidget {
  Q_OBJECT
 public:
  explicit CompareView(QWidget* parent = nullptr);
  ~CompareView() override;

  void setRuns(const QString& databasePath, const QList<RunSummary>& runs);
  const QList<RunSummary>& runs() const { return runs_; }
  int loadedCount() const { return int(series_.size()); }

  ConfigDiffModel* diffModel() const { return diff_; }
  CompareSummaryModel* summaryModel() const { return summary_; }
  QList<LivePlot*> plots() const { return plots_; }
  SpeedupChart* speedupChart() const { return speedup_; }
  ScalingChart* scalingChart() const { return scaling_; }
  void setDifferencesOnly(bool on);
  void setBaseline(qint64 runId);

  // Markdown (.md) or HTML (.html): the summary, the differing configuration
  // keys and every plot as a PNG next to the report.
  bool exportReport(const QString& path, QString* error = nullptr);

 public slots:
  void exportReportDialog();

 signals:
  void allLoaded();
  void statusMessage(const QString& message);

 private:
  void onLoaded(qint64 runId, const RunSeries& series);
  void rebuildPlots();

  QList<RunSummary> runs_;
  std::map<qint64, std::unique_ptr<RunSeries>> series_;
  QList<LivePlot*> plots_;
  SeriesLoader* loader_;
  ConfigDiffModel* diff_;
  CompareSummaryModel* summary_;
  QTableView *diffTable_, *summaryTable_;
  QCheckBox* diffOnly_;
  QComboBox *baseline_, *xAxis_;
  QSlider* smoothing_;
  QLabel* title_;
  SpeedupChart* speedup_ = nullptr;
  ScalingChart* scaling_ = nullptr;
  QWidget* plotCanvas_;
};
