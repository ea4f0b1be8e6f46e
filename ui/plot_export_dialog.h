// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QString>

class LivePlot;
class QAbstractItemModel;
class QWidget;

// File dialogs in front of the exports (remembering the last folder in QSettings).
class PlotExportDialog {
 public:
  static void exportPlotImage(LivePlot* plot);
  static void exportPlotCsv(LivePlot* plot);
  static void exportTableCsv(QWidget* parent, const QAbstractItemModel* model, const QString& suggestedName);
};
