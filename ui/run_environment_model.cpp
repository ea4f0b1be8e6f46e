// SPDX-License-Identifier: GPL-3.0-or-later
#include "run_environment_model.h"

#include <QJsonArray>

#include <algorithm>

#include "run_config.h"

namespace {

bool plain(const QJsonValue& v) { return !v.isObject() && !v.isArray(); }

QString entries(qsizetype n) {
  return n == 1 ? QObject::tr("1 entry") : QObject::tr("%1 entries").arg(n);
}

void addRows(QStandardItem* parent, const QString& key, const QJsonValue& value) {
  auto* name = new QStandardItem(key);
  auto* text = new QStandardItem;
  name->setEditable(false);
  text->setEditable(false);
  if (value.isObject()) {
    const QJsonObject o = value.toObject();
    text->setText(entries(o.size()));
    for (auto it = o.begin(); it != o.end(); ++it) addRows(name, it.key(), it.value());
  } else if (value.isArray()) {
    const QJsonArray a = value.toArray();
    if (std::all_of(a.begin(), a.end(), [](const QJsonValue& v) { return plain(v); })) {
      QStringList parts;
      for (const QJsonValue& v : a) parts << RunConfig::valueText(v);
      text->setText(parts.join(QStringLiteral(", ")));
    } else {
      text->setText(entries(a.size()));
      for (int i = 0; i < a.size(); ++i) addRows(name, QString::number(i), a.at(i));
    }
  } else {
    text->setText(RunConfig::valueText(value));
  }
  text->setToolTip(text->text());
  parent->appendRow({name, text});
}

}  // namespace

RunEnvironmentModel::RunEnvironmentModel(QObject* parent) : QStandardItemModel(parent) {
  setHorizontalHeaderLabels({tr("Key"), tr("Value")});
}

void RunEnvironmentModel::setEnvironment(const QJsonObject& environment) {
  if (environment == environment_) return;
  environment_ = environment;
  removeRows(0, rowCount());
  for (auto it = environment.begin(); it != environment.end(); ++it)
    addRows(invisibleRootItem(), it.key(), it.value());
}
