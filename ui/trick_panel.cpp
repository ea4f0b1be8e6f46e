// SPDX-License-Identifier: GPL-3.0-or-later
#include "trick_panel.h"

#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QScrollArea>
#include <QToolButton>
#include <QVBoxLayout>

#include "setting_controls.h"
#include "trick_catalog.h"

TrickPanel::TrickPanel(QWidget* parent) : QWidget(parent) {
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(0, 0, 0, 0);
  auto* scroll = new QScrollArea(this);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  auto* canvas = new QWidget(scroll);
  auto* column = new QVBoxLayout(canvas);
  scroll->setWidget(canvas);
  outer->addWidget(scroll);

  const TrickCatalog& catalog = TrickCatalog::instance();
  for (const TrickGroup& group : catalog.groups()) {
    auto* box = new QGroupBox(group.title, canvas);
    auto* form = new QVBoxLayout(box);
    form->setSpacing(2);
    for (const TrickInfo& t : catalog.tricksInGroup(group.id)) {
      auto* line = new QHBoxLayout;
      // Type, range, choices, their names and default are the engine's (its settings table).
      QWidget* control = makeSettingControl(t, box);
      QLabel* label = nullptr;
      if (t.type == QLatin1String("bool")) {
        line->addWidget(control, 1);
      } else {
        label = new QLabel(t.label + QLatin1Char(':'), box);
        line->addWidget(label, 1);
        control->setMinimumWidth(90);
        line->addWidget(control);
      }
      onSettingControlChanged(control, this, [this, key = t.key] {
        if (!updating_) {
          rows_[key].userValue = controlValue(key);
          updateApplicability();
          emit changed();
          emit learnMoreRequested(key);
        }
      });
      control->setObjectName(QStringLiteral("trick_") + t.key);
      const QString cost = t.measuredCostText().toHtmlEscaped().replace(QLatin1Char('\n'), QStringLiteral("<br>"));
      control->setToolTip(QStringLiteral("<p><b>%1</b> (<code>%2</code>)</p><p>%3</p><p><i>%4</i></p>%5")
                              .arg(t.label.toHtmlEscaped(), t.key, t.tooltip.toHtmlEscaped(),
                                   tr("Watch: %1").arg(t.plot).toHtmlEscaped(),
                                   cost.isEmpty() ? QString() : QStringLiteral("<p>%1</p>").arg(cost)));
      auto* learn = new QToolButton(box);
      learn->setText(QStringLiteral("?"));
      learn->setAutoRaise(true);
      learn->setToolTip(tr("Learn more about %1").arg(t.label));
      connect(learn, &QToolButton::clicked, this, [this, key = t.key] { emit learnMoreRequested(key); });
      line->addWidget(learn);
      form->addLayout(line);
      auto* reason = new QLabel(box);
      reason->setObjectName(QStringLiteral("reason_") + t.key);
      reason->setWordWrap(true);
      QFont small = reason->font();
      small.setPointSizeF(small.pointSizeF() * 0.9);
      small.setItalic(true);
      reason->setFont(small);
      reason->setForegroundRole(QPalette::PlaceholderText);
      reason->setVisible(false);
      form->addWidget(reason);

      Row row;
      row.control = control;
      row.label = label;
      row.reason = reason;
      rows_.insert(t.key, row);
      support_.insert(t.key, t.backends);
      setControlValue(t.key, t.defaultValue);
      rows_[t.key].userValue = t.defaultValue;
    }
    column->addWidget(box);
  }
  column->addStretch(1);
  updateAvailability();
}

QWidget* TrickPanel::control(const QString& key) const {
  auto it = rows_.constFind(key);
  return it == rows_.constEnd() ? nullptr : it->control;
}

QJsonValue TrickPanel::controlValue(const QString& key) const { return settingControlValue(control(key)); }

void TrickPanel::setControlValue(const QString& key, const QJsonValue& value) {
  const bool wasUpdating = updating_;
  updating_ = true;
  setSettingControlValue(control(key), value);
  updating_ = wasUpdating;
}

void TrickPanel::setValues(const QJsonObject& config) {
  for (auto it = rows_.begin(); it != rows_.end(); ++it) {
    if (!config.contains(it.key())) continue;
    it->userValue = config.value(it.key());
    if (it->enabled) setControlValue(it.key(), it->userValue);
  }
  updateApplicability();
  emit changed();
}

QJsonObject TrickPanel::values() const {
  QJsonObject out;
  for (auto it = rows_.constBegin(); it != rows_.constEnd(); ++it) out.insert(it.key(), controlValue(it.key()));
  return out;
}

void TrickPanel::setDeviceContext(const QString& backend, int gpuCount) {
  backend_ = backend;
  gpuCount_ = gpuCount;
  updateAvailability();
}

void TrickPanel::setBackendSupport(const QMap<QString, QStringList>& support) {
  for (auto it = support.constBegin(); it != support.constEnd(); ++it)
    if (rows_.contains(it.key())) support_[it.key()] = it.value();
  updateAvailability();
}

QString TrickPanel::disabledReason(const QString& key) const {
  const TrickInfo* t = TrickCatalog::instance().find(key);
  const QStringList backends = support_.value(key);
  if (!backends.contains(backend_)) {
    if (backend_ == QLatin1String("cpu"))
      return tr("Needs a CUDA GPU (not used on the CPU).");
    return tr("Not honoured by the %1 backend.").arg(backend_);
  }
  if (t && t->minDevices > 1 && gpuCount_ < t->minDevices)
    return tr("Needs at least %1 GPUs; the engine found %2.").arg(t->minDevices).arg(gpuCount_);
  return {};
}

bool TrickPanel::isTrickEnabled(const QString& key) const {
  auto it = rows_.constFind(key);
  return it != rows_.constEnd() && it->enabled;
}

void TrickPanel::updateAvailability() {
  bool anyChange = false;
  for (auto it = rows_.begin(); it != rows_.end(); ++it) {
    const QString reason = disabledReason(it.key());
    const bool enable = reason.isEmpty();
    it->reason->setText(reason);
    it->reason->setVisible(!enable);
    if (enable == it->enabled) continue;
    anyChange = true;
    it->enabled = enable;
    it->control->setEnabled(enable);
    const TrickInfo* t = TrickCatalog::instance().find(it.key());
    setControlValue(it.key(), enable ? it->userValue : (t ? t->defaultValue : QJsonValue()));
  }
  updateApplicability();
  if (anyChange) emit changed();
}

void TrickPanel::setOtherValues(const QJsonObject& values) {
  others_ = values;
  updateApplicability();
}

QString TrickPanel::notApplicableReason(const QString& key) const {
  const TrickInfo* t = TrickCatalog::instance().find(key);
  if (!t || t->appliesKey.isEmpty()) return {};
  const QJsonValue deciding = rows_.contains(t->appliesKey) ? controlValue(t->appliesKey) : others_.value(t->appliesKey);
  return ::notApplicableReason(*t, TrickCatalog::instance().setting(t->appliesKey), deciding);
}

void TrickPanel::updateApplicability() {
  // Only tricks the device can use: the others are disabled with their reason.
  for (auto it = rows_.begin(); it != rows_.end(); ++it)
    if (it->enabled) showApplicability(it->control, it->label, notApplicableReason(it.key()));
}
