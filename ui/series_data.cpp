// SPDX-License-Identifier: GPL-3.0-or-later
#include "series_data.h"

#include <QCoreApplication>
#include <QObject>
#include <algorithm>
#include <cmath>

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

namespace {
// The workbench's words for the engine's series: title, unit shown and the
// factor from the stored unit (docs/events.md declares the stored names and
// units; tests/ui/test_gpu_run_plots.cpp checks that these agree with it).
struct SeriesWords {
  const char* name;
  const char* title;
  const char* unit;
  double scale;
};
constexpr double kMiB = 1.0 / (1024.0 * 1024.0);
const SeriesWords kSeriesWords[] = {
    {"step_time_ms", QT_TRANSLATE_NOOP("Series", "Step time"), "ms", 1},
    {"samples_per_s", QT_TRANSLATE_NOOP("Series", "Samples per second"), "samples/s", 1},
    {"lr", QT_TRANSLATE_NOOP("Series", "Learning rate"), "", 1},
    {"h2d_ms", QT_TRANSLATE_NOOP("Series", "Host-to-device copy time"), "ms", 1},
    {"h2d_bytes", QT_TRANSLATE_NOOP("Series", "Host-to-device copy per step"), "MiB", kMiB},
    {"gpu_mem_allocated_bytes", QT_TRANSLATE_NOOP("Series", "GPU memory allocated"), "MiB", kMiB},
    {"gpu_mem_reserved_bytes", QT_TRANSLATE_NOOP("Series", "GPU memory reserved"), "MiB", kMiB},
    {"gpu_mem_peak_bytes", QT_TRANSLATE_NOOP("Series", "GPU memory peak"), "MiB", kMiB},
    {"gpu_mem_used_bytes", QT_TRANSLATE_NOOP("Series", "GPU memory used (device)"), "MiB", kMiB},
    {"host_rss_bytes", QT_TRANSLATE_NOOP("Series", "Host resident memory (RSS)"), "MiB", kMiB},
    {"gpu_mem_total_bytes", QT_TRANSLATE_NOOP("Series", "GPU memory (device total)"), "MiB", kMiB},
    {"gpu_util_pct", QT_TRANSLATE_NOOP("Series", "GPU utilization (NVML)"), "%", 1},
    {"gpu_mem_util_pct", QT_TRANSLATE_NOOP("Series", "GPU memory-bus utilization (NVML)"), "%", 1},
    {"gpu_power_w", QT_TRANSLATE_NOOP("Series", "GPU power"), "W", 1},
    {"gpu_sm_clock_mhz", QT_TRANSLATE_NOOP("Series", "GPU SM clock"), "MHz", 1},
    {"gpu_temp_c", QT_TRANSLATE_NOOP("Series", "GPU temperature"), "°C", 1},
    {"kernels_per_step", QT_TRANSLATE_NOOP("Series", "Kernels per step"), "kernels", 1},
    {"memsets_per_step", QT_TRANSLATE_NOOP("Series", "Memsets per step"), "memsets", 1},
    {"kernel_time_ms", QT_TRANSLATE_NOOP("Series", "Kernel time per step"), "ms", 1},
    {"cpu_threads_busy", QT_TRANSLATE_NOOP("Series", "CPU threads busy"), "threads", 1},
    {"tensor_core_share", QT_TRANSLATE_NOOP("Series", "Tensor Core share of kernel time"), "%", 100},
    {"tensor_pipe_active_pct", QT_TRANSLATE_NOOP("Series", "Tensor pipe active"), "%", 1},
};
const SeriesWords* wordsFor(const QString& series) {
  for (const SeriesWords& w : kSeriesWords)
    if (series == QLatin1String(w.name)) return &w;
  return nullptr;
}
}  // namespace

QPair<QString, QString> seriesTitleAndUnit(const QString& series) {
  if (const SeriesWords* w = wordsFor(series))
    return {QCoreApplication::translate("Series", w->title), QString::fromUtf8(w->unit)};
  // Unit suffixes of the engine's series names (docs/events.md).
  static const QList<QPair<QString, QString>> units = {
      {QStringLiteral("_per_s"), QStringLiteral("/s")},    {QStringLiteral("_ms"), QStringLiteral("ms")},
      {QStringLiteral("_s"), QStringLiteral("s")},         {QStringLiteral("_bytes"), QStringLiteral("MiB")},
      {QStringLiteral("_pct"), QStringLiteral("%")},       {QStringLiteral("_mib"), QStringLiteral("MiB")},
      {QStringLiteral("_w"), QStringLiteral("W")},         {QStringLiteral("_mhz"), QStringLiteral("MHz")},
  };
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
  if (const SeriesWords* w = wordsFor(series)) return w->scale;
  return series.endsWith(QLatin1String("_bytes")) ? kMiB : 1.0;
}

double lastWarmupStep(const SeriesPoints& stepTime) {
  // The leading steps, within the first quarter of the run and at most 10 (the
  // advisor's steady window leaves out the same), that took more than 1.5x the
  // median of the steps after that window.
  const int window = std::min(10, stepTime.size() / 4);
  if (window < 1) return 0;
  QVector<double> rest;
  for (int i = window; i < stepTime.size(); ++i)
    if (std::isfinite(stepTime.value[i])) rest << stepTime.value[i];
  if (rest.isEmpty()) return 0;
  std::nth_element(rest.begin(), rest.begin() + rest.size() / 2, rest.end());
  const double median = rest[rest.size() / 2];
  double last = 0;
  for (int i = 0; i < window && stepTime.value[i] > 1.5 * median; ++i) last = stepTime.step[i];
  return last;
}
