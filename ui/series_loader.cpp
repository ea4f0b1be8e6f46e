// SPDX-License-Identifier: GPL-3.0-or-later
#include "series_loader.h"

#include <QDateTime>
#include <QMetaObject>
#include <exception>
#include <stdexcept>

#include "engine/store/run_store.h"

class SeriesLoader::Worker : public QObject {
 public:
  explicit Worker(SeriesLoader* owner) : owner_(owner) {}
  void run(const QString& path, qint64 runId) {
    try {
      RunSeries s = SeriesLoader::load(path, runId);
      emit owner_->loaded(runId, s);
    } catch (const std::exception& e) {
      emit owner_->failed(runId, QString::fromUtf8(e.what()));
    }
  }

 private:
  SeriesLoader* owner_;
};

SeriesLoader::SeriesLoader(QObject* parent) : QObject(parent) {
  qRegisterMetaType<RunSeries>();
  worker_ = new Worker(this);
  worker_->moveToThread(&thread_);
  connect(&thread_, &QThread::finished, worker_, &QObject::deleteLater);
  thread_.setObjectName(QStringLiteral("SeriesLoader"));
  thread_.start();
}

SeriesLoader::~SeriesLoader() {
  thread_.quit();
  thread_.wait();
}

void SeriesLoader::request(const QString& databasePath, qint64 runId) {
  QMetaObject::invokeMethod(worker_, [w = worker_, databasePath, runId] { w->run(databasePath, runId); },
                            Qt::QueuedConnection);
}

RunSeries SeriesLoader::load(const QString& databasePath, qint64 runId) {
  tb::RunStore store(databasePath.toStdString(), tb::RunStore::Mode::ReadOnly);
  RunSeries out;
  out.runId = runId;
  const auto run = store.get_run(runId);
  if (!run) throw std::runtime_error("run " + std::to_string(runId) + " is not in the database");
  out.runName = QString::fromStdString(run->name);
  QString start = QString::fromStdString(run->started_at);
  if (start.isEmpty()) start = QString::fromStdString(run->created_at);
  const QDateTime started = QDateTime::fromString(start, Qt::ISODateWithMs);
  out.startWallSeconds = started.isValid() ? started.toMSecsSinceEpoch() / 1000.0 : 0;
  auto number = [](const nlohmann::json& j, const char* key) -> int {
    if (j.is_object() && j.contains(key) && j[key].is_number()) return j[key].get<int>();
    return 0;
  };
  out.stepsPerEpoch = number(run->summary, "steps_per_epoch");
  if (out.stepsPerEpoch == 0) out.stepsPerEpoch = number(run->environment, "steps_per_epoch");

  std::map<std::string, std::vector<tb::EpochPoint>> epochData;
  for (const std::string& name : store.epoch_series_names(runId)) epochData[name] = store.epoch_series(runId, name);
  if (out.stepsPerEpoch == 0) {
    // Estimate from the first epoch point (its step is where that epoch ended).
    for (const auto& [name, points] : epochData) {
      if (points.empty() || points.front().step <= 0) continue;
      out.stepsPerEpoch = int(points.front().step / std::max<int64_t>(1, points.front().epoch));
      break;
    }
  }
  for (const std::string& name : store.step_series_names(runId)) {
    const std::vector<tb::MetricPoint> points = store.step_series(runId, name);
    SeriesPoints& s = out.step[QString::fromStdString(name)];
    s.reserve(int(points.size()));
    for (const tb::MetricPoint& p : points)
      s.append(double(p.step), out.epochOfStep(double(p.step), 0), p.wall_time, out.startWallSeconds + p.wall_time,
               p.value);
  }
  for (const tb::EventRecord& e : store.events(runId))
    out.events << QStringLiteral("[%1] %2").arg(QString::fromStdString(e.level), QString::fromStdString(e.message));
  for (const auto& [name, points] : epochData) {
    SeriesPoints& s = out.epoch[QString::fromStdString(name)];
    s.reserve(int(points.size()));
    for (const tb::EpochPoint& p : points)
      s.append(double(p.step), out.stepsPerEpoch > 0 ? double(p.step) / out.stepsPerEpoch : double(p.epoch),
               p.wall_time, out.startWallSeconds + p.wall_time, p.value);
  }
  return out;
}
