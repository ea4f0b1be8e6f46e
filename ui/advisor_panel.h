// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QJsonObject>
#include <QProcess>
#include <QWidget>

#include <nlohmann/json.hpp>

class QLabel;
class QVBoxLayout;
class QTextBrowser;

// What to try next for a stored run: the advisor's recommendations
// (engine/advise/advisor.h), each with its evidence, threshold and the most
// it can gain, and "Apply and re-run", which has the engine re-run the
// configuration with the change (`trainbench-engine advise ID --apply RULE`,
// the pair linked in the store). Re-runs already made are listed with the
// predicted bound next to the measured speed-up. The run's series are read
// on a worker thread.
class AdvisorPanel : public QWidget {
  Q_OBJECT
 public:
  explicit AdvisorPanel(QWidget* parent = nullptr);
  ~AdvisorPanel() override;

  void setDatabasePath(const QString& path) { databasePath_ = path; }
  void setEnginePath(const QString& path) { enginePath_ = path; }
  void showRun(qint64 runId);  // (re)computes the advice, asynchronously
  qint64 runId() const { return runId_; }
  bool busy() const { return computing_ || rerun_.state() != QProcess::NotRunning; }

  QStringList rules() const;  // of the advice shown
  const nlohmann::json& advice() const { return advice_; }
  const nlohmann::json& reruns() const { return reruns_; }
  // False (with the reason in statusMessage) where the rule does not fire,
  // a re-run is running, or this machine cannot train the run (a GPU run here
  // without a GPU: its buttons are disabled and the header says why).
  bool applyAndRerun(const QString& rule);
  QString cannotRerunReason() const { return cannotRerun_; }
  // The ladder baseline for a rule's advice; empty when no rung makes its changes.
  QJsonObject ladderFor(const QString& rule) const;

 signals:
  void adviceReady(qint64 runId);
  void rerunFinished(qint64 beforeRunId, int exitCode);
  void statusMessage(const QString& message);
  // "Add to ladder": the run's configuration as a ladder baseline whose rungs
  // are the ones this advice's changes make.
  void addToLadderRequested(const QJsonObject& baseline);
  // "Show in Layers" of advice whose evidence cites a per-layer row.
  void showLayerRequested(const QString& layer, const QString& phase);

 private:
  void render();

  QString databasePath_, enginePath_;
  qint64 runId_ = 0;
  bool computing_ = false;
  nlohmann::json advice_ = nlohmann::json::array(), reruns_ = nlohmann::json::array();
  nlohmann::json config_;  // the run's configuration
  QString error_;
  QString cannotRerun_;  // why this machine cannot re-run the run (a GPU run, no GPU here)
  QLabel* header_ = nullptr;
  QWidget* cards_ = nullptr;
  QVBoxLayout* cardsLayout_ = nullptr;
  QProcess rerun_;
};
