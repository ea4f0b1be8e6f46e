// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QJsonObject>
#include <QMap>
#include <QStringList>
#include <QWidget>

class DataCheck;
class QComboBox;
class QLabel;
class QTimer;
class TrickCatalog;

// The run settings that are not tricks, built from the engine's settings
// table: one box per group (Run, Data, Training, Learning-rate schedule), one
// row per key in table order, each control made from its schema entry (type,
// range, choices and their names, label, what 0 means). A key added to the
// table appears here without a change to this file. Two keys get more than a
// plain control: `device` lists the devices the engine reported, and
// `data_dir` has a Browse button and the data check below it. Keys that do
// not apply to the other settings (the table's applies_when: step_size only
// for the step schedule...) are disabled with the reason in their tooltip.
class ConfigPanel : public QWidget {
  Q_OBJECT
 public:
  explicit ConfigPanel(QWidget* parent = nullptr);
  // With another catalogue than the engine's own (tests: a key added to the table).
  ConfigPanel(const TrickCatalog& catalog, QWidget* parent = nullptr);
  ~ConfigPanel() override;

  void setConfig(const QJsonObject& config);
  QJsonObject config() const;

  // Devices the engine reported: ids such as "cuda:0" with a display label.
  void setDevices(const QList<QPair<QString, QString>>& devices);
  QString deviceId() const;       // as in the config: auto | cpu | cuda:N
  QString deviceBackend() const;  // cpu | cuda (auto resolves to cuda when a GPU exists)
  int gpuCount() const { return gpuCount_; }
  // The control of one key (nullptr when the panel has none), for tests.
  QWidget* control(const QString& key) const { return controls_.value(key); }

  // The values of keys shown elsewhere (the trick panel) that decide whether
  // a key here applies (base_batch_size follows lr_scaling).
  void setOtherValues(const QJsonObject& values);
  // Why a key does not apply with the current values (empty: it does).
  QString notApplicableReason(const QString& key) const;

  // Checks the data folder now (headers and sizes, quick) and shows the
  // result; false with the problem in *why when a run could not open its data.
  bool readyToLaunch(QString* why = nullptr);
  QStringList dataProblems() const { return dataProblems_; }  // as last shown

 signals:
  void changed();
  void deviceChanged();

 protected:
  void showEvent(QShowEvent* event) override;

 private:
  void build();
  void settingChanged(const QString& key);
  void updateApplicability();
  QJsonValue currentValue(const QString& key) const;
  void scheduleDataCheck();
  void showDataProblems(const QStringList& problems);
  QString dataset() const;
  QString dataFolder() const;

  const TrickCatalog& catalog_;
  QJsonObject base_, others_;
  QMap<QString, QWidget*> controls_;  // key -> control made from its schema entry
  QMap<QString, QWidget*> rows_;      // key -> what its form row holds (the control, or a row around it)
  QMap<QString, QLabel*> labels_;     // key -> its name in the form
  QComboBox* device_ = nullptr;
  QLabel* dataProblemsLabel_ = nullptr;
  QStringList dataProblems_;
  DataCheck* dataCheck_ = nullptr;
  QTimer* dataCheckSoon_ = nullptr;
  int gpuCount_ = 0;
  bool updating_ = false;
};
