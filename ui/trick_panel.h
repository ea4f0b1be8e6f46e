// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QJsonObject>
#include <QMap>
#include <QWidget>

class QLabel;
class QToolButton;

// Every trick of the catalogue as a control, grouped (data pipeline,
// precision, kernels and memory layout, optimizer, memory, debugging), each
// with a tooltip and a "?" button that opens its "learn more" text. Tricks the
// chosen device cannot use are disabled with the reason shown; while disabled
// they contribute their neutral default to the configuration. A trick that
// applies only with some values of another key (the table's applies_when) is
// disabled with the reason in its tooltip while it does not, and keeps its value.
class TrickPanel : public QWidget {
  Q_OBJECT
 public:
  explicit TrickPanel(QWidget* parent = nullptr);

  // Sets the controls of every trick key present in config.
  void setValues(const QJsonObject& config);
  // The trick keys and their values.
  QJsonObject values() const;

  // backend: "cpu" or "cuda"; gpuCount: GPUs the engine found.
  void setDeviceContext(const QString& backend, int gpuCount);
  // Overrides from the engine's schema: key -> backends that honour it.
  void setBackendSupport(const QMap<QString, QStringList>& support);
  // The values of keys shown elsewhere (the run panel), for tricks that
  // apply only with some of them (the table's applies_when).
  void setOtherValues(const QJsonObject& values);
  // Why a trick does not apply with the current values (empty: it does).
  QString notApplicableReason(const QString& key) const;

  bool isTrickEnabled(const QString& key) const;
  QString disabledReason(const QString& key) const;
  QWidget* control(const QString& key) const;

 signals:
  void changed();
  // The "?" button was pressed, or the user changed that trick.
  void learnMoreRequested(const QString& key);

 private:
  struct Row {
    QWidget* control = nullptr;
    QLabel* label = nullptr;  // its name, for non-check-box controls
    QLabel* reason = nullptr;
    QJsonValue userValue;  // what the user chose, restored when enabled again
    bool enabled = true;
  };
  QJsonValue controlValue(const QString& key) const;
  void setControlValue(const QString& key, const QJsonValue& value);
  void updateAvailability();
  void updateApplicability();

  QMap<QString, Row> rows_;
  QJsonObject others_;
  QMap<QString, QStringList> support_;
  QString backend_ = QStringLiteral("cpu");
  int gpuCount_ = 0;
  bool updating_ = false;
};
