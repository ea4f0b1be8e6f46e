// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <functional>

#include <QJsonValue>
#include <QList>
#include <QPair>
#include <QString>

#include "trick_catalog.h"

class QWidget;

// A control for one setting, made from its schema entry (SettingInfo) so its
// type, range and choices are the engine's:
//   bool -> QCheckBox (text: `text`), choice -> QComboBox, int -> QSpinBox,
//   double -> QDoubleSpinBox (`decimals`), string -> QLineEdit.
// `choiceLabels` names choices for display (value, label); a choice without a
// label shows its value. The control's objectName is the key.
QWidget* makeSettingControl(const SettingInfo& setting, QWidget* parent, const QString& text = {},
                            int decimals = 3, const QList<QPair<QString, QString>>& choiceLabels = {});
QJsonValue settingControlValue(const QWidget* control);
void setSettingControlValue(QWidget* control, const QJsonValue& value);
// Calls `changed` when the user (or code) changes the control's value.
void onSettingControlChanged(QWidget* control, QObject* context, const std::function<void()>& changed);
