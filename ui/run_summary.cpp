// SPDX-License-Identifier: GPL-3.0-or-later
#include "run_summary.h"

#include <QDateTime>
#include <QJsonDocument>
#include <QObject>
#include <cmath>
#include <limits>

#include "engine/train/config.h"

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The first of several possible key names that holds a number.
double firstNumber(const QJsonObject& o, std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    const QJsonValue v = o.value(QLatin1String(k));
    if (v.isDouble()) return v.toDouble();
  }
  return kNaN;
}
}  // namespace

RunSummary::RunSummary()
    : medianStepMs(kNaN), samplesPerSecond(kNaN), peakMemoryBytes(kNaN), finalAccuracy(kNaN), timeToTargetS(kNaN),
      batchSize(kNaN), wallSeconds(kNaN) {}

bool RunSummary::isTerminal() const {
  // "interrupted" is the store's derived status of a run whose engine died.
  return tb::is_terminal_run_status(status.toStdString()) || status == QLatin1String("interrupted");
}

QJsonObject RunSummary::toQt(const nlohmann::json& json) {
  if (!json.is_object()) return {};
  return QJsonDocument::fromJson(QByteArray::fromStdString(json.dump())).object();
}

QString RunSummary::shownName(const QString& name) {
  return name.trimmed().isEmpty() ? QObject::tr("unnamed run") : name;
}

QString RunSummary::nameOf(const QJsonObject& config) {
  const QString name = config.value(QLatin1String("name")).toString().trimmed();
  if (!name.isEmpty()) return name;
  return QString::fromStdString(tb::default_run_name(config.value(QLatin1String("model")).toString().toStdString(),
                                                     config.value(QLatin1String("batch_size")).toInteger()));
}

RunSummary RunSummary::fromRecord(const tb::RunRecord& r) {
  RunSummary s;
  s.id = r.id;
  s.name = QString::fromStdString(r.name);
  s.createdAt = QString::fromStdString(r.created_at);
  s.startedAt = QString::fromStdString(r.started_at);
  s.finishedAt = QString::fromStdString(r.finished_at);
  s.enginePid = r.engine_pid;
  s.engineHost = QString::fromStdString(r.engine_host);
  s.status = QString::fromStdString(r.status);
  s.tags = QString::fromStdString(r.tags);
  s.notes = QString::fromStdString(r.notes);
  s.error = QString::fromStdString(r.error);
  s.config = toQt(r.config);
  s.summary = toQt(r.summary);
  s.environment = toQt(r.environment);
  s.tricks = toQt(r.tricks);
  s.model = s.config.value(QLatin1String("model")).toString();
  s.dataset = s.config.value(QLatin1String("dataset")).toString();
  s.device = s.environment.value(QLatin1String("device")).toString();
  const QString deviceName = s.environment.value(QLatin1String("device_name")).toString();
  if (s.device.isEmpty()) s.device = deviceName;
  else if (!deviceName.isEmpty() && deviceName != s.device) s.device += QStringLiteral(" (%1)").arg(deviceName);
  if (s.device.isEmpty()) s.device = s.summary.value(QLatin1String("device")).toString();
  if (s.device.isEmpty()) s.device = s.config.value(QLatin1String("device")).toString();
  s.medianStepMs = firstNumber(s.summary, {"median_step_time_ms", "step_time_ms_median", "median_step_ms"});
  s.samplesPerSecond = firstNumber(s.summary, {"samples_per_s", "median_samples_per_s", "samples_per_s_median"});
  s.peakMemoryBytes = firstNumber(s.summary, {"gpu_mem_peak_bytes", "peak_memory_bytes", "peak_mem_bytes",
                                              "host_mem_peak_bytes"});
  s.finalAccuracy = firstNumber(s.summary, {"final_test_accuracy", "test_accuracy", "final_accuracy"});
  s.batchSize = firstNumber(s.config, {"batch_size"});
  s.timeToTargetS = firstNumber(s.summary, {"time_to_target_s"});
  const QDateTime started = QDateTime::fromString(s.startedAt.isEmpty() ? s.createdAt : s.startedAt, Qt::ISODateWithMs);
  const QDateTime finished = QDateTime::fromString(s.finishedAt, Qt::ISODateWithMs);
  if (started.isValid() && finished.isValid()) s.wallSeconds = started.msecsTo(finished) / 1000.0;
  return s;
}

QJsonObject RunSummary::environmentFacts() const {
  const QByteArray text = QJsonDocument(environment).toJson(QJsonDocument::Compact);
  return toQt(tb::environment_facts(nlohmann::json::parse(text.constData(), text.constData() + text.size())));
}
