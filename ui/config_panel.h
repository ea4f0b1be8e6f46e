// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QJsonObject>
#include <QMap>
#include <QStringList>
#include <QWidget>

class QComboBox;
class QLineEdit;
class QSpinBox;

// The run settings that are not tricks: model, data set, length, batch,
// optimizer, learning rate and schedule, device. Each control is made from
// the engine's schema entry for its key (type, range, choices, help); keys
// without a control here (betas, eps...) are kept as they came in setConfig().
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
  // The control of one key (nullptr when the panel has none), for tests.
  QWidget* control(const QString& key) const { return controls_.value(key); }

 signals:
  void changed();
  void deviceChanged();

 private:
  QWidget* add(const QString& key, QWidget* parent, const QString& text = {}, int decimals = 3,
               const QList<QPair<QString, QString>>& choiceLabels = {});
  void updateDatasetControls();

  QJsonObject base_;
  QMap<QString, QWidget*> controls_;  // key -> control made from its schema entry
  QComboBox* device_;
  QSpinBox *synthC_, *synthH_, *synthW_;
  QWidget *dataDirRow_, *syntheticRow_;
  int gpuCount_ = 0;
  bool updating_ = false;
};
