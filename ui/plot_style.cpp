// SPDX-License-Identifier: GPL-3.0-or-later
#include "plot_style.h"

#include <qcustomplot.h>

#include <QPalette>
#include <QVBoxLayout>

namespace PlotStyle {

QCustomPlot* addTitledPlot(QWidget* owner, const QString& title, int minHeight) {
  auto* layout = new QVBoxLayout(owner);
  layout->setContentsMargins(0, 0, 0, 0);
  auto* plot = new QCustomPlot(owner);
  plot->setMinimumHeight(minHeight);
  layout->addWidget(plot);
  plot->plotLayout()->insertRow(0);
  QFont titleFont = owner->font();
  titleFont.setBold(true);
  plot->plotLayout()->addElement(0, 0, new QCPTextElement(plot, title, titleFont));
  return plot;
}

void applyPalette(QCustomPlot* plot, const QPalette& palette) {
  const QColor bg = palette.color(QPalette::Base), fg = palette.color(QPalette::Text);
  plot->setBackground(bg);
  for (QCPAxis* axis : {plot->xAxis, plot->yAxis, plot->xAxis2, plot->yAxis2}) {
    axis->setBasePen(QPen(fg));
    axis->setTickPen(QPen(fg));
    axis->setSubTickPen(QPen(fg));
    axis->setTickLabelColor(fg);
    axis->setLabelColor(fg);
  }
  if (auto* t = qobject_cast<QCPTextElement*>(plot->plotLayout()->element(0, 0))) t->setTextColor(fg);
}

}  // namespace PlotStyle
