// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QColor>
#include <QPalette>
#include <QString>

// Colours for text that must stay readable on light and dark palettes alike:
// run statuses, errors, warnings and hints, each pushed lighter or darker
// until it reaches WCAG's 4.5:1 contrast against the background it is drawn on.
namespace PaletteColors {

inline constexpr double kMinContrast = 4.5;

// WCAG 2 contrast ratio of two colours (1 to 21).
double contrast(const QColor& a, const QColor& b);
// color, made lighter or darker (hue kept) until contrast(color, background) >= minContrast.
QColor readable(const QColor& color, const QColor& background, double minContrast = kMinContrast);

// Status of a run, any string: the known ones (finished, running, stopped,
// failed, interrupted, queued) get a colour, others the palette's text colour.
QColor status(const QString& status, const QPalette& palette);
QColor error(const QPalette& palette);
QColor warning(const QPalette& palette);
// Secondary, explanatory text (the palette's placeholder colour, made readable).
QColor hint(const QPalette& palette);

// The palette with PlaceholderText (used for hints and reasons throughout)
// raised to kMinContrast against both Window and Base.
QPalette withReadableHints(QPalette palette);

// "<span style='color:#rrggbb'>text</span>" (text is escaped).
QString span(const QString& text, const QColor& color, bool bold = false);

}  // namespace PaletteColors
