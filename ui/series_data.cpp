// SPDX-License-Identifier: GPL-3.0-or-later
#include "series_data.h"

#include <QObject>

void SeriesPoints::reserve(int n) {
  step.reserve(n);
  time.reserve(n);
  value.reserve(n);
  epoch_.reserve(n);
}

void SeriesPoints::append(double stepX, double epochX, double timeX, double wallX, double y) {
  if (value.isEmpty()) wallOffset_ = wallX - timeX;
  step.append(stepX);
  time.append(timeX);
  value.append(y);
  epoch_.append(float(epochX));
}

void SeriesPoints::appendAll(const SeriesPoints& other) {
  const QVector<double>& epochs = other.x(XAxis::Epoch);
  reserve(size() + other.size());
  for (int i = 0; i < other.size(); ++i)
    append(other.step[i], epochs[i], other.time[i], other.time[i] + other.wallOffset_, other.value[i]);
}

void SeriesPoints::setEpochsFromSteps(int stepsPerEpoch) {
  if (stepsPerEpoch <= 0) return;
  for (int i = 0; i < size(); ++i) epoch_[i] = float(step[i] / stepsPerEpoch);
  cache_.clear();
  cacheAxis_ = -1;
}

void RunSeries::appendAll(const RunSeries& newer) {
  if (runId == 0) runId = newer.runId;
  if (!newer.runName.isEmpty()) runName = newer.runName;
  if (startWallSeconds == 0) startWallSeconds = newer.startWallSeconds;
  if (stepsPerEpoch == 0 && newer.stepsPerEpoch > 0) {
    stepsPerEpoch = newer.stepsPerEpoch;
    for (auto& [name, points] : step) points.setEpochsFromSteps(stepsPerEpoch);
    for (auto& [name, points] : epoch) points.setEpochsFromSteps(stepsPerEpoch);
  }
  for (const auto& [name, points] : newer.step) step[name].appendAll(points);
  for (const auto& [name, points] : newer.epoch) epoch[name].appendAll(points);
  events += newer.events;
}

const QVector<double>& SeriesPoints::x(XAxis axis) const {
  switch (axis) {
    case XAxis::Step: return step;
    case XAxis::RelativeTime: return time;
    case XAxis::Epoch:
    case XAxis::WallTime: break;
  }
  if (cacheAxis_ != int(axis) || cache_.size() > size()) {
    cache_.clear();
    cacheAxis_ = int(axis);
  }
  cache_.reserve(size());
  for (int i = cache_.size(); i < size(); ++i)
    cache_.append(axis == XAxis::Epoch ? double(epoch_[i]) : time[i] + wallOffset_);
  return cache_;
}

QString xAxisTitle(XAxis axis) {
  switch (axis) {
    case XAxis::Step: return QObject::tr("step");
    case XAxis::Epoch: return QObject::tr("epoch");
    case XAxis::RelativeTime: return QObject::tr("time since start (s)");
    case XAxis::WallTime: return QObject::tr("wall-clock time");
  }
  return {};
}

QPair<QString, QString> seriesTitleAndUnit(const QString& series) {
  // Unit suffixes of the engine's series names (docs/events.md).
  static const QList<QPair<QString, QString>> units = {
      {QStringLiteral("_per_s"), QStringLiteral("/s")},    {QStringLiteral("_ms"), QStringLiteral("ms")},
      {QStringLiteral("_s"), QStringLiteral("s")},         {QStringLiteral("_bytes"), QStringLiteral("MiB")},
      {QStringLiteral("_pct"), QStringLiteral("%")},       {QStringLiteral("_mib"), QStringLiteral("MiB")},
  };
  // Names whose words read better spelled out.
  if (series == QLatin1String("samples_per_s")) return {QObject::tr("Samples per second"), QObject::tr("samples/s")};
  if (series == QLatin1String("lr")) return {QObject::tr("Learning rate"), QString()};
  QString base = series, unit;
  for (const auto& [suffix, u] : units)
    if (base.endsWith(suffix) && base.size() > suffix.size()) {
      base.chop(suffix.size());
      unit = u;
      break;
    }
  base.replace(QLatin1Char('_'), QLatin1Char(' '));
  if (!base.isEmpty()) base[0] = base[0].toUpper();
  return {base, unit};
}

double seriesScale(const QString& series) {
  return series.endsWith(QLatin1String("_bytes")) ? 1.0 / (1024.0 * 1024.0) : 1.0;
}
