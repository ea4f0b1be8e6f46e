// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QDateTime>
#include <QJsonObject>
#include <QObject>
#include <QProcess>
#include <QStringList>
#include <QTemporaryFile>
#include <memory>

// One run of `trainbench-engine run --config FILE --db PATH --events jsonl`,
// driven without blocking: its JSON-lines stdout becomes signals, its stderr is
// kept as the engine's "last words". Stop sends SIGTERM (the engine finishes
// the step, saves and exits "stopped"); Kill sends SIGKILL. When the engine
// dies without saying it finished, the run is marked failed in the store with
// its last words (created there if the engine never got that far).
class EngineProcess : public QObject {
  Q_OBJECT
 public:
  enum class State { NotStarted, Running, Stopping, Ended };
  Q_ENUM(State)

  EngineProcess(const QString& enginePath, const QString& databasePath, const QJsonObject& config,
                QObject* parent = nullptr);
  ~EngineProcess() override;

  void start();
  void stop();  // SIGTERM
  void kill();  // SIGKILL

  State state() const { return state_; }
  qint64 runId() const { return runId_; }
  QString name() const;
  const QJsonObject& config() const { return config_; }
  const QJsonObject& startEvent() const { return startEvent_; }
  QString finalStatus() const { return finalStatus_; }  // finished | stopped | failed
  QString lastWords() const;                             // last stderr lines and errors
  // Why a failed run failed, in the engine's words, once (the "failed"
  // event's error, else its last error line).
  QString failureReason() const;
  // The "finished" (or "failed") event's summary: the run's headline figures.
  const QJsonObject& summary() const { return summary_; }
  QString databasePath() const { return databasePath_; }
  qint64 pid() const { return process_.processId(); }

  // Feeds one stdout line as if the engine had printed it (used by tests and
  // by the stream reader).
  void handleLine(const QByteArray& line);

 signals:
  void runStarted(qint64 runId, const QJsonObject& event);
  void stepReceived(const QJsonObject& event);
  void epochReceived(const QJsonObject& event);
  void logReceived(const QString& level, const QString& message);
  void stateChanged(EngineProcess::State state);
  // After the process is gone: status finished | stopped | failed.
  void ended(const QString& status, const QString& message);

 private:
  void readStdout();
  void readStderr();
  void onFinished(int exitCode, QProcess::ExitStatus exitStatus);
  void onError(QProcess::ProcessError error);
  void finish(const QString& status, const QString& message);
  void markFailedInStore(const QString& message);
  QString storedStatus() const;  // the run's terminal status in the store, or empty
  bool signalRankZero(int signal);
  void rememberLine(const QString& line);
  QString withoutConfigPath(QString text) const;
  void explain(const QString& line);  // what the workbench saw happen, kept and logged

  QString enginePath_, databasePath_;
  QJsonObject config_, startEvent_, summary_;
  QProcess process_;
  std::unique_ptr<QTemporaryFile> configFile_;
  QByteArray stdoutBuffer_, stderrBuffer_;
  QStringList lastLines_;
  QString reportedStatus_, reportedError_, finalStatus_, explanation_;
  qint64 runId_ = 0;
  qint64 startedPid_ = 0;  // processId() is 0 once the process is gone
  QDateTime startedAt_;
  State state_ = State::NotStarted;
  bool killed_ = false;
  bool viaMpirun_ = false;  // parallel: ddp over several processes (parallel_launch.h)
};
