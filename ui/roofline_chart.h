// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QVector>
#include <QWidget>

#include <nlohmann/json.hpp>

class QCustomPlot;
class QCPGraph;
class QLabel;

// The roofline of a run's per-layer profile (docs/layers.md): every layer's
// forward and backward as a point, arithmetic intensity (counted FLOPs per
// counted byte, log x) against the FLOP/s it achieved (log y), under the
// device's two roofs from the run's stored peaks: the memory bandwidth's
// slope and the FMA rate's flat roof, meeting at the ridge. Hovering a point
// names the layer, its phase, its share of the step, its figures and its
// bound. Reads layer_profile_table's object; draws nothing on its own thread
// but the GUI's (the table is loaded off it by LayersPanel).
class RooflineChart : public QWidget {
  Q_OBJECT
 public:
  struct Point {
    QString layer, kind, phase, bound;
    double intensity = 0;   // FLOPs a byte
    double flopsPerS = 0;   // achieved
    double bytesPerS = 0;   // achieved
    double share = 0;       // of the step
    double timeMs = 0;
    double rooflinePct = 0;  // NaN without peaks
  };

  explicit RooflineChart(QWidget* parent = nullptr);

  // table: layer_profile_table's object (anything else clears the chart).
  void setTable(const nlohmann::json& table);
  const QVector<Point>& points() const { return points_; }
  // The roofs from the run's peaks; NaN when the run has none.
  double computeRoof() const { return computeRoof_; }  // FLOP/s
  double memoryRoof() const { return memoryRoof_; }    // bytes/s
  // The attainable FLOP/s at an intensity: min(compute roof, intensity x bandwidth).
  double attainable(double intensity) const;
  QString caption() const;
  // The point under a pixel of the plot (within a few pixels), -1 if none.
  int pointAt(const QPointF& pixel) const;
  QPointF pixelOf(int point) const;
  QString pointToolTip(int point) const;
  // Rings the point of this layer and phase (the table's selection); empty: none.
  void highlight(const QString& layer, const QString& phase);
  QCustomPlot* plot() const { return plot_; }

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;
  void changeEvent(QEvent* event) override;

 private:
  void refresh();

  nlohmann::json table_ = nlohmann::json::object();
  QVector<Point> points_;
  int notDrawn_ = 0;  // layer rows without counted work (no intensity or no FLOPs)
  double computeRoof_, memoryRoof_;
  QString peaksDtype_, peaksDevice_, peaksSource_;
  QCustomPlot* plot_;
  QCPGraph* highlight_ = nullptr;
  QLabel* caption_;
};
