// SPDX-License-Identifier: GPL-3.0-or-later
#include "palette_colors.h"

#include <cmath>

namespace PaletteColors {
namespace {
double linear(double c) { return c <= 0.04045 ? c / 12.92 : std::pow((c + 0.055) / 1.055, 2.4); }

double luminance(const QColor& c) {
  return 0.2126 * linear(c.redF()) + 0.7152 * linear(c.greenF()) + 0.0722 * linear(c.blueF());
}

bool isDark(const QColor& background) { return luminance(background) < 0.18; }
}  // namespace

double contrast(const QColor& a, const QColor& b) {
  const double la = luminance(a), lb = luminance(b);
  return (std::max(la, lb) + 0.05) / (std::min(la, lb) + 0.05);
}

QColor readable(const QColor& color, const QColor& background, double minContrast) {
  QColor c = color.toHsl();
  c.setAlpha(255);
  const bool lighten = isDark(background);
  for (int i = 0; i < 100 && contrast(c, background) < minContrast; ++i) {
    const int l = c.lightness();
    if ((lighten && l >= 255) || (!lighten && l <= 0)) break;
    c.setHsl(c.hslHue(), c.hslSaturation(), std::clamp(l + (lighten ? 6 : -6), 0, 255));
  }
  return c.toRgb();
}

QColor status(const QString& s, const QPalette& palette) {
  const QColor bg = palette.color(QPalette::Window);
  QColor c = palette.color(QPalette::WindowText);
  if (s == QLatin1String("finished")) c = QColor(40, 150, 60);
  else if (s == QLatin1String("running") || s == QLatin1String("starting")) c = QColor(30, 120, 210);
  else if (s == QLatin1String("stopped") || s == QLatin1String("stopping")) c = QColor(190, 120, 0);
  else if (s == QLatin1String("failed")) c = QColor(210, 40, 40);
  else if (s == QLatin1String("interrupted")) c = QColor(200, 70, 160);
  else if (s == QLatin1String("queued") || s == QLatin1String("waiting")) return hint(palette);
  return readable(c, bg);
}

QColor error(const QPalette& palette) { return readable(QColor(210, 40, 40), palette.color(QPalette::Window)); }

QColor warning(const QPalette& palette) { return readable(QColor(190, 100, 0), palette.color(QPalette::Window)); }

QColor hint(const QPalette& palette) {
  const QColor c = readable(palette.color(QPalette::PlaceholderText), palette.color(QPalette::Window));
  return readable(c, palette.color(QPalette::Base));
}

QPalette withReadableHints(QPalette palette) {
  for (QPalette::ColorGroup g : {QPalette::Active, QPalette::Inactive}) {
    QColor c = palette.color(g, QPalette::PlaceholderText);
    c = readable(readable(c, palette.color(g, QPalette::Window)), palette.color(g, QPalette::Base));
    palette.setColor(g, QPalette::PlaceholderText, c);
  }
  return palette;
}

QString span(const QString& text, const QColor& color, bool bold) {
  return QStringLiteral("<span style='color:%1%2'>%3</span>")
      .arg(color.name(), bold ? QStringLiteral(";font-weight:bold") : QString(), text.toHtmlEscaped());
}

}  // namespace PaletteColors
