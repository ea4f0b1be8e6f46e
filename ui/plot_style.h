// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QString>

class QCustomPlot;
class QPalette;
class QWidget;

// What every plot of the workbench shares: a QCustomPlot filling its owner
// with a bold title row, and the owner's palette on background, axes and title
// (so dark palettes read as well as light ones).
namespace PlotStyle {

// A QCustomPlot in a margin-free vertical layout of `owner`, minimum height
// `minHeight`, with `title` in bold over the axis rect.
QCustomPlot* addTitledPlot(QWidget* owner, const QString& title, int minHeight);

// Background from Base, axes (x, y and the second pair), ticks, labels and the
// title from Text. Legends and grids stay the caller's.
void applyPalette(QCustomPlot* plot, const QPalette& palette);

}  // namespace PlotStyle
