// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QList>
#include <QMap>
#include <QWidget>
#include <QSet>
#include <deque>
#include <memory>

#include "run_summary.h"
#include "series_data.h"

class CompareSummaryModel;
class ConfigDiffModel;
class LayerComparePanel;
class LivePlot;
class QCheckBox;
class QComboBox;
class QLabel;
class QSlider;
class QTabWidget;
class QTableView;
class SeriesLoader;
class ScalingChart;
class SpeedupChart;

// Two or more saved runs side by side: overlaid plots of the metrics the user
// picks among those the runs share, runs that can be hidden, a summary table
// with the speed-up over a chosen baseline run, and a configuration table that
// can hide equal keys. Runs of one configuration (repeats, e.g. the ladder's)
// are grouped: their mean with a min-max band, and the speed-up's spread.
// Two runs' per-layer profiles side by side in the "Layers" table tab.
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
  // The tables under the plots: the summary and configuration, and the layers of two runs.
  QTabWidget* tableTabs() const { return tableTabs_; }
  LayerComparePanel* layerComparison() const { return layers_; }
  void setDifferencesOnly(bool on);
  void setBaseline(qint64 runId);
  // Metrics as "s:name" (per step) or "e:name" (per epoch).
  QStringList availableMetrics() const;
  QStringList shownMetrics() const { return metrics_; }
  void setShownMetrics(const QStringList& metrics);
  void setRunHidden(qint64 runId, bool hidden);
  void setGroupRepeats(bool on);
  bool groupsRepeats() const;
  // Runs that share a configuration (all keys but name and seed), in order.
  static QList<QList<RunSummary>> repeatGroups(const QList<RunSummary>& runs);

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
  void rebuildMenus();
  void fitSummaryColumns();
  void updateSummary();

  QList<RunSummary> runs_;
  QStringList metrics_;
  bool metricsChosen_ = false;  // the user picked; else defaults follow the loaded runs
  QSet<qint64> hidden_;
  std::deque<SeriesPoints> aggregates_;  // means and bands of repeat groups (plots point here)
  std::map<qint64, std::unique_ptr<RunSeries>> series_;
  QList<LivePlot*> plots_;
  SeriesLoader* loader_;
  ConfigDiffModel* diff_;
  CompareSummaryModel* summary_;
  QTableView *diffTable_, *summaryTable_;
  QCheckBox *diffOnly_, *groupRepeats_;
  class QToolButton *metricsButton_, *runsButton_;
  QComboBox *baseline_, *xAxis_;
  QSlider* smoothing_;
  QLabel* title_;
  QTabWidget* tableTabs_ = nullptr;
  LayerComparePanel* layers_ = nullptr;
  SpeedupChart* speedup_ = nullptr;
  ScalingChart* scaling_ = nullptr;
  QWidget* plotCanvas_;
};
