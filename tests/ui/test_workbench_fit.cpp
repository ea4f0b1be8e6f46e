// SPDX-License-Identifier: GPL-3.0-or-later
// The workbench fits common laptop screens (1280x800, 1366x768) and a saved
// geometry larger than the screen is clamped; texts drawn in colour (status,
// errors, hints) stay readable on dark palettes (WCAG contrast >= 4.5:1).
#include <QApplication>
#include <QLabel>
#include <QRegularExpression>
#include <QScreen>
#include <QSettings>
#include <QStandardPaths>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QtTest>

#include "main_window.h"
#include "palette_colors.h"
#include "run_dashboard.h"

namespace {
QPalette darkPalette() {
  QPalette p;
  p.setColor(QPalette::Window, QColor(0x20, 0x20, 0x20));
  p.setColor(QPalette::WindowText, QColor(0xe0, 0xe0, 0xe0));
  p.setColor(QPalette::Base, QColor(0x18, 0x18, 0x18));
  p.setColor(QPalette::Text, QColor(0xe0, 0xe0, 0xe0));
  p.setColor(QPalette::Button, QColor(0x30, 0x30, 0x30));
  p.setColor(QPalette::ButtonText, QColor(0xe0, 0xe0, 0xe0));
  p.setColor(QPalette::PlaceholderText, QColor(0x55, 0x55, 0x55));  // a typical dim hint colour
  return p;
}

// Every colour of a "color:#rrggbb" span in html.
QList<QColor> spanColours(const QString& html) {
  QList<QColor> out;
  static const QRegularExpression re(QStringLiteral("color:(#[0-9a-fA-F]{6})"));
  for (auto it = re.globalMatch(html); it.hasNext();) out << QColor(it.next().captured(1));
  return out;
}
}  // namespace

class TestWorkbenchFit : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    Q_INIT_RESOURCE(trainbench);
    QStandardPaths::setTestModeEnabled(true);
    QVERIFY(dir_.isValid());
  }

  void init() { QSettings().clear(); }

  void fitsCommonLaptopScreens_data() {
    QTest::addColumn<QSize>("size");
    QTest::newRow("1280x800") << QSize(1280, 800);
    QTest::newRow("1366x768") << QSize(1366, 768);
  }

  // No page needs more room than the screen gives: what does not fit
  // scrolls or wraps instead of being cut off.
  void fitsCommonLaptopScreens() {
    QFETCH(QSize, size);
    MainWindow window(dir_.filePath(QStringLiteral("fit.db")));
    const QSize need = window.minimumSizeHint();
    QVERIFY2(need.width() <= size.width() && need.height() <= size.height() - 30,  // 30: a title bar
             qPrintable(QStringLiteral("the window needs %1x%2").arg(need.width()).arg(need.height())));
    window.resize(size.width(), size.height() - 30);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    // Every page's own minimum fits too (a page can need more than the tab bar says).
    auto* pages = window.findChild<QTabWidget*>();
    for (int i = 0; i < pages->count(); ++i) {
      window.showPage(MainWindow::Page(i));
      QWidget* page = pages->widget(i);
      QVERIFY2(page->minimumSizeHint().width() <= page->width() && page->minimumSizeHint().height() <= page->height(),
               qPrintable(QStringLiteral("page %1 needs %2x%3, has %4x%5")
                              .arg(pages->tabText(i))
                              .arg(page->minimumSizeHint().width())
                              .arg(page->minimumSizeHint().height())
                              .arg(page->width())
                              .arg(page->height())));
    }
  }

  void restoredGeometryLargerThanTheScreenIsClamped() {
    const QRect available = QGuiApplication::primaryScreen()->availableGeometry();
    {
      MainWindow big(dir_.filePath(QStringLiteral("fit.db")));
      big.setGeometry(available.x(), available.y(), available.width() * 2, available.height() * 2);
      QSettings().setValue(QStringLiteral("window/geometry"), big.saveGeometry());
    }
    MainWindow window(dir_.filePath(QStringLiteral("fit.db")));
    const QSize least = window.minimumSizeHint();
    QVERIFY2(window.width() <= std::max(available.width(), least.width()) &&
                 window.height() <= std::max(available.height(), least.height()),
             qPrintable(QStringLiteral("%1x%2 on a %3x%4 screen").arg(window.width()).arg(window.height())
                            .arg(available.width()).arg(available.height())));
  }

  void paletteColoursAreReadable() {
    for (const QPalette& palette : {darkPalette(), QPalette(Qt::white)}) {
      const QColor bg = palette.color(QPalette::Window);
      for (const char* s : {"finished", "running", "stopped", "failed", "interrupted", "queued", "some new status"})
        QVERIFY2(PaletteColors::contrast(PaletteColors::status(QString::fromLatin1(s), palette), bg) >= 4.5, s);
      QVERIFY(PaletteColors::contrast(PaletteColors::error(palette), bg) >= 4.5);
      QVERIFY(PaletteColors::contrast(PaletteColors::warning(palette), bg) >= 4.5);
      QVERIFY(PaletteColors::contrast(PaletteColors::hint(palette), bg) >= 4.5);
      QVERIFY(PaletteColors::contrast(PaletteColors::hint(palette), palette.color(QPalette::Base)) >= 4.5);
    }
    QCOMPARE(PaletteColors::contrast(Qt::black, Qt::white), 21.0);
  }

  // On a dark palette: the hint colour the whole window uses (placeholders,
  // the reasons under disabled tricks) and the dashboard's coloured texts.
  void darkPaletteHintsAreReadable() {
    const QPalette old = QApplication::palette();
    QApplication::setPalette(darkPalette());
    {
      MainWindow window(dir_.filePath(QStringLiteral("dark.db")));
      const QPalette p = window.palette();
      QVERIFY2(PaletteColors::contrast(p.color(QPalette::PlaceholderText), p.color(QPalette::Window)) >= 4.5,
               qPrintable(p.color(QPalette::PlaceholderText).name()));
      QVERIFY(PaletteColors::contrast(p.color(QPalette::PlaceholderText), p.color(QPalette::Base)) >= 4.5);
      RunDashboard dashboard;
      dashboard.setPalette(darkPalette());
      dashboard.setStatus(QStringLiteral("failed"), QStringLiteral("the data folder /x does not exist"));
      QStringList html;
      for (QLabel* l : dashboard.findChildren<QLabel*>())
        if (l->isVisibleTo(&dashboard)) html << l->text();
      const QList<QColor> colours = spanColours(html.join(QLatin1Char('\n')));
      QVERIFY(colours.size() >= 2);  // the status and "Failed:"
      for (const QColor& c : colours)
        QVERIFY2(PaletteColors::contrast(c, darkPalette().color(QPalette::Window)) >= 4.5, qPrintable(c.name()));
    }
    QApplication::setPalette(old);
  }

 private:
  QTemporaryDir dir_;
};

QTEST_MAIN(TestWorkbenchFit)
#include "test_workbench_fit.moc"
