// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine_info.h"

#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QProcess>

#include "trick_catalog.h"

EngineInfo::EngineInfo(const QString& enginePath, QObject* parent) : QObject(parent), enginePath_(enginePath) {}

// A window closed while the engine is still being asked: the probe ends here,
// quietly (a QProcess destroyed with its process running kills it and warns).
EngineInfo::~EngineInfo() {
  for (QProcess* p : findChildren<QProcess*>()) {
    p->disconnect(this);
    if (p->state() == QProcess::NotRunning) continue;
    p->kill();
    p->waitForFinished(1000);
  }
}

bool EngineInfo::engineExists() const {
  const QFileInfo f(enginePath_);
  return f.exists() && f.isExecutable();
}

void EngineInfo::query() {
  pending_ = {{QStringLiteral("--version")},
              {QStringLiteral("devices"), QStringLiteral("--json")},
              {QStringLiteral("config"), QStringLiteral("--defaults")},
              {QStringLiteral("config"), QStringLiteral("--schema")}};
  if (!engineExists()) {
    pending_.clear();
    emit ready();
    return;
  }
  runNext();
}

void EngineInfo::runNext() {
  if (pending_.isEmpty()) {
    emit ready();
    return;
  }
  const QStringList args = pending_.takeFirst();
  auto* process = new QProcess(this);
  connect(process, &QProcess::finished, this, [this, process, args](int code, QProcess::ExitStatus status) {
    const QByteArray out = process->readAllStandardOutput();
    process->deleteLater();
    if (status == QProcess::NormalExit && code == 0) {
      if (args.first() == QLatin1String("--version")) {
        version_ = QString::fromUtf8(out).trimmed();
      } else if (args.first() == QLatin1String("devices")) {
        devices_ = parseDevices(out, &environment_);
      } else if (args.value(1) == QLatin1String("--defaults")) {
        const QJsonDocument doc = QJsonDocument::fromJson(out);
        if (doc.isObject()) defaults_ = doc.object();
      } else if (args.value(1) == QLatin1String("--schema")) {
        support_ = parseSchemaBackends(out);
      }
    }
    runNext();
  });
  connect(process, &QProcess::errorOccurred, this, [this, process](QProcess::ProcessError e) {
    if (e == QProcess::FailedToStart) {
      process->deleteLater();
      runNext();
    }
  });
  process->start(enginePath_, args);
}

QList<QPair<QString, QString>> EngineInfo::parseDevices(const QByteArray& json, QJsonObject* environment) {
  QList<QPair<QString, QString>> out;
  const QJsonDocument doc = QJsonDocument::fromJson(json);
  QJsonArray list;
  if (doc.isArray()) {
    list = doc.array();
  } else if (doc.isObject()) {
    list = doc.object().value(QLatin1String("devices")).toArray();
    if (environment) {
      for (auto it = doc.object().begin(); it != doc.object().end(); ++it)
        if (it.key() != QLatin1String("devices")) environment->insert(it.key(), it.value());
    }
  }
  int cudaIndex = 0;
  for (const QJsonValue& v : list) {
    const QJsonObject d = v.toObject();
    QString id = d.value(QLatin1String("id")).toString();
    if (id.isEmpty()) id = d.value(QLatin1String("device")).toString();
    const QString kind = d.value(QLatin1String("kind")).toString(d.value(QLatin1String("type")).toString());
    if (id.isEmpty()) {
      if (kind == QLatin1String("cpu")) id = QStringLiteral("cpu");
      else id = QStringLiteral("cuda:%1").arg(d.value(QLatin1String("index")).toInt(cudaIndex));
    }
    if (id.startsWith(QLatin1String("cuda"))) ++cudaIndex;
    QString label = d.value(QLatin1String("name")).toString();
    const double memory = d.value(QLatin1String("memory_bytes")).toDouble(d.value(QLatin1String("total_memory_bytes")).toDouble());
    if (memory > 0) label += QStringLiteral(", %1 GiB").arg(memory / (1024.0 * 1024.0 * 1024.0), 0, 'f', 0);
    out.append({id, label.isEmpty() ? id : QStringLiteral("%1 — %2").arg(id, label)});
  }
  return out;
}

QMap<QString, QStringList> EngineInfo::parseSchemaBackends(const QByteArray& json) {
  QMap<QString, QStringList> out;
  const QJsonDocument doc = QJsonDocument::fromJson(json);
  auto take = [&out](const QString& key, const QJsonObject& entry) {
    const QJsonValue b = entry.value(QLatin1String("backends"));
    if (b.isArray() || b.isString()) out.insert(key, TrickCatalog::backendsFrom(b));
  };
  QJsonObject root = doc.object();
  if (root.contains(QLatin1String("keys"))) {
    const QJsonValue keys = root.value(QLatin1String("keys"));
    if (keys.isObject()) root = keys.toObject();
    else
      for (const QJsonValue& v : keys.toArray()) take(v.toObject().value(QLatin1String("key")).toString(), v.toObject());
  }
  if (doc.isArray())
    for (const QJsonValue& v : doc.array()) take(v.toObject().value(QLatin1String("key")).toString(), v.toObject());
  for (auto it = root.begin(); it != root.end(); ++it)
    if (it.value().isObject()) take(it.key(), it.value().toObject());
  return out;
}
