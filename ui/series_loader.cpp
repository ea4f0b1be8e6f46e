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
  return RunSeriesReader(runId).read(store);
}

RunSeries RunSeriesReader::read(const tb::RunStore& store, tb::RunRecord* record) {
  RunSeries out;
  out.runId = runId_;
  const auto run = store.get_run(runId_);
  if (!run) throw std::runtime_error("run " + std::to_string(runId_) + " is not in the database");
  if (record) *record = *run;
  out.runName = QString::fromStdString(run->name);
  if (startWallSeconds_ == 0) {
    QString start = QString::fromStdString(run->started_at);
    if (start.isEmpty()) start = QString::fromStdString(run->created_at);
    const QDateTime started = QDateTime::fromString(start, Qt::ISODateWithMs);
    startWallSeconds_ = started.isValid() ? started.toMSecsSinceEpoch() / 1000.0 : 0;
  }
  out.startWallSeconds = startWallSeconds_;
  auto number = [](const nlohmann::json& j, const char* key) -> int {
    if (j.is_object() && j.contains(key) && j[key].is_number()) return j[key].get<int>();
    return 0;
  };
  if (stepsPerEpoch_ == 0) stepsPerEpoch_ = number(run->summary, "steps_per_epoch");
  if (stepsPerEpoch_ == 0) stepsPerEpoch_ = number(run->environment, "steps_per_epoch");

  std::map<std::string, std::vector<tb::EpochPoint>> epochData;
  for (const std::string& name : store.epoch_series_names(runId_)) {
    auto last = lastEpoch_.find(name);
    epochData[name] = store.epoch_series(runId_, name, last == lastEpoch_.end() ? -1 : last->second);
  }
  if (stepsPerEpoch_ == 0) {
    // Estimate from the first epoch point (its step is where that epoch ended).
    for (const auto& [name, points] : epochData) {
      if (points.empty() || points.front().step <= 0) continue;
      stepsPerEpoch_ = int(points.front().step / std::max<int64_t>(1, points.front().epoch + 1));
      break;
    }
  }
  out.stepsPerEpoch = stepsPerEpoch_;
  for (const std::string& name : store.step_series_names(runId_)) {
    auto last = lastStep_.find(name);
    const std::vector<tb::MetricPoint> points =
        store.step_series(runId_, name, last == lastStep_.end() ? -1 : last->second);
    if (points.empty()) continue;
    lastStep_[name] = points.back().step;
    SeriesPoints& s = out.step[QString::fromStdString(name)];
    s.reserve(int(points.size()));
    for (const tb::MetricPoint& p : points)
      s.append(double(p.step), out.epochOfStep(double(p.step), 0), p.wall_time, out.startWallSeconds + p.wall_time,
               p.value);
  }
  for (const tb::EventRecord& e : store.events(runId_, lastEvent_)) {
    out.events << QStringLiteral("[%1] %2").arg(QString::fromStdString(e.level), QString::fromStdString(e.message));
    lastEvent_ = std::max(lastEvent_, e.id);
  }
  for (const auto& [name, points] : epochData) {
    if (points.empty()) continue;
    lastEpoch_[name] = points.back().epoch;
    SeriesPoints& s = out.epoch[QString::fromStdString(name)];
    s.reserve(int(points.size()));
    for (const tb::EpochPoint& p : points)
      s.append(double(p.step), out.stepsPerEpoch > 0 ? double(p.step) / out.stepsPerEpoch : double(p.epoch),
               p.wall_time, out.startWallSeconds + p.wall_time, p.value);
  }
  return out;
}
