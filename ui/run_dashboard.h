// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QJsonObject>
#include <QList>
#include <QMap>
#include <QPointer>
#include <QSet>
#include <QWidget>

#include "run_summary.h"
#include "series_data.h"

class LivePlot;
class RunEnvironmentModel;
class QComboBox;
class QCheckBox;
class QFrame;
class QGridLayout;
class QTabWidget;
class QLabel;
class QPlainTextEdit;
class QPushButton;
class QSlider;
class QTimer;
class RunFollower;

// The dashboard of one run: its header (name, status, progress, the reason of
// a failure in words, Stop), a result strip with the headline figures once it
// ended, a grid of LivePlots (step time, samples/s, the stacked step-time
// breakdown, memory, Tensor Cores, loss, accuracy, learning rate, then one
// plot for every other series), shared plot controls, the trick status the
// engine reported and its log. Fed live from the engine's events (a run this
// workbench started), or from the store (follow(): a saved run, or one that
// another process is running, followed until it ends).
class RunDashboard : public QWidget {
  Q_OBJECT
 public:
  explicit RunDashboard(QWidget* parent = nullptr);
  ~RunDashboard() override;

  // Live feed (engine events).
  void handleRunStarted(const QJsonObject& event);
  void handleStep(const QJsonObject& event);
  void handleEpoch(const QJsonObject& event);
  void appendLog(const QString& level, const QString& message);
  // Any status string; a failed or interrupted one shows reason in the header.
  void setStatus(const QString& status, const QString& reason = QString());
  // The engine's per-trick report: {key: {requested, applied, changed, reason}}.
  void setTricks(const QJsonObject& tricks);
  // The run ended: its summary (the "finished"/"failed" event's, or the
  // store's) fills the result strip.
  void showResult(const QJsonObject& summary);

  // From the store: reads the run on a worker thread and, while it is not
  // over, keeps reading what its engine commits (see RunFollower).
  void follow(const QString& databasePath, qint64 runId);
  bool isFollowing() const;
  // A row of the store: status, error, tricks, summary, engine pid/host.
  void setRun(const RunSummary& run);
  void appendSeries(const RunSeries& newer);
  void setSeries(const RunSeries& series);

  // Stop: a run of this workbench asks its EngineProcess (stopRequested);
  // a followed run's engine gets SIGTERM when it is ours (EngineOwner).
  void setStoppable(bool on, const QString& whyNot = QString());
  bool canStop() const;
  void requestStop();

  const RunSeries& series() const { return series_; }
  QList<LivePlot*> plots() const;
  LivePlot* plot(const QString& title) const;
  QString statusText() const;
  QString failureReason() const { return reason_; }
  QString headerText() const;         // the header as plain text (tests)
  bool hasResult() const;
  // The tricks in effect (changed from the baseline and honoured by the
  // engine), as "label: value" with the settings table's names.
  QStringList tricksInEffect() const;
  QString resultText() const;         // the result strip as plain text (tests)

  void setXAxis(XAxis axis);
  void setSmoothing(double alpha);
  void setLogScale(bool on);
  // Labels of the tricks whose "which plot should move" text names this plot.
  static QString tricksThatMove(const QString& plotTitle);
  // A series name as a plot title and its unit: "data_wait_ms" -> "Data wait", "ms".
  static QPair<QString, QString> readableName(const QString& series);
  void refreshNow();  // redraw all plots (normally done a few times a second)
  // How often a live run's plots are redrawn after a redraw that took
  // cost_ms: four times a second at most, and never more than
  // kLiveViewShare of the wall clock (the engine fills the cores of a small
  // machine, so the workbench's drawing is time taken from its steps).
  static constexpr double kLiveViewShare = 0.02;
  static int refreshIntervalMs(double cost_ms);
  int refreshInterval() const;  // the current one
  // The tabs under the plots (tricks applied, engine log); the window adds the advisor there.
  QTabWidget* bottomTabs() const { return bottom_; }
  const RunEnvironmentModel* environmentModel() const { return environment_; }
  // Every plot as PNG, SVG and PDF into folder, named after the run (and its
  // id), so exports of several runs into one folder never overwrite each
  // other; returns the number of files.
  int exportPlots(const QString& folder, QString* error = nullptr);

 signals:
  void stopRequested();
  void runEnded(const QString& status);  // a followed run ended
  void runNamed(const QString& name);    // a followed run's name, when read or changed

 protected:
  void changeEvent(QEvent* event) override;

 private:
  struct PanelCurve {
    bool epochSeries;
    QString name, label;
    double scale = 1.0;  // times the panel's yScale (a share in a percent panel: 100)
  };
  struct Panel {
    QString title, unit;
    QList<PanelCurve> curves;
    bool stacked = false, zeroBased = false;
    bool warmupMarked = false;  // a timing plot: warm-up steps shaded, out of the y range
    bool totalSet = false;      // the breakdown: step time drawn over its parts
    QString help;               // what the plot shows and its caveats (title tooltip)
    double yScale = 1.0;
    LivePlot* plot = nullptr;
    QSet<QString> attached;  // "s:name" / "e:name" already on the plot
  };
  void ensurePanels();
  void attachCurves(Panel& panel);
  // The breakdown as the plot draws it: with cuda_graphs, a replayed step's
  // forward/backward/optimizer/other are "not measured" (NaN) and its time is
  // one layer of its own. Empty when every step's phases were measured.
  void updateBreakdownView();
  QString breakdownHelp(const Panel& panel) const;
  void placePlot(LivePlot* plot);
  void scheduleRefresh();
  void updateHeader();
  SeriesPoints& stepSeries(const QString& name);

  RunSeries series_;
  std::map<QString, SeriesPoints> breakdownView_;  // see updateBreakdownView()
  int replayScan_ = 0;  // forward_ms points searched for a replayed step so far
  QList<Panel> panels_;
  QSet<QString> claimed_;  // series shown on a fixed panel
  QGridLayout* grid_ = nullptr;
  QTabWidget* bottom_ = nullptr;
  QLabel* header_ = nullptr;
  QLabel* reasonLabel_ = nullptr;
  QLabel* emptyHint_ = nullptr;
  QFrame* resultStrip_ = nullptr;
  QList<QLabel*> resultLabels_;
  QPushButton* stopButton_ = nullptr;
  QLabel* tricks_ = nullptr;
  RunEnvironmentModel* environment_ = nullptr;  // the Environment tab's rows
  QPlainTextEdit* log_ = nullptr;
  QComboBox* xAxisBox_ = nullptr;
  QSlider* smoothing_ = nullptr;
  QLabel* smoothingValue_ = nullptr;
  QCheckBox* logScale_ = nullptr;
  QCheckBox* fitWarmup_ = nullptr;
  QTimer* refreshTimer_ = nullptr;
  QPointer<RunFollower> follower_;
  QString status_ = QStringLiteral("waiting");
  QString reason_;
  QJsonObject tricksReport_, lastSummary_;
  RunSummary followedRun_;
  qint64 totalSteps_ = 0, lastStep_ = 0;
  QString announcedName_;  // the run name last sent with runNamed
  bool dirty_ = false, followed_ = false;
};
