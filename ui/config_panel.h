// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QJsonObject>
#include <QStringList>
#include <QWidget>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QSpinBox;
class QWidget;

// The run settings that are not tricks: model, data set, length, batch,
// optimizer, learning rate and schedule, device. Keys without a control here
// (betas, eps...) are kept as they came in setConfig().
class ConfigPanel : public QWidget {
  Q_OBJECT
 public:
  explicit ConfigPanel(QWidget* parent = nullptr);

  void setConfig(const QJsonObject& config);
  QJsonObject config() const;

  // Devices the engine reported: ids such as "cuda:0" with a display label.
  void setDevices(const QList<QPair<QString, QString>>& devices);
  QString deviceId() const;       // as in the config: auto | cpu | cuda:N
  QString deviceBackend() const;  // cpu | cuda (auto resolves to cuda when a GPU exists)
  int gpuCount() const { return gpuCount_; }

 signals:
  void changed();
  void deviceChanged();

 private:
  void updateDatasetControls();

  QJsonObject base_;
  QLineEdit* name_;
  QComboBox *model_, *dataset_, *device_, *optimizer_, *schedule_;
  QLineEdit* dataDir_;
  QSpinBox *trainLimit_, *testLimit_, *synthC_, *synthH_, *synthW_, *synthSize_;
  QSpinBox *epochs_, *maxSteps_, *batch_, *seed_, *logEvery_, *stepSize_;
  QDoubleSpinBox *lr_, *momentum_, *weightDecay_, *gamma_, *minLr_, *labelSmoothing_;
  QCheckBox *nesterov_, *flip_;
  QWidget *dataDirRow_, *syntheticRow_;
  int gpuCount_ = 0;
  bool updating_ = false;
};
