// SPDX-License-Identifier: GPL-3.0-or-later
#include "layers_panel.h"

#include <QLabel>
#include <QPointer>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QThread>
#include <QVBoxLayout>

#include <memory>

#include "engine/metrics/layer_profile.h"
#include "engine/store/run_store.h"
#include "layer_profile_model.h"
#include "layer_table_view.h"
#include "roofline_chart.h"

using json = nlohmann::json;

LayersPanel::LayersPanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  header_ = new QLabel(this);
  header_->setWordWrap(true);
  header_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(header_);
  model_ = new LayerProfileModel(this);
  split_ = new QSplitter(Qt::Horizontal, this);
  view_ = makeLayerTableView(model_, split_);
  auto* proxy = static_cast<QSortFilterProxyModel*>(view_->model());
  view_->setToolTip(tr("Click a header to sort (time: the slowest first after two clicks)"));
  roofline_ = new RooflineChart(split_);
  split_->addWidget(view_);
  split_->addWidget(roofline_);
  split_->setSizes({750, 350});  // the table's columns whole at 1366 px, the chart beside
  layout->addWidget(split_, 1);
  connect(view_->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          [this, proxy](const QModelIndex& current) {
            const QModelIndex row = proxy->mapToSource(current);
            roofline_->highlight(
                model_->data(model_->index(row.row(), LayerProfileModel::Layer)).toString(),
                model_->data(model_->index(row.row(), LayerProfileModel::Phase)).toString());
          });
  render();
}

void LayersPanel::showRun(qint64 runId) {
  runId_ = runId;
  loading_ = true;
  render();
  struct Result {
    json table;
    QString error, absent;
  };
  auto result = std::make_shared<Result>();
  const std::string path = databasePath_.toStdString();
  QThread* worker = QThread::create([path, runId, result] {
    try {
      const tb::RunStore store(path, tb::RunStore::Mode::ReadOnly);
      const auto run = store.get_run(runId);
      if (!run) {
        result->error = tr("No run %1 in %2.").arg(runId).arg(QString::fromStdString(path));
        return;
      }
      const auto steps = store.layer_profile(runId);
      if (steps.empty())
        result->absent = QString::fromStdString(
            tb::layer_profile_absence(run->summary, run->status, run->engine_version));
      else
        result->table = tb::layer_profile_table(
            steps, tb::DevicePeaks::from_environment(run->environment));
    } catch (const std::exception& e) {
      result->error = QString::fromUtf8(e.what());
    }
  });
  QPointer<LayersPanel> self(this);
  connect(worker, &QThread::finished, this, [self, worker, result, runId] {
    worker->deleteLater();
    if (!self || self->runId_ != runId) return;
    self->loading_ = false;
    self->error_ = result->error;
    self->absent_ = result->absent;
    self->model_->setTable(result->table);
    self->roofline_->setTable(result->table);
    self->render();
    emit self->profileReady(runId);
  });
  worker->start();
}

QString LayersPanel::headerText() const { return header_->text(); }

bool LayersPanel::selectLayer(const QString& layer, const QString& phase) {
  auto* proxy = static_cast<QSortFilterProxyModel*>(view_->model());
  for (int r = 0; r < proxy->rowCount(); ++r) {
    if (proxy->index(r, LayerProfileModel::Layer).data().toString() != layer ||
        proxy->index(r, LayerProfileModel::Phase).data().toString() != phase)
      continue;
    view_->setCurrentIndex(proxy->index(r, LayerProfileModel::Layer));
    view_->scrollTo(view_->currentIndex());
    return true;
  }
  return false;
}

void LayersPanel::render() {
  split_->setVisible(model_->rowCount() > 0);
  if (loading_) {
    header_->setText(tr("Reading run %1's per-layer profile…").arg(runId_));
    return;
  }
  if (!error_.isEmpty()) {
    header_->setText(tr("Could not read the per-layer profile: %1").arg(error_));
    return;
  }
  if (!absent_.isEmpty()) {
    header_->setText(tr("Run %1 has no per-layer profile: %2.").arg(runId_).arg(absent_));
    return;
  }
  const json& t = model_->table();
  if (!t.contains("rows")) {
    header_->setText(QString());
    return;
  }
  const json& peaks = t["peaks"];
  auto giga = [](const json& v) {
    return v.is_number() ? QString::number(v.get<double>() / 1e9, 'f', 1) : QStringLiteral("–");
  };
  QStringList steps;
  for (const json& s : t["sampled_steps"]) steps << QString::number(s.get<int64_t>());
  header_->setText(
      tr("Mean of %1 sampled step(s) (%2): %3 ms a step, %4 % of it in named rows. Peaks: %5 GFLOP/s, "
         "%6 GB/s (%7).")
          .arg(steps.size())
          .arg(steps.join(QStringLiteral(", ")))
          .arg(t.value("step_time_ms", 0.0), 0, 'f', 2)
          .arg(t["attributed_share"].is_number() ? t["attributed_share"].get<double>() * 100 : 0.0, 0, 'f', 1)
          .arg(giga(peaks["flops_per_s"]), giga(peaks["bytes_per_s"]),
               QString::fromStdString(peaks.value("source", std::string()))));
}
