// SPDX-License-Identifier: GPL-3.0-or-later
#include "preset_library.h"

#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QObject>

#include "install_paths.h"
#include "run_config.h"
#include "trick_catalog.h"

QJsonObject Preset::applyTo(const QJsonObject& current, const QJsonObject& defaults) const {
  QJsonObject out = current;
  if (resetTricks) {
    for (const TrickInfo& t : TrickCatalog::instance().tricks())
      out.insert(t.key, defaults.contains(t.key) ? defaults.value(t.key) : t.defaultValue);
    if (defaults.contains(QLatin1String("batch_size")))
      out.insert(QStringLiteral("batch_size"), defaults.value(QLatin1String("batch_size")));
  }
  return RunConfig::merged(out, overrides);
}

QString Preset::toolTip() const {
  if (source.isEmpty()) return description;
  return QObject::tr("%1\n\nFrom %2.").arg(description, source);
}

Preset PresetLibrary::fromJson(const QJsonObject& o) {
  Preset p;
  p.name = o.value(QLatin1String("name")).toString();
  p.description = o.value(QLatin1String("description")).toString();
  p.source = o.value(QLatin1String("source")).toString();
  p.resetTricks = o.value(QLatin1String("reset_tricks")).toBool(true);
  p.overrides = o.value(QLatin1String("overrides")).toObject();
  return p;
}

QList<Preset> PresetLibrary::builtIn() {
  QList<Preset> out;
  QDir dir(InstallPaths::dataFile(QStringLiteral("presets")));
  for (const QString& file : dir.entryList({QStringLiteral("*.json")}, QDir::Files, QDir::Name)) {
    QFile f(dir.filePath(file));
    if (!f.open(QIODevice::ReadOnly)) continue;
    const QJsonObject o = QJsonDocument::fromJson(f.readAll()).object();
    if (!o.isEmpty()) out.append(fromJson(o));
  }
  return out;
}
