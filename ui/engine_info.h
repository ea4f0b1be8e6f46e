// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QJsonObject>
#include <QList>
#include <QMap>
#include <QObject>
#include <QPair>
#include <QStringList>

// What the engine binary says about itself, asked asynchronously at start-up:
// `devices --json`, `config --defaults`, `config --schema`, `--version`.
// Anything the engine cannot answer (yet) is simply left empty.
class EngineInfo : public QObject {
  Q_OBJECT
 public:
  explicit EngineInfo(const QString& enginePath, QObject* parent = nullptr);
  ~EngineInfo() override;

  void query();  // returns at once; ready() follows
  bool engineExists() const;

  QString enginePath() const { return enginePath_; }
  QString version() const { return version_; }
  QList<QPair<QString, QString>> devices() const { return devices_; }  // id, label
  QJsonObject defaults() const { return defaults_; }
  QMap<QString, QStringList> backendSupport() const { return support_; }
  QJsonObject environment() const { return environment_; }  // versions (CUDA, cuDNN) when reported

  // Parsers, public for tests.
  static QList<QPair<QString, QString>> parseDevices(const QByteArray& json, QJsonObject* environment = nullptr);
  static QMap<QString, QStringList> parseSchemaBackends(const QByteArray& json);

 signals:
  void ready();

 private:
  void runNext();

  QString enginePath_, version_;
  QList<QPair<QString, QString>> devices_;
  QJsonObject defaults_, environment_;
  QMap<QString, QStringList> support_;
  QList<QStringList> pending_;
};
