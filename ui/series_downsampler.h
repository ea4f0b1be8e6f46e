// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QVector>

// Reduces a long series to what a plot of a given pixel width can show,
// without hiding spikes: the points inside [xMin, xMax] are split into
// `columns` equal x intervals and each interval keeps its first, lowest,
// highest and last point (in x order). Intervals with few points keep them
// all. One point either side of the range is kept so lines reach the edges.
// x must be ascending. NaN values are dropped.
class SeriesDownsampler {
 public:
  static void downsample(const QVector<double>& x, const QVector<double>& y, double xMin,
                         double xMax, int columns, QVector<double>* outX, QVector<double>* outY);
};
