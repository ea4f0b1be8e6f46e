// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <functional>

#include <QDoubleSpinBox>
#include <QJsonArray>
#include <QJsonValue>
#include <QList>
#include <QString>
#include <QWidget>

#include "trick_catalog.h"

class QSpinBox;

// A control for one setting, made from its schema entry (SettingInfo), so its
// type, range, choices and their display names, its label and what 0 means
// are the engine's (its settings table):
//   bool -> QCheckBox (text: the label), choice -> QComboBox, int -> QSpinBox,
//   double -> NumberSpinBox, string -> QLineEdit, int_list -> IntListEdit.
// The control's objectName is the key and its tooltip the table's help.
QWidget* makeSettingControl(const SettingInfo& setting, QWidget* parent);
QJsonValue settingControlValue(const QWidget* control);
void setSettingControlValue(QWidget* control, const QJsonValue& value);
// Calls `changed` when the user (or code) changes the control's value.
void onSettingControlChanged(QWidget* control, QObject* context, const std::function<void()>& changed);

// Why `setting` does not apply while the key it depends on (its appliesKey,
// described by `deciding` for its names, may be null) has `value`, in words
// ("Applies only when Schedule is Step decay; now Cosine."), or empty when
// it applies.
QString notApplicableReason(const SettingInfo& setting, const SettingInfo* deciding, const QJsonValue& value);
// Enables `control` (and `label`, if any) when `reason` is empty, else
// disables them and adds the reason to the control's tooltip. Its value is
// kept either way: the engine ignores a key that does not apply.
void showApplicability(QWidget* control, QWidget* label, const QString& reason);

// A floating-point spin box for values of any magnitude (1e-8 as well as
// 0.05): shown with significant digits, typed in plain or scientific
// notation, stepped by a tenth of the value's own order of magnitude.
class NumberSpinBox : public QDoubleSpinBox {
  Q_OBJECT
 public:
  explicit NumberSpinBox(QWidget* parent = nullptr);
  QString textFromValue(double value) const override;
  double valueFromText(const QString& text) const override;
  QValidator::State validate(QString& text, int& pos) const override;
  void stepBy(int steps) override;
};

// A list of integers of fixed length (synthetic_shape: C, H, W), one spin box
// per element within the setting's range.
class IntListEdit : public QWidget {
  Q_OBJECT
 public:
  IntListEdit(int size, int minimum, int maximum, QWidget* parent = nullptr);
  QJsonArray value() const;
  void setValue(const QJsonArray& value);  // missing elements keep theirs
  QSpinBox* box(int i) const { return boxes_.value(i); }

 signals:
  void valueChanged();

 private:
  QList<QSpinBox*> boxes_;
};
