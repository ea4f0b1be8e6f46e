// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QJsonObject>
#include <QList>
#include <QString>

// A named set of configuration overrides (resources/presets/*.json), named
// by what it does; `source` names the article it comes from (for tooltips).
struct Preset {
  QString name, description, source;
  QString toolTip() const;  // description, then "From <source>." 
  bool resetTricks = true;  // put every trick back to its default first
  QJsonObject overrides;

  // The configuration this preset makes from `current` (keeps model, data set,
  // device and other non-trick settings unless the preset names them).
  QJsonObject applyTo(const QJsonObject& current, const QJsonObject& defaults) const;
};

class PresetLibrary {
 public:
  static QList<Preset> builtIn();  // from <data dir>/presets, in file-name order
  static Preset fromJson(const QJsonObject& object);
};
