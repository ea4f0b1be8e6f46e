// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QJsonObject>
#include <QMap>
#include <QProcess>
#include <QWidget>

#include <nlohmann/json.hpp>

class QCheckBox;
class QComboBox;
class QCustomPlot;
class QLabel;
class QListWidget;
class QPushButton;
class QTableWidget;

// The optimization ladder, a front end to `trainbench-engine ladder`: the
// rungs to climb (the engine's rung catalogue), the ladder settings (controls
// from the settings table's "ladder" group), Start/Stop; the table filling in
// live from the engine's ladder_progress events (or a stored ladder picked in
// the list), the speed-up chart with min-max error bars, the accuracy curves
// of accuracy runs, and exports (CSV, Markdown and HTML with the chart).
class LadderView : public QWidget {
  Q_OBJECT
 public:
  explicit LadderView(QWidget* parent = nullptr);
  ~LadderView() override;

  void setDatabasePath(const QString& path);
  void setEnginePath(const QString& path) { enginePath_ = path; }
  // The baseline (its ladder_* keys set this view's controls and are then
  // replaced by them); source says where it comes from ("the Set-up page",
  // "run 12"), shown above the table.
  void setBaseline(const QJsonObject& config, const QString& source = QString());
  // The baseline alone, the controls as they are (the Set-up page's
  // configuration, followed while it changes).
  void followBaseline(const QJsonObject& config, const QString& source);
  QString baselineText() const;  // the baseline line as plain text (tests)
  QJsonObject ladderConfig() const;  // the baseline with this view's ladder settings

  bool start();  // false (with a status message) when one is running or the engine is missing
  void stop();   // SIGTERM: the run in progress finishes, the ladder is stored as stopped
  bool isRunning() const { return process_.state() != QProcess::NotRunning; }

  void reloadLadders();  // the list of stored ladders
  bool showLadder(qint64 id);
  qint64 currentLadder() const { return ladderId_; }
  const nlohmann::json& table() const { return table_; }

  QTableWidget* tableWidget() const { return tableWidget_; }
  QCustomPlot* chart() const { return chart_; }
  QCustomPlot* accuracyPlot() const { return accuracy_; }
  QListWidget* rungList() const { return rungs_; }
  // The backend the machine's runs use ("cpu", "cuda"; the Set-up page's
  // device): rungs that would do nothing there are marked, with the engine's
  // reason, before a ladder starts (it records them as skipped).
  void setDeviceBackend(const QString& backend);
  QString rungSkipReason(const QString& id) const { return skipReasons_.value(id); }  // "" when it runs

  bool exportCsv(const QString& path) const;
  bool exportMarkdown(const QString& path) const;  // with the chart as PATH.png beside it
  bool exportHtml(const QString& path) const;      // the chart embedded

 signals:
  void statusMessage(const QString& message);
  void ladderFinished(qint64 ladderId, const QString& status);

 private:
  void readEngineOutput();
  void render();
  void renderChart();
  void renderAccuracy();
  QString tableHtml() const;

  void showBaseline();
  void markRungs();

  QString databasePath_, enginePath_, configFile_;
  QJsonObject baseline_;
  QString baselineSource_;
  QLabel* baselineLabel_ = nullptr;
  QProcess process_;
  QByteArray pending_;
  qint64 ladderId_ = 0;
  nlohmann::json table_;
  QListWidget* rungs_ = nullptr;
  QString deviceBackend_;
  QMap<QString, QString> skipReasons_;
  QList<QWidget*> settings_;
  QComboBox* ladders_ = nullptr;
  QPushButton *start_ = nullptr, *stop_ = nullptr;
  QLabel* status_ = nullptr;
  QTableWidget* tableWidget_ = nullptr;
  QCustomPlot *chart_ = nullptr, *accuracy_ = nullptr;
};
