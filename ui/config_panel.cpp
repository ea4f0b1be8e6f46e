// SPDX-License-Identifier: GPL-3.0-or-later
#include "config_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QJsonArray>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>

#include "run_config.h"

namespace {
QSpinBox* spin(QWidget* parent, int lo, int hi, const QString& tip, const QString& special = {}) {
  auto* s = new QSpinBox(parent);
  s->setRange(lo, hi);
  s->setToolTip(tip);
  if (!special.isEmpty()) s->setSpecialValueText(special);
  return s;
}
QDoubleSpinBox* dspin(QWidget* parent, double lo, double hi, int decimals, double step, const QString& tip) {
  auto* s = new QDoubleSpinBox(parent);
  s->setRange(lo, hi);
  s->setDecimals(decimals);
  s->setSingleStep(step);
  s->setToolTip(tip);
  return s;
}
QComboBox* combo(QWidget* parent, const QList<QPair<QString, QString>>& items, const QString& tip) {
  auto* c = new QComboBox(parent);
  for (const auto& [value, label] : items) c->addItem(label, value);
  c->setToolTip(tip);
  return c;
}
void selectData(QComboBox* c, const QString& value) {
  const int i = c->findData(value);
  if (i >= 0) c->setCurrentIndex(i);
}
}  // namespace

ConfigPanel::ConfigPanel(QWidget* parent) : QWidget(parent) {
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(0, 0, 0, 0);

  auto* runBox = new QGroupBox(tr("Run"), this);
  auto* runForm = new QFormLayout(runBox);
  name_ = new QLineEdit(runBox);
  name_->setToolTip(tr("The name the run gets in the history."));
  runForm->addRow(tr("Name:"), name_);
  model_ = combo(runBox,
                 {{"fmnist-cnn", tr("Small CNN for Fashion-MNIST")},
                  {"resnet18-cifar", tr("ResNet-18 (CIFAR variant)")},
                  {"resnet9", tr("ResNet-9")},
                  {"mlp", tr("Multi-layer perceptron")}},
                 tr("The network to train."));
  runForm->addRow(tr("Model:"), model_);
  device_ = combo(runBox, {{"auto", tr("Automatic (first GPU, else CPU)")}, {"cpu", tr("CPU")}},
                  tr("Where the engine trains. GPUs appear here when the engine finds them."));
  runForm->addRow(tr("Device:"), device_);
  outer->addWidget(runBox);

  auto* dataBox = new QGroupBox(tr("Data"), this);
  auto* dataForm = new QFormLayout(dataBox);
  dataset_ = combo(dataBox,
                   {{"fashion-mnist", tr("Fashion-MNIST")},
                    {"cifar10", tr("CIFAR-10 (binary folder)")},
                    {"synthetic", tr("Synthetic images")}},
                   tr("Fashion-MNIST is installed on every machine; CIFAR-10 needs a folder with "
                      "data_batch_N.bin files; synthetic images measure throughput without a data set."));
  dataForm->addRow(tr("Data set:"), dataset_);
  dataDirRow_ = new QWidget(dataBox);
  auto* dirLine = new QHBoxLayout(dataDirRow_);
  dirLine->setContentsMargins(0, 0, 0, 0);
  dataDir_ = new QLineEdit(dataDirRow_);
  dataDir_->setToolTip(tr("Folder with the data set's files."));
  auto* browse = new QPushButton(tr("Browse…"), dataDirRow_);
  dirLine->addWidget(dataDir_, 1);
  dirLine->addWidget(browse);
  dataForm->addRow(tr("Folder:"), dataDirRow_);
  syntheticRow_ = new QWidget(dataBox);
  auto* shapeLine = new QHBoxLayout(syntheticRow_);
  shapeLine->setContentsMargins(0, 0, 0, 0);
  synthC_ = spin(syntheticRow_, 1, 64, tr("Channels"));
  synthH_ = spin(syntheticRow_, 1, 1024, tr("Height"));
  synthW_ = spin(syntheticRow_, 1, 1024, tr("Width"));
  synthSize_ = spin(syntheticRow_, 1, 10000000, tr("Number of synthetic samples"));
  shapeLine->addWidget(new QLabel(tr("C×H×W"), syntheticRow_));
  shapeLine->addWidget(synthC_);
  shapeLine->addWidget(synthH_);
  shapeLine->addWidget(synthW_);
  shapeLine->addWidget(new QLabel(tr("samples"), syntheticRow_));
  shapeLine->addWidget(synthSize_);
  dataForm->addRow(tr("Shape:"), syntheticRow_);
  trainLimit_ = spin(dataBox, 0, 100000000, tr("Use only the first N training samples (0 = all)."), tr("all"));
  testLimit_ = spin(dataBox, 0, 100000000, tr("Use only the first N test samples (0 = all)."), tr("all"));
  dataForm->addRow(tr("Training samples:"), trainLimit_);
  dataForm->addRow(tr("Test samples:"), testLimit_);
  flip_ = new QCheckBox(tr("Random horizontal flip"), dataBox);
  dataForm->addRow(QString(), flip_);
  outer->addWidget(dataBox);

  auto* trainBox = new QGroupBox(tr("Training"), this);
  auto* trainForm = new QFormLayout(trainBox);
  epochs_ = spin(trainBox, 1, 100000, tr("Passes over the training set."));
  maxSteps_ = spin(trainBox, 0, 100000000, tr("Stop after this many steps (0 = run the epochs)."), tr("use epochs"));
  batch_ = spin(trainBox, 1, 65536,
                tr("Samples per step. Larger batches use the device better (samples/s) and need more memory; "
                   "see 'Scale LR with batch' among the optimizer tricks."));
  trainForm->addRow(tr("Epochs:"), epochs_);
  trainForm->addRow(tr("Max steps:"), maxSteps_);
  trainForm->addRow(tr("Batch size:"), batch_);
  optimizer_ = combo(trainBox,
                     {{"sgd", tr("SGD with momentum")},
                      {"adamw", tr("AdamW")},
                      {"rmsprop", tr("RMSProp")},
                      {"lars", tr("LARS (large batch)")},
                      {"lamb", tr("LAMB (large batch)")}},
                     tr("LARS and LAMB scale each layer's update by a trust ratio, which keeps very large "
                        "batches stable."));
  trainForm->addRow(tr("Optimizer:"), optimizer_);
  lr_ = dspin(trainBox, 0, 10, 6, 0.001, tr("Learning rate (before scaling and warm-up)."));
  momentum_ = dspin(trainBox, 0, 0.999, 3, 0.01, tr("Momentum (SGD, LARS)."));
  nesterov_ = new QCheckBox(tr("Nesterov"), trainBox);
  auto* momentumRow = new QHBoxLayout;
  momentumRow->addWidget(momentum_, 1);
  momentumRow->addWidget(nesterov_);
  weightDecay_ = dspin(trainBox, 0, 1, 6, 0.0001, tr("Weight decay."));
  labelSmoothing_ = dspin(trainBox, 0, 0.5, 3, 0.01, tr("Label smoothing of the cross-entropy loss."));
  trainForm->addRow(tr("Learning rate:"), lr_);
  trainForm->addRow(tr("Momentum:"), momentumRow);
  trainForm->addRow(tr("Weight decay:"), weightDecay_);
  trainForm->addRow(tr("Label smoothing:"), labelSmoothing_);
  schedule_ = combo(trainBox,
                    {{"constant", tr("Constant")},
                     {"step", tr("Step decay")},
                     {"cosine", tr("Cosine")},
                     {"onecycle", tr("One-cycle")}},
                    tr("How the learning rate changes over the run."));
  trainForm->addRow(tr("Schedule:"), schedule_);
  stepSize_ = spin(trainBox, 1, 100000000, tr("Step decay: steps between decays."));
  gamma_ = dspin(trainBox, 0, 1, 4, 0.05, tr("Step decay: factor per decay."));
  minLr_ = dspin(trainBox, 0, 10, 6, 0.0001, tr("Cosine: the lowest learning rate."));
  auto* stepRow = new QHBoxLayout;
  stepRow->addWidget(new QLabel(tr("every"), trainBox));
  stepRow->addWidget(stepSize_);
  stepRow->addWidget(new QLabel(tr("× γ"), trainBox));
  stepRow->addWidget(gamma_);
  stepRow->addWidget(new QLabel(tr("min"), trainBox));
  stepRow->addWidget(minLr_);
  trainForm->addRow(tr("Schedule details:"), stepRow);
  seed_ = spin(trainBox, 0, 2147483647, tr("Random seed for weights, shuffling and augmentation."));
  logEvery_ = spin(trainBox, 1, 100000, tr("Report metrics every N steps."));
  trainForm->addRow(tr("Seed:"), seed_);
  trainForm->addRow(tr("Log every:"), logEvery_);
  outer->addWidget(trainBox);
  outer->addStretch(1);

  const auto notify = [this] {
    if (!updating_) emit changed();
  };
  for (QComboBox* c : {model_, dataset_, optimizer_, schedule_})
    connect(c, &QComboBox::currentIndexChanged, this, notify);
  connect(device_, &QComboBox::currentIndexChanged, this, [this, notify] {
    notify();
    emit deviceChanged();
  });
  connect(dataset_, &QComboBox::currentIndexChanged, this, [this] {
    updateDatasetControls();
    if (updating_) return;
    const QString ds = dataset_->currentData().toString();
    if (ds == QLatin1String("fashion-mnist")) dataDir_->setText(QStringLiteral("/usr/share/datasets/fashion-mnist"));
    else if (ds == QLatin1String("cifar10") && dataDir_->text().contains(QLatin1String("fashion"))) dataDir_->clear();
  });
  for (QSpinBox* s : {trainLimit_, testLimit_, synthC_, synthH_, synthW_, synthSize_, epochs_, maxSteps_, batch_,
                      seed_, logEvery_, stepSize_})
    connect(s, &QSpinBox::valueChanged, this, notify);
  for (QDoubleSpinBox* s : {lr_, momentum_, weightDecay_, gamma_, minLr_, labelSmoothing_})
    connect(s, &QDoubleSpinBox::valueChanged, this, notify);
  for (QCheckBox* c : {nesterov_, flip_}) connect(c, &QCheckBox::toggled, this, notify);
  connect(name_, &QLineEdit::textChanged, this, notify);
  connect(dataDir_, &QLineEdit::textChanged, this, notify);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Data set folder"), dataDir_->text());
    if (!dir.isEmpty()) dataDir_->setText(dir);
  });

  setConfig(RunConfig::fallbackDefaults());
}

void ConfigPanel::updateDatasetControls() {
  const bool synthetic = dataset_->currentData().toString() == QLatin1String("synthetic");
  syntheticRow_->setEnabled(synthetic);
  dataDirRow_->setEnabled(!synthetic);
}

void ConfigPanel::setConfig(const QJsonObject& c) {
  updating_ = true;
  base_ = RunConfig::merged(base_, c);
  name_->setText(base_.value(QLatin1String("name")).toString());
  selectData(model_, base_.value(QLatin1String("model")).toString());
  selectData(dataset_, base_.value(QLatin1String("dataset")).toString());
  const QString device = base_.value(QLatin1String("device")).toString(QStringLiteral("auto"));
  if (device_->findData(device) < 0) device_->addItem(device, device);  // a GPU not (yet) listed
  selectData(device_, device);
  dataDir_->setText(base_.value(QLatin1String("data_dir")).toString());
  const QJsonArray shape = base_.value(QLatin1String("synthetic_shape")).toArray();
  synthC_->setValue(shape.size() > 0 ? shape[0].toInt() : 3);
  synthH_->setValue(shape.size() > 1 ? shape[1].toInt() : 32);
  synthW_->setValue(shape.size() > 2 ? shape[2].toInt() : 32);
  synthSize_->setValue(base_.value(QLatin1String("synthetic_size")).toInt(10000));
  trainLimit_->setValue(base_.value(QLatin1String("train_limit")).toInt());
  testLimit_->setValue(base_.value(QLatin1String("test_limit")).toInt());
  flip_->setChecked(base_.value(QLatin1String("horizontal_flip")).toBool());
  epochs_->setValue(base_.value(QLatin1String("epochs")).toInt(1));
  maxSteps_->setValue(base_.value(QLatin1String("max_steps")).toInt());
  batch_->setValue(base_.value(QLatin1String("batch_size")).toInt(64));
  selectData(optimizer_, base_.value(QLatin1String("optimizer")).toString());
  lr_->setValue(base_.value(QLatin1String("lr")).toDouble());
  momentum_->setValue(base_.value(QLatin1String("momentum")).toDouble());
  nesterov_->setChecked(base_.value(QLatin1String("nesterov")).toBool());
  weightDecay_->setValue(base_.value(QLatin1String("weight_decay")).toDouble());
  labelSmoothing_->setValue(base_.value(QLatin1String("label_smoothing")).toDouble());
  selectData(schedule_, base_.value(QLatin1String("schedule")).toString());
  stepSize_->setValue(base_.value(QLatin1String("step_size")).toInt(1000));
  gamma_->setValue(base_.value(QLatin1String("gamma")).toDouble(0.1));
  minLr_->setValue(base_.value(QLatin1String("min_lr")).toDouble());
  seed_->setValue(base_.value(QLatin1String("seed")).toInt(1));
  logEvery_->setValue(base_.value(QLatin1String("log_every")).toInt(1));
  updateDatasetControls();
  updating_ = false;
  emit changed();
  emit deviceChanged();
}

QJsonObject ConfigPanel::config() const {
  QJsonObject c = base_;
  c.insert(QStringLiteral("name"), name_->text());
  c.insert(QStringLiteral("model"), model_->currentData().toString());
  c.insert(QStringLiteral("dataset"), dataset_->currentData().toString());
  c.insert(QStringLiteral("device"), deviceId());
  c.insert(QStringLiteral("data_dir"), dataDir_->text());
  c.insert(QStringLiteral("synthetic_shape"), QJsonArray{synthC_->value(), synthH_->value(), synthW_->value()});
  c.insert(QStringLiteral("synthetic_size"), synthSize_->value());
  c.insert(QStringLiteral("train_limit"), trainLimit_->value());
  c.insert(QStringLiteral("test_limit"), testLimit_->value());
  c.insert(QStringLiteral("horizontal_flip"), flip_->isChecked());
  c.insert(QStringLiteral("epochs"), epochs_->value());
  c.insert(QStringLiteral("max_steps"), maxSteps_->value());
  c.insert(QStringLiteral("batch_size"), batch_->value());
  c.insert(QStringLiteral("optimizer"), optimizer_->currentData().toString());
  c.insert(QStringLiteral("lr"), lr_->value());
  c.insert(QStringLiteral("momentum"), momentum_->value());
  c.insert(QStringLiteral("nesterov"), nesterov_->isChecked());
  c.insert(QStringLiteral("weight_decay"), weightDecay_->value());
  c.insert(QStringLiteral("label_smoothing"), labelSmoothing_->value());
  c.insert(QStringLiteral("schedule"), schedule_->currentData().toString());
  c.insert(QStringLiteral("step_size"), stepSize_->value());
  c.insert(QStringLiteral("gamma"), gamma_->value());
  c.insert(QStringLiteral("min_lr"), minLr_->value());
  c.insert(QStringLiteral("seed"), seed_->value());
  c.insert(QStringLiteral("log_every"), logEvery_->value());
  return c;
}

void ConfigPanel::setDevices(const QList<QPair<QString, QString>>& devices) {
  updating_ = true;
  const QString current = deviceId();
  device_->clear();
  device_->addItem(tr("Automatic (first GPU, else CPU)"), QStringLiteral("auto"));
  gpuCount_ = 0;
  bool haveCpu = false;
  for (const auto& [id, label] : devices) {
    if (id.startsWith(QLatin1String("cuda"))) ++gpuCount_;
    if (id == QLatin1String("cpu")) haveCpu = true;
    device_->addItem(label, id);
  }
  if (!haveCpu) device_->addItem(tr("CPU"), QStringLiteral("cpu"));
  if (device_->findData(current) < 0) device_->addItem(current, current);
  selectData(device_, current);
  updating_ = false;
  emit deviceChanged();
}

QString ConfigPanel::deviceId() const { return device_->currentData().toString(); }

QString ConfigPanel::deviceBackend() const {
  const QString id = deviceId();
  if (id.startsWith(QLatin1String("cuda"))) return QStringLiteral("cuda");
  if (id == QLatin1String("auto")) return gpuCount_ > 0 ? QStringLiteral("cuda") : QStringLiteral("cpu");
  return QStringLiteral("cpu");
}
