// SPDX-License-Identifier: GPL-3.0-or-later
#include "setting_controls.h"

#include <QCheckBox>
#include <QComboBox>
#include <QHBoxLayout>
#include <QLineEdit>
#include <QRegularExpression>
#include <QSpinBox>

#include <algorithm>
#include <climits>
#include <cmath>

QWidget* makeSettingControl(const SettingInfo& s, QWidget* parent) {
  QWidget* w = nullptr;
  if (s.type == QLatin1String("bool")) {
    w = new QCheckBox(s.label, parent);
  } else if (s.type == QLatin1String("choice")) {
    auto* combo = new QComboBox(parent);
    for (const QVariant& option : s.options) combo->addItem(s.optionLabel(option), option);
    w = combo;
  } else if (s.type == QLatin1String("int")) {
    auto* spin = new QSpinBox(parent);
    // QSpinBox holds an int; the engine's wider ranges are cut to it.
    spin->setRange(int(std::max<double>(s.minimum, INT_MIN)), int(std::min<double>(s.maximum, INT_MAX)));
    if (!s.zeroMeans.isEmpty() && s.minimum == 0) spin->setSpecialValueText(s.zeroMeans);
    w = spin;
  } else if (s.type == QLatin1String("double")) {
    auto* spin = new NumberSpinBox(parent);
    spin->setRange(s.minimum, s.maximum);
    if (!s.zeroMeans.isEmpty() && s.minimum == 0) spin->setSpecialValueText(s.zeroMeans);
    w = spin;
  } else if (s.type == QLatin1String("int_list")) {
    const int size = std::max<int>(1, int(s.defaultValue.toArray().size()));
    w = new IntListEdit(size, int(std::max<double>(s.minimum, INT_MIN)), int(std::min<double>(s.maximum, INT_MAX)),
                        parent);
  } else {
    w = new QLineEdit(parent);
  }
  w->setObjectName(s.key);
  const QString cost = s.measuredCostText();
  w->setToolTip(cost.isEmpty() ? s.help : s.help + QStringLiteral("\n\n") + cost);
  setSettingControlValue(w, s.defaultValue);
  return w;
}

QJsonValue settingControlValue(const QWidget* w) {
  if (auto* c = qobject_cast<const QCheckBox*>(w)) return c->isChecked();
  if (auto* c = qobject_cast<const QComboBox*>(w)) return QJsonValue::fromVariant(c->currentData());
  if (auto* s = qobject_cast<const QSpinBox*>(w)) return s->value();
  if (auto* s = qobject_cast<const QDoubleSpinBox*>(w)) return s->value();
  if (auto* e = qobject_cast<const QLineEdit*>(w)) return e->text();
  if (auto* l = qobject_cast<const IntListEdit*>(w)) return l->value();
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
  } else if (auto* l = qobject_cast<IntListEdit*>(w)) {
    l->setValue(value.toArray());
  }
}

void onSettingControlChanged(QWidget* w, QObject* context, const std::function<void()>& changed) {
  if (auto* c = qobject_cast<QCheckBox*>(w)) QObject::connect(c, &QCheckBox::toggled, context, changed);
  if (auto* c = qobject_cast<QComboBox*>(w)) QObject::connect(c, &QComboBox::currentIndexChanged, context, changed);
  if (auto* s = qobject_cast<QSpinBox*>(w)) QObject::connect(s, &QSpinBox::valueChanged, context, changed);
  if (auto* s = qobject_cast<QDoubleSpinBox*>(w)) QObject::connect(s, &QDoubleSpinBox::valueChanged, context, changed);
  if (auto* e = qobject_cast<QLineEdit*>(w)) QObject::connect(e, &QLineEdit::textChanged, context, changed);
  if (auto* l = qobject_cast<IntListEdit*>(w)) QObject::connect(l, &IntListEdit::valueChanged, context, changed);
}

QString notApplicableReason(const SettingInfo& s, const SettingInfo* deciding, const QJsonValue& value) {
  if (s.appliesWith(value)) return {};
  QStringList when;
  for (const QJsonValue& v : s.appliesValues)
    when << (deciding ? deciding->optionLabel(v.toVariant()) : v.toVariant().toString());
  const QString name = deciding ? deciding->label : s.appliesKey;
  const QString now = deciding ? deciding->optionLabel(value.toVariant()) : value.toVariant().toString();
  const QString list = when.size() <= 1 ? when.value(0)
                                        : QObject::tr("%1 or %2").arg(when.mid(0, when.size() - 1).join(QStringLiteral(", ")),
                                                                      when.last());
  return QObject::tr("Applies only when %1 is %2; now %3.").arg(name, list, now);
}

void showApplicability(QWidget* control, QWidget* label, const QString& reason) {
  // The control's own tooltip is kept aside once, so reasons never pile up.
  if (!control->property("baseToolTip").isValid()) control->setProperty("baseToolTip", control->toolTip());
  const QString base = control->property("baseToolTip").toString();
  QString tip = base;
  if (!reason.isEmpty())
    tip = base.startsWith(QLatin1Char('<')) ? base + QStringLiteral("<p><i>%1</i></p>").arg(reason.toHtmlEscaped())
                                            : base + QStringLiteral("\n\n") + reason;
  control->setToolTip(tip);
  control->setEnabled(reason.isEmpty());
  if (label) {
    label->setEnabled(reason.isEmpty());
    label->setToolTip(reason);
  }
}

// --- NumberSpinBox

NumberSpinBox::NumberSpinBox(QWidget* parent) : QDoubleSpinBox(parent) {
  setDecimals(15);  // values are rounded to this; the text shows significant digits
  setKeyboardTracking(false);
}

QString NumberSpinBox::textFromValue(double value) const { return locale().toString(value, 'g', 8); }

double NumberSpinBox::valueFromText(const QString& text) const {
  bool ok = false;
  const double v = locale().toDouble(text.trimmed(), &ok);
  return ok ? v : text.trimmed().toDouble();
}

QValidator::State NumberSpinBox::validate(QString& text, int&) const {
  const QString t = text.trimmed();
  if (!specialValueText().isEmpty() && t == specialValueText()) return QValidator::Acceptable;
  bool ok = false;
  double v = locale().toDouble(t, &ok);
  if (!ok) v = t.toDouble(&ok);
  if (ok) return v >= minimum() && v <= maximum() ? QValidator::Acceptable : QValidator::Intermediate;
  // A number being typed: "", "-", "1e", "1e-", "0."
  static const QRegularExpression partial(QStringLiteral("^[+-]?[0-9]*[.,]?[0-9]*([eE][+-]?[0-9]*)?$"));
  return partial.match(t).hasMatch() ? QValidator::Intermediate : QValidator::Invalid;
}

void NumberSpinBox::stepBy(int steps) {
  const double v = value();
  // A tenth of the value's own order of magnitude (0.05 -> 0.01, 5e-4 ->
  // 1e-4); going down from a power of ten takes the smaller one (0.1 -> 0.09).
  double step = singleStep();
  if (v != 0) step = std::pow(10.0, std::floor(std::log10(std::abs(v)) - (steps < 0 ? 1e-9 : 0.0)));
  else if (maximum() > 0) step = std::pow(10.0, std::floor(std::log10(std::min(1.0, maximum())))) / 10.0;
  setValue(std::clamp(v + steps * step, minimum(), maximum()));
  selectAll();
}

// --- IntListEdit

IntListEdit::IntListEdit(int size, int minimum, int maximum, QWidget* parent) : QWidget(parent) {
  auto* line = new QHBoxLayout(this);
  line->setContentsMargins(0, 0, 0, 0);
  for (int i = 0; i < size; ++i) {
    auto* box = new QSpinBox(this);
    box->setRange(minimum, maximum);
    connect(box, &QSpinBox::valueChanged, this, &IntListEdit::valueChanged);
    line->addWidget(box);
    boxes_ << box;
  }
}

QJsonArray IntListEdit::value() const {
  QJsonArray out;
  for (const QSpinBox* b : boxes_) out.append(b->value());
  return out;
}

void IntListEdit::setValue(const QJsonArray& value) {
  for (int i = 0; i < boxes_.size() && i < value.size(); ++i) boxes_[i]->setValue(value[i].toInt());
}
