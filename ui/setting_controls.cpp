// SPDX-License-Identifier: GPL-3.0-or-later
#include "setting_controls.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLineEdit>
#include <QSpinBox>

#include <algorithm>
#include <climits>

QWidget* makeSettingControl(const SettingInfo& s, QWidget* parent, const QString& text, int decimals,
                            const QList<QPair<QString, QString>>& choiceLabels) {
  QWidget* w = nullptr;
  if (s.type == QLatin1String("bool")) {
    w = new QCheckBox(text, parent);
  } else if (s.type == QLatin1String("choice")) {
    auto* combo = new QComboBox(parent);
    for (const QVariant& option : s.options) {
      QString label = option.toString();
      for (const auto& [value, name] : choiceLabels)
        if (value == label) label = name;
      combo->addItem(label, option);
    }
    w = combo;
  } else if (s.type == QLatin1String("int")) {
    auto* spin = new QSpinBox(parent);
    // QSpinBox holds an int; the engine's wider ranges are cut to it.
    spin->setRange(int(std::max<double>(s.minimum, INT_MIN)), int(std::min<double>(s.maximum, INT_MAX)));
    w = spin;
  } else if (s.type == QLatin1String("double")) {
    auto* spin = new QDoubleSpinBox(parent);
    spin->setDecimals(decimals);
    spin->setRange(s.minimum, s.maximum);
    w = spin;
  } else {
    w = new QLineEdit(parent);
  }
  w->setObjectName(s.key);
  w->setToolTip(s.help);
  setSettingControlValue(w, s.defaultValue);
  return w;
}

QJsonValue settingControlValue(const QWidget* w) {
  if (auto* c = qobject_cast<const QCheckBox*>(w)) return c->isChecked();
  if (auto* c = qobject_cast<const QComboBox*>(w)) return QJsonValue::fromVariant(c->currentData());
  if (auto* s = qobject_cast<const QSpinBox*>(w)) return s->value();
  if (auto* s = qobject_cast<const QDoubleSpinBox*>(w)) return s->value();
  if (auto* e = qobject_cast<const QLineEdit*>(w)) return e->text();
  return {};
}

void setSettingControlValue(QWidget* w, const QJsonValue& value) {
  if (auto* c = qobject_cast<QCheckBox*>(w)) {
    c->setChecked(value.toBool());
  } else if (auto* c = qobject_cast<QComboBox*>(w)) {
    int index = -1;
    for (int i = 0; i < c->count(); ++i)
      if (QJsonValue::fromVariant(c->itemData(i)) == value ||
          c->itemData(i).toString() == value.toVariant().toString())
        index = i;
    if (index >= 0) c->setCurrentIndex(index);
  } else if (auto* s = qobject_cast<QSpinBox*>(w)) {
    s->setValue(value.toInt());
  } else if (auto* s = qobject_cast<QDoubleSpinBox*>(w)) {
    s->setValue(value.toDouble());
  } else if (auto* e = qobject_cast<QLineEdit*>(w)) {
    e->setText(value.toString());
  }
}

void onSettingControlChanged(QWidget* w, QObject* context, const std::function<void()>& changed) {
  if (auto* c = qobject_cast<QCheckBox*>(w)) QObject::connect(c, &QCheckBox::toggled, context, changed);
  if (auto* c = qobject_cast<QComboBox*>(w)) QObject::connect(c, &QComboBox::currentIndexChanged, context, changed);
  if (auto* s = qobject_cast<QSpinBox*>(w)) QObject::connect(s, &QSpinBox::valueChanged, context, changed);
  if (auto* s = qobject_cast<QDoubleSpinBox*>(w)) QObject::connect(s, &QDoubleSpinBox::valueChanged, context, changed);
  if (auto* e = qobject_cast<QLineEdit*>(w)) QObject::connect(e, &QLineEdit::textChanged, context, changed);
}
