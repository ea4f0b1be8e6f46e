// SPDX-License-Identifier: GPL-3.0-or-later
#include "plot_export_dialog.h"

#include <QFileDialog>
#include <QFileInfo>
#include <QMessageBox>
#include <QSettings>
#include <QStandardPaths>

#include "live_plot.h"
#include "table_export.h"

static QString lastFolder() {
  return QSettings().value(QStringLiteral("export/folder"),
                           QStandardPaths::writableLocation(QStandardPaths::DocumentsLocation))
      .toString();
}

static void rememberFolder(const QString& file) {
  QSettings().setValue(QStringLiteral("export/folder"), QFileInfo(file).absolutePath());
}

static QString safeName(QString name) {
  for (QChar& c : name)
    if (!c.isLetterOrNumber() && c != QLatin1Char('-')) c = QLatin1Char('_');
  return name;
}

void PlotExportDialog::exportPlotImage(LivePlot* plot) {
  const QString path = QFileDialog::getSaveFileName(
      plot, QObject::tr("Export plot"), lastFolder() + QLatin1Char('/') + safeName(plot->title()) + QStringLiteral(".png"),
      QObject::tr("PNG image (*.png);;SVG drawing (*.svg);;PDF document (*.pdf)"));
  if (path.isEmpty()) return;
  rememberFolder(path);
  QString error;
  if (!plot->exportImage(path, 1200, 700, &error))
    QMessageBox::warning(plot, QObject::tr("Export failed"), error);
}

void PlotExportDialog::exportPlotCsv(LivePlot* plot) {
  const QString path = QFileDialog::getSaveFileName(
      plot, QObject::tr("Export plot data"), lastFolder() + QLatin1Char('/') + safeName(plot->title()) + QStringLiteral(".csv"),
      QObject::tr("CSV file (*.csv)"));
  if (path.isEmpty()) return;
  rememberFolder(path);
  QString error;
  if (!plot->exportCsv(path, &error)) QMessageBox::warning(plot, QObject::tr("Export failed"), error);
}

void PlotExportDialog::exportTableCsv(QWidget* parent, const QAbstractItemModel* model, const QString& suggestedName) {
  const QString path = QFileDialog::getSaveFileName(
      parent, QObject::tr("Export table"), lastFolder() + QLatin1Char('/') + safeName(suggestedName) + QStringLiteral(".csv"),
      QObject::tr("CSV file (*.csv)"));
  if (path.isEmpty()) return;
  rememberFolder(path);
  QString error;
  if (!TableExport::writeCsv(model, path, &error)) QMessageBox::warning(parent, QObject::tr("Export failed"), error);
}
