// SPDX-License-Identifier: GPL-3.0-or-later
#include "run_config.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QSaveFile>
#include <QSet>

#include "engine/train/config.h"
#include "engine/train/config_file.h"
#include "trick_catalog.h"

namespace RunConfig {

QJsonObject defaults() {
  QJsonObject c;
  for (const SettingInfo& s : TrickCatalog::instance().settings()) c.insert(s.key, s.defaultValue);
  return c;
}

QJsonObject merged(const QJsonObject& base, const QJsonObject& overrides) {
  QJsonObject out = base;
  for (auto it = overrides.begin(); it != overrides.end(); ++it) out.insert(it.key(), it.value());
  return out;
}

namespace {
nlohmann::json toEngine(const QJsonValue& value) {
  return nlohmann::json::parse(QJsonDocument(QJsonArray{value}).toJson(QJsonDocument::Compact).toStdString()).at(0);
}

QJsonValue fromEngine(const nlohmann::json& value) {
  return QJsonDocument::fromJson(QByteArray::fromStdString(nlohmann::json::array({value}).dump())).array().at(0);
}
}  // namespace

nlohmann::json validated(const QJsonObject& config, const QString& source) {
  QJsonObject known;
  for (auto it = config.begin(); it != config.end(); ++it)
    if (tb::find_config_key(it.key().toStdString())) known.insert(it.key(), it.value());
  return tb::validate_config(toEngine(known), source.toStdString());
}

Checked check(const QJsonObject& overrides, const QString& source, const QJsonObject& base) {
  Checked out;
  const std::string where = source.toStdString();
  for (auto it = overrides.begin(); it != overrides.end(); ++it) {
    try {
      out.accepted.insert(it.key(), fromEngine(tb::check_config_entry(it.key().toStdString(), toEngine(it.value()), where)));
    } catch (const std::exception& e) {
      out.refused << QString::fromUtf8(e.what());
    }
  }
  // The rules between keys (epochs and max_steps both 0...) on what would be used.
  try {
    (void)validated(merged(base, out.accepted), source);
  } catch (const std::exception& e) {
    out.refused << QString::fromUtf8(e.what());
    out.accepted = {};
  }
  return out;
}

QStringList differingKeys(const QList<QJsonObject>& configs) {
  QSet<QString> all;
  for (const QJsonObject& c : configs)
    for (const QString& k : c.keys()) all.insert(k);
  QStringList out;
  for (const QString& k : all) {
    bool same = true;
    for (int i = 1; i < configs.size() && same; ++i) {
      if (configs[i].contains(k) != configs[0].contains(k) || configs[i].value(k) != configs[0].value(k))
        same = false;
    }
    if (!same) out << k;
  }
  out.sort();
  return out;
}

QString valueText(const QJsonValue& v) {
  switch (v.type()) {
    case QJsonValue::Bool: return v.toBool() ? QStringLiteral("true") : QStringLiteral("false");
    case QJsonValue::Double: return QString::number(v.toDouble(), 'g', 8);
    case QJsonValue::String: return v.toString();
    case QJsonValue::Array:
      return QString::fromUtf8(QJsonDocument(v.toArray()).toJson(QJsonDocument::Compact));
    case QJsonValue::Object:
      return QString::fromUtf8(QJsonDocument(v.toObject()).toJson(QJsonDocument::Compact));
    case QJsonValue::Null: return QStringLiteral("null");
    default: return QStringLiteral("—");
  }
}

bool save(const QJsonObject& config, const QString& path, QString* error) {
  QSaveFile f(path);
  if (!f.open(QIODevice::WriteOnly)) {
    if (error) *error = f.errorString();
    return false;
  }
  f.write(QJsonDocument(config).toJson(QJsonDocument::Indented));
  if (!f.commit()) {
    if (error) *error = f.errorString();
    return false;
  }
  return true;
}

// The engine's reader (tb::read_config_file), so a file is refused in the
// same words on the command line and here: a folder, an empty file, where the
// JSON stops, a number too large and its key.
bool load(const QString& path, QJsonObject* config, QString* error) {
  try {
    *config = fromEngine(tb::read_config_file(path.toStdString())).toObject();
    return true;
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return false;
  }
}

}  // namespace RunConfig
