// SPDX-License-Identifier: GPL-3.0-or-later
// The Layers tab of a saved run: the per-layer table the engine stored
// (docs/layers.md), read from the store off the GUI thread, sortable, with a
// header that says what was sampled and a run without a profile saying why.
// Set TRAINBENCH_SCREENSHOTS=DIR to keep a screenshot.
#include <QtTest>

#include <QHeaderView>
#include <QHelpEvent>
#include <QToolTip>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>

#include <qcustomplot.h>

#include "engine/metrics/layer_profile.h"
#include "engine/store/run_store.h"
#include "advisor_panel.h"
#include "compare_view.h"
#include "engine/train/config.h"
#include "layer_compare_model.h"
#include "layer_compare_panel.h"
#include "layer_profile_model.h"
#include "layers_panel.h"
#include "roofline_chart.h"
#include "main_window.h"
#include "run_dashboard.h"

namespace {

int runEngine(const QStringList& args, const QProcessEnvironment& env) {
  QProcess p;
  p.setProcessEnvironment(env);
  p.start(QStringLiteral(TRAINBENCH_ENGINE_BIN), args);
  if (!p.waitForFinished(300000)) {
    p.kill();
    p.waitForFinished();
    return -1;
  }
  if (p.exitCode() != 0) qWarning().noquote() << p.readAllStandardError();
  return p.exitCode();
}

}  // namespace

class TestLayersView : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  QString db() const { return dir_.filePath(QStringLiteral("runs.db")); }

 private slots:
  // Run 1: fmnist-cnn for 5 steps, profiled at steps 3 and 5; run 2: 2 steps, none sampled.
  void initTestCase() {
    Q_INIT_RESOURCE(trainbench);
    QStandardPaths::setTestModeEnabled(true);
    QVERIFY(dir_.isValid());
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("TRAINBENCH_PEAKS_CACHE"), dir_.filePath(QStringLiteral("peaks.json")));
    const QStringList common = {"--db", db(), "--device", "cpu", "--dataset", "synthetic", "--set",
                                "synthetic_shape=[1,28,28]", "--set", "synthetic_size=256", "--set",
                                "test_limit=32", "--set", "batch_size=16", "--set", "measure_every=2",
                                "--quiet", "--set"};
    QCOMPARE(runEngine(QStringList{"run"} + common + QStringList{"max_steps=5"}, env), 0);
    QCOMPARE(runEngine(QStringList{"run"} + common + QStringList{"max_steps=2"}, env), 0);
    // Run 3: run 1 with fuse_pointwise (its ReLUs inside batch norm and the linear layer).
    QCOMPARE(runEngine(QStringList{"run"} + common + QStringList{"max_steps=5", "--set", "fuse_pointwise=true"}, env), 0);
  }

  void tableOfAStoredRun() {
    LayersPanel panel;
    panel.setDatabasePath(db());
    QSignalSpy ready(&panel, &LayersPanel::profileReady);
    panel.showRun(1);
    QVERIFY(panel.loading());  // read on a worker thread
    QVERIFY(ready.wait(10000));
    QVERIFY(!panel.loading());
    const LayerProfileModel* m = panel.model();
    QCOMPARE(m->columnCount(), int(LayerProfileModel::ColumnCount));
    QVERIFY(m->rowCount() > 20);
    int conv = -1;
    double shares = 0;
    for (int r = 0; r < m->rowCount(); ++r) {
      shares += m->data(m->index(r, LayerProfileModel::Share), Qt::UserRole).toDouble();
      if (m->data(m->index(r, LayerProfileModel::Layer)).toString() == QLatin1String("block2.conv") &&
          m->data(m->index(r, LayerProfileModel::Phase)).toString() == QLatin1String("backward"))
        conv = r;
    }
    QVERIFY(std::abs(shares - 100.0) < 0.01);  // the rows add up to the step
    QVERIFY(conv >= 0);
    QVERIFY(m->data(m->index(conv, LayerProfileModel::GflopsPerS), Qt::UserRole).toDouble() > 0);
    const QString bound = m->data(m->index(conv, LayerProfileModel::Bound)).toString();
    QVERIFY2(bound == QLatin1String("compute") || bound == QLatin1String("memory"), qPrintable(bound));
    QVERIFY(m->data(m->index(conv, LayerProfileModel::Layer), Qt::ToolTipRole).toString().contains(
        QLatin1String("FLOPs")));
    for (int c = 0; c < m->columnCount(); ++c)
      QVERIFY2(!m->headerData(c, Qt::Horizontal, Qt::DisplayRole).toString().isEmpty(), qPrintable(QString::number(c)));
    QVERIFY(!m->headerData(LayerProfileModel::RooflinePct, Qt::Horizontal, Qt::ToolTipRole).toString().isEmpty());
    QVERIFY2(panel.headerText().contains(QLatin1String("2 sampled step(s) (3, 5)")), qPrintable(panel.headerText()));
    QVERIFY2(panel.headerText().contains(QLatin1String("GFLOP/s")), qPrintable(panel.headerText()));

    // Sorted by time, the slowest row first.
    QTableView* view = panel.view();
    view->sortByColumn(LayerProfileModel::TimeMs, Qt::DescendingOrder);
    auto* proxy = qobject_cast<QSortFilterProxyModel*>(view->model());
    QVERIFY(proxy);
    const double first = proxy->data(proxy->index(0, LayerProfileModel::TimeMs), Qt::UserRole).toDouble();
    for (int r = 1; r < proxy->rowCount(); ++r)
      QVERIFY(first >= proxy->data(proxy->index(r, LayerProfileModel::TimeMs), Qt::UserRole).toDouble());
  }

  // The roofline of run 1: a point per layer and phase at the figures the
  // engine computes from the stored profile and peaks, under roofs that are
  // the stored peaks; the hover text of a point names its layer and figures.
  void rooflineOfAStoredRun() {
    LayersPanel panel;
    panel.setDatabasePath(db());
    QSignalSpy ready(&panel, &LayersPanel::profileReady);
    panel.showRun(1);
    QVERIFY(ready.wait(10000));
    const RooflineChart* chart = panel.roofline();

    const tb::RunStore store(db().toStdString(), tb::RunStore::Mode::ReadOnly);
    const tb::DevicePeaks peaks = tb::DevicePeaks::from_environment(store.get_run(1)->environment);
    QVERIFY(peaks.known());
    QCOMPARE(chart->computeRoof(), peaks.flops_per_s);
    QCOMPARE(chart->memoryRoof(), peaks.bytes_per_s);
    const double ridge = peaks.flops_per_s / peaks.bytes_per_s;
    QVERIFY(std::abs(chart->attainable(ridge / 10) - peaks.bytes_per_s * ridge / 10) < 1e-6 * peaks.flops_per_s);
    QCOMPARE(chart->attainable(ridge * 10), peaks.flops_per_s);
    // The drawn roof: the bandwidth's slope, the FMA rate from the ridge on (GFLOP/s).
    const QCPGraph* roof = chart->plot()->graph(0);
    QCOMPARE(roof->dataCount(), 3);
    const auto knee = roof->data()->at(1);
    QVERIFY(std::abs(knee->key - ridge) < 1e-9 * ridge);
    QVERIFY(std::abs(knee->value - peaks.flops_per_s / 1e9) < 1e-9 * knee->value);
    const auto start = roof->data()->at(0);
    QVERIFY(std::abs(start->value - start->key * peaks.bytes_per_s / 1e9) < 1e-9 * start->value);
    QVERIFY2(chart->caption().contains(QLatin1String("f32 FMA rate")), qPrintable(chart->caption()));
    QVERIFY2(chart->caption().contains(QString::fromStdString(peaks.device)), qPrintable(chart->caption()));

    // The points: every layer row with counted work, at the engine's figures.
    const tb::LayerProfileStep mean = tb::mean_profile(store.layer_profile(1));
    int expected = 0, flatten = 0;
    for (const tb::LayerProfileRow& r : mean.rows) {
      if (r.layer.empty()) continue;
      const tb::RooflinePoint want = tb::roofline(r, peaks);
      if (!(want.intensity > 0) || !(want.flops_per_s > 0)) {
        ++flatten;
        continue;
      }
      ++expected;
      bool found = false;
      for (const RooflineChart::Point& p : chart->points())
        if (p.layer.toStdString() == r.layer && p.phase.toStdString() == r.phase) {
          found = true;
          QVERIFY(std::abs(p.intensity - want.intensity) < 1e-9 * want.intensity);
          QVERIFY(std::abs(p.flopsPerS - want.flops_per_s) < 1e-9 * want.flops_per_s);
          QCOMPARE(p.bound.toStdString(), want.bound);
          QVERIFY(std::abs(p.share - r.time_ms / mean.step_time_ms) < 1e-9);
        }
      QVERIFY2(found, r.layer.c_str());
    }
    QCOMPARE(chart->points().size(), expected);
    QVERIFY(expected >= 20);  // fmnist-cnn: 11 layers with work, forward and backward
    QCOMPARE(flatten, 2);     // flatten is a view: no work, not drawn, and said so
    QVERIFY2(chart->caption().contains(QLatin1String("2 row(s) without counted work")), qPrintable(chart->caption()));

    // Hovering a point: the point under the pixel, its layer, phase and bound.
    panel.resize(1100, 500);
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    chart->plot()->replot(QCustomPlot::rpImmediateRefresh);
    int conv = -1;
    for (int i = 0; i < chart->points().size(); ++i)
      if (chart->points()[i].layer == QLatin1String("block2.conv") && chart->points()[i].phase == QLatin1String("backward"))
        conv = i;
    QVERIFY(conv >= 0);
    const int hovered = chart->pointAt(chart->pixelOf(conv) + QPointF(2, -2));
    QVERIFY(hovered >= 0);
    QCOMPARE(chart->pixelOf(hovered), chart->pixelOf(conv));  // it, or one drawn on top of it
    const QString tip = chart->pointToolTip(conv);
    for (const QString& text : {QStringLiteral("block2.conv"), QStringLiteral("backward"), QStringLiteral("% of the step"),
                                QStringLiteral("GFLOP/s"), chart->points()[conv].bound + QStringLiteral("-bound")})
      QVERIFY2(tip.contains(text), qPrintable(tip));
    QCOMPARE(chart->pointAt(QPointF(-100, -100)), -1);
    // The tooltip the plot shows there is the point's.
    const QPoint at = chart->pixelOf(conv).toPoint();
    QHelpEvent help(QEvent::ToolTip, at, chart->plot()->mapToGlobal(at));
    QApplication::sendEvent(chart->plot(), &help);
    QTRY_VERIFY(QToolTip::isVisible());
    QCOMPARE(QToolTip::text(), chart->pointToolTip(chart->pointAt(at)));
  }

  // Without stored peaks the chart still draws the layers' achieved figures,
  // and says why there are no roofs instead of drawing none silently.
  void rooflineWithoutPeaksSaysSo() {
    const QString copy = dir_.filePath(QStringLiteral("no-peaks.db"));
    QFile::remove(copy);
    QVERIFY(QFile::copy(db(), copy));
    {
      tb::RunStore store(copy.toStdString());
      nlohmann::json env = store.get_run(1)->environment;
      env.erase("peaks");
      store.set_environment(1, env);
    }
    LayersPanel panel;
    panel.setDatabasePath(copy);
    QSignalSpy ready(&panel, &LayersPanel::profileReady);
    panel.showRun(1);
    QVERIFY(ready.wait(10000));
    const RooflineChart* chart = panel.roofline();
    QVERIFY(std::isnan(chart->computeRoof()) && std::isnan(chart->memoryRoof()));
    QVERIFY(chart->points().size() >= 20);
    QVERIFY2(chart->caption().contains(QLatin1String("No roofs")) &&
                 chart->caption().contains(QLatin1String("not recorded")),
             qPrintable(chart->caption()));
    QVERIFY(chart->pointToolTip(0).contains(QLatin1String("no device peaks")));
  }

  // Compare, layers of A against B: run 1 against run 3 (fuse_pointwise), read
  // off the GUI thread; the ReLUs the fused run folded away are "only in A",
  // the batch norms changed kind, and each time is the run's stored mean.
  void compareLayersOfTwoRuns() {
    const tb::RunStore store(db().toStdString(), tb::RunStore::Mode::ReadOnly);
    LayerComparePanel panel;
    QSignalSpy ready(&panel, &LayerComparePanel::comparisonReady);
    panel.setRuns(db(), {RunSummary::fromRecord(*store.get_run(1)), RunSummary::fromRecord(*store.get_run(3))});
    QVERIFY(panel.loading());
    QVERIFY(ready.wait(10000));
    QCOMPARE(panel.runA(), qint64(1));
    QCOMPARE(panel.runB(), qint64(3));
    const LayerCompareModel* m = panel.model();
    const tb::LayerProfileStep a = tb::mean_profile(store.layer_profile(1)),
                               b = tb::mean_profile(store.layer_profile(3));
    auto rowOf = [m](const QString& layer, const QString& phase) {
      for (int r = 0; r < m->rowCount(); ++r)
        if (m->data(m->index(r, LayerCompareModel::Layer)).toString() == layer &&
            m->data(m->index(r, LayerCompareModel::Phase)).toString() == phase)
          return r;
      return -1;
    };
    auto meanOf = [](const tb::LayerProfileStep& s, const std::string& layer, const std::string& phase) {
      for (const tb::LayerProfileRow& r : s.rows)
        if (r.layer == layer && r.phase == phase) return r.time_ms;
      return std::nan("");
    };
    const int relu = rowOf(QStringLiteral("block1.relu"), QStringLiteral("backward"));
    QVERIFY(relu >= 0);
    QCOMPARE(m->data(m->index(relu, LayerCompareModel::Change)).toString(), QStringLiteral("only in A"));
    QCOMPARE(m->data(m->index(relu, LayerCompareModel::TimeB)).toString(), QStringLiteral("–"));
    QCOMPARE(m->data(m->index(relu, LayerCompareModel::TimeA), Qt::UserRole).toDouble(),
             meanOf(a, "block1.relu", "backward"));
    QVERIFY(m->data(m->index(relu, LayerCompareModel::Change), Qt::ToolTipRole).toString().contains(
        QLatin1String("folded it into the layer before it")));
    const int bn = rowOf(QStringLiteral("block1.bn"), QStringLiteral("forward"));
    QVERIFY(bn >= 0);
    QCOMPARE(m->data(m->index(bn, LayerCompareModel::Kind)).toString(), QStringLiteral("batchnorm2d → batchnorm_relu"));
    const double ratio = meanOf(b, "block1.bn", "forward") / meanOf(a, "block1.bn", "forward");
    QVERIFY(std::abs(m->data(m->index(bn, LayerCompareModel::Ratio), Qt::UserRole).toDouble() - ratio) < 1e-12);
    const QString change = m->data(m->index(bn, LayerCompareModel::Change)).toString();
    QCOMPARE(change, QString::fromLatin1(ratio < 0.95 ? "faster" : ratio > 1.05 ? "slower" : "about the same"));
    // Every row of either run is there once: A's rows, and B's (none only in B).
    QCOMPARE(m->rowCount(), int(a.rows.size()));
    int onlyA = 0;
    for (int r = 0; r < m->rowCount(); ++r) onlyA += m->comparison(r).change() == tb::LayerChange::OnlyA;
    QCOMPARE(size_t(onlyA), a.rows.size() - b.rows.size());
    QVERIFY2(panel.headerText().contains(QStringLiteral("%1 only in A").arg(onlyA)), qPrintable(panel.headerText()));
    // Sorted by B / A: the rows whose time vanished in B first.
    QTableView* view = panel.view();
    view->sortByColumn(LayerCompareModel::Ratio, Qt::AscendingOrder);
    const QAbstractItemModel* proxy = view->model();
    QCOMPARE(proxy->data(proxy->index(0, LayerCompareModel::Change)).toString(), QStringLiteral("only in A"));
    for (int c = 0; c < m->columnCount(); ++c)
      QVERIFY(!m->headerData(c, Qt::Horizontal, Qt::ToolTipRole).toString().isEmpty());

    // A run without a profile: said, not an empty table.
    panel.compare(1, 2);
    QVERIFY(ready.wait(10000));
    QCOMPARE(m->rowCount(), 0);
    QVERIFY2(panel.headerText().contains(QLatin1String("(#2) has no per-layer profile: no step was sampled")),
             qPrintable(panel.headerText()));
  }

  // The Compare page has the tab, loaded with the first two compared runs.
  void comparePageHasTheLayersTab() {
    MainWindow window(db());
    window.resize(1366, 768);
    window.compareRuns({1, 3});
    CompareView* view = window.compareView();
    QTRY_COMPARE_WITH_TIMEOUT(view->runs().size(), 2, 10000);
    QTabWidget* tabs = view->tableTabs();
    QCOMPARE(tabs->widget(1), static_cast<QWidget*>(view->layerComparison()));
    QTRY_VERIFY_WITH_TIMEOUT(view->layerComparison()->model()->rowCount() > 20, 10000);
    QCOMPARE(view->layerComparison()->runB(), qint64(3));
    QTRY_VERIFY_WITH_TIMEOUT(!view->layerComparison()->loading(), 10000);
    // The comparison's report carries the table.
    const QString report = dir_.filePath(QStringLiteral("report.md"));
    QString error;
    QVERIFY2(view->exportReport(report, &error), qPrintable(error));
    QFile md(report);
    QVERIFY(md.open(QIODevice::ReadOnly));
    const QString text = QString::fromUtf8(md.readAll());
    QVERIFY(text.contains(QLatin1String("## Layers, A against B")));
    QVERIFY(text.contains(QLatin1String("| block1.relu | forward | relu |")));
    QVERIFY(text.contains(QLatin1String("only in A")));
  }

  // The Advisor's advice that cites a layer leads to its row: "Show in Layers"
  // selects it in the Layers tab and rings it on the roofline. The store is
  // made by hand so that the rule's condition is met by its figures.
  void advisorCitesALayer() {
    const QString path = dir_.filePath(QStringLiteral("cited.db"));
    {
      tb::RunStore store(path.toStdString());
      tb::RunRecord rec;
      rec.name = "cited";
      rec.status = "finished";
      rec.config = tb::validate_config({{"device", "cpu"}}, "test");
      const int64_t id = store.create_run(rec);
      store.set_environment(id, {{"device", "cpu"},
                                 {"peaks", {{"flops_per_s", 100e9}, {"bytes_per_s", 10e9}, {"dtype", "f32"}}}});
      store.append_layer_profile(id, {21, 10.0, {{"block1.conv", "conv2d", "forward", 3.0, 3e8, 1e6},
                                                 {"block1.relu", "relu", "forward", 0.8, 2.5e5, 2e6},
                                                 {"", "", "optimizer", 6.2}}});
    }
    MainWindow window(path);
    window.resize(1366, 768);
    window.openRun(1);
    auto* dashboard = qobject_cast<RunDashboard*>(window.dashboards()->currentWidget());
    QVERIFY(dashboard);
    AdvisorPanel* advisor = dashboard->findChild<AdvisorPanel*>();
    LayersPanel* layers = dashboard->findChild<LayersPanel*>();
    QVERIFY(advisor && layers);
    // The advice is computed again when the saved run's dashboard says it ended: its cards are
    // made anew, so the button is looked for once the advisor is idle.
    auto showButton = [advisor]() -> QPushButton* {
      for (QPushButton* b : advisor->findChildren<QPushButton*>())
        if (b->text() == QLatin1String("Show in Layers")) return b;
      return nullptr;
    };
    // One wait for both: a second wait runs the event loop again, in which the
    // advice can be made anew and the button found before is gone (a crash
    // about one run in fifteen).
    QTRY_VERIFY_WITH_TIMEOUT(!advisor->busy() && !layers->loading() && showButton(), 10000);
    QPushButton* show = showButton();
    QVERIFY(show);
    QVERIFY(advisor->rules().contains(QStringLiteral("pointwise_passes")));
    QVERIFY(show->toolTip().contains(QLatin1String("block1.relu")));
    show->click();
    QCOMPARE(dashboard->bottomTabs()->currentWidget(), static_cast<QWidget*>(layers));
    const QModelIndex current = layers->view()->currentIndex();
    QCOMPARE(current.siblingAtColumn(LayerProfileModel::Layer).data().toString(), QStringLiteral("block1.relu"));
    QCOMPARE(current.siblingAtColumn(LayerProfileModel::Phase).data().toString(), QStringLiteral("forward"));
    const QCPGraph* ring = layers->roofline()->plot()->graph(layers->roofline()->plot()->graphCount() - 1);
    QCOMPARE(ring->dataCount(), 1);
    QCOMPARE(ring->data()->at(0)->key, 2.5e5 / 2e6);  // block1.relu's intensity
  }

  void runWithoutAProfileSaysWhy() {
    LayersPanel panel;
    panel.setDatabasePath(db());
    QSignalSpy ready(&panel, &LayersPanel::profileReady);
    panel.showRun(2);
    QVERIFY(ready.wait(10000));
    QCOMPARE(panel.model()->rowCount(), 0);
    QVERIFY2(panel.headerText().contains(QLatin1String("Run 2 has no per-layer profile: no step was sampled")),
             qPrintable(panel.headerText()));
    QVERIFY2(panel.headerText().contains(QLatin1String("measure_every")), qPrintable(panel.headerText()));
  }

  // A saved run's dashboard has the tab, next to the Advisor.
  void savedRunHasALayersTab() {
    MainWindow window(db());
    window.resize(1366, 768);
    window.openRun(1);
    auto* dashboard = qobject_cast<RunDashboard*>(window.dashboards()->currentWidget());
    QVERIFY(dashboard);
    QTabWidget* tabs = dashboard->bottomTabs();
    int layersTab = -1;
    for (int i = 0; i < tabs->count(); ++i)
      if (tabs->tabText(i) == QLatin1String("Layers")) layersTab = i;
    QVERIFY(layersTab >= 0);
    auto* panel = qobject_cast<LayersPanel*>(tabs->widget(layersTab));
    QVERIFY(panel);
    QTRY_VERIFY_WITH_TIMEOUT(!panel->loading(), 10000);
    QVERIFY(panel->model()->rowCount() > 20);
    tabs->setCurrentIndex(layersTab);
    if (auto* split = qobject_cast<QSplitter*>(tabs->parentWidget())) split->setSizes({250, 500});
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    const QString dir = qEnvironmentVariable("TRAINBENCH_SCREENSHOTS");
    if (!dir.isEmpty()) QVERIFY(window.grab().save(QDir(dir).filePath(QStringLiteral("layers.png"))));
  }
};

QTEST_MAIN(TestLayersView)
#include "test_layers_view.moc"
