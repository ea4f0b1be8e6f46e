// SPDX-License-Identifier: GPL-3.0-or-later
#include "trick_catalog.h"

#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QObject>

#include "install_paths.h"

static QByteArray readResource(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return {};
  return f.readAll();
}

const TrickCatalog& TrickCatalog::instance() {
  static const TrickCatalog catalog(readResource(InstallPaths::dataFile(QStringLiteral("tricks/tricks.json"))));
  return catalog;
}

TrickCatalog::TrickCatalog(const QByteArray& json) {
  const QJsonObject root = QJsonDocument::fromJson(json).object();
  for (const QJsonValue& g : root.value(QLatin1String("groups")).toArray()) {
    const QJsonObject o = g.toObject();
    groups_.append({o.value(QLatin1String("id")).toString(), o.value(QLatin1String("title")).toString()});
  }
  for (const QJsonValue& t : root.value(QLatin1String("tricks")).toArray()) {
    const QJsonObject o = t.toObject();
    TrickInfo info;
    info.key = o.value(QLatin1String("key")).toString();
    info.group = o.value(QLatin1String("group")).toString();
    info.label = o.value(QLatin1String("label")).toString();
    info.type = o.value(QLatin1String("type")).toString();
    info.options = o.value(QLatin1String("options")).toArray().toVariantList();
    info.minimum = o.value(QLatin1String("min")).toDouble(0);
    info.maximum = o.value(QLatin1String("max")).toDouble(1e9);
    info.defaultValue = o.value(QLatin1String("default"));
    for (const QJsonValue& b : o.value(QLatin1String("backends")).toArray())
      info.backends << b.toString();
    info.minDevices = o.value(QLatin1String("min_devices")).toInt(1);
    info.tooltip = o.value(QLatin1String("tooltip")).toString();
    info.what = o.value(QLatin1String("what")).toString();
    info.why = o.value(QLatin1String("why")).toString();
    info.whenNot = o.value(QLatin1String("when_not")).toString();
    info.plot = o.value(QLatin1String("plot")).toString();
    tricks_.append(info);
  }
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
