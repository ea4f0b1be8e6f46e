// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <map>
#include <QPair>
#include <QString>
#include <QStringList>
#include <QVector>

// What a plot's x axis shows.
enum class XAxis { Step, Epoch, RelativeTime, WallTime };

// One metric series of one run, with every x the plots can show.
// Times: RelativeTime in seconds since the run started, WallTime in seconds
// since the Unix epoch. To keep long runs small (about 28 bytes a point), only
// step, time and value are stored as doubles, the epoch as a float, and wall
// time as one offset; epoch and wall-time x values are built on demand into a
// cache (one axis at a time) that grows with the series.
struct SeriesPoints {
  QVector<double> step, time, value;

  int size() const { return value.size(); }
  bool isEmpty() const { return value.isEmpty(); }
  void reserve(int n);
  void append(double stepX, double epochX, double timeX, double wallX, double y);
  const QVector<double>& x(XAxis axis) const;
  double wallOffset() const { return wallOffset_; }
  // Appends other's points (a follower's newer points of the same series).
  void appendAll(const SeriesPoints& other);
  // Epoch x of every point from its step, once steps per epoch became known
  // (a followed run learns it from its first epoch point).
  void setEpochsFromSteps(int stepsPerEpoch);

 private:
  QVector<float> epoch_;
  double wallOffset_ = 0;  // wall = time + wallOffset_
  mutable QVector<double> cache_;
  mutable int cacheAxis_ = -1;
};

// All series of one run: per-step metrics and per-epoch metrics, by name.
// std::map (not the implicitly shared QMap): values stay at the same address
// while other keys are added, so a plot may keep pointers to them.
struct RunSeries {
  qint64 runId = 0;
  QString runName;
  double startWallSeconds = 0;  // Unix time of step 0
  int stepsPerEpoch = 0;        // 0 when unknown
  std::map<QString, SeriesPoints> step;
  std::map<QString, SeriesPoints> epoch;
  QStringList events;  // "[level] message" lines the engine stored (saved runs)

  double epochOfStep(double stepIndex, double fallbackEpoch) const {
    return stepsPerEpoch > 0 ? stepIndex / stepsPerEpoch : fallbackEpoch;
  }
  // Adds a follower's newer points, series and events (see RunSeriesReader).
  void appendAll(const RunSeries& newer);
};

// Text for axis titles.
QString xAxisTitle(XAxis axis);

// A series name as a plot title and unit: the workbench's words for the
// engine's known series ("gpu_power_w" -> {"GPU power", "W"}), else from the
// unit suffixes of the engine's names (docs/events.md): "data_wait_ms" ->
// {"Data wait", "ms"}, "my_metric_bytes" -> {"My metric", "MiB"}.
QPair<QString, QString> seriesTitleAndUnit(const QString& series);
// The factor from a series' stored unit to the unit above (bytes -> MiB,
// a fraction -> %).
double seriesScale(const QString& series);
// The last warm-up step of a run from its step times (0: none): the leading
// steps, among the first quarter and at most 10, slower than 1.5x the median
// of the rest (cuDNN autotuning, first allocations, graph capture).
double lastWarmupStep(const SeriesPoints& stepTime);
