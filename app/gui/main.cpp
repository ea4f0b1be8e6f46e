// SPDX-License-Identifier: GPL-3.0-or-later
// trainbench: the Qt desktop workbench.
#include <QApplication>
#include <QCoreApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QFileInfo>
#include <QSplitter>
#include <QTabWidget>
#include <QTimer>
#include <QTreeView>

#include "compare_view.h"
#include "engine_locator.h"
#include "layer_compare_panel.h"
#include "main_window.h"
#include "run_dashboard.h"
#include "run_history_view.h"

namespace {
void nameTheApplication() {
  QCoreApplication::setApplicationName(QStringLiteral("trainbench"));
  // No organization name, so AppDataLocation is $XDG_DATA_HOME/trainbench: the
  // default runs.db is the engine's own default store (runs started from the
  // command line show up here). QSettings falls back to the domain:
  // ~/.config/trainbench/trainbench.conf.
  QCoreApplication::setOrganizationDomain(QStringLiteral("trainbench"));
  QCoreApplication::setApplicationVersion(QStringLiteral(TRAINBENCH_VERSION));
}

QStringList argumentsOf(int argc, char** argv) {
  QStringList out;
  for (int i = 0; i < argc; ++i) out << QString::fromLocal8Bit(argv[i]);
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  Q_INIT_RESOURCE(trainbench);
  QCommandLineParser parser;
  parser.setApplicationDescription(QStringLiteral("Trainbench: make deep-learning training fast."));
  const QCommandLineOption help = parser.addHelpOption();
  const QCommandLineOption version = parser.addVersionOption();
  QCommandLineOption db(QStringLiteral("db"), QStringLiteral("Run database to open."), QStringLiteral("PATH"));
  QCommandLineOption engine(QStringLiteral("engine"), QStringLiteral("trainbench-engine binary to use."), QStringLiteral("PATH"));
  QCommandLineOption config(QStringLiteral("config"), QStringLiteral("Configuration JSON to load."), QStringLiteral("FILE"));
  QCommandLineOption preset(QStringLiteral("preset"), QStringLiteral("Apply a preset by name."), QStringLiteral("NAME"));
  QCommandLineOption learn(QStringLiteral("learn"), QStringLiteral("Show the 'learn more' text of a trick."), QStringLiteral("KEY"));
  QCommandLineOption run(QStringLiteral("run"), QStringLiteral("Launch the loaded configuration at start."));
  QCommandLineOption page(QStringLiteral("page"), QStringLiteral("Page to show: setup, runs, history, compare, ladder."), QStringLiteral("NAME"));
  QCommandLineOption openRun(QStringLiteral("open-run"), QStringLiteral("Open the dashboard of a saved run."), QStringLiteral("ID"));
  QCommandLineOption advisor(QStringLiteral("advisor"), QStringLiteral("With --open-run: show the run's Advisor tab, enlarged."));
  QCommandLineOption layers(QStringLiteral("layers"), QStringLiteral("With --open-run: show the run's Layers tab, enlarged."));
  QCommandLineOption environment(QStringLiteral("environment"), QStringLiteral("With --open-run: show the run's Environment tab, enlarged and unfolded."));
  QCommandLineOption compare(QStringLiteral("compare"), QStringLiteral("Compare saved runs (comma-separated ids)."), QStringLiteral("IDS"));
  QCommandLineOption compareLayers(QStringLiteral("compare-layers"), QStringLiteral("With --compare: show the first two runs' layers side by side, enlarged."));
  QCommandLineOption screenshot(QStringLiteral("screenshot"), QStringLiteral("Save a picture of the window and quit."), QStringLiteral("FILE"));
  QCommandLineOption delay(QStringLiteral("screenshot-delay"), QStringLiteral("Milliseconds to wait before the screenshot."), QStringLiteral("MS"), QStringLiteral("3000"));
  QCommandLineOption size(QStringLiteral("size"), QStringLiteral("Window size WxH."), QStringLiteral("WxH"));
  for (const auto& o : {db, engine, config, preset, learn, run, page, openRun, advisor, layers, environment, compare, compareLayers, screenshot, delay, size}) parser.addOption(o);

  // --help and --version are answered without a display (QApplication aborts
  // where none is set): a QCoreApplication prints them. Arguments this parse
  // does not know (Qt's own, such as -platform) are left to QApplication.
  if (parser.parse(argumentsOf(argc, argv)) && (parser.isSet(help) || parser.isSet(version))) {
    QCoreApplication app(argc, argv);
    nameTheApplication();
    parser.process(app);  // prints and exits
    return 0;
  }

  QApplication app(argc, argv);
  nameTheApplication();
  QApplication::setApplicationDisplayName(QStringLiteral("Trainbench"));
  QApplication::setDesktopFileName(QStringLiteral(TRAINBENCH_APP_ID));  // packaging/trainbench.desktop.in
  QApplication::setWindowIcon(QIcon(QStringLiteral(":/icons/trainbench.svg")));
  parser.process(app);

  if (parser.isSet(engine)) qputenv("TRAINBENCH_ENGINE", QFileInfo(parser.value(engine)).absoluteFilePath().toLocal8Bit());
  MainWindow window(parser.isSet(db) ? QFileInfo(parser.value(db)).absoluteFilePath() : QString());
  if (parser.isSet(size)) {
    const QStringList wh = parser.value(size).split(QLatin1Char('x'));
    if (wh.size() == 2) window.resize(wh[0].toInt(), wh[1].toInt());
  }
  if (parser.isSet(config)) {
    QStringList refused;
    QString error;
    if (!window.loadConfigFile(parser.value(config), &refused, &error))
      qWarning("cannot load %s: %s", qPrintable(parser.value(config)), qPrintable(error));
    for (const QString& r : refused) qWarning("%s: not taken", qPrintable(r));
  }
  if (parser.isSet(preset) && !window.applyPreset(parser.value(preset)))
    qWarning("no preset named %s", qPrintable(parser.value(preset)));
  if (parser.isSet(learn)) window.showLearnMore(parser.value(learn));
  window.show();

  const QString pageName = parser.value(page);
  if (pageName == QLatin1String("setup")) window.showPage(MainWindow::SetupPage);
  else if (pageName == QLatin1String("runs")) window.showPage(MainWindow::RunsPage);
  else if (pageName == QLatin1String("history")) window.showPage(MainWindow::HistoryPage);
  else if (pageName == QLatin1String("compare")) window.showPage(MainWindow::ComparePage);
  else if (pageName == QLatin1String("ladder")) window.showPage(MainWindow::LadderPage);
  if (parser.isSet(openRun)) window.openRun(parser.value(openRun).toLongLong());
  // The open run's bottom tab of that title, enlarged.
  auto showBottomTab = [&window](const QString& title, QList<int> sizes) {
    auto* d = qobject_cast<RunDashboard*>(window.dashboards()->currentWidget());
    if (!d) return;
    QTabWidget* tabs = d->bottomTabs();
    for (int i = 0; i < tabs->count(); ++i)
      if (tabs->tabText(i) == title) tabs->setCurrentIndex(i);
    if (auto* split = qobject_cast<QSplitter*>(tabs->parentWidget())) split->setSizes(sizes);
  };
  if (parser.isSet(advisor)) showBottomTab(QObject::tr("Advisor"), {400, 500});
  // The table and the roofline side by side want the height.
  if (parser.isSet(layers)) showBottomTab(QObject::tr("Layers"), {150, 650});
  if (parser.isSet(environment)) {
    showBottomTab(QObject::tr("Environment"), {250, 550});
    // The rows come when the run's record is read (off the GUI thread).
    if (auto* d = qobject_cast<RunDashboard*>(window.dashboards()->currentWidget()))
      if (auto* view = d->findChild<QTreeView*>(QStringLiteral("environmentView")))
        QObject::connect(view->model(), &QAbstractItemModel::rowsInserted, view, [view] { view->expandAll(); });
  }
  if (parser.isSet(compare)) {
    QList<qint64> ids;
    for (const QString& id : parser.value(compare).split(QLatin1Char(','), Qt::SkipEmptyParts)) ids << id.toLongLong();
    window.compareRuns(ids);
    if (parser.isSet(compareLayers)) {
      CompareView* view = window.compareView();
      view->tableTabs()->setCurrentWidget(view->layerComparison());
      if (auto* split = qobject_cast<QSplitter*>(view->tableTabs()->parentWidget())) split->setSizes({150, 650});
    }
  }
  if (parser.isSet(run)) QTimer::singleShot(500, &window, [&window] { window.launchNow(); });
  if (parser.isSet(screenshot)) {
    const QString file = parser.value(screenshot);
    QTimer::singleShot(parser.value(delay).toInt(), &window, [&window, file] {
      window.grab().save(file);
      QApplication::exit(0);
    });
  }
  return app.exec();
}
