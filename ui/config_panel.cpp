// SPDX-License-Identifier: GPL-3.0-or-later
#include "config_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QTimer>
#include <QVBoxLayout>

#include "data_check.h"
#include "engine/data/dataset.h"
#include "palette_colors.h"
#include "run_config.h"
#include "run_summary.h"
#include "setting_controls.h"
#include "trick_catalog.h"

namespace {
const QString kDevice = QStringLiteral("device");
const QString kDataset = QStringLiteral("dataset");
const QString kDataDir = QStringLiteral("data_dir");

// Teaching texts beside the table's one-line help (the tricks' live in tricks.json).
QString teaching(const QString& key) {
  if (key == kDataset)
    return ConfigPanel::tr("Fashion-MNIST is installed on every machine; CIFAR-10 needs a folder with "
                           "data_batch_N.bin files; synthetic images measure throughput without a data set.");
  if (key == QLatin1String("batch_size"))
    return ConfigPanel::tr("Larger batches use the device better (samples/s) and need more memory; "
                           "see 'Scale LR with batch' among the optimizer tricks.");
  if (key == QLatin1String("optimizer"))
    return ConfigPanel::tr("LARS and LAMB scale each layer's update by a trust ratio, which keeps very large "
                           "batches stable.");
  return {};
}
}  // namespace

ConfigPanel::ConfigPanel(QWidget* parent) : ConfigPanel(TrickCatalog::instance(), parent) {}

ConfigPanel::ConfigPanel(const TrickCatalog& catalog, QWidget* parent) : QWidget(parent), catalog_(catalog) {
  build();
  dataCheck_ = new DataCheck(this);
  connect(dataCheck_, &DataCheck::checked, this,
          [this](const QString& dataset, const QString& folder, const QStringList& problems) {
            // Only the answer for what the panel shows now.
            if (dataset == this->dataset() && folder == dataFolder()) showDataProblems(problems);
          });
  dataCheckSoon_ = new QTimer(this);
  dataCheckSoon_->setSingleShot(true);
  dataCheckSoon_->setInterval(300);  // typing a folder name checks once, after a pause
  connect(dataCheckSoon_, &QTimer::timeout, this, [this] { dataCheck_->request(dataset(), dataFolder()); });
  setConfig(RunConfig::defaults());
}

ConfigPanel::~ConfigPanel() = default;

void ConfigPanel::build() {
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(0, 0, 0, 0);
  for (const TrickGroup& group : catalog_.runGroups()) {
    auto* box = new QGroupBox(group.title, this);
    auto* form = new QFormLayout(box);
    form->setRowWrapPolicy(QFormLayout::WrapLongRows);
    for (const SettingInfo& s : catalog_.settingsInGroup(group.id)) {
      QWidget* control = nullptr;
      QWidget* row = nullptr;
      if (s.key == kDevice) {
        // The devices are the engine's answer to `devices`, not a choice list.
        device_ = new QComboBox(box);
        device_->setObjectName(s.key);
        device_->addItem(tr("Automatic (first GPU, else CPU)"), QStringLiteral("auto"));
        device_->addItem(tr("CPU"), QStringLiteral("cpu"));
        device_->setToolTip(tr("Where the engine trains. GPUs appear here when the engine finds them."));
        connect(device_, &QComboBox::currentIndexChanged, this, [this] {
          if (!updating_) emit changed();
          emit deviceChanged();
        });
        control = row = device_;
      } else {
        control = row = makeSettingControl(s, box);
        const QString more = teaching(s.key);
        if (!more.isEmpty()) control->setToolTip(control->toolTip() + QStringLiteral("\n\n") + more);
        onSettingControlChanged(control, this, [this, key = s.key] { settingChanged(key); });
      }
      if (s.key == kDataDir) {
        row = new QWidget(box);
        auto* line = new QHBoxLayout(row);
        line->setContentsMargins(0, 0, 0, 0);
        control->setParent(row);
        line->addWidget(control, 1);
        auto* browse = new QPushButton(tr("Browse…"), row);
        browse->setToolTip(tr("Choose the folder of the data set files."));
        line->addWidget(browse);
        auto* edit = qobject_cast<QLineEdit*>(control);
        connect(browse, &QPushButton::clicked, this, [this, edit] {
          const QString dir = QFileDialog::getExistingDirectory(this, tr("Data set folder"), edit->text());
          if (!dir.isEmpty()) edit->setText(dir);
        });
      }
      controls_.insert(s.key, control);
      rows_.insert(s.key, row);
      if (s.type == QLatin1String("bool")) {
        form->addRow(QString(), row);  // a check box carries its own label
      } else {
        auto* label = new QLabel(s.label + QLatin1Char(':'), box);
        label->setBuddy(control);
        labels_.insert(s.key, label);
        form->addRow(label, row);
      }
      if (s.key == kDataDir) {
        // What the data check found, in the readers' words, under the folder.
        dataProblemsLabel_ = new QLabel(box);
        dataProblemsLabel_->setObjectName(QStringLiteral("dataProblems"));
        dataProblemsLabel_->setWordWrap(true);
        dataProblemsLabel_->setTextFormat(Qt::PlainText);
        dataProblemsLabel_->setTextInteractionFlags(Qt::TextSelectableByMouse);
        dataProblemsLabel_->setVisible(false);
        form->addRow(dataProblemsLabel_);
      }
    }
    outer->addWidget(box);
  }
  outer->addStretch(1);
}

void ConfigPanel::settingChanged(const QString& key) {
  if (key == kDataset && !updating_) {
    // The installed Fashion-MNIST is the natural folder for it; a folder of
    // Fashion-MNIST is no CIFAR-10 folder.
    auto* folder = qobject_cast<QLineEdit*>(controls_.value(kDataDir));
    const QString ds = dataset();
    const QString fallback = QString::fromStdString(tb::default_data_dir(ds.toStdString()));
    if (folder && !fallback.isEmpty()) folder->setText(fallback);
    else if (folder && ds == QLatin1String("cifar10") && folder->text().contains(QLatin1String("fashion"))) folder->clear();
  }
  updateApplicability();
  if (key == kDataset || key == kDataDir) scheduleDataCheck();
  if (!updating_) emit changed();
}

QJsonValue ConfigPanel::currentValue(const QString& key) const {
  if (key == kDevice) return deviceId();
  if (QWidget* c = controls_.value(key)) return settingControlValue(c);
  return others_.contains(key) ? others_.value(key) : base_.value(key);
}

QString ConfigPanel::notApplicableReason(const QString& key) const {
  const SettingInfo* s = catalog_.setting(key);
  if (!s || s->appliesKey.isEmpty()) return {};
  return ::notApplicableReason(*s, catalog_.setting(s->appliesKey), currentValue(s->appliesKey));
}

void ConfigPanel::updateApplicability() {
  for (auto it = controls_.constBegin(); it != controls_.constEnd(); ++it) {
    const QString reason = notApplicableReason(it.key());
    showApplicability(it.value(), labels_.value(it.key()), reason);
    if (QWidget* row = rows_.value(it.key()); row != it.value()) row->setEnabled(reason.isEmpty());
  }
  // An empty name: the engine names the run by model and batch size.
  if (auto* name = qobject_cast<QLineEdit*>(controls_.value(QStringLiteral("name"))))
    name->setPlaceholderText(tr("%1 (when left empty)").arg(RunSummary::nameOf(config())));
}

void ConfigPanel::setOtherValues(const QJsonObject& values) {
  others_ = values;
  updateApplicability();
}

void ConfigPanel::setConfig(const QJsonObject& c) {
  updating_ = true;
  base_ = RunConfig::merged(base_, c);
  for (auto it = controls_.begin(); it != controls_.end(); ++it)
    if (it.key() != kDevice && base_.contains(it.key())) setSettingControlValue(it.value(), base_.value(it.key()));
  if (device_) {
    const QString device = base_.value(kDevice).toString(QStringLiteral("auto"));
    if (device_->findData(device) < 0) device_->addItem(device, device);  // a GPU not (yet) listed
    device_->setCurrentIndex(device_->findData(device));
  }
  updateApplicability();
  scheduleDataCheck();
  updating_ = false;
  emit changed();
  emit deviceChanged();
}

QJsonObject ConfigPanel::config() const {
  QJsonObject c = base_;
  for (auto it = controls_.constBegin(); it != controls_.constEnd(); ++it) c.insert(it.key(), currentValue(it.key()));
  return c;
}

void ConfigPanel::setDevices(const QList<QPair<QString, QString>>& devices) {
  if (!device_) return;
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
  device_->setCurrentIndex(device_->findData(current));
  updating_ = false;
  emit deviceChanged();
}

QString ConfigPanel::deviceId() const {
  return device_ ? device_->currentData().toString() : base_.value(kDevice).toString(QStringLiteral("auto"));
}

QString ConfigPanel::deviceBackend() const {
  const QString id = deviceId();
  if (id.startsWith(QLatin1String("cuda"))) return QStringLiteral("cuda");
  if (id == QLatin1String("auto")) return gpuCount_ > 0 ? QStringLiteral("cuda") : QStringLiteral("cpu");
  return QStringLiteral("cpu");
}

// --- the data check

QString ConfigPanel::dataset() const { return currentValue(kDataset).toString(); }

QString ConfigPanel::dataFolder() const {
  // A folder that does not apply (synthetic data) is not looked at.
  return notApplicableReason(kDataDir).isEmpty() ? currentValue(kDataDir).toString() : QString();
}

void ConfigPanel::scheduleDataCheck() {
  if (dataCheckSoon_) dataCheckSoon_->start();
}

void ConfigPanel::showDataProblems(const QStringList& problems) {
  dataProblems_ = problems;
  if (!dataProblemsLabel_) return;
  QStringList lines;
  for (const QString& p : problems) lines << QStringLiteral("• ") + p;
  dataProblemsLabel_->setText(problems.isEmpty() ? QString()
                                                 : tr("A run could not open this data set:\n%1").arg(lines.join(QLatin1Char('\n'))));
  QPalette p = dataProblemsLabel_->palette();
  p.setColor(QPalette::WindowText, PaletteColors::error(palette()));
  dataProblemsLabel_->setPalette(p);
  dataProblemsLabel_->setVisible(!problems.isEmpty());
}

bool ConfigPanel::readyToLaunch(QString* why) {
  // Checked again now: the files may have been fixed (or broken) since.
  dataCheckSoon_->stop();
  showDataProblems(DataCheck::run(dataset(), dataFolder()));
  if (!dataProblems_.isEmpty() && why)
    *why = tr("Not started: %1%2").arg(dataProblems_.first(),
                                       dataProblems_.size() > 1 ? tr(" (and %n more problem(s), see Set up)", nullptr,
                                                                     int(dataProblems_.size() - 1))
                                                                : QString());
  return dataProblems_.isEmpty();
}

void ConfigPanel::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  scheduleDataCheck();  // back on the page: files may have changed meanwhile
}
