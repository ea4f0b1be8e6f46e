// SPDX-License-Identifier: GPL-3.0-or-later
#include "trick_catalog.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QObject>
#include <QSet>

#include <algorithm>

#include "engine/train/config.h"

#include "install_paths.h"
#include "run_config.h"

static QByteArray readResource(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return {};
  return f.readAll();
}

const TrickCatalog& TrickCatalog::instance() {
  // The GUI links the engine library, so it reads the very JSON that
  // `trainbench-engine config --schema` prints without waiting for a process.
  static const TrickCatalog catalog(QByteArray::fromStdString(tb::config_schema_json().dump()),
                                    readResource(InstallPaths::dataFile(QStringLiteral("tricks/tricks.json"))),
                                    readResource(InstallPaths::dataFile(QStringLiteral("measurement/costs.json"))));
  return catalog;
}

namespace {
// The control type the GUI uses for a schema entry.
QString controlType(const QJsonObject& entry) {
  const QString type = entry.value(QLatin1String("type")).toString();
  if (!entry.value(QLatin1String("choices")).toArray().isEmpty()) return QStringLiteral("choice");
  if (type == QLatin1String("float")) return QStringLiteral("double");
  return type;  // bool, int, string, int_list
}
}  // namespace

TrickCatalog::TrickCatalog(const QByteArray& schema, const QByteArray& texts, const QByteArray& costs) {
  const QJsonObject root = QJsonDocument::fromJson(schema).object();
  QSet<QString> trickGroups;
  for (const QJsonValue& g : root.value(QLatin1String("groups")).toArray()) {
    const QJsonObject o = g.toObject();
    const TrickGroup group{o.value(QLatin1String("id")).toString(), o.value(QLatin1String("title")).toString()};
    if (!o.value(QLatin1String("tricks")).toBool()) {
      runGroups_.append(group);
      continue;
    }
    groups_.append(group);
    trickGroups.insert(group.id);
  }
  const QJsonObject textsByKey = QJsonDocument::fromJson(texts).object().value(QLatin1String("texts")).toObject();
  for (const QJsonValue& v : root.value(QLatin1String("keys")).toArray()) {
    const QJsonObject o = v.toObject();
    SettingInfo s;
    s.key = o.value(QLatin1String("key")).toString();
    s.group = o.value(QLatin1String("group")).toString();
    s.type = controlType(o);
    s.options = o.value(QLatin1String("choices")).toArray().toVariantList();
    s.minimum = o.value(QLatin1String("min")).toDouble(0);
    s.maximum = o.value(QLatin1String("max")).toDouble(1e9);
    s.defaultValue = o.value(QLatin1String("default"));
    s.backends = backendsFrom(o.value(QLatin1String("backends")));
    s.minDevices = o.value(QLatin1String("min_devices")).toInt(1);
    s.help = o.value(QLatin1String("help")).toString();
    s.zeroMeans = o.value(QLatin1String("zero_means")).toString();
    const QJsonObject names = o.value(QLatin1String("choice_labels")).toObject();
    for (auto it = names.begin(); it != names.end(); ++it) s.optionLabels.append({it.key(), it.value().toString()});
    const QJsonObject applies = o.value(QLatin1String("applies_when")).toObject();
    s.appliesKey = applies.value(QLatin1String("key")).toString();
    s.appliesValues = applies.value(QLatin1String("values")).toArray();
    s.label = o.value(QLatin1String("label")).toString();
    if (s.label.isEmpty()) s.label = s.key;
    if (trickGroups.contains(s.group)) {
      const QJsonObject t = textsByKey.value(s.key).toObject();
      if (t.isEmpty()) problems_ << QStringLiteral("trick '%1' has no teaching text in tricks.json").arg(s.key);
      s.tooltip = t.value(QLatin1String("tooltip")).toString();
      s.what = t.value(QLatin1String("what")).toString();
      s.why = t.value(QLatin1String("why")).toString();
      s.whenNot = t.value(QLatin1String("when_not")).toString();
      s.plot = t.value(QLatin1String("plot")).toString();
      if (!t.isEmpty())
        for (const char* field : {"tooltip", "what", "why", "when_not", "plot"})
          if (t.value(QLatin1String(field)).toString().isEmpty())
            problems_ << QStringLiteral("trick '%1': the text '%2' is empty").arg(s.key, QLatin1String(field));
      tricks_.append(s);
    }
    settings_.append(s);
  }
  for (auto it = textsByKey.begin(); it != textsByKey.end(); ++it)
    if (!find(it.key())) problems_ << QStringLiteral("tricks.json has a text for '%1', which is no trick key").arg(it.key());
  const QJsonObject costsByKey = QJsonDocument::fromJson(costs).object().value(QLatin1String("costs")).toObject();
  for (auto it = costsByKey.begin(); it != costsByKey.end(); ++it) {
    auto s = std::find_if(settings_.begin(), settings_.end(), [&](const SettingInfo& x) { return x.key == it.key(); });
    if (s == settings_.end()) {
      problems_ << QStringLiteral("measurement/costs.json has a cost for '%1', which is no setting").arg(it.key());
      continue;
    }
    s->costListed = true;
    for (const QJsonValue& v : it.value().toArray()) {
      const QJsonObject m = v.toObject();
      const QString note = m.value(QLatin1String("note")).toString();
      s->measuredCosts << m.value(QLatin1String("text")).toString() + (note.isEmpty() ? QString() : QStringLiteral(": ") + note);
    }
    for (TrickInfo& t : tricks_)
      if (t.key == s->key) t.measuredCosts = s->measuredCosts, t.costListed = true;
  }
}

QString SettingInfo::measuredCostText() const {
  if (!costListed) return {};
  if (measuredCosts.isEmpty()) return QObject::tr("Measured cost against measurement off: not measured yet.");
  return QObject::tr("Measured cost against measurement off:") + QStringLiteral("\n\u2022 ") +
         measuredCosts.join(QStringLiteral("\n\u2022 "));
}

QStringList TrickCatalog::backendsFrom(const QJsonValue& b) {
  QStringList out;
  if (b.isArray())
    for (const QJsonValue& v : b.toArray()) out << v.toString();
  else if (b.toString() == QLatin1String("all"))
    out << QStringLiteral("cpu") << QStringLiteral("cuda");
  else if (b.isString())
    out << b.toString();
  return out;
}

QString SettingInfo::optionLabel(const QVariant& option) const {
  // Choices are named by their value as text: "sgd", or "0" for a number.
  const QString text = option.typeId() == QMetaType::Double ? QString::number(option.toDouble()) : option.toString();
  for (const auto& [value, name] : optionLabels)
    if (value == text) return name;
  return text;
}

QString SettingInfo::valueText(const QJsonValue& value) const {
  if (value.isBool()) return value.toBool() ? QObject::tr("on") : QObject::tr("off");
  if (!options.isEmpty()) return optionLabel(value.toVariant());
  if (value.isDouble() && value.toDouble() == 0 && !zeroMeans.isEmpty()) return zeroMeans;
  return RunConfig::valueText(value);
}

bool SettingInfo::appliesWith(const QJsonValue& value) const {
  if (appliesKey.isEmpty()) return true;
  for (const QJsonValue& v : appliesValues)
    if (v == value) return true;
  return false;
}

QList<SettingInfo> TrickCatalog::settingsInGroup(const QString& group) const {
  QList<SettingInfo> out;
  for (const SettingInfo& s : settings_)
    if (s.group == group) out.append(s);
  return out;
}

QList<TrickInfo> TrickCatalog::tricksInGroup(const QString& group) const {
  QList<TrickInfo> out;
  for (const TrickInfo& t : tricks_)
    if (t.group == group) out.append(t);
  return out;
}

const TrickInfo* TrickCatalog::find(const QString& key) const {
  for (const TrickInfo& t : tricks_)
    if (t.key == key) return &t;
  return nullptr;
}

const SettingInfo* TrickCatalog::setting(const QString& key) const {
  for (const SettingInfo& s : settings_)
    if (s.key == key) return &s;
  return nullptr;
}

QStringList TrickCatalog::keys() const {
  QStringList out;
  for (const TrickInfo& t : tricks_) out << t.key;
  return out;
}

QString TrickCatalog::learnMoreHtml(const TrickInfo& t) {
  auto para = [](const QString& title, const QString& text) {
    return QStringLiteral("<h4>%1</h4><p>%2</p>").arg(title, text.toHtmlEscaped());
  };
  QString html = QStringLiteral("<h3>%1</h3><p><code>%2</code></p>")
                     .arg(t.label.toHtmlEscaped(), t.key.toHtmlEscaped());
  html += para(QObject::tr("What it does"), t.what);
  html += para(QObject::tr("Why it helps"), t.why);
  html += para(QObject::tr("When it does not"), t.whenNot);
  html += para(QObject::tr("Which plot should move"), t.plot);
  html += QStringLiteral("<p><i>%1 %2</i></p>")
              .arg(QObject::tr("Honoured on:"), t.backends.join(QStringLiteral(", ")).toHtmlEscaped());
  return html;
}
