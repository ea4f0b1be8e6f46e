// SPDX-License-Identifier: GPL-3.0-or-later
#include "series_data.h"

#include <QObject>

void SeriesPoints::reserve(int n) {
  step.reserve(n);
  epoch.reserve(n);
  time.reserve(n);
  wall.reserve(n);
  value.reserve(n);
}

void SeriesPoints::append(double stepX, double epochX, double timeX, double wallX, double y) {
  step.append(stepX);
  epoch.append(epochX);
  time.append(timeX);
  wall.append(wallX);
  value.append(y);
}

const QVector<double>& SeriesPoints::x(XAxis axis) const {
  switch (axis) {
    case XAxis::Step: return step;
    case XAxis::Epoch: return epoch;
    case XAxis::RelativeTime: return time;
    case XAxis::WallTime: return wall;
  }
  return step;
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
