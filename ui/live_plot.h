// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QColor>
#include <cmath>
#include <QList>
#include <QPointer>
#include <QString>
#include <QVector>
#include <QWidget>

#include "series_data.h"

class QCustomPlot;
class QCPGraph;
class QCPItemRect;
class QCPItemStraightLine;
class QCPItemText;
class QTimer;

// One plot of one or more metric curves, fed from SeriesPoints that its owner
// keeps alive and appends to. Draws every curve downsampled to the plot's pixel
// width (spikes kept), optionally EMA-smoothed with the raw curve drawn faintly
// behind, optionally stacked (for the step-time breakdown). The x axis can be
// step, epoch, relative or wall time; the y axis linear or logarithmic.
// Zoom with the wheel, pan by dragging, double-click to reset; a small hover
// tracker beside the cursor shows every curve's value at the mouse's x. The
// legend sits under the axes (never over data); clicking an entry hides or
// shows its curve.
class LivePlot : public QWidget {
  Q_OBJECT
 public:
  explicit LivePlot(const QString& title, const QString& yLabel, QWidget* parent = nullptr);

  QString title() const { return title_; }
  // points must outlive the plot (or removeCurves() must be called first).
  void addCurve(const QString& label, const SeriesPoints* points, double yScale = 1.0);
  void removeCurves();
  // A faint band from low to high behind curve `index` (the min-max of
  // repeated runs around their mean); both must outlive the plot.
  void setBand(int index, const SeriesPoints* low, const SeriesPoints* high);
  int curveCount() const { return curves_.size(); }
  QStringList curveLabels() const;
  // What the tracker says where curve `index` has no value (NaN): why it was
  // not measured, instead of a dash.
  void setMissingText(int index, const QString& text);
  // Curve `index` filled with hatching (a stacked layer that is not a
  // measured part of its own, e.g. a replayed CUDA graph's whole step).
  void setCurveHatched(int index, bool hatched);
  // Stacked plots: the total the layers should add up to (the step time),
  // drawn as a line over them. Steps whose layers add up to more are marked,
  // and the tracker says so with `excessText` (why they can).
  void setStackTotal(const SeriesPoints* total, const QString& label, const QString& excessText);
  // Steps (x on the step axis) where the visible layers exceed the total.
  QVector<double> excessSteps() const;

  void setStacked(bool stacked);
  // y axis from zero (amounts such as memory, times, throughput), so noise
  // does not look like a jump; otherwise the range is padded.
  void setZeroBased(bool on);
  // Curves can be hidden (click their legend entry); hidden ones are left out
  // of the y range, the tracker and stacked sums.
  void setCurveVisible(int index, bool visible);
  bool curveVisible(int index) const;
  void setLegendVisible(bool on);
  bool legendVisible() const;
  // Help shown as the tooltip of the title (never over the data).
  void setHelpText(const QString& text);
  QString helpText() const { return help_; }
  // "12.3 ms", "5,210 samples/s", "84.21 %": value with the plot's unit.
  QString formatValue(double v) const;
  void setXAxis(XAxis axis);
  XAxis xAxis() const { return xAxis_; }
  void setSmoothing(double alpha);  // 0 = off, up to 0.999
  double smoothing() const { return alpha_; }
  void setLogScale(bool on);
  bool logScale() const { return log_; }
  // The run's steps: on the step axis the x range covers at least these, so
  // a series of one sampled point sits at its step within the run, not alone
  // on an axis of its own.
  void setStepDomain(double firstStep, double lastStep);
  // Steps up to lastWarmupStep are warm-up (autotuning, allocations): shaded
  // and labelled, and left out of the y range unless fitWarmup is on; a
  // warm-up value above the range is marked at the top with its value.
  void setWarmupSteps(double lastWarmupStep);
  double warmupSteps() const { return warmupStep_; }
  void setFitWarmup(bool on);
  bool fitWarmup() const { return fitWarmup_; }
  // The warm-up mark's text ("" when none is shown; tests).
  QString warmupMarkText() const;

  // Re-reads the curves' points (new data) and redraws; cheap enough to call a
  // few times a second on million-point series.
  void refresh();
  // Back to showing all data, following new points.
  void resetView();
  bool followsData() const { return follow_; }

  // Number of points currently handed to QCustomPlot over all graphs (tests).
  int displayedPointCount() const;
  // Text the hover tracker shows for data x (tests use it too).
  QString trackerText(double x) const;
  bool trackerVisible() const;
  // A redraw waits until the plot is seen (a hidden tab, scrolled out of view).
  bool redrawPending() const { return redrawPending_; }
  // How long the plot's last drawing took, in ms (QCustomPlot's replot: the
  // curves rasterised into its buffers; the redraw itself only queues it).
  double lastDrawMs() const;

  bool exportImage(const QString& path, int width = 1200, int height = 700, QString* error = nullptr);
  bool exportCsv(const QString& path, QString* error = nullptr) const;
  QCustomPlot* customPlot() const { return plot_; }

 signals:
  void viewChanged();

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;
  void changeEvent(QEvent* event) override;
  void showEvent(QShowEvent* event) override;

 private:
  struct Curve {
    QString label;
    const SeriesPoints* points = nullptr;
    double yScale = 1.0;
    QColor color;
    QCPGraph* raw = nullptr;       // faint when smoothing, else the curve itself
    QCPGraph* smooth = nullptr;
    QVector<double> ema;           // smoothed values, same length as points->value
    double emaState = 0, emaWeight = 0;
    double emaAlpha = -1;
    bool visible = true;
    QString missingText;
    bool hatched = false;
    const SeriesPoints *bandLow = nullptr, *bandHigh = nullptr;
    QCPGraph *bandLowGraph = nullptr, *bandHighGraph = nullptr;
  };
  void updateEma(Curve& c);
  QVector<double> displayValues(const Curve& c, int n) const;  // scaled, smoothed if on
  void rebuildGraphs();
  void redraw();  // draw() when the plot can be seen, else later, when it can
  void draw();
  void applyPalette();
  void updateTracker(double pixelX, double pixelY);
  void showContextMenu(const QPoint& pos);
  void updateLegendItem(int index);
  bool dataRange(double* xMin, double* xMax) const;
  double warmupX(const SeriesPoints& points) const;  // x of the last warm-up point, -inf if none
  void placeWarmupMark(double clippedValue, double clippedX);

  QString title_, yLabel_;
  QCustomPlot* plot_ = nullptr;
  QList<Curve> curves_;
  XAxis xAxis_ = XAxis::Step;
  double alpha_ = 0;
  bool log_ = false, stacked_ = false, zeroBased_ = false, follow_ = true, redrawing_ = false,
       redrawPending_ = false;
  QString help_;
  double domainFirst_ = NAN, domainLast_ = NAN, warmupStep_ = 0;
  bool fitWarmup_ = false;
  const SeriesPoints* total_ = nullptr;
  QString totalLabel_, excessText_;
  QCPGraph *totalGraph_ = nullptr, *excessGraph_ = nullptr;
  QVector<double> excessSteps_;
  QCPItemRect* warmupRect_ = nullptr;
  QCPItemText* warmupLabel_ = nullptr;
  QCPItemStraightLine* trackerLine_ = nullptr;
  QCPItemText* trackerLabel_ = nullptr;
  QTimer* rangeTimer_ = nullptr;
};
