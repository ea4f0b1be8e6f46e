// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QList>
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
  // The same choice made jointly for several series over one x: the indices
  // of, per column, the first and last point and every series' lowest and
  // highest, ascending. Stacked layers drawn at these indices keep each
  // layer's own spikes in that layer (and share x, so fills line up).
  static QVector<int> jointIndices(const QVector<double>& x, const QList<const QVector<double>*>& ys,
                                   double xMin, double xMax, int columns);
};
