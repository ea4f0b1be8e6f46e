// SPDX-License-Identifier: GPL-3.0-or-later
#include "table_export.h"

#include <QAbstractItemModel>
#include <QSaveFile>
#include <QStringList>

static QString headerText(const QAbstractItemModel* m, int column) {
  // A header shown on two lines is one line in a file.
  return m->headerData(column, Qt::Horizontal, Qt::DisplayRole).toString().replace(QLatin1Char('\n'), QLatin1Char(' '));
}

static QString cellText(const QAbstractItemModel* m, int row, int column) {
  return m->data(m->index(row, column), Qt::DisplayRole).toString();
}

QString TableExport::csvField(const QString& text) {
  if (text.contains(QLatin1Char(',')) || text.contains(QLatin1Char('"')) || text.contains(QLatin1Char('\n'))) {
    QString quoted = text;
    quoted.replace(QLatin1Char('"'), QStringLiteral("\"\""));
    return QLatin1Char('"') + quoted + QLatin1Char('"');
  }
  return text;
}

QString TableExport::toCsv(const QAbstractItemModel* m) {
  QString out;
  QStringList fields;
  for (int c = 0; c < m->columnCount(); ++c) fields << csvField(headerText(m, c));
  out += fields.join(QLatin1Char(',')) + QLatin1Char('\n');
  for (int r = 0; r < m->rowCount(); ++r) {
    fields.clear();
    for (int c = 0; c < m->columnCount(); ++c) fields << csvField(cellText(m, r, c));
    out += fields.join(QLatin1Char(',')) + QLatin1Char('\n');
  }
  return out;
}

QString TableExport::toMarkdown(const QAbstractItemModel* m) {
  auto cell = [](QString s) { return s.replace(QLatin1Char('|'), QStringLiteral("\\|")).replace(QLatin1Char('\n'), QLatin1Char(' ')); };
  QStringList header, rule;
  for (int c = 0; c < m->columnCount(); ++c) {
    header << cell(headerText(m, c));
    rule << QStringLiteral("---");
  }
  QString out = QStringLiteral("| ") + header.join(QStringLiteral(" | ")) + QStringLiteral(" |\n| ") +
                rule.join(QStringLiteral(" | ")) + QStringLiteral(" |\n");
  for (int r = 0; r < m->rowCount(); ++r) {
    QStringList row;
    for (int c = 0; c < m->columnCount(); ++c) row << cell(cellText(m, r, c));
    out += QStringLiteral("| ") + row.join(QStringLiteral(" | ")) + QStringLiteral(" |\n");
  }
  return out;
}

QString TableExport::toHtml(const QAbstractItemModel* m) {
  QString out = QStringLiteral("<table>\n<thead><tr>");
  for (int c = 0; c < m->columnCount(); ++c)
    out += QStringLiteral("<th>") + headerText(m, c).toHtmlEscaped() + QStringLiteral("</th>");
  out += QStringLiteral("</tr></thead>\n<tbody>\n");
  for (int r = 0; r < m->rowCount(); ++r) {
    out += QStringLiteral("<tr>");
    for (int c = 0; c < m->columnCount(); ++c)
      out += QStringLiteral("<td>") + cellText(m, r, c).toHtmlEscaped() + QStringLiteral("</td>");
    out += QStringLiteral("</tr>\n");
  }
  out += QStringLiteral("</tbody>\n</table>\n");
  return out;
}

bool TableExport::writeCsv(const QAbstractItemModel* model, const QString& path, QString* error) {
  QSaveFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Text)) {
    if (error) *error = f.errorString();
    return false;
  }
  f.write(toCsv(model).toUtf8());
  if (!f.commit()) {
    if (error) *error = f.errorString();
    return false;
  }
  return true;
}
