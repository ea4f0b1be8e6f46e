// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QJsonObject>
#include <QString>
#include <QStringList>
#include <nlohmann/json.hpp>

// Helpers for the flat run-configuration JSON object the engine reads.
namespace RunConfig {

// Every key with the engine's default, from its settings table (the same
// values as `trainbench-engine config --defaults`).
QJsonObject defaults();

// base with every key of overrides replaced.
QJsonObject merged(const QJsonObject& base, const QJsonObject& overrides);

// Keys whose values differ between any of the configs (union of keys; a key
// missing from one config counts as different). Sorted.
QStringList differingKeys(const QList<QJsonObject>& configs);

// Compact text of one value for tables ("true", "0.1", "[1,28,28]").
QString valueText(const QJsonValue& value);

// What the engine's settings table accepts of a configuration (or part of
// one), checked key by key with the engine's own rules
// (tb::check_config_entry), then as a whole merged onto base (the cross-key
// rules of tb::validate_config). refused: one line per entry that is not
// taken, naming the key, the value and why, in the engine's words.
struct Checked {
  QJsonObject accepted;  // values as the engine stores them
  QStringList refused;
};
// source prefixes the messages (a file name, "saved settings").
Checked check(const QJsonObject& overrides, const QString& source, const QJsonObject& base = defaults());

// The configuration as the engine validates it (tb::validate_config), of the
// keys its settings table has; throws the engine's error naming what is wrong.
nlohmann::json validated(const QJsonObject& config, const QString& source);

// Read/write a configuration file; on failure return false and set *error.
bool save(const QJsonObject& config, const QString& path, QString* error);
bool load(const QString& path, QJsonObject* config, QString* error);

}  // namespace RunConfig
