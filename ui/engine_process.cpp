// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine_process.h"

#include <signal.h>

#include <QDateTime>
#include <QDir>
#include <QJsonDocument>
#include <exception>

#include "engine/store/run_store.h"
#include "parallel_launch.h"
#include "run_summary.h"

namespace {
constexpr int kLastLines = 30;
}

EngineProcess::EngineProcess(const QString& enginePath, const QString& databasePath,
                             const QJsonObject& config, QObject* parent)
    : QObject(parent), enginePath_(enginePath), databasePath_(databasePath), config_(config) {
  connect(&process_, &QProcess::readyReadStandardOutput, this, &EngineProcess::readStdout);
  connect(&process_, &QProcess::readyReadStandardError, this, &EngineProcess::readStderr);
  connect(&process_, &QProcess::finished, this, &EngineProcess::onFinished);
  connect(&process_, &QProcess::errorOccurred, this, &EngineProcess::onError);
  connect(&process_, &QProcess::started, this, [this] { startedPid_ = process_.processId(); });
}

EngineProcess::~EngineProcess() {
  if (process_.state() != QProcess::NotRunning) {
    // Leaving the GUI: ask the engine to save and stop, then insist.
    disconnect(&process_, nullptr, this, nullptr);
    process_.terminate();
    if (!process_.waitForFinished(3000)) {
      process_.kill();
      process_.waitForFinished(1000);
    }
  }
}

QString EngineProcess::name() const {
  return RunSummary::nameOf(config_);
}

void EngineProcess::start() {
  if (state_ != State::NotStarted) return;
  configFile_ = std::make_unique<QTemporaryFile>(QDir::tempPath() + QStringLiteral("/trainbench-config-XXXXXX.json"));
  if (!configFile_->open()) {
    finish(QStringLiteral("failed"), tr("cannot write the run configuration: %1").arg(configFile_->errorString()));
    return;
  }
  configFile_->write(QJsonDocument(config_).toJson(QJsonDocument::Indented));
  configFile_->flush();
  // parallel: ddp with processes > 1 starts through mpirun (parallel_launch.h).
  const EngineLaunch launch = engineLaunch(
      enginePath_, {QStringLiteral("run"), QStringLiteral("--config"), configFile_->fileName(),
                    QStringLiteral("--db"), databasePath_, QStringLiteral("--events"), QStringLiteral("jsonl")},
      config_);
  if (!launch.error.isEmpty()) {
    finish(QStringLiteral("failed"), launch.error);
    return;
  }
  state_ = State::Running;
  emit stateChanged(state_);
  startedAt_ = QDateTime::currentDateTimeUtc();
  viaMpirun_ = launch.processes > 1;
  process_.setProcessEnvironment(launch.environment);
  process_.start(launch.program, launch.arguments);
}

void EngineProcess::stop() {
  if (state_ != State::Running) return;
  state_ = State::Stopping;
  emit stateChanged(state_);
  if (viaMpirun_ && signalRankZero(SIGTERM)) return;
  process_.terminate();
}

// ddp through mpirun: SIGTERM to rank 0 alone (its pid is in its run record);
// the ranks agree in their per-step exchange to stop after the same step
// (docs/parallel.md). mpirun's own SIGTERM ends the ranks a second later
// and stops forwarding their output, so rank 0 could not finish its record.
bool EngineProcess::signalRankZero(int signal) {
  if (runId_ <= 0) return false;
  try {
    const tb::RunStore store(databasePath_.toStdString(), tb::RunStore::Mode::ReadOnly);
    const auto run = store.get_run(runId_);
    if (!run || run->engine_pid <= 0 || run->engine_host != tb::this_host_name()) return false;
    return ::kill(static_cast<pid_t>(run->engine_pid), signal) == 0;
  } catch (const std::exception&) {
    return false;
  }
}

void EngineProcess::kill() {
  if (state_ != State::Running && state_ != State::Stopping) return;
  killed_ = true;
  process_.kill();
}

QString EngineProcess::withoutConfigPath(QString text) const {
  // The engine names the file it read, a temporary copy the user never saw.
  if (configFile_ && !configFile_->fileName().isEmpty())
    text.replace(configFile_->fileName(), tr("the run's configuration"));
  return text;
}

QString EngineProcess::failureReason() const {
  if (!reportedError_.isEmpty()) return withoutConfigPath(reportedError_);
  // The engine's own "error: ..." line, else what the workbench saw happen
  // with the last thing the engine said.
  for (auto it = lastLines_.crbegin(); it != lastLines_.crend(); ++it)
    if (it->startsWith(QLatin1String("error: "))) return withoutConfigPath(it->mid(7));
  QString said;
  for (auto it = lastLines_.crbegin(); it != lastLines_.crend() && said.isEmpty(); ++it)
    if (*it != explanation_) said = *it;
  if (explanation_.isEmpty()) return withoutConfigPath(said);
  return withoutConfigPath(said.isEmpty() ? explanation_ : tr("%1; its last words: %2").arg(explanation_, said));
}

QString EngineProcess::lastWords() const {
  QStringList words = lastLines_;
  if (!reportedError_.isEmpty() && !words.contains(reportedError_)) words << reportedError_;
  return withoutConfigPath(words.join(QLatin1Char('\n')));
}

void EngineProcess::rememberLine(const QString& line) {
  if (line.trimmed().isEmpty()) return;
  lastLines_ << line;
  while (lastLines_.size() > kLastLines) lastLines_.removeFirst();
}

void EngineProcess::readStdout() {
  stdoutBuffer_ += process_.readAllStandardOutput();
  int newline;
  while ((newline = stdoutBuffer_.indexOf('\n')) >= 0) {
    const QByteArray line = stdoutBuffer_.left(newline);
    stdoutBuffer_.remove(0, newline + 1);
    handleLine(line);
  }
}

void EngineProcess::readStderr() {
  stderrBuffer_ += process_.readAllStandardError();
  int newline;
  while ((newline = stderrBuffer_.indexOf('\n')) >= 0) {
    const QString line = QString::fromUtf8(stderrBuffer_.left(newline));
    stderrBuffer_.remove(0, newline + 1);
    rememberLine(line);
    emit logReceived(QStringLiteral("stderr"), line);
  }
}

void EngineProcess::handleLine(const QByteArray& raw) {
  const QByteArray line = raw.trimmed();
  if (line.isEmpty()) return;
  QJsonParseError pe;
  const QJsonDocument doc = QJsonDocument::fromJson(line, &pe);
  if (pe.error != QJsonParseError::NoError || !doc.isObject()) {
    // Not an event: keep it as plain output.
    rememberLine(QString::fromUtf8(line));
    emit logReceived(QStringLiteral("stdout"), QString::fromUtf8(line));
    return;
  }
  const QJsonObject event = doc.object();
  const QString type = event.value(QLatin1String("type")).toString();
  // Every event of a recorded run names it; a run that fails before it
  // started training says so only in its "failed" event.
  if (runId_ <= 0 && event.value(QLatin1String("run_id")).toInteger() > 0)
    runId_ = event.value(QLatin1String("run_id")).toInteger();
  // An evaluation between epochs (eval_every_steps) carries step series, as the store keeps it.
  if (type == QLatin1String("step") || type == QLatin1String("evaluation")) {
    emit stepReceived(event);
  } else if (type == QLatin1String("epoch")) {
    emit epochReceived(event);
  } else if (type == QLatin1String("run_started")) {
    runId_ = event.value(QLatin1String("run_id")).toInteger();
    startEvent_ = event;
    emit runStarted(runId_, event);
  } else if (type == QLatin1String("log")) {
    const QString level = event.value(QLatin1String("level")).toString(QStringLiteral("info"));
    const QString message = event.value(QLatin1String("message")).toString();
    if (level == QLatin1String("error") || level == QLatin1String("warning")) rememberLine(message);
    emit logReceived(level, message);
  } else if (type == QLatin1String("finished")) {
    reportedStatus_ = event.value(QLatin1String("status")).toString(QStringLiteral("finished"));
    summary_ = event.value(QLatin1String("summary")).toObject();
  } else if (type == QLatin1String("failed")) {
    reportedStatus_ = QStringLiteral("failed");
    reportedError_ = event.value(QLatin1String("error")).toString();
    summary_ = event.value(QLatin1String("summary")).toObject();
    rememberLine(reportedError_);
    emit logReceived(QStringLiteral("error"), reportedError_);
  }
}

void EngineProcess::explain(const QString& line) {
  explanation_ = line;
  rememberLine(line);
  emit logReceived(QStringLiteral("workbench"), line);
}

void EngineProcess::onError(QProcess::ProcessError error) {
  if (error == QProcess::FailedToStart) {
    explain(tr("could not start the engine '%1': %2").arg(enginePath_, process_.errorString()));
    markFailedInStore(failureReason());
    finish(QStringLiteral("failed"), lastWords());
  }
}

void EngineProcess::onFinished(int exitCode, QProcess::ExitStatus exitStatus) {
  readStdout();
  if (!stdoutBuffer_.isEmpty()) handleLine(stdoutBuffer_);
  stdoutBuffer_.clear();
  readStderr();
  if (!stderrBuffer_.isEmpty()) {
    rememberLine(QString::fromUtf8(stderrBuffer_));
    emit logReceived(QStringLiteral("stderr"), QString::fromUtf8(stderrBuffer_));
  }
  stderrBuffer_.clear();

  // Exit code 0 = finished, 130 = stopped by SIGTERM/SIGINT (docs/events.md).
  // mpirun, stopped by SIGTERM, exits 1 after its ranks stopped cleanly, and
  // may drop rank 0's last lines: rank 0's record in the store has the word.
  if (viaMpirun_ && reportedStatus_.isEmpty() && runId_ > 0) reportedStatus_ = storedStatus();
  const bool stoppedCode = exitCode == 130 || (viaMpirun_ && reportedStatus_ == QLatin1String("stopped"));
  if (exitStatus == QProcess::NormalExit && (exitCode == 0 || stoppedCode) &&
      (reportedStatus_ == QLatin1String("finished") || reportedStatus_ == QLatin1String("stopped"))) {
    finish(reportedStatus_, QString());
    return;
  }
  if (killed_) explain(tr("the engine was killed (SIGKILL) from the workbench"));
  else if (exitStatus == QProcess::CrashExit) explain(tr("the engine crashed or was killed by a signal (%1)").arg(process_.errorString()));
  else if (reportedStatus_.isEmpty() || exitCode != 0)
    explain(tr("the engine exited with code %1 without finishing the run").arg(exitCode));
  markFailedInStore(failureReason());
  finish(QStringLiteral("failed"), lastWords());
}

QString EngineProcess::storedStatus() const {
  try {
    const tb::RunStore store(databasePath_.toStdString(), tb::RunStore::Mode::ReadOnly);
    const auto run = store.get_run(runId_);
    if (run && tb::is_terminal_run_status(run->status)) return QString::fromStdString(run->status);
  } catch (const std::exception&) {
  }
  return {};
}

void EngineProcess::markFailedInStore(const QString& message) {
  try {
    tb::RunStore store(databasePath_.toStdString());
    if (runId_ <= 0 && startedPid_ > 0) {
      // The engine may have recorded the run and died before it said which:
      // its row names our engine's pid and this host (and is not older than
      // our start, so a reused pid is not mistaken for ours).
      const std::string host = tb::this_host_name();
      for (const tb::RunRecord& r : store.list_runs()) {
        const QDateTime created = QDateTime::fromString(QString::fromStdString(r.created_at), Qt::ISODateWithMs);
        if (r.engine_pid == startedPid_ && r.engine_host == host && created.isValid() &&
            created.msecsTo(startedAt_) < 1000)
          runId_ = r.id;
      }
    }
    if (runId_ > 0) {
      const auto run = store.get_run(runId_);
      if (run && !tb::is_terminal_run_status(run->status)) {
        // The engine could not record its end: keep its last words with the run.
        for (const QString& line : lastLines_) store.append_event(runId_, "stderr", line.toStdString());
        store.set_status(runId_, tb::run_status::kFailed, message.toStdString());
      }
    } else {
      // The engine died before it recorded the run: record it here.
      tb::RunRecord record;
      record.name = name().toStdString();
      record.config = nlohmann::json::parse(QJsonDocument(config_).toJson(QJsonDocument::Compact).toStdString());
      runId_ = store.create_run(record);
      for (const QString& line : lastLines_) store.append_event(runId_, "stderr", line.toStdString());
      store.set_status(runId_, tb::run_status::kFailed, message.toStdString());
    }
  } catch (const std::exception& e) {
    rememberLine(tr("could not mark the run failed in %1: %2").arg(databasePath_, QString::fromUtf8(e.what())));
  }
}

void EngineProcess::finish(const QString& status, const QString& message) {
  if (state_ == State::Ended) return;
  state_ = State::Ended;
  finalStatus_ = status;
  emit stateChanged(state_);
  emit ended(status, message);
}
