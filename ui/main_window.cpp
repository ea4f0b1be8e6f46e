// SPDX-License-Identifier: GPL-3.0-or-later
#include "main_window.h"

#include <QApplication>
#include <QCloseEvent>
#include <QComboBox>
#include <QFileDialog>
#include <QFileInfo>
#include <utility>
#include <QHBoxLayout>
#include <QJsonDocument>
#include <QLabel>
#include <QListWidget>
#include <QMenuBar>
#include <QMessageBox>
#include <QPushButton>
#include <QScreen>
#include <QTabBar>
#include <QMenu>
#include <QScrollArea>
#include <QSettings>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QTextBrowser>
#include <QTimer>
#include <QVBoxLayout>

#include "compare_view.h"
#include "advisor_panel.h"
#include "layers_panel.h"
#include "config_panel.h"
#include "engine/data/dataset.h"
#include "engine_info.h"
#include "engine_locator.h"
#include "engine_process.h"
#include "ladder_view.h"
#include "live_plot.h"
#include "plot_export_dialog.h"
#include "preset_library.h"
#include "run_config.h"
#include "run_dashboard.h"
#include "run_history_model.h"
#include "run_history_view.h"
#include "run_queue.h"
#include "palette_colors.h"
#include "trick_catalog.h"
#include "trick_panel.h"

MainWindow::MainWindow(const QString& databasePath, QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(tr("Trainbench"));
  setWindowIcon(QIcon(QStringLiteral(":/icons/trainbench.svg")));
  queue_ = new RunQueue(this);
  applyReadableHints();

  pages_ = new QTabWidget(this);
  pages_->setDocumentMode(true);
  pages_->addTab(buildSetupPage(), tr("Set up"));
  pages_->addTab(buildRunsPage(), tr("Runs"));
  history_ = new RunHistoryView(pages_);
  pages_->addTab(history_, tr("History"));
  compare_ = new CompareView(pages_);
  pages_->addTab(compare_, tr("Compare"));
  ladder_ = new LadderView(pages_);
  pages_->addTab(ladder_, tr("Ladder"));
  setCentralWidget(pages_);

  engineStatus_ = new QLabel(this);
  dbStatus_ = new QLabel(this);
  statusBar()->addPermanentWidget(engineStatus_);
  statusBar()->addPermanentWidget(dbStatus_);
  buildMenus();

  connect(queue_, &RunQueue::launched, this, &MainWindow::onLaunched);
  connect(queue_, &RunQueue::runEnded, this, &MainWindow::onRunEnded);
  connect(queue_, &RunQueue::pendingChanged, this, &MainWindow::updateQueueList);
  connect(history_, &RunHistoryView::openRunRequested, this, &MainWindow::openRun);
  connect(history_, &RunHistoryView::compareRequested, this, &MainWindow::compareRuns);
  connect(history_, &RunHistoryView::reloaded, this, [this] {
    if (!pendingCompare_.isEmpty()) compareRunsNow(std::exchange(pendingCompare_, {}), true);
  });
  connect(history_, &RunHistoryView::statusMessage, this, [this](const QString& m) { statusBar()->showMessage(m, 8000); });
  connect(compare_, &CompareView::statusMessage, this, [this](const QString& m) { statusBar()->showMessage(m, 8000); });
  connect(ladder_, &LadderView::statusMessage, this, [this](const QString& m) { statusBar()->showMessage(m, 8000); });
  connect(ladder_, &LadderView::ladderFinished, this, [this] { history_->reload(); });

  QSettings settings;
  setDatabasePath(databasePath.isEmpty()
                      ? settings.value(QStringLiteral("database/path"), EngineLocator::defaultDatabasePath()).toString()
                      : databasePath);
  setEnginePath(EngineLocator::enginePath());
  const QJsonObject saved = QJsonDocument::fromJson(settings.value(QStringLiteral("setup/config")).toByteArray()).object();
  hadSavedConfig_ = !saved.isEmpty();
  // Checked like a loaded file: a key or value the engine would refuse is
  // dropped (with a warning), never kept to fail every later run.
  for (const QString& refused : setConfig(saved, tr("saved settings (%1)").arg(settings.fileName())))
    qWarning("%s: dropped", qPrintable(refused));
  if (!restoreGeometry(settings.value(QStringLiteral("window/geometry")).toByteArray())) resize(1500, 950);
  restoreState(settings.value(QStringLiteral("window/state")).toByteArray());
  fitToScreen();
  if (!runsSplitter_->restoreState(settings.value(QStringLiteral("window/runsSplitter")).toByteArray()) ||
      runsSplitter_->sizes().value(0) < 150 || runsSplitter_->sizes().value(1) < 400)
    runsSplitter_->setSizes({240, std::max(600, width() - 240)});
  pages_->setCurrentIndex(settings.value(QStringLiteral("window/page"), 0).toInt());
}

MainWindow::~MainWindow() = default;

void MainWindow::fitToScreen() {
  // A geometry saved on a larger screen (or a default that is too big) is
  // clamped to the screen the window is on, so no control is off-screen.
  QScreen* screen = this->screen() ? this->screen() : QGuiApplication::primaryScreen();
  if (!screen) return;
  const QRect available = screen->availableGeometry();
  const QSize frame = frameGeometry().size() - geometry().size();
  const QSize limit = available.size() - frame;
  if (isMaximized() || isFullScreen()) return;
  QRect g = geometry();
  g.setSize(g.size().boundedTo(limit));
  if (g.right() > available.right()) g.moveRight(available.right());
  if (g.bottom() > available.bottom()) g.moveBottom(available.bottom());
  if (g.left() < available.left()) g.moveLeft(available.left());
  if (g.top() < available.top()) g.moveTop(available.top());
  setGeometry(g);
}

void MainWindow::applyReadableHints() {
  // Hint texts (placeholders, the reasons under disabled tricks) keep 4.5:1
  // contrast on any palette, dark ones included.
  const QPalette readable = PaletteColors::withReadableHints(QApplication::palette(this));
  QPalette hints;
  for (QPalette::ColorGroup g : {QPalette::Active, QPalette::Inactive})
    hints.setColor(g, QPalette::PlaceholderText, readable.color(g, QPalette::PlaceholderText));
  if (palette().color(QPalette::PlaceholderText) != hints.color(QPalette::PlaceholderText)) setPalette(hints);
}

void MainWindow::changeEvent(QEvent* event) {
  QMainWindow::changeEvent(event);
  if (event->type() == QEvent::ApplicationPaletteChange) applyReadableHints();
}

QWidget* MainWindow::buildSetupPage() {
  auto* page = new QWidget(this);
  auto* layout = new QVBoxLayout(page);

  auto* presetBar = new QHBoxLayout;
  presetBar->addWidget(new QLabel(tr("Preset:"), page));
  presets_ = new QComboBox(page);
  presets_->setToolTip(tr("Start from a known set of tricks: the baseline, everything on, or one article's recipe."));
  presets_->addItem(tr("— choose a preset —"));
  for (const Preset& p : PresetLibrary::builtIn()) {
    presets_->addItem(p.name, p.name);
    presets_->setItemData(presets_->count() - 1, p.toolTip(), Qt::ToolTipRole);
  }
  presetBar->addWidget(presets_);
  presetDescription_ = new QLabel(page);
  presetDescription_->setWordWrap(true);
  presetBar->addWidget(presetDescription_, 1);
  auto* load = new QPushButton(tr("Load…"), page);
  load->setToolTip(tr("Load a configuration from a JSON file (Ctrl+L)."));
  auto* save = new QPushButton(tr("Save…"), page);
  save->setToolTip(tr("Save this configuration as a JSON file (Ctrl+S)."));
  presetBar->addWidget(load);
  presetBar->addWidget(save);
  layout->addLayout(presetBar);

  auto* splitter = new QSplitter(Qt::Horizontal, page);
  auto* configScroll = new QScrollArea(splitter);
  configScroll->setWidgetResizable(true);
  config_ = new ConfigPanel(configScroll);
  configScroll->setWidget(config_);
  configScroll->setMinimumWidth(380);
  splitter->addWidget(configScroll);
  tricks_ = new TrickPanel(splitter);
  tricks_->setMinimumWidth(380);
  splitter->addWidget(tricks_);

  auto* right = new QWidget(splitter);
  auto* rightLayout = new QVBoxLayout(right);
  rightLayout->setContentsMargins(0, 0, 0, 0);
  rightLayout->addWidget(new QLabel(tr("<b>Learn more</b>"), right));
  learnMore_ = new QTextBrowser(right);
  learnMore_->setOpenExternalLinks(false);
  learnMore_->setHtml(tr("<p>Click the <b>?</b> next to a trick to read what it does, why it helps, when it "
                         "does not, and which plot should move.</p>"));
  rightLayout->addWidget(learnMore_, 3);
  rightLayout->addWidget(new QLabel(tr("<b>Configuration sent to the engine</b>"), right));
  preview_ = new QTextBrowser(right);
  QFont mono(QStringLiteral("monospace"));
  mono.setStyleHint(QFont::Monospace);
  preview_->setFont(mono);
  rightLayout->addWidget(preview_, 2);
  auto* buttons = new QHBoxLayout;
  auto* runNow = new QPushButton(tr("Run now"), right);
  runNow->setToolTip(tr("Start this configuration in the engine (Ctrl+R); queued behind a run in progress."));
  runNow->setDefault(true);
  auto* queueButton = new QPushButton(tr("Add to queue"), right);
  queueButton->setToolTip(tr("Queue this configuration to run after the others (Ctrl+Shift+R)."));
  auto* ladderButton = new QPushButton(tr("Queue ladder"), right);
  ladderButton->setToolTip(tr("Measure an optimization ladder with this configuration as the baseline: each "
                              "rung adds tricks, every rung runs several times, interleaved (Ctrl+Alt+R)."));
  buttons->addWidget(runNow);
  buttons->addWidget(queueButton);
  buttons->addWidget(ladderButton);
  connect(ladderButton, &QPushButton::clicked, this, [this] { queueLadder(); });
  rightLayout->addLayout(buttons);
  splitter->addWidget(right);
  splitter->setStretchFactor(0, 3);
  splitter->setStretchFactor(1, 3);
  splitter->setStretchFactor(2, 3);
  layout->addWidget(splitter, 1);

  connect(presets_, &QComboBox::activated, this, [this](int index) {
    if (index > 0) applyPreset(presets_->itemData(index).toString());
  });
  connect(load, &QPushButton::clicked, this, &MainWindow::loadConfigDialog);
  connect(save, &QPushButton::clicked, this, &MainWindow::saveConfigDialog);
  connect(runNow, &QPushButton::clicked, this, &MainWindow::launchNow);
  connect(queueButton, &QPushButton::clicked, this, &MainWindow::addToQueue);
  connect(tricks_, &TrickPanel::learnMoreRequested, this, &MainWindow::showLearnMore);
  connect(tricks_, &TrickPanel::changed, this, &MainWindow::updateConfigPreview);
  connect(config_, &ConfigPanel::changed, this, &MainWindow::updateConfigPreview);
  connect(config_, &ConfigPanel::deviceChanged, this, &MainWindow::updateDeviceContext);
  // Keys that apply only with a value on the other panel (applies_when).
  connect(tricks_, &TrickPanel::changed, config_, [this] { config_->setOtherValues(tricks_->values()); });
  connect(config_, &ConfigPanel::changed, tricks_, [this] { tricks_->setOtherValues(config_->config()); });
  config_->setOtherValues(tricks_->values());
  tricks_->setOtherValues(config_->config());
  return page;
}

QWidget* MainWindow::buildRunsPage() {
  auto* page = new QSplitter(Qt::Horizontal, this);
  runsSplitter_ = page;
  page->setChildrenCollapsible(false);
  auto* left = new QWidget(page);
  auto* leftLayout = new QVBoxLayout(left);
  leftLayout->addWidget(new QLabel(tr("<b>Queue</b>"), left));
  queueList_ = new QListWidget(left);
  queueList_->setToolTip(tr("The run in progress, then the runs waiting. Del removes a waiting run."));
  queueList_->setWordWrap(true);  // long names wrap instead of being cut off
  queueList_->setTextElideMode(Qt::ElideNone);
  queueList_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  leftLayout->addWidget(queueList_, 1);
  stopButton_ = new QPushButton(tr("Stop"), left);
  stopButton_->setToolTip(tr("Ask the engine to finish the current step, save and stop (SIGTERM)."));
  killButton_ = new QPushButton(tr("Kill"), left);
  killButton_->setToolTip(tr("End the engine at once (SIGKILL) when Stop does not; the run is marked failed."));
  auto* remove = new QPushButton(tr("Remove waiting run"), left);
  leftLayout->addWidget(stopButton_);
  leftLayout->addWidget(killButton_);
  leftLayout->addWidget(remove);
  auto* closeAll = new QPushButton(tr("Close ended runs' tabs"), left);
  closeAll->setToolTip(tr("Close every dashboard tab whose run has ended (Ctrl+Shift+W); live runs stay open."));
  leftLayout->addWidget(closeAll);
  left->setMinimumWidth(180);
  page->addWidget(left);
  dashboards_ = new QTabWidget(page);
  dashboards_->setTabsClosable(true);
  dashboards_->setMovable(true);
  dashboards_->setElideMode(Qt::ElideMiddle);
  dashboards_->setUsesScrollButtons(true);
  dashboards_->tabBar()->setContextMenuPolicy(Qt::CustomContextMenu);
  connect(dashboards_->tabBar(), &QWidget::customContextMenuRequested, this, [this](const QPoint& pos) {
    const int index = dashboards_->tabBar()->tabAt(pos);
    QMenu menu(this);
    if (index >= 0)
      menu.addAction(tr("Close"), this, [this, index] { closeDashboard(index); });
    menu.addAction(tr("Close other tabs"), this, [this, index] {
      QWidget* keep = dashboards_->widget(index);
      closeDashboards([keep](QWidget* w) { return w != keep; });
    })->setEnabled(index >= 0);
    menu.addAction(tr("Close ended runs' tabs"), this, [this] { closeDashboards(); });
    menu.exec(dashboards_->tabBar()->mapToGlobal(pos));
  });
  connect(closeAll, &QPushButton::clicked, this, [this] { closeDashboards(); });
  page->addWidget(dashboards_);
  page->setStretchFactor(0, 1);
  page->setStretchFactor(1, 6);

  connect(stopButton_, &QPushButton::clicked, this, &MainWindow::stopRun);
  connect(killButton_, &QPushButton::clicked, this, &MainWindow::killRun);
  connect(remove, &QPushButton::clicked, this, [this] {
    const int row = queueList_->currentRow() - (queue_->current() ? 1 : 0);
    queue_->removePending(row);
  });
  connect(dashboards_, &QTabWidget::tabCloseRequested, this, [this](int index) {
    if (!closeDashboard(index)) statusBar()->showMessage(tr("Stop the run before closing its dashboard."), 5000);
  });
  updateQueueList();
  return page;
}

bool MainWindow::closeDashboard(int index) {
  QWidget* w = dashboards_->widget(index);
  auto* d = qobject_cast<RunDashboard*>(w);
  if (!w) return false;
  // A run this workbench drives keeps its dashboard until it ended (a run
  // followed from the store is only watched: closing its tab is harmless).
  auto* process = d ? qobject_cast<EngineProcess*>(d->property("process").value<QObject*>()) : nullptr;
  if (process && process->state() != EngineProcess::State::Ended) return false;
  dashboards_->removeTab(index);
  w->deleteLater();
  return true;
}

int MainWindow::closeDashboards(const std::function<bool(QWidget*)>& which) {
  int closed = 0;
  for (int i = dashboards_->count() - 1; i >= 0; --i) {
    auto* d = qobject_cast<RunDashboard*>(dashboards_->widget(i));
    const bool chosen = which ? which(dashboards_->widget(i)) : !(d && d->isFollowing());  // default: runs that ended
    if (chosen && closeDashboard(i)) ++closed;
  }
  return closed;
}

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("&Open run database…"), QKeySequence::Open, this, &MainWindow::openDatabaseDialog);
  file->addAction(tr("&Load configuration…"), QKeySequence(Qt::CTRL | Qt::Key_L), this, &MainWindow::loadConfigDialog);
  file->addAction(tr("&Save configuration…"), QKeySequence::Save, this, &MainWindow::saveConfigDialog);
  file->addAction(tr("Choose engine binary…"), this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, tr("trainbench-engine binary"), QFileInfo(enginePath()).absolutePath());
    if (path.isEmpty()) return;
    QSettings().setValue(QStringLiteral("engine/path"), path);
    setEnginePath(path);
  });
  file->addSeparator();
  file->addAction(tr("Export run history as CSV…"), this, [this] { history_->exportCsv(); });
  file->addAction(tr("Export comparison report…"), this, [this] { compare_->exportReportDialog(); });
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);

  QMenu* run = menuBar()->addMenu(tr("&Run"));
  run->addAction(tr("Run &now"), QKeySequence(Qt::CTRL | Qt::Key_R), this, &MainWindow::launchNow);
  run->addAction(tr("Add to &queue"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_R), this, &MainWindow::addToQueue);
  QAction* ladder = run->addAction(tr("Queue optimization &ladder"), QKeySequence(Qt::CTRL | Qt::ALT | Qt::Key_R), this,
                                   [this] { queueLadder(); });
  ladder->setToolTip(tr("Measure an optimization ladder with this configuration as the baseline."));
  stopAction_ = run->addAction(tr("&Stop (save and end)"), QKeySequence(Qt::CTRL | Qt::Key_Period), this, &MainWindow::stopRun);
  killAction_ = run->addAction(tr("&Kill engine"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_K), this, &MainWindow::killRun);
  QMenu* presetMenu = run->addMenu(tr("&Presets"));
  for (const Preset& p : PresetLibrary::builtIn()) {
    QAction* a = presetMenu->addAction(p.name, this, [this, name = p.name] { applyPreset(name); });
    a->setToolTip(p.toolTip());
  }

  QMenu* view = menuBar()->addMenu(tr("&View"));
  const QStringList names{tr("Set up"), tr("Runs"), tr("History"), tr("Compare"), tr("Ladder")};
  for (int i = 0; i < names.size(); ++i)
    view->addAction(names[i], QKeySequence(Qt::CTRL | (Qt::Key_1 + i)), this, [this, i] { pages_->setCurrentIndex(i); });
  view->addSeparator();
  view->addAction(tr("Close ended runs' tabs"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_W), this,
                  [this] { closeDashboards(); });
  view->addAction(tr("&Refresh history"), QKeySequence::Refresh, this, [this] { history_->reload(); });
  view->addAction(tr("Compare selected runs"), QKeySequence(Qt::CTRL | Qt::Key_M), this, [this] {
    compareRuns(history_->selectedRunIds());
  });

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("&About Trainbench"), this, &MainWindow::about);
  help->addAction(tr("About &Qt"), qApp, &QApplication::aboutQt);
}

QJsonObject MainWindow::currentConfig() const { return RunConfig::merged(config_->config(), tricks_->values()); }

QStringList MainWindow::setConfig(const QJsonObject& config, const QString& source) {
  const RunConfig::Checked checked =
      RunConfig::check(config, source.isEmpty() ? tr("configuration") : source, currentConfig());
  config_->setConfig(checked.accepted);
  tricks_->setValues(checked.accepted);
  updateConfigPreview();
  if (!checked.refused.isEmpty())
    statusBar()->showMessage(tr("Not taken: %1%2").arg(checked.refused.first(),
                                                       checked.refused.size() > 1
                                                           ? tr(" (and %n more)", nullptr, int(checked.refused.size() - 1))
                                                           : QString()),
                             15000);
  return checked.refused;
}

bool MainWindow::loadConfigFile(const QString& path, QStringList* refused, QString* error) {
  QJsonObject config;
  if (!RunConfig::load(path, &config, error)) return false;
  *refused = setConfig(config, QFileInfo(path).fileName());
  if (refused->isEmpty()) statusBar()->showMessage(tr("Loaded %1").arg(path), 5000);
  return true;
}

bool MainWindow::applyPreset(const QString& name) {
  for (const Preset& p : PresetLibrary::builtIn()) {
    if (p.name != name) continue;
    const QJsonObject defaults = engineDefaults_.isEmpty() ? RunConfig::defaults() : engineDefaults_;
    setConfig(p.applyTo(currentConfig(), defaults));
    presetDescription_->setText(p.source.isEmpty() ? p.description : tr("%1 (from %2)").arg(p.description, p.source));
    const int i = presets_->findData(name);
    if (i >= 0) presets_->setCurrentIndex(i);
    statusBar()->showMessage(tr("Preset applied: %1").arg(name), 5000);
    return true;
  }
  return false;
}

void MainWindow::showLearnMore(const QString& key) {
  const TrickInfo* t = TrickCatalog::instance().find(key);
  if (!t) return;
  QString html = TrickCatalog::learnMoreHtml(*t);
  const QString reason = tricks_->disabledReason(key);
  if (!reason.isEmpty())
    html += QStringLiteral("<p>%1 %2</p>").arg(PaletteColors::span(tr("On this device:"), PaletteColors::warning(palette()), true),
                                               reason.toHtmlEscaped());
  learnMore_->setHtml(html);
}

QString MainWindow::setupBaselineSource() const { return tr("the Set-up page's configuration"); }

void MainWindow::updateConfigPreview() {
  // The Ladder page's baseline is this configuration unless an Advisor chose a run's.
  if (ladder_ && ladderFollowsSetup_) ladder_->followBaseline(currentConfig(), setupBaselineSource());
  if (!preview_) return;
  preview_->setPlainText(QString::fromUtf8(QJsonDocument(currentConfig()).toJson(QJsonDocument::Indented)));
}

void MainWindow::updateDeviceContext() {
  tricks_->setDeviceContext(config_->deviceBackend(), config_->gpuCount());
  if (ladder_) ladder_->setDeviceBackend(config_->deviceBackend());
}

void MainWindow::setDatabasePath(const QString& path) {
  databasePath_ = path;
  queue_->setDatabasePath(path);
  history_->setDatabasePath(path);
  ladder_->setDatabasePath(path);
  dbStatus_->setText(tr("Database: %1").arg(QFileInfo(path).fileName()));
  dbStatus_->setToolTip(path);
}

void MainWindow::setEnginePath(const QString& path) {
  queue_->setEnginePath(path);
  ladder_->setEnginePath(path);
  if (engineInfo_) engineInfo_->deleteLater();
  engineInfo_ = new EngineInfo(path, this);
  connect(engineInfo_, &EngineInfo::ready, this, &MainWindow::onEngineInfo);
  engineStatus_->setText(tr("Engine: asking…"));
  engineInfo_->query();
}

QString MainWindow::enginePath() const { return queue_->enginePath(); }

void MainWindow::onEngineInfo() {
  if (!engineInfo_->engineExists()) {
    engineStatus_->setText(tr("Engine: not found"));
    engineStatus_->setToolTip(tr("No engine at %1. Set TRAINBENCH_ENGINE or the engine/path setting.").arg(engineInfo_->enginePath()));
    return;
  }
  engineStatus_->setText(tr("Engine: %1").arg(engineInfo_->version().isEmpty() ? tr("ready") : engineInfo_->version()));
  engineStatus_->setToolTip(engineInfo_->enginePath());
  if (!engineInfo_->defaults().isEmpty()) {
    engineDefaults_ = engineInfo_->defaults();
    // First start: begin from the engine's own defaults, with the data set's
    // folder shown (an empty name: the engine names the run by model and batch).
    if (!hadSavedConfig_) {
      // Values the user (or a preset, or --config) already changed stay.
      const QJsonObject current = currentConfig(), builtIn = RunConfig::defaults();
      QJsonObject start = RunConfig::merged(current, engineDefaults_);
      for (auto it = current.begin(); it != current.end(); ++it)
        if (builtIn.value(it.key()) != it.value()) start.insert(it.key(), it.value());
      if (start.value(QLatin1String("data_dir")).toString().isEmpty())
        start.insert(QStringLiteral("data_dir"), QString::fromStdString(tb::default_data_dir(
                                                     start.value(QLatin1String("dataset")).toString().toStdString())));
      setConfig(start);
    }
  }
  if (!engineInfo_->backendSupport().isEmpty()) tricks_->setBackendSupport(engineInfo_->backendSupport());
  config_->setDevices(engineInfo_->devices());
  updateDeviceContext();
}

bool MainWindow::dataReady() {
  QString why;
  if (config_->readyToLaunch(&why)) return true;
  showPage(SetupPage);  // where the problems are named, beside the data set
  statusBar()->showMessage(why, 15000);
  return false;
}

void MainWindow::launchNow() {
  if (!dataReady()) return;
  queue_->enqueue(currentConfig());
  pages_->setCurrentIndex(RunsPage);
  if (queue_->pending().size() > 0) statusBar()->showMessage(tr("A run is in progress; this one waits in the queue."), 6000);
}

void MainWindow::addToQueue() {
  if (!dataReady()) return;
  queue_->enqueue(currentConfig());
  statusBar()->showMessage(tr("Queued: %1").arg(RunSummary::nameOf(currentConfig())), 5000);
}

bool MainWindow::queueLadder() {
  ladderFollowsSetup_ = true;
  ladder_->setBaseline(currentConfig(), setupBaselineSource());
  showPage(LadderPage);
  return ladder_->start();
}

void MainWindow::stopRun() {
  if (!queue_->current()) return;
  QPointer<EngineProcess> process = queue_->current();
  queue_->stopCurrent();
  statusBar()->showMessage(tr("Asked the engine to stop after this step (Kill ends it at once)."), 8000);
  QTimer::singleShot(15000, this, [this, process] {
    if (process && process->state() == EngineProcess::State::Stopping)
      statusBar()->showMessage(tr("The engine has not stopped after 15 s: Kill (Ctrl+Shift+K) ends it at once; "
                                  "the run is then marked failed."),
                               20000);
  });
  updateQueueList();
}

void MainWindow::killRun() {
  if (!queue_->current()) return;
  queue_->killCurrent();
}

RunDashboard* MainWindow::dashboardFor(EngineProcess* process) const {
  for (int i = 0; i < dashboards_->count(); ++i) {
    auto* d = qobject_cast<RunDashboard*>(dashboards_->widget(i));
    if (d && d->property("process").value<QObject*>() == process) return d;
  }
  return nullptr;
}

namespace {
// A run is (store, id): run 1 of one database is not run 1 of another.
bool sameStore(const QString& a, const QString& b) {
  auto canonical = [](const QString& path) {
    const QFileInfo info(path);
    return info.exists() ? info.canonicalFilePath() : info.absoluteFilePath();
  };
  return canonical(a) == canonical(b);
}
}  // namespace

void MainWindow::showInDashboard(RunDashboard* dashboard, const QString& store) {
  dashboard->setProperty("store", store);
  const int i = dashboards_->addTab(dashboard, QString());
  dashboards_->setTabToolTip(i, tr("Run database: %1").arg(store));
  dashboards_->setCurrentIndex(i);
}

void MainWindow::addAdvisor(RunDashboard* dashboard, const QString& store, qint64 runId) {
  if (dashboard->property("advisor").toBool()) return;
  dashboard->setProperty("advisor", true);
  auto* advisor = new AdvisorPanel(dashboard);
  advisor->setDatabasePath(store);
  advisor->setEnginePath(enginePath());
  connect(advisor, &AdvisorPanel::statusMessage, this, [this](const QString& m) { statusBar()->showMessage(m, 8000); });
  connect(advisor, &AdvisorPanel::rerunFinished, this, [this] { history_->reload(); });
  connect(advisor, &AdvisorPanel::addToLadderRequested, this, [this, runId](const QJsonObject& baseline) {
    ladderFollowsSetup_ = false;  // until "Queue ladder" on the Set-up page
    ladder_->setBaseline(baseline, tr("run %1's configuration, from its Advisor").arg(runId));
    showPage(LadderPage);
  });
  advisor->showRun(runId);
  connect(dashboard, &RunDashboard::runEnded, advisor, [advisor, runId] { advisor->showRun(runId); });
  dashboard->bottomTabs()->addTab(advisor, tr("Advisor"));
  auto* layers = new LayersPanel(dashboard);
  layers->setDatabasePath(store);
  layers->showRun(runId);
  connect(dashboard, &RunDashboard::runEnded, layers, [layers, runId] { layers->showRun(runId); });
  const int tab = dashboard->bottomTabs()->addTab(layers, tr("Layers"));
  dashboard->bottomTabs()->setTabToolTip(
      tab, tr("Where the sampled steps went, layer by layer, against the roofline (docs/layers.md)"));
  connect(advisor, &AdvisorPanel::showLayerRequested, layers, [dashboard, layers](const QString& layer, const QString& phase) {
    dashboard->bottomTabs()->setCurrentWidget(layers);
    layers->selectLayer(layer, phase);
  });
}

void MainWindow::onLaunched(EngineProcess* process) {
  auto* dashboard = new RunDashboard(dashboards_);
  dashboard->setProperty("process", QVariant::fromValue<QObject*>(process));
  showInDashboard(dashboard, process->databasePath());
  dashboards_->setTabText(dashboards_->indexOf(dashboard), process->name());
  dashboard->setStatus(tr("starting"));
  dashboard->setStoppable(true);
  connect(dashboard, &RunDashboard::stopRequested, this, [this, process] {
    if (queue_->current() == process) stopRun();
  });
  connect(process, &EngineProcess::runStarted, dashboard, [dashboard, this, process](qint64, const QJsonObject& e) {
    dashboard->handleRunStarted(e);
    const int i = dashboards_->indexOf(dashboard);
    if (i >= 0) dashboards_->setTabText(i, QStringLiteral("%1 (#%2)").arg(process->name()).arg(process->runId()));
    updateQueueList();
  });
  connect(process, &EngineProcess::stepReceived, dashboard, &RunDashboard::handleStep);
  connect(process, &EngineProcess::epochReceived, dashboard, &RunDashboard::handleEpoch);
  connect(process, &EngineProcess::logReceived, dashboard, &RunDashboard::appendLog);
  connect(process, &EngineProcess::stateChanged, this, &MainWindow::updateQueueList);
  connect(process, &EngineProcess::stateChanged, dashboard, [dashboard](EngineProcess::State state) {
    if (state == EngineProcess::State::Stopping) dashboard->setStatus(QStringLiteral("stopping"));
  });
  updateQueueList();
}

void MainWindow::onRunEnded(EngineProcess* process, const QString& status, const QString&) {
  const QString reason = status == QLatin1String("failed") ? process->failureReason() : QString();
  if (RunDashboard* d = dashboardFor(process)) {
    d->refreshNow();
    d->setStatus(status, reason);
    d->showResult(process->summary());
    const int i = dashboards_->indexOf(d);
    if (i >= 0 && process->runId() > 0)
      dashboards_->setTabText(i, QStringLiteral("%1 (#%2)").arg(process->name()).arg(process->runId()));
    // What to try next, as for a run opened from the history.
    if (process->runId() > 0) addAdvisor(d, process->databasePath(), process->runId());
  }
  if (status == QLatin1String("failed")) {
    statusBar()->showMessage(tr("Run '%1' failed: %2").arg(process->name(), reason), 15000);
  } else {
    statusBar()->showMessage(tr("Run '%1' %2.").arg(process->name(), status), 8000);
  }
  history_->reload();
  updateQueueList();
}

void MainWindow::updateQueueList() {
  if (!queueList_) return;
  queueList_->clear();
  EngineProcess* current = queue_->current();
  if (current) {
    const QString state = current->state() == EngineProcess::State::Stopping ? tr("stopping") : tr("running");
    const QString id = current->runId() > 0 ? QStringLiteral(" (#%1)").arg(current->runId()) : QString();
    queueList_->addItem(QStringLiteral("▶ %1%2 — %3").arg(current->name(), id, state));
    queueList_->item(0)->setToolTip(queueList_->item(0)->text());
  }
  int position = 1;
  for (const QJsonObject& c : queue_->pending()) {
    auto* item = new QListWidgetItem(QStringLiteral("%1. %2").arg(position++).arg(RunSummary::nameOf(c)), queueList_);
    item->setToolTip(tr("Waiting: %1").arg(RunSummary::nameOf(c)));
  }
  stopButton_->setEnabled(current != nullptr);
  killButton_->setEnabled(current != nullptr);
  if (stopAction_) stopAction_->setEnabled(current != nullptr);
  if (killAction_) killAction_->setEnabled(current != nullptr);
}

void MainWindow::showPage(Page page) { pages_->setCurrentIndex(int(page)); }

void MainWindow::openRun(qint64 runId) {
  for (int i = 0; i < dashboards_->count(); ++i) {
    auto* d = qobject_cast<RunDashboard*>(dashboards_->widget(i));
    if (d && (d->property("storedRunId").toLongLong() == runId || d->series().runId == runId) &&
        sameStore(d->property("store").toString(), databasePath_)) {
      dashboards_->setCurrentIndex(i);
      showPage(RunsPage);
      return;
    }
  }
  const RunSummary* run = history_->model()->run(runId);
  auto* dashboard = new RunDashboard(dashboards_);
  dashboard->setProperty("storedRunId", runId);
  dashboard->setStatus(tr("loading"));
  showInDashboard(dashboard, databasePath_);
  dashboards_->setTabText(dashboards_->indexOf(dashboard),
                          run ? QStringLiteral("%1 (#%2)").arg(RunSummary::shownName(run->name)).arg(runId) : tr("Run %1").arg(runId));
  // Read from the store on a worker thread; a run still being written (by
  // the command line or another workbench) is followed until it ends.
  // The tab is named before the history has read the run (--open-run at start).
  connect(dashboard, &RunDashboard::runNamed, this, [this, dashboard, runId](const QString& name) {
    const int i = dashboards_->indexOf(dashboard);
    if (i >= 0) dashboards_->setTabText(i, QStringLiteral("%1 (#%2)").arg(RunSummary::shownName(name)).arg(runId));
  });
  dashboard->follow(databasePath_, runId);
  connect(dashboard, &RunDashboard::runEnded, history_, &RunHistoryView::reload);
  addAdvisor(dashboard, databasePath_, runId);
  showPage(RunsPage);
}

void MainWindow::compareRuns(const QList<qint64>& ids) { compareRunsNow(ids, false); }

void MainWindow::compareRunsNow(const QList<qint64>& ids, bool afterReload) {
  if (ids.size() < 2) {
    statusBar()->showMessage(tr("Select two or more runs in the history to compare."), 6000);
    return;
  }
  QList<RunSummary> runs;
  QStringList missing;
  for (qint64 id : ids) {
    if (const RunSummary* r = history_->model()->run(id)) runs << *r;
    else missing << QStringLiteral("#%1").arg(id);
  }
  if (!missing.isEmpty() && !afterReload) {
    pendingCompare_ = ids;  // compared when the history has read the store
    history_->reload();
    return;
  }
  if (!missing.isEmpty())
    statusBar()->showMessage(tr("Not in %1: run(s) %2").arg(QFileInfo(databasePath_).fileName(),
                                                            missing.join(QLatin1String(", "))), 8000);
  if (runs.size() < 2) return;
  std::sort(runs.begin(), runs.end(), [](const RunSummary& a, const RunSummary& b) { return a.id < b.id; });
  compare_->setRuns(databasePath_, runs);
  showPage(ComparePage);
}

void MainWindow::saveConfigDialog() {
  QSettings settings;
  const QString path = QFileDialog::getSaveFileName(
      this, tr("Save configuration"),
      settings.value(QStringLiteral("config/folder"), QDir::homePath()).toString() + QLatin1Char('/') +
          RunSummary::nameOf(currentConfig()) + QStringLiteral(".json"),
      tr("Run configuration (*.json)"));
  if (path.isEmpty()) return;
  settings.setValue(QStringLiteral("config/folder"), QFileInfo(path).absolutePath());
  QString error;
  if (!RunConfig::save(currentConfig(), path, &error)) QMessageBox::warning(this, tr("Save failed"), error);
  else statusBar()->showMessage(tr("Saved %1").arg(path), 5000);
}

void MainWindow::loadConfigDialog() {
  QSettings settings;
  const QString path = QFileDialog::getOpenFileName(this, tr("Load configuration"),
                                                    settings.value(QStringLiteral("config/folder"), QDir::homePath()).toString(),
                                                    tr("Run configuration (*.json)"));
  if (path.isEmpty()) return;
  settings.setValue(QStringLiteral("config/folder"), QFileInfo(path).absolutePath());
  QStringList refused;
  QString error;
  if (!loadConfigFile(path, &refused, &error)) {
    QMessageBox::warning(this, tr("Load failed"), tr("%1: %2").arg(path, error));
    return;
  }
  if (!refused.isEmpty()) {
    QMessageBox box(QMessageBox::Warning, tr("Loaded with entries refused"),
                    tr("%1 was loaded except for %n entry(ies) the engine would refuse; those settings keep "
                       "their previous values.", nullptr, int(refused.size())).arg(path),
                    QMessageBox::Ok, this);
    box.setDetailedText(refused.join(QLatin1Char('\n')));
    box.setInformativeText(refused.mid(0, 5).join(QLatin1Char('\n')));
    box.exec();
  }
}

void MainWindow::openDatabaseDialog() {
  const QString path = QFileDialog::getOpenFileName(this, tr("Open run database"), QFileInfo(databasePath_).absolutePath(),
                                                    tr("Run databases (*.db *.sqlite);;All files (*)"));
  if (path.isEmpty()) return;
  setDatabasePath(path);
  QSettings().setValue(QStringLiteral("database/path"), path);
  showPage(HistoryPage);
}

void MainWindow::about() {
  // Library versions: what the engine reported about itself, and the
  // environment of the most recent run in the store (CUDA, cuDNN, BLAS...).
  QJsonObject env = engineInfo_ ? engineInfo_->environment() : QJsonObject();
  qint64 newest = 0;
  for (const RunSummary& r : history_->model()->runs())
    if (r.id > newest && !r.environment.isEmpty()) {
      newest = r.id;
      env = RunConfig::merged(engineInfo_ ? engineInfo_->environment() : QJsonObject(), r.environment);
    }
  auto lookup = [&env](const QString& word, const QString& unless = QString()) {
    QStringList found;
    for (auto it = env.begin(); it != env.end(); ++it)
      if (it.key().contains(word, Qt::CaseInsensitive) && (unless.isEmpty() || !it.key().contains(unless)))
        found << QStringLiteral("%1 = %2").arg(it.key(), RunConfig::valueText(it.value()));
    return found.isEmpty() ? tr("not reported (no CUDA run yet, or a CPU-only build)") : found.join(QStringLiteral(", "));
  };
  QMessageBox::about(
      this, tr("About Trainbench"),
      tr("<h3>Trainbench %1</h3><p>A workbench for making deep-learning training fast: switch speed-up tricks "
         "on and off, run, watch and compare.</p>"
         "<table cellspacing='4'><tr><td>Qt (run time / build)</td><td>%2 / %3</td></tr>"
         "<tr><td>Engine</td><td>%4</td></tr><tr><td>CUDA</td><td>%5</td></tr><tr><td>cuDNN</td><td>%6</td></tr>"
         "<tr><td>BLAS</td><td>%7</td></tr><tr><td>Run database</td><td>%8</td></tr></table>"
         "<p>License: GPL-3.0-or-later. Plots by QCustomPlot.</p>")
          .arg(QStringLiteral(TRAINBENCH_VERSION), QString::fromLatin1(qVersion()), QStringLiteral(QT_VERSION_STR),
               engineInfo_ && !engineInfo_->version().isEmpty() ? engineInfo_->version().toHtmlEscaped() : tr("unknown"),
               lookup(QStringLiteral("cuda"), QStringLiteral("cudnn")).toHtmlEscaped(), lookup(QStringLiteral("cudnn")).toHtmlEscaped(),
               lookup(QStringLiteral("blas")).toHtmlEscaped(), databasePath_.toHtmlEscaped()));
}

void MainWindow::closeEvent(QCloseEvent* event) {
  if (queue_->current()) {
    const auto answer = QMessageBox::question(this, tr("A run is in progress"),
                                              tr("Stop the run in progress (it is saved as stopped) and quit?"),
                                              QMessageBox::Yes | QMessageBox::Cancel, QMessageBox::Cancel);
    if (answer != QMessageBox::Yes) {
      event->ignore();
      return;
    }
  }
  history_->saveNotesIfModified();
  QSettings settings;
  settings.setValue(QStringLiteral("window/geometry"), saveGeometry());
  settings.setValue(QStringLiteral("window/runsSplitter"), runsSplitter_->saveState());
  settings.setValue(QStringLiteral("window/state"), saveState());
  settings.setValue(QStringLiteral("window/page"), pages_->currentIndex());
  settings.setValue(QStringLiteral("setup/config"), QJsonDocument(currentConfig()).toJson(QJsonDocument::Compact));
  settings.setValue(QStringLiteral("database/path"), databasePath_);
  queue_->clearPending();
  event->accept();
}
