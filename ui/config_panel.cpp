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

#include <algorithm>

#include "run_config.h"
#include "setting_controls.h"
#include "trick_catalog.h"

namespace {
void selectData(QComboBox* c, const QString& value) {
  const int i = c->findData(value);
  if (i >= 0) c->setCurrentIndex(i);
}
void addTip(QWidget* w, const QString& more) { w->setToolTip(w->toolTip() + QStringLiteral("\n\n") + more); }
}  // namespace

QWidget* ConfigPanel::add(const QString& key, QWidget* parent, const QString& text, int decimals,
                          const QList<QPair<QString, QString>>& choiceLabels) {
  const SettingInfo* s = TrickCatalog::instance().setting(key);
  if (!s) qFatal("ConfigPanel: the engine declares no key '%s'", qPrintable(key));
  QWidget* w = makeSettingControl(*s, parent, text, decimals, choiceLabels);
  controls_.insert(key, w);
  onSettingControlChanged(w, this, [this] {
    if (!updating_) emit changed();
  });
  return w;
}

ConfigPanel::ConfigPanel(QWidget* parent) : QWidget(parent) {
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(0, 0, 0, 0);

  auto* runBox = new QGroupBox(tr("Run"), this);
  auto* runForm = new QFormLayout(runBox);
  runForm->addRow(tr("Name:"), add(QStringLiteral("name"), runBox));
  runForm->addRow(tr("Model:"), add(QStringLiteral("model"), runBox, {}, 0,
                                    {{"fmnist-cnn", tr("Small CNN for Fashion-MNIST")},
                                     {"resnet18-cifar", tr("ResNet-18 (CIFAR variant)")},
                                     {"resnet9", tr("ResNet-9")},
                                     {"mlp", tr("Multi-layer perceptron")}}));
  // The devices are the engine's answer to `devices`, not a schema choice list.
  device_ = new QComboBox(runBox);
  device_->addItem(tr("Automatic (first GPU, else CPU)"), QStringLiteral("auto"));
  device_->addItem(tr("CPU"), QStringLiteral("cpu"));
  device_->setToolTip(tr("Where the engine trains. GPUs appear here when the engine finds them."));
  runForm->addRow(tr("Device:"), device_);
  outer->addWidget(runBox);

  auto* dataBox = new QGroupBox(tr("Data"), this);
  auto* dataForm = new QFormLayout(dataBox);
  QWidget* dataset = add(QStringLiteral("dataset"), dataBox, {}, 0,
                         {{"fashion-mnist", tr("Fashion-MNIST")},
                          {"mnist", tr("MNIST")},
                          {"cifar10", tr("CIFAR-10 (binary folder)")},
                          {"synthetic", tr("Synthetic images")}});
  addTip(dataset, tr("Fashion-MNIST is installed on every machine; CIFAR-10 needs a folder with "
                     "data_batch_N.bin files; synthetic images measure throughput without a data set."));
  dataForm->addRow(tr("Data set:"), dataset);
  dataDirRow_ = new QWidget(dataBox);
  auto* dirLine = new QHBoxLayout(dataDirRow_);
  dirLine->setContentsMargins(0, 0, 0, 0);
  auto* dataDir = qobject_cast<QLineEdit*>(add(QStringLiteral("data_dir"), dataDirRow_));
  auto* browse = new QPushButton(tr("Browse…"), dataDirRow_);
  dirLine->addWidget(dataDir, 1);
  dirLine->addWidget(browse);
  dataForm->addRow(tr("Folder:"), dataDirRow_);
  syntheticRow_ = new QWidget(dataBox);
  auto* shapeLine = new QHBoxLayout(syntheticRow_);
  shapeLine->setContentsMargins(0, 0, 0, 0);
  // synthetic_shape is one int_list key: three spin boxes in the schema's range.
  const SettingInfo* shape = TrickCatalog::instance().setting(QStringLiteral("synthetic_shape"));
  auto dim = [&](const QString& tip) {
    auto* s = new QSpinBox(syntheticRow_);
    s->setRange(int(shape->minimum), int(std::min(shape->maximum, 2.0e9)));
    s->setToolTip(tip);
    connect(s, &QSpinBox::valueChanged, this, [this] {
      if (!updating_) emit changed();
    });
    return s;
  };
  synthC_ = dim(tr("Channels"));
  synthH_ = dim(tr("Height"));
  synthW_ = dim(tr("Width"));
  shapeLine->addWidget(new QLabel(tr("C×H×W"), syntheticRow_));
  shapeLine->addWidget(synthC_);
  shapeLine->addWidget(synthH_);
  shapeLine->addWidget(synthW_);
  shapeLine->addWidget(new QLabel(tr("samples"), syntheticRow_));
  shapeLine->addWidget(add(QStringLiteral("synthetic_size"), syntheticRow_));
  dataForm->addRow(tr("Shape:"), syntheticRow_);
  auto* trainLimit = qobject_cast<QSpinBox*>(add(QStringLiteral("train_limit"), dataBox));
  auto* testLimit = qobject_cast<QSpinBox*>(add(QStringLiteral("test_limit"), dataBox));
  trainLimit->setSpecialValueText(tr("all"));
  testLimit->setSpecialValueText(tr("all"));
  dataForm->addRow(tr("Training samples:"), trainLimit);
  dataForm->addRow(tr("Test samples:"), testLimit);
  dataForm->addRow(QString(), add(QStringLiteral("horizontal_flip"), dataBox, tr("Random horizontal flip")));
  outer->addWidget(dataBox);

  auto* trainBox = new QGroupBox(tr("Training"), this);
  auto* trainForm = new QFormLayout(trainBox);
  auto* maxSteps = qobject_cast<QSpinBox*>(add(QStringLiteral("max_steps"), trainBox));
  maxSteps->setSpecialValueText(tr("use epochs"));
  QWidget* batch = add(QStringLiteral("batch_size"), trainBox);
  addTip(batch, tr("Larger batches use the device better (samples/s) and need more memory; "
                   "see 'Scale LR with batch' among the optimizer tricks."));
  trainForm->addRow(tr("Epochs:"), add(QStringLiteral("epochs"), trainBox));
  trainForm->addRow(tr("Max steps:"), maxSteps);
  trainForm->addRow(tr("Batch size:"), batch);
  QWidget* optimizer = add(QStringLiteral("optimizer"), trainBox, {}, 0,
                           {{"sgd", tr("SGD with momentum")},
                            {"adamw", tr("AdamW")},
                            {"rmsprop", tr("RMSProp")},
                            {"lars", tr("LARS (large batch)")},
                            {"lamb", tr("LAMB (large batch)")}});
  addTip(optimizer, tr("LARS and LAMB scale each layer's update by a trust ratio, which keeps very large "
                       "batches stable."));
  trainForm->addRow(tr("Optimizer:"), optimizer);
  auto* momentumRow = new QHBoxLayout;
  momentumRow->addWidget(add(QStringLiteral("momentum"), trainBox, {}, 3), 1);
  momentumRow->addWidget(add(QStringLiteral("nesterov"), trainBox, tr("Nesterov")));
  trainForm->addRow(tr("Learning rate:"), add(QStringLiteral("lr"), trainBox, {}, 6));
  trainForm->addRow(tr("Momentum:"), momentumRow);
  trainForm->addRow(tr("Weight decay:"), add(QStringLiteral("weight_decay"), trainBox, {}, 6));
  trainForm->addRow(tr("Label smoothing:"), add(QStringLiteral("label_smoothing"), trainBox, {}, 3));
  trainForm->addRow(tr("Schedule:"), add(QStringLiteral("schedule"), trainBox, {}, 0,
                                         {{"constant", tr("Constant")},
                                          {"step", tr("Step decay")},
                                          {"cosine", tr("Cosine")},
                                          {"onecycle", tr("One-cycle")}}));
  auto* stepRow = new QHBoxLayout;
  stepRow->addWidget(new QLabel(tr("every"), trainBox));
  stepRow->addWidget(add(QStringLiteral("step_size"), trainBox));
  stepRow->addWidget(new QLabel(tr("× γ"), trainBox));
  stepRow->addWidget(add(QStringLiteral("gamma"), trainBox, {}, 4));
  stepRow->addWidget(new QLabel(tr("min"), trainBox));
  stepRow->addWidget(add(QStringLiteral("min_lr"), trainBox, {}, 6));
  trainForm->addRow(tr("Schedule details:"), stepRow);
  trainForm->addRow(tr("Seed:"), add(QStringLiteral("seed"), trainBox));
  trainForm->addRow(tr("Log every:"), add(QStringLiteral("log_every"), trainBox));
  // Time to accuracy: the run ends at the first evaluation reaching the target.
  auto* target = qobject_cast<QDoubleSpinBox*>(add(QStringLiteral("target_accuracy"), trainBox, {}, 3));
  target->setSpecialValueText(tr("off"));
  trainForm->addRow(tr("Stop at test accuracy:"), target);
  auto* evalEvery = qobject_cast<QSpinBox*>(add(QStringLiteral("eval_every_steps"), trainBox));
  evalEvery->setSpecialValueText(tr("epoch ends"));
  trainForm->addRow(tr("Evaluate every (steps):"), evalEvery);
  outer->addWidget(trainBox);
  outer->addStretch(1);

  connect(device_, &QComboBox::currentIndexChanged, this, [this] {
    if (!updating_) emit changed();
    emit deviceChanged();
  });
  auto* datasetCombo = qobject_cast<QComboBox*>(dataset);
  connect(datasetCombo, &QComboBox::currentIndexChanged, this, [this, datasetCombo, dataDir] {
    updateDatasetControls();
    if (updating_) return;
    const QString ds = datasetCombo->currentData().toString();
    if (ds == QLatin1String("fashion-mnist")) dataDir->setText(QStringLiteral("/usr/share/datasets/fashion-mnist"));
    else if (ds == QLatin1String("cifar10") && dataDir->text().contains(QLatin1String("fashion"))) dataDir->clear();
  });
  connect(browse, &QPushButton::clicked, this, [this, dataDir] {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Data set folder"), dataDir->text());
    if (!dir.isEmpty()) dataDir->setText(dir);
  });

  setConfig(RunConfig::defaults());
}

void ConfigPanel::updateDatasetControls() {
  const bool synthetic = settingControlValue(controls_.value(QStringLiteral("dataset"))).toString() ==
                         QLatin1String("synthetic");
  syntheticRow_->setEnabled(synthetic);
  dataDirRow_->setEnabled(!synthetic);
}

void ConfigPanel::setConfig(const QJsonObject& c) {
  updating_ = true;
  base_ = RunConfig::merged(base_, c);
  for (auto it = controls_.begin(); it != controls_.end(); ++it)
    if (base_.contains(it.key())) setSettingControlValue(it.value(), base_.value(it.key()));
  const QString device = base_.value(QLatin1String("device")).toString(QStringLiteral("auto"));
  if (device_->findData(device) < 0) device_->addItem(device, device);  // a GPU not (yet) listed
  selectData(device_, device);
  const QJsonArray shape = base_.value(QLatin1String("synthetic_shape")).toArray();
  synthC_->setValue(shape.size() > 0 ? shape[0].toInt() : 3);
  synthH_->setValue(shape.size() > 1 ? shape[1].toInt() : 32);
  synthW_->setValue(shape.size() > 2 ? shape[2].toInt() : 32);
  updateDatasetControls();
  updating_ = false;
  emit changed();
  emit deviceChanged();
}

QJsonObject ConfigPanel::config() const {
  QJsonObject c = base_;
  for (auto it = controls_.constBegin(); it != controls_.constEnd(); ++it)
    c.insert(it.key(), settingControlValue(it.value()));
  c.insert(QStringLiteral("device"), deviceId());
  c.insert(QStringLiteral("synthetic_shape"), QJsonArray{synthC_->value(), synthH_->value(), synthW_->value()});
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
