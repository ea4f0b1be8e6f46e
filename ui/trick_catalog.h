// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QJsonValue>
#include <QList>
#include <QString>
#include <QStringList>
#include <QVariantList>

// One switchable trick as the GUI shows it: its config key, the control type,
// and the teaching texts of resources/tricks/tricks.json.
struct TrickInfo {
  QString key, group, label, type;  // type: bool | int | double | choice
  QVariantList options;             // for choice
  double minimum = 0, maximum = 0;
  QJsonValue defaultValue;
  QStringList backends;  // "cpu", "cuda": where the engine honours it
  int minDevices = 1;    // e.g. 2 for multi-GPU
  QString tooltip, what, why, whenNot, plot;

  bool honouredOn(const QString& backend) const { return backends.contains(backend); }
};

struct TrickGroup {
  QString id, title;
};

// The catalogue of tricks, read from the application resources.
class TrickCatalog {
 public:
  // Loads <data dir>/tricks/tricks.json; the catalogue is empty when that fails.
  static const TrickCatalog& instance();
  explicit TrickCatalog(const QByteArray& json);

  const QList<TrickGroup>& groups() const { return groups_; }
  const QList<TrickInfo>& tricks() const { return tricks_; }
  QList<TrickInfo> tricksInGroup(const QString& group) const;
  const TrickInfo* find(const QString& key) const;
  QStringList keys() const;

  // Rich text of the "learn more" pane for one trick.
  static QString learnMoreHtml(const TrickInfo& trick);

 private:
  QList<TrickGroup> groups_;
  QList<TrickInfo> tricks_;
};
