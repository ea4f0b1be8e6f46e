// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QWidget>

#include <nlohmann/json.hpp>

class QLabel;
class QSplitter;
class QTableView;
class LayerProfileModel;
class RooflineChart;

// A stored run's "Layers" tab: where its sampled steps went, layer by layer
// (docs/layers.md), as `trainbench-engine layers` prints it: time, share of
// the step, achieved GFLOP/s and GB/s, share of the roofline and the bound,
// sortable, beside the roofline of its layers (RooflineChart; selecting a row
// rings its point). A run without a profile says why, in the engine's words.
// The store is read on a worker thread.
class LayersPanel : public QWidget {
  Q_OBJECT
 public:
  explicit LayersPanel(QWidget* parent = nullptr);

  void setDatabasePath(const QString& path) { databasePath_ = path; }
  void showRun(qint64 runId);  // (re)reads the run's profile, asynchronously
  qint64 runId() const { return runId_; }
  bool loading() const { return loading_; }
  QString headerText() const;
  LayerProfileModel* model() const { return model_; }
  QTableView* view() const { return view_; }
  RooflineChart* roofline() const { return roofline_; }
  // Selects the row of this layer and phase (the roofline rings its point);
  // false when the table has none.
  bool selectLayer(const QString& layer, const QString& phase);

 signals:
  void profileReady(qint64 runId);

 private:
  void render();

  QString databasePath_;
  qint64 runId_ = 0;
  bool loading_ = false;
  QString error_, absent_;
  QLabel* header_ = nullptr;
  QSplitter* split_ = nullptr;
  QTableView* view_ = nullptr;
  LayerProfileModel* model_ = nullptr;
  RooflineChart* roofline_ = nullptr;
};
