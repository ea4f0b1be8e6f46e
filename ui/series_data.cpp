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
