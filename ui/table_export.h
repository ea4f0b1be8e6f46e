// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QString>

class QAbstractItemModel;

// Tables (any item model's display text, with its horizontal headers) as CSV,
// Markdown or HTML.
class TableExport {
 public:
  static QString toCsv(const QAbstractItemModel* model);
  static QString toMarkdown(const QAbstractItemModel* model);
  static QString toHtml(const QAbstractItemModel* model);
  static bool writeCsv(const QAbstractItemModel* model, const QString& path, QString* error);
  static QString csvField(const QString& text);
};
