// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QByteArray>
#include <QJsonArray>
#include <QJsonValue>
#include <QList>
#include <QPair>
#include <QString>
#include <QStringList>
#include <QVariantList>

// One configuration key as the GUI shows it. Everything but the teaching
// texts comes from the engine's settings table (`trainbench-engine config
// --schema`); the texts of a trick come from resources/tricks/tricks.json,
// keyed by the same name.
struct SettingInfo {
  QString key, group, type;  // type: bool | int | double | choice | string | int_list
  QVariantList options;      // for choice
  QList<QPair<QString, QString>> optionLabels;  // choice (as text) -> display name, where the table names one
  double minimum = 0, maximum = 0;
  QJsonValue defaultValue;
  QStringList backends;  // "cpu", "cuda": where the engine honours it
  int minDevices = 1;    // e.g. 2 for multi-GPU
  QString help;          // the engine's one-line help
  QString zeroMeans;     // what 0 means where it is special ("all", "off")
  // The key takes effect only while appliesKey has one of appliesValues
  // (the table's applies_when); empty appliesKey: always.
  QString appliesKey;
  QJsonArray appliesValues;
  // The display name: the table's label, else the key. Teaching texts
  // (tricks only):
  QString label, tooltip, what, why, whenNot, plot;
  // The mode this key selects, measured against measurement off
  // (<data dir>/measurement/costs.json, from bench/results/): one line per
  // measurement with where and when; costListed: the file lists the key
  // (an empty list then means "not measured yet").
  QStringList measuredCosts;
  bool costListed = false;

  bool honouredOn(const QString& backend) const { return backends.contains(backend); }
  // The display name of one choice (the value itself when the table names none).
  QString optionLabel(const QVariant& option) const;
  // A value in words: "on"/"off", a choice's name, what 0 means, else the value.
  QString valueText(const QJsonValue& value) const;
  // Whether the key applies while appliesKey has `value`.
  bool appliesWith(const QJsonValue& value) const;
  // The measured cost as a tooltip paragraph (plain text); empty when unlisted.
  QString measuredCostText() const;
};
using TrickInfo = SettingInfo;  // a setting of a trick group

struct TrickGroup {
  QString id, title;
};

// The settings the engine declares, with the teaching texts of its tricks.
class TrickCatalog {
 public:
  // The engine's table as linked into this program (the same JSON as
  // `config --schema`) with <data dir>/tricks/tricks.json and
  // <data dir>/measurement/costs.json.
  static const TrickCatalog& instance();
  // schema: the JSON of `config --schema`; texts: tricks.json; costs:
  // measurement/costs.json (optional).
  TrickCatalog(const QByteArray& schema, const QByteArray& texts, const QByteArray& costs = {});

  const QList<TrickGroup>& groups() const { return groups_; }  // the trick groups
  const QList<TrickGroup>& runGroups() const { return runGroups_; }  // the others (run, data...)
  QList<SettingInfo> settingsInGroup(const QString& group) const;  // in table order
  const QList<TrickInfo>& tricks() const { return tricks_; }   // in schema order
  QList<TrickInfo> tricksInGroup(const QString& group) const;
  const TrickInfo* find(const QString& key) const;  // a trick, or nullptr
  QStringList keys() const;                         // the trick keys

  const QList<SettingInfo>& settings() const { return settings_; }  // every key
  const SettingInfo* setting(const QString& key) const;             // any key, or nullptr

  // Where the schema and the texts disagree: a trick without texts (or with
  // an empty one), a text naming no trick. Empty when they agree.
  QStringList problems() const { return problems_; }

  // A schema entry's "backends": "all" (every backend), one name, or a list.
  static QStringList backendsFrom(const QJsonValue& backends);

  // Rich text of the "learn more" pane for one trick.
  static QString learnMoreHtml(const TrickInfo& trick);

 private:
  QList<TrickGroup> groups_, runGroups_;
  QList<TrickInfo> tricks_;
  QList<SettingInfo> settings_;
  QStringList problems_;
};
