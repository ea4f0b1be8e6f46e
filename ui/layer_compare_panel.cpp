// SPDX-License-Identifier: GPL-3.0-or-later
#include "layer_compare_panel.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QPointer>
#include <QPushButton>
#include <QTableView>
#include <QThread>
#include <QVBoxLayout>

#include <memory>
#include <tuple>

#include "engine/metrics/layer_profile.h"
#include "engine/store/run_store.h"
#include "layer_compare_model.h"
#include "layer_table_view.h"
#include "plot_export_dialog.h"

LayerComparePanel::LayerComparePanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  bar->addWidget(new QLabel(tr("A:"), this));
  pickA_ = new QComboBox(this);
  pickA_->setToolTip(tr("The run to compare against (the ratio is B's time over A's)"));
  bar->addWidget(pickA_, 1);
  bar->addWidget(new QLabel(tr("B:"), this));
  pickB_ = new QComboBox(this);
  pickB_->setToolTip(tr("The run whose layers are measured against A's, e.g. A with one trick more"));
  bar->addWidget(pickB_, 1);
  auto* csv = new QPushButton(tr("CSV…"), this);
  csv->setToolTip(tr("Write the layer comparison as CSV"));
  bar->addWidget(csv);
  layout->addLayout(bar);
  connect(csv, &QPushButton::clicked, this,
          [this] { PlotExportDialog::exportTableCsv(this, model_, QStringLiteral("layer-comparison")); });
  header_ = new QLabel(this);
  header_->setWordWrap(true);
  header_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(header_);
  model_ = new LayerCompareModel(this);
  view_ = makeLayerTableView(model_, this);
  view_->setToolTip(tr("Sort by B / A: the layers B made faster first"));
  layout->addWidget(view_, 1);
  auto pick = [this] {
    if (pickA_->count() > 0) compare(pickA_->currentData().toLongLong(), pickB_->currentData().toLongLong());
  };
  connect(pickA_, &QComboBox::currentIndexChanged, this, pick);
  connect(pickB_, &QComboBox::currentIndexChanged, this, pick);
}

QString LayerComparePanel::runLabel(qint64 id) const {
  for (const RunSummary& r : runs_)
    if (r.id == id) return QStringLiteral("%1 (#%2)").arg(r.name).arg(r.id);
  return QStringLiteral("#%1").arg(id);
}

void LayerComparePanel::setRuns(const QString& databasePath, const QList<RunSummary>& runs) {
  databasePath_ = databasePath;
  runs_ = runs;
  {
    const QSignalBlocker blockA(pickA_), blockB(pickB_);
    pickA_->clear();
    pickB_->clear();
    for (const RunSummary& r : runs) {
      pickA_->addItem(runLabel(r.id), r.id);
      pickB_->addItem(runLabel(r.id), r.id);
    }
    if (runs.size() > 1) pickB_->setCurrentIndex(1);
  }
  model_->setComparison({}, {}, {});
  if (runs.size() < 2) {
    runA_ = runB_ = 0;
    header_->setText(tr("Compare two runs to see their layers side by side."));
    return;
  }
  compare(runs[0].id, runs[1].id);
}

void LayerComparePanel::compare(qint64 runA, qint64 runB) {
  runA_ = runA;
  runB_ = runB;
  loading_ = true;
  header_->setText(tr("Reading the per-layer profiles of %1 and %2…").arg(runLabel(runA), runLabel(runB)));
  struct Result {
    tb::LayerProfileStep a, b;
    size_t stepsA = 0, stepsB = 0;
    QString labelA, labelB, error;
  };
  auto result = std::make_shared<Result>();
  result->labelA = runLabel(runA);
  result->labelB = runLabel(runB);
  const std::string path = databasePath_.toStdString();
  QThread* worker = QThread::create([path, runA, runB, result] {
    try {
      const tb::RunStore store(path, tb::RunStore::Mode::ReadOnly);
      QStringList absent;
      for (const auto& [id, label, mean, count] :
           {std::tuple{runA, &result->labelA, &result->a, &result->stepsA},
            std::tuple{runB, &result->labelB, &result->b, &result->stepsB}}) {
        const auto run = store.get_run(id);
        if (!run) {
          absent << tr("no run %1 in %2").arg(id).arg(QString::fromStdString(path));
          continue;
        }
        *label = QStringLiteral("%1 (#%2)").arg(QString::fromStdString(run->name)).arg(id);
        const auto steps = store.layer_profile(id);
        if (steps.empty())
          absent << tr("%1 has no per-layer profile: %2")
                        .arg(*label, QString::fromStdString(
                                        tb::layer_profile_absence(run->summary, run->status, run->engine_version)));
        *mean = tb::mean_profile(steps);
        *count = steps.size();
      }
      result->error = absent.join(QStringLiteral("; "));
    } catch (const std::exception& e) {
      result->error = QString::fromUtf8(e.what());
    }
  });
  QPointer<LayerComparePanel> self(this);
  connect(worker, &QThread::finished, this, [self, worker, result, runA, runB] {
    worker->deleteLater();
    if (!self || self->runA_ != runA || self->runB_ != runB) return;
    self->loading_ = false;
    const QString &labelA = result->labelA, &labelB = result->labelB;
    if (!result->error.isEmpty()) {
      self->model_->setComparison({}, labelA, labelB);
      self->header_->setText(tr("No layer comparison: %1.").arg(result->error));
    } else {
      self->model_->setComparison(tb::compare_layer_profiles(result->a, result->b), labelA, labelB);
      int counts[5] = {};
      for (int r = 0; r < self->model_->rowCount(); ++r) ++counts[int(self->model_->comparison(r).change())];
      self->header_->setText(
          tr("A: %1, %2 ms a step (mean of %3 sampled). B: %4, %5 ms (%6): B takes %7× A's step. "
             "Rows: %8 faster, %9 slower, %10 about the same, %11 only in A, %12 only in B.")
              .arg(labelA)
              .arg(result->a.step_time_ms, 0, 'f', 2)
              .arg(qulonglong(result->stepsA))
              .arg(labelB)
              .arg(result->b.step_time_ms, 0, 'f', 2)
              .arg(qulonglong(result->stepsB))
              .arg(result->b.step_time_ms / result->a.step_time_ms, 0, 'f', 2)
              .arg(counts[int(tb::LayerChange::Faster)])
              .arg(counts[int(tb::LayerChange::Slower)])
              .arg(counts[int(tb::LayerChange::Same)])
              .arg(counts[int(tb::LayerChange::OnlyA)])
              .arg(counts[int(tb::LayerChange::OnlyB)]));
    }
    emit self->comparisonReady(runA, runB);
  });
  worker->start();
}

QString LayerComparePanel::headerText() const { return header_->text(); }
