// SPDX-License-Identifier: GPL-3.0-or-later
// Plots: min/max downsampling keeps every spike and stays bounded at a
// million points, smoothing, log scale, hover tracker, stacked breakdown,
// and exports (PNG, SVG, PDF, CSV) that are real files of their type.
#include <QElapsedTimer>
#include <QScrollArea>
#include <QScrollBar>
#include <QVBoxLayout>
#include <QFile>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>
#include <cmath>
#include <qcustomplot.h>

#include "live_plot.h"
#include "series_data.h"
#include "series_downsampler.h"
#include "table_export.h"

namespace {
SeriesPoints makeSeries(int n, double (*f)(int)) {
  SeriesPoints s;
  s.reserve(n);
  for (int i = 0; i < n; ++i) s.append(i + 1, (i + 1) / 1000.0, i * 0.01, 1.7e9 + i * 0.01, f(i));
  return s;
}
double noisy(int i) { return 10.0 + std::sin(i * 0.001) + ((qint64(i) * 7919) % 13) * 0.01; }
QByteArray head(const QString& path, int n) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return {};
  return f.read(n);
}
}  // namespace

class TestLivePlot : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    Q_INIT_RESOURCE(trainbench);
    QStandardPaths::setTestModeEnabled(true);
  }

  void downsamplerKeepsExtremesPerColumn() {
    // Compare with a brute-force min/max per column on random-looking data.
    const int n = 100000, columns = 300;
    QVector<double> x(n), y(n);
    for (int i = 0; i < n; ++i) {
      x[i] = i;
      y[i] = std::sin(i * 0.37) * 5 + ((quint64(i) * 2654435761u) % 1000) / 100.0;
    }
    QVector<double> ox, oy;
    SeriesDownsampler::downsample(x, y, 0, n - 1, columns, &ox, &oy);
    QVERIFY(ox.size() <= 4 * columns + 8);
    QVERIFY(ox.size() >= columns);
    for (int i = 1; i < ox.size(); ++i) QVERIFY(ox[i] >= ox[i - 1]);  // still in x order
    const double width = double(n - 1) / columns;
    for (int c = 0; c < columns; ++c) {
      double lo = 1e300, hi = -1e300, olo = 1e300, ohi = -1e300;
      for (int i = 0; i < n; ++i) {
        const int col = std::min(columns, int(std::floor(x[i] / width)));
        if (col != c) continue;
        lo = std::min(lo, y[i]);
        hi = std::max(hi, y[i]);
      }
      for (int i = 0; i < ox.size(); ++i) {
        const int col = std::min(columns, int(std::floor(ox[i] / width)));
        if (col != c) continue;
        olo = std::min(olo, oy[i]);
        ohi = std::max(ohi, oy[i]);
      }
      QCOMPARE(olo, lo);
      QCOMPARE(ohi, hi);
    }
  }

  void downsamplerSmallAndEdgeCases() {
    QVector<double> ox, oy;
    SeriesDownsampler::downsample({}, {}, 0, 1, 100, &ox, &oy);
    QVERIFY(ox.isEmpty());
    // Few points come back unchanged (plus neighbours outside the range).
    SeriesDownsampler::downsample({1, 2, 3, 4, 5}, {5, 4, NAN, 2, 1}, 2, 4, 100, &ox, &oy);
    QCOMPARE(ox, (QVector<double>{1, 2, 4, 5}));  // NaN dropped
    QCOMPARE(oy, (QVector<double>{5, 4, 2, 1}));
  }

  void millionPointsStayFluidAndSpikesShow() {
    SeriesPoints s = makeSeries(1000000, noisy);
    s.value[777777] = 1000.0;  // one spike in a million
    s.value[123456] = -50.0;   // one dip
    LivePlot plot(QStringLiteral("Step time"), QStringLiteral("ms"));
    plot.resize(900, 400);
    plot.show();
    QVERIFY(QTest::qWaitForWindowExposed(&plot));
    plot.addCurve(QStringLiteral("step time"), &s);
    QElapsedTimer timer;
    timer.start();
    for (int i = 0; i < 5; ++i) plot.refresh();
    const qint64 perRefresh = timer.elapsed() / 5;
    qInfo("refresh of 1,000,000 points: %lld ms", perRefresh);
    QVERIFY2(perRefresh < 400, qPrintable(QStringLiteral("refresh took %1 ms").arg(perRefresh)));
    const int width = plot.customPlot()->axisRect()->width();
    QVERIFY(plot.displayedPointCount() <= 4 * std::max(50, width) + 8);
    QCPGraph* g = plot.customPlot()->graph(0);
    double hi = -1e300, lo = 1e300;
    for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it) {
      hi = std::max(hi, it->value);
      lo = std::min(lo, it->value);
    }
    QCOMPARE(hi, 1000.0);
    QCOMPARE(lo, -50.0);
    QVERIFY(plot.customPlot()->yAxis->range().contains(1000.0));
    // Zooming in re-samples the visible range only: the spike's neighbourhood at full detail.
    plot.customPlot()->xAxis->setRange(777700, 777900);
    QTRY_VERIFY(!plot.followsData());
    plot.refresh();
    QVERIFY(plot.displayedPointCount() >= 200);
    QVERIFY(plot.displayedPointCount() < 1000);
    plot.resetView();
    QVERIFY(plot.followsData());
    // All data again, with a little room at the ends (at most 2 %).
    QVERIFY(plot.customPlot()->xAxis->range().contains(1.0) && plot.customPlot()->xAxis->range().contains(1000000.0));
    QVERIFY(plot.customPlot()->xAxis->range().upper <= 1000000.0 * 1.02);
  }

  // A plot scrolled out of a shown window's view waits to be drawn until it
  // is seen (a live run's dashboard refreshes a few times a second; on a
  // 2-core machine every plot drawn is time taken from the engine's step),
  // and draws as soon as it is scrolled into view.
  void plotsOutOfViewDrawWhenSeen() {
    SeriesPoints s = makeSeries(500, noisy);
    QScrollArea area;
    area.resize(600, 300);
    auto* canvas = new QWidget;
    auto* column = new QVBoxLayout(canvas);
    auto* seen = new LivePlot(QStringLiteral("Seen"), QStringLiteral("ms"));
    auto* below = new LivePlot(QStringLiteral("Below"), QStringLiteral("ms"));
    for (LivePlot* p : {seen, below}) {
      p->setMinimumHeight(400);
      column->addWidget(p);
    }
    area.setWidget(canvas);
    area.setWidgetResizable(true);
    area.show();
    QVERIFY(QTest::qWaitForWindowExposed(&area));
    seen->addCurve(QStringLiteral("a"), &s);
    below->addCurve(QStringLiteral("b"), &s);
    seen->refresh();
    below->refresh();
    QVERIFY(!seen->redrawPending());
    QVERIFY(seen->displayedPointCount() > 0);
    QVERIFY(below->redrawPending());
    QCOMPARE(below->displayedPointCount(), 0);
    area.verticalScrollBar()->setValue(area.verticalScrollBar()->maximum());
    QTRY_VERIFY(!below->redrawPending());
    QVERIFY(below->displayedPointCount() > 0);
    // Out of view again: a new point waits, and an export draws it first.
    area.verticalScrollBar()->setValue(0);
    QTRY_VERIFY(below->visibleRegion().isEmpty() || below->customPlot()->visibleRegion().isEmpty());
    s.append(501, 0.501, 5.0, 1.7e9 + 5.0, 1000.0);
    below->refresh();
    QVERIFY(below->redrawPending());
    QTemporaryDir dir;
    QVERIFY(below->exportImage(dir.filePath(QStringLiteral("below.png")), 400, 300));
    QVERIFY(!below->redrawPending());
    QVERIFY(below->customPlot()->yAxis->range().contains(1000.0));
  }

  void seriesAxesAreExactAndGrow() {
    SeriesPoints s;
    s.append(1, 0.01, 0.5, 1.7e9 + 0.5, 3.0);
    s.append(2, 0.02, 1.0, 1.7e9 + 1.0, 2.0);
    QCOMPARE(s.x(XAxis::WallTime), (QVector<double>{1.7e9 + 0.5, 1.7e9 + 1.0}));
    QCOMPARE(s.x(XAxis::Step), (QVector<double>{1, 2}));
    QCOMPARE(s.x(XAxis::Epoch).size(), 2);
    QVERIFY(std::abs(s.x(XAxis::Epoch)[1] - 0.02) < 1e-7);
    s.append(3, 0.03, 1.5, 1.7e9 + 1.5, 1.0);  // the cache follows new points
    QCOMPARE(s.x(XAxis::Epoch).size(), 3);
    QCOMPARE(s.x(XAxis::WallTime).last(), 1.7e9 + 1.5);
    QCOMPARE(s.x(XAxis::RelativeTime), (QVector<double>{0.5, 1.0, 1.5}));
  }

  void smoothingDrawsRawFaintlyBehind() {
    SeriesPoints s = makeSeries(2000, [](int i) { return (i % 2) ? 1.0 : 3.0; });
    LivePlot plot(QStringLiteral("Loss"), QStringLiteral("loss"));
    plot.resize(600, 300);
    plot.addCurve(QStringLiteral("train"), &s);
    plot.setSmoothing(0.9);
    plot.refresh();
    QCPGraph* raw = plot.customPlot()->graph(0);
    QCPGraph* smooth = plot.customPlot()->graph(1);
    QVERIFY(raw->visible() && smooth->visible());
    QVERIFY(raw->pen().color().alpha() < 100);  // faint
    QCOMPARE(smooth->pen().color().alpha(), 255);
    // The EMA of an alternating 1/3 series settles near 2.
    const double last = (smooth->data()->constEnd() - 1)->value;
    QVERIFY2(std::abs(last - 2.0) < 0.15, qPrintable(QString::number(last)));
    QVERIFY(plot.trackerText(1999).contains(QLatin1String("train: ")));
    plot.setSmoothing(0);
    QVERIFY(!plot.customPlot()->graph(1)->visible());
  }

  void logScaleXAxesAndTracker() {
    SeriesPoints a = makeSeries(100, [](int i) { return std::exp(-i * 0.05); });
    SeriesPoints b = makeSeries(100, [](int i) { return 2.0 * std::exp(-i * 0.05); });
    LivePlot plot(QStringLiteral("Loss"), QStringLiteral("loss"));
    plot.resize(600, 300);
    plot.addCurve(QStringLiteral("a"), &a);
    plot.addCurve(QStringLiteral("b"), &b);
    plot.setLogScale(true);
    plot.refresh();
    QCOMPARE(plot.customPlot()->yAxis->scaleType(), QCPAxis::stLogarithmic);
    QVERIFY(plot.customPlot()->yAxis->range().lower > 0);
    const QString text = plot.trackerText(11);  // step 11 = index 10
    QVERIFY2(text.contains(QStringLiteral("a: %1").arg(QString::number(std::exp(-0.5), 'f', 4))), qPrintable(text));
    QVERIFY2(text.contains(QStringLiteral("b: %1").arg(QString::number(2 * std::exp(-0.5), 'f', 3))), qPrintable(text));
    for (XAxis axis : {XAxis::Epoch, XAxis::RelativeTime, XAxis::WallTime, XAxis::Step}) {
      plot.setXAxis(axis);
      const QCPRange r = plot.customPlot()->xAxis->range();
      QVERIFY(r.contains(a.x(axis).first()) && r.contains(a.x(axis).last()));
      QVERIFY(r.upper - a.x(axis).last() <= 0.02 * (a.x(axis).last() - a.x(axis).first()));
    }
    plot.setXAxis(XAxis::WallTime);
    QVERIFY(!plot.customPlot()->xAxis->ticker().dynamicCast<QCPAxisTickerDateTime>().isNull());
  }

  void stackedBreakdownAddsUp() {
    SeriesPoints f = makeSeries(50, [](int) { return 4.0; });
    SeriesPoints b = makeSeries(50, [](int) { return 6.0; });
    LivePlot plot(QStringLiteral("Breakdown"), QStringLiteral("ms"));
    plot.resize(600, 300);
    plot.setStacked(true);
    plot.addCurve(QStringLiteral("forward"), &f);
    plot.addCurve(QStringLiteral("backward"), &b);
    plot.refresh();
    QCOMPARE(plot.customPlot()->graph(0)->data()->constBegin()->value, 4.0);
    QCOMPARE(plot.customPlot()->graph(2)->data()->constBegin()->value, 10.0);  // forward + backward
    QCOMPARE(plot.customPlot()->graph(2)->channelFillGraph(), plot.customPlot()->graph(0));
  }

  // The legend sits under the axes, never over data; clicking an entry hides
  // and shows its curve (hidden curves leave the y range and the tracker).
  void legendOutsideAxesAndClickToHide() {
    SeriesPoints a = makeSeries(200, [](int) { return 1.0; });
    SeriesPoints b = makeSeries(200, [](int) { return 100.0; });
    LivePlot plot(QStringLiteral("Loss"), QStringLiteral("loss"));
    plot.resize(700, 350);
    plot.show();
    QVERIFY(QTest::qWaitForWindowExposed(&plot));
    plot.addCurve(QStringLiteral("small"), &a);
    plot.addCurve(QStringLiteral("large"), &b);
    plot.refresh();
    plot.customPlot()->replot();
    QCPLegend* legend = plot.customPlot()->legend;
    QVERIFY(legend->visible());
    QVERIFY2(!legend->outerRect().intersects(plot.customPlot()->axisRect()->rect()), "the legend is outside the axes");
    QVERIFY(plot.customPlot()->yAxis->range().contains(100.0));
    const QPoint entry = legend->item(1)->outerRect().center();
    QTest::mouseClick(plot.customPlot(), Qt::LeftButton, {}, entry);
    QVERIFY(!plot.curveVisible(1));
    QVERIFY(!plot.customPlot()->graph(2)->visible());
    QVERIFY(!plot.customPlot()->yAxis->range().contains(100.0));  // y follows what is shown
    QVERIFY(!plot.trackerText(5).contains(QLatin1String("large")));
    QCOMPARE(legend->itemCount(), 2);  // still listed, so it can come back
    plot.customPlot()->replot();
    QTest::mouseClick(plot.customPlot(), Qt::LeftButton, {}, legend->item(1)->outerRect().center());
    QVERIFY(plot.curveVisible(1));
    plot.setLegendVisible(false);
    QVERIFY(!legend->visible());
  }

  // The tracker: values with units and readable precision, in a small label
  // beside the cursor that goes away when the cursor leaves; no big tooltip
  // over the data.
  void trackerBesideCursorWithUnits() {
    SeriesPoints s = makeSeries(100, [](int i) { return 12.3456 + i; });
    LivePlot plot(QStringLiteral("Step time"), QStringLiteral("ms"));
    plot.resize(700, 350);
    plot.show();
    QVERIFY(QTest::qWaitForWindowExposed(&plot));
    plot.addCurve(QStringLiteral("step time"), &s);
    plot.refresh();
    plot.customPlot()->replot();
    QVERIFY2(plot.trackerText(1).contains(QLatin1String("step time: 12.35 ms")), qPrintable(plot.trackerText(1)));
    QCOMPARE(plot.formatValue(5210.4), QLocale().toString(5210.0, 'f', 0) + QStringLiteral(" ms"));
    QVERIFY(plot.toolTip().isEmpty());  // help lives on the title only
    QVERIFY(!plot.helpText().isEmpty());
    const QRect rect = plot.customPlot()->axisRect()->rect();
    const QPoint at = rect.center();
    QTest::mouseMove(plot.customPlot(), at);
    QTRY_VERIFY(plot.trackerVisible());
    auto* label = qobject_cast<QCPItemText*>(plot.customPlot()->item(1));
    QVERIFY(label);
    const QPointF p = label->position->pixelPosition();
    QVERIFY2(std::abs(p.x() - at.x()) < 200 && std::abs(p.y() - at.y()) < 120, "the tracker is beside the cursor");
    QEvent leave(QEvent::Leave);
    QCoreApplication::sendEvent(plot.customPlot(), &leave);
    QVERIFY(!plot.trackerVisible());
  }

  // The stacked breakdown: a spike in one phase is drawn in that phase's
  // colour (not as the outline of the layers above).
  void stackedSpikeKeepsItsPhaseColour() {
    const int n = 1000;
    SeriesPoints wait = makeSeries(n, [](int) { return 2.0; });
    SeriesPoints forward = makeSeries(n, [](int i) { return i >= 500 && i < 504 ? 40.0 : 4.0; });
    SeriesPoints other = makeSeries(n, [](int) { return 1.0; });
    LivePlot plot(QStringLiteral("Breakdown"), QStringLiteral("ms"));
    plot.resize(600, 320);
    plot.setStacked(true);
    plot.addCurve(QStringLiteral("data wait"), &wait);
    plot.addCurve(QStringLiteral("forward"), &forward);
    plot.addCurve(QStringLiteral("other"), &other);
    plot.show();
    QVERIFY(QTest::qWaitForWindowExposed(&plot));
    plot.refresh();
    plot.customPlot()->replot();
    const QImage image = plot.customPlot()->toPixmap().toImage();
    const double px = plot.customPlot()->xAxis->coordToPixel(502);
    const double py = plot.customPlot()->yAxis->coordToPixel(25);  // inside the forward spike
    const QColor forwardColour = plot.customPlot()->graph(2)->brush().color();
    const QColor otherColour = plot.customPlot()->graph(4)->brush().color();
    auto distance = [](QColor a, QColor b) {
      return std::abs(a.red() - b.red()) + std::abs(a.green() - b.green()) + std::abs(a.blue() - b.blue());
    };
    int best = 1 << 30;
    for (int dx = -1; dx <= 1; ++dx) best = std::min(best, distance(image.pixelColor(int(px) + dx, int(py)), forwardColour));
    int toOther = 1 << 30;
    for (int dx = -1; dx <= 1; ++dx) toOther = std::min(toOther, distance(image.pixelColor(int(px) + dx, int(py)), otherColour));
    QVERIFY2(best < toOther, qPrintable(QStringLiteral("spike pixel is nearer 'other' (%1) than 'forward' (%2)").arg(toOther).arg(best)));
  }

  // y ranges: amounts from zero; a flat, slightly noisy curve is not blown
  // up into jumps; a single point (per-epoch accuracy) is drawn whole.
  void yRangesAndSinglePoints() {
    SeriesPoints memory = makeSeries(100, [](int i) { return 300.0e6 + (i % 3) * 1e5; });
    LivePlot mem(QStringLiteral("Memory"), QStringLiteral("MiB"));
    mem.resize(600, 300);
    mem.setZeroBased(true);
    mem.addCurve(QStringLiteral("rss"), &memory, 1.0 / (1024 * 1024));
    mem.refresh();
    QCOMPARE(mem.customPlot()->yAxis->range().lower, 0.0);
    SeriesPoints flat = makeSeries(100, [](int i) { return 0.5 + (i % 2) * 1e-4; });
    LivePlot loss(QStringLiteral("Loss"), QStringLiteral("loss"));
    loss.resize(600, 300);
    loss.addCurve(QStringLiteral("loss"), &flat);
    loss.refresh();
    QVERIFY(loss.customPlot()->yAxis->range().size() >= 0.02 * 0.5);
    SeriesPoints steps = makeSeries(100, [](int) { return 0.7; });
    SeriesPoints epoch;
    epoch.append(100, 1, 1.0, 1.7e9 + 1.0, 0.8);  // one test-accuracy point at the last step
    LivePlot acc(QStringLiteral("Accuracy"), QStringLiteral("%"));
    acc.resize(600, 300);
    acc.show();
    QVERIFY(QTest::qWaitForWindowExposed(&acc));
    acc.addCurve(QStringLiteral("train"), &steps, 100);
    acc.addCurve(QStringLiteral("test (epoch)"), &epoch, 100);
    acc.refresh();
    acc.customPlot()->replot();
    const double x = acc.customPlot()->xAxis->coordToPixel(100);
    QVERIFY2(x <= acc.customPlot()->axisRect()->rect().right() - 3, "the last point is inside the axes, not on the edge");
    QCOMPARE(acc.customPlot()->graph(2)->scatterStyle().shape(), QCPScatterStyle::ssDisc);
  }

  void exportsAreValidFiles() {
    SeriesPoints s = makeSeries(500, noisy);
    LivePlot plot(QStringLiteral("Samples, per \"second\""), QStringLiteral("samples/s"));
    plot.resize(600, 300);
    plot.addCurve(QStringLiteral("run, one"), &s);
    plot.refresh();
    QTemporaryDir dir;
    QString error;
    const QString png = dir.filePath(QStringLiteral("p.png")), svg = dir.filePath(QStringLiteral("p.svg")),
                  pdf = dir.filePath(QStringLiteral("p.pdf")), csv = dir.filePath(QStringLiteral("p.csv"));
    QVERIFY2(plot.exportImage(png, 800, 500, &error), qPrintable(error));
    QVERIFY2(plot.exportImage(svg, 800, 500, &error), qPrintable(error));
    QVERIFY2(plot.exportImage(pdf, 800, 500, &error), qPrintable(error));
    QVERIFY(!plot.exportImage(dir.filePath(QStringLiteral("p.xyz")), 800, 500, &error));
    QCOMPARE(head(png, 8), QByteArray("\x89PNG\r\n\x1a\n", 8));
    QImage image(png);
    QCOMPARE(image.size(), QSize(800, 500));
    QCOMPARE(head(pdf, 5), QByteArray("%PDF-"));
    QFile svgFile(svg);
    QVERIFY(svgFile.open(QIODevice::ReadOnly));
    const QByteArray svgText = svgFile.readAll();
    QVERIFY(svgText.contains("<svg") && svgText.contains("</svg>"));
    QVERIFY(svgText.contains("run, one"));  // the legend is in the drawing
    QVERIFY2(plot.exportCsv(csv, &error), qPrintable(error));
    QFile csvFile(csv);
    QVERIFY(csvFile.open(QIODevice::ReadOnly | QIODevice::Text));
    const QStringList lines = QString::fromUtf8(csvFile.readAll()).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
    QCOMPARE(lines.size(), 501);
    QCOMPARE(lines[0], QStringLiteral("series,step,epoch,time_s,wall_time_unix_s,value"));
    QVERIFY(lines[1].startsWith(QLatin1String("\"run, one\",1,")));
  }

  void followsTheDarkPalette() {
    SeriesPoints s = makeSeries(10, noisy);
    LivePlot plot(QStringLiteral("Loss"), QStringLiteral("loss"));
    plot.addCurve(QStringLiteral("a"), &s);
    QPalette dark = plot.palette();
    dark.setColor(QPalette::Base, QColor(30, 30, 30));
    dark.setColor(QPalette::Text, QColor(230, 230, 230));
    plot.setPalette(dark);
    QCoreApplication::processEvents();
    QCOMPARE(plot.customPlot()->xAxis->tickLabelColor(), QColor(230, 230, 230));
    QCOMPARE(plot.customPlot()->legend->textColor(), QColor(230, 230, 230));
    const QImage image = plot.customPlot()->toPixmap(400, 300).toImage();
    QCOMPARE(QColor(image.pixel(2, 2)), QColor(30, 30, 30));  // background follows Base
  }

  void csvQuoting() {
    QCOMPARE(TableExport::csvField(QStringLiteral("plain")), QStringLiteral("plain"));
    QCOMPARE(TableExport::csvField(QStringLiteral("a,b")), QStringLiteral("\"a,b\""));
    QCOMPARE(TableExport::csvField(QStringLiteral("say \"hi\"")), QStringLiteral("\"say \"\"hi\"\"\""));
  }
};

QTEST_MAIN(TestLivePlot)
#include "test_live_plot.moc"
