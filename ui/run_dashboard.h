// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QJsonObject>
#include <QList>
#include <QMap>
#include <QSet>
#include <QWidget>

#include "series_data.h"

class LivePlot;
class QComboBox;
class QCheckBox;
class QGridLayout;
class QTabWidget;
class QLabel;
class QPlainTextEdit;
class QSlider;
class QTimer;

// The dashboard of one run: a grid of LivePlots (step time, samples/s, the
// stacked step-time breakdown, GPU memory, Tensor Cores, loss, accuracy,
// learning rate, then one plot for every other series), shared plot controls,
// the trick status the engine reported and its log. Fed live from engine events
// or at once from series loaded out of the store.
class RunDashboard : public QWidget {
  Q_OBJECT
 public:
  explicit RunDashboard(QWidget* parent = nullptr);

  // Live feed (engine events).
  void handleRunStarted(const QJsonObject& event);
  void handleStep(const QJsonObject& event);
  void handleEpoch(const QJsonObject& event);
  void appendLog(const QString& level, const QString& message);
  void setStatus(const QString& status, const QString& message = QString());
  // The engine's per-trick report: {key: {requested, applied, changed, reason}}.
  void setTricks(const QJsonObject& tricks);

  // Saved run.
  void setSeries(const RunSeries& series);

  const RunSeries& series() const { return series_; }
  QList<LivePlot*> plots() const;
  LivePlot* plot(const QString& title) const;
  QString statusText() const;

  void setXAxis(XAxis axis);
  void setSmoothing(double alpha);
  void setLogScale(bool on);
  // Labels of the tricks whose "which plot should move" text names this plot.
  static QString tricksThatMove(const QString& plotTitle);
  void refreshNow();  // redraw all plots (normally done a few times a second)
  // The tabs under the plots (tricks applied, engine log); the window adds the advisor there.
  QTabWidget* bottomTabs() const { return bottom_; }
  // Every plot as PNG, SVG and PDF into folder; returns the number of files.
  int exportPlots(const QString& folder, QString* error = nullptr);

 private:
  struct PanelCurve {
    bool epochSeries;
    QString name, label;
    double scale = 1.0;  // times the panel's yScale (a share in a percent panel: 100)
  };
  struct Panel {
    QString title, unit;
    QList<PanelCurve> curves;
    bool stacked = false;
    double yScale = 1.0;
    LivePlot* plot = nullptr;
    QSet<QString> attached;  // "s:name" / "e:name" already on the plot
  };
  void ensurePanels();
  void attachCurves(Panel& panel);
  void placePlot(LivePlot* plot);
  void scheduleRefresh();
  SeriesPoints& stepSeries(const QString& name);

  RunSeries series_;
  QList<Panel> panels_;
  QSet<QString> claimed_;  // series shown on a fixed panel
  QGridLayout* grid_ = nullptr;
  QTabWidget* bottom_ = nullptr;
  QLabel* header_ = nullptr;
  QLabel* tricks_ = nullptr;
  QPlainTextEdit* log_ = nullptr;
  QComboBox* xAxisBox_ = nullptr;
  QSlider* smoothing_ = nullptr;
  QCheckBox* logScale_ = nullptr;
  QTimer* refreshTimer_ = nullptr;
  QString status_ = QStringLiteral("waiting");
  QString lastWords_;
  qint64 totalSteps_ = 0, lastStep_ = 0;
  bool dirty_ = false;
};
