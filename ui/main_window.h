// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QJsonObject>
#include <QMainWindow>
#include <QPointer>
#include <functional>

class CompareView;
class ConfigPanel;
class EngineInfo;
class EngineProcess;
class LadderView;
class QAction;
class QComboBox;
class QLabel;
class QListWidget;
class QPushButton;
class QTabWidget;
class QTextBrowser;
class RunDashboard;
class RunHistoryView;
class RunQueue;
class QSplitter;
class TrickPanel;

// The workbench window: Set up (configuration, tricks, presets), Runs (queue
// and one live dashboard per run), History and Compare.
class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  enum Page { SetupPage, RunsPage, HistoryPage, ComparePage, LadderPage };

  explicit MainWindow(const QString& databasePath = QString(), QWidget* parent = nullptr);
  ~MainWindow() override;

  QJsonObject currentConfig() const;
  // Takes what the engine's settings table accepts of config (merged onto the
  // current configuration) and returns the refused entries, each naming its
  // key, value and why (also in the status bar). source prefixes them.
  QStringList setConfig(const QJsonObject& config, const QString& source = QString());
  // Loads a configuration file onto the current one; false with the reason in
  // *error when the file cannot be read, else the refused entries in *refused.
  bool loadConfigFile(const QString& path, QStringList* refused, QString* error);
  bool applyPreset(const QString& name);
  void showLearnMore(const QString& key);

  void setDatabasePath(const QString& path);
  QString databasePath() const { return databasePath_; }
  void setEnginePath(const QString& path);
  QString enginePath() const;

  void showPage(Page page);
  void openRun(qint64 runId);
  // Compares saved runs on the Compare page. Runs the history has not read
  // yet (it reads the store on a worker thread) are waited for, once.
  void compareRuns(const QList<qint64>& ids);

  ConfigPanel* configPanel() const { return config_; }
  TrickPanel* trickPanel() const { return tricks_; }
  RunQueue* runQueue() const { return queue_; }
  RunHistoryView* historyView() const { return history_; }
  CompareView* compareView() const { return compare_; }
  LadderView* ladderView() const { return ladder_; }
  QTabWidget* dashboards() const { return dashboards_; }
  RunDashboard* dashboardFor(EngineProcess* process) const;
  // Closes a dashboard tab unless its run is driven by this workbench and not
  // over; closeDashboards() closes those `which` picks (default: every run
  // that ended). Returns whether / how many closed.
  bool closeDashboard(int index);
  int closeDashboards(const std::function<bool(QWidget*)>& which = {});
  // Clamps the window to its screen's available area.
  void fitToScreen();

 public slots:
  void launchNow();
  void addToQueue();
  // The Ladder page with the current configuration as the baseline, started
  // (`trainbench-engine ladder`); false when it could not start.
  bool queueLadder();
  void stopRun();
  void killRun();
  void saveConfigDialog();
  void loadConfigDialog();
  void openDatabaseDialog();
  void about();

 protected:
  void closeEvent(QCloseEvent* event) override;
  void changeEvent(QEvent* event) override;

 private:
  void compareRunsNow(const QList<qint64>& ids, bool afterReload);
  QWidget* buildSetupPage();
  QWidget* buildRunsPage();
  void buildMenus();
  // A new dashboard tab for a run of the database at store (a run is
  // (store, id): the tab is found again by both).
  void showInDashboard(RunDashboard* dashboard, const QString& store);
  // The Advisor tab under a dashboard (once), for run runId of store.
  void addAdvisor(RunDashboard* dashboard, const QString& store, qint64 runId);
  void onLaunched(EngineProcess* process);
  void onRunEnded(EngineProcess* process, const QString& status, const QString& message);
  void updateQueueList();
  void updateDeviceContext();
  void onEngineInfo();
  void updateConfigPreview();
  void applyReadableHints();
  // The data check before a launch: false (and why, on the Set-up page and
  // in the status bar) when the run could not open its data.
  bool dataReady();

  QString databasePath_;
  ConfigPanel* config_ = nullptr;
  TrickPanel* tricks_ = nullptr;
  QComboBox* presets_ = nullptr;
  QLabel* presetDescription_ = nullptr;
  QTextBrowser* learnMore_ = nullptr;
  QTextBrowser* preview_ = nullptr;
  QTabWidget* pages_ = nullptr;
  QTabWidget* dashboards_ = nullptr;
  QListWidget* queueList_ = nullptr;
  QPushButton *stopButton_ = nullptr, *killButton_ = nullptr;
  RunQueue* queue_ = nullptr;
  RunHistoryView* history_ = nullptr;
  CompareView* compare_ = nullptr;
  LadderView* ladder_ = nullptr;
  EngineInfo* engineInfo_ = nullptr;
  QSplitter* runsSplitter_ = nullptr;
  QLabel *engineStatus_ = nullptr, *dbStatus_ = nullptr;
  QAction *stopAction_ = nullptr, *killAction_ = nullptr;
  QJsonObject engineDefaults_;
  bool hadSavedConfig_ = false;
  bool ladderFollowsSetup_ = true;  // the Ladder page's baseline is the Set-up page's configuration
  QString setupBaselineSource() const;
  QList<qint64> pendingCompare_;  // ids waiting for the history's next read
};
