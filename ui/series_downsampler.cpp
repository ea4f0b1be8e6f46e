// SPDX-License-Identifier: GPL-3.0-or-later
#include "series_downsampler.h"

#include <algorithm>
#include <cmath>

void SeriesDownsampler::downsample(const QVector<double>& x, const QVector<double>& y, double xMin,
                                   double xMax, int columns, QVector<double>* outX,
                                   QVector<double>* outY) {
  outX->clear();
  outY->clear();
  const int n = std::min(x.size(), y.size());
  if (n == 0) return;
  columns = std::max(columns, 1);
  // First index >= xMin and first index > xMax, widened by one each side.
  int begin = int(std::lower_bound(x.begin(), x.begin() + n, xMin) - x.begin());
  int end = int(std::upper_bound(x.begin(), x.begin() + n, xMax) - x.begin());
  begin = std::max(0, begin - 1);
  end = std::min(n, end + 1);
  if (begin >= end) return;

  auto keep = [&](int i) {
    if (std::isnan(y[i])) return;
    outX->append(x[i]);
    outY->append(y[i]);
  };

  if (end - begin <= 4 * columns || !(xMax > xMin)) {
    outX->reserve(end - begin);
    outY->reserve(end - begin);
    for (int i = begin; i < end; ++i) keep(i);
    return;
  }

  outX->reserve(4 * columns + 4);
  outY->reserve(4 * columns + 4);
  const double scale = columns / (xMax - xMin);
  auto columnOf = [&](double xv) {
    const double c = std::floor((xv - xMin) * scale);
    return c < 0 ? -1 : (c >= columns ? columns : int(c));  // -1 / columns: outside points
  };

  int i = begin;
  while (i < end) {
    const int col = columnOf(x[i]);
    int first = -1, last = -1, lo = -1, hi = -1;
    int j = i;
    for (; j < end && columnOf(x[j]) == col; ++j) {
      if (std::isnan(y[j])) continue;
      if (first < 0) first = j;
      last = j;
      if (lo < 0 || y[j] < y[lo]) lo = j;
      if (hi < 0 || y[j] > y[hi]) hi = j;
    }
    if (first >= 0) {
      int picks[4] = {first, std::min(lo, hi), std::max(lo, hi), last};
      int previous = -1;
      for (int p : picks) {
        if (p != previous) keep(p);
        previous = p;
      }
    }
    i = j;
  }
}

QVector<int> SeriesDownsampler::jointIndices(const QVector<double>& x, const QList<const QVector<double>*>& ys,
                                             double xMin, double xMax, int columns) {
  QVector<int> out;
  int n = x.size();
  for (const QVector<double>* y : ys) n = std::min(n, int(y->size()));
  if (n == 0) return out;
  columns = std::max(columns, 1);
  int begin = int(std::lower_bound(x.begin(), x.begin() + n, xMin) - x.begin());
  int end = int(std::upper_bound(x.begin(), x.begin() + n, xMax) - x.begin());
  begin = std::max(0, begin - 1);
  end = std::min(n, end + 1);
  if (begin >= end) return out;
  if (end - begin <= 4 * columns || !(xMax > xMin)) {
    for (int i = begin; i < end; ++i) out.append(i);
    return out;
  }
  const double scale = columns / (xMax - xMin);
  auto columnOf = [&](double xv) {
    const double c = std::floor((xv - xMin) * scale);
    return c < 0 ? -1 : (c >= columns ? columns : int(c));
  };
  QVector<int> picks;
  int i = begin;
  while (i < end) {
    const int col = columnOf(x[i]);
    int j = i;
    while (j < end && columnOf(x[j]) == col) ++j;
    picks = {i, j - 1};
    for (const QVector<double>* y : ys) {
      int lo = -1, hi = -1;
      for (int k = i; k < j; ++k) {
        if (std::isnan((*y)[k])) continue;
        if (lo < 0 || (*y)[k] < (*y)[lo]) lo = k;
        if (hi < 0 || (*y)[k] > (*y)[hi]) hi = k;
      }
      if (lo >= 0) picks << lo << hi;
    }
    std::sort(picks.begin(), picks.end());
    picks.erase(std::unique(picks.begin(), picks.end()), picks.end());
    out += picks;
    i = j;
  }
  return out;
}
