// SPDX-License-Identifier: GPL-3.0-or-later
#include "ladder_view.h"

#include <qcustomplot.h>

#include <QBuffer>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QJsonDocument>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QSplitter>
#include <QStandardPaths>
#include <QTableWidget>
#include <QTextDocument>
#include <QVBoxLayout>
#include <cmath>
#include <fstream>

#include "engine/ladder/ladder.h"
#include "engine/ladder/ladder_table.h"
#include "engine/ladder/rungs.h"
#include "engine/store/run_store.h"
#include "engine/train/config.h"
#include "run_config.h"
#include "setting_controls.h"
#include "trick_catalog.h"

using json = nlohmann::json;

namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

QColor verdictColor(const std::string& verdict) {
  if (verdict == "faster") return QColor(44, 160, 44);
  if (verdict == "slower") return QColor(214, 39, 40);
  return QColor(127, 127, 127);
}

bool writeText(const QString& path, const QByteArray& text) {
  QFile f(path);
  return f.open(QIODevice::WriteOnly | QIODevice::Truncate) && f.write(text) == text.size();
}

// "cumulative on cpu, 1 repeat of 3 measured steps after 1 warm-up step",
// the mode by the settings table's name for it.
QString measurementText(const json& table) {
  const SettingInfo* mode = TrickCatalog::instance().setting(QStringLiteral("ladder_mode"));
  const QString modeName = qs(table.value("mode", ""));
  const qint64 repeats = table.value("repeats", 0), measured = table.value("measured_steps", 0),
               warmup = table.value("warmup_steps", 0);
  return LadderView::tr("%1 on %2, %3 of %4 after %5")
      .arg(mode ? mode->optionLabel(modeName) : modeName, qs(table.value("device", "")))
      .arg(repeats == 1 ? LadderView::tr("1 repeat") : LadderView::tr("%1 repeats").arg(repeats))
      .arg(measured == 1 ? LadderView::tr("1 measured step") : LadderView::tr("%1 measured steps").arg(measured))
      .arg(warmup == 1 ? LadderView::tr("1 warm-up step") : LadderView::tr("%1 warm-up steps").arg(warmup));
}

// The rung list's items keep their title and tooltip beside what is shown.
constexpr int kTitleRole = Qt::UserRole + 1;
constexpr int kToolTipRole = Qt::UserRole + 2;
}  // namespace

LadderView::LadderView(QWidget* parent) : QWidget(parent) {
  auto* outer = new QHBoxLayout(this);
  auto* splitter = new QSplitter(Qt::Horizontal, this);
  outer->addWidget(splitter);

  // --- left: what to climb
  auto* left = new QWidget(splitter);
  auto* leftLayout = new QVBoxLayout(left);
  leftLayout->setContentsMargins(0, 0, 0, 0);
  auto* rungBox = new QGroupBox(tr("Rungs, in order"), left);
  auto* rungLayout = new QVBoxLayout(rungBox);
  rungs_ = new QListWidget(rungBox);
  rungs_->setDragDropMode(QAbstractItemView::InternalMove);
  rungs_->setToolTip(tr("Each checked rung adds its tricks on top of the last (cumulative mode). Drag to "
                        "reorder. A rung the device cannot apply is run as 'skipped' with the reason."));
  for (const tb::RungDef& r : tb::rung_catalogue()) {
    auto* item = new QListWidgetItem(qs(r.title), rungs_);
    item->setData(Qt::UserRole, qs(r.id));
    item->setFlags(item->flags() | Qt::ItemIsUserCheckable | Qt::ItemIsDragEnabled);
    item->setCheckState(Qt::Checked);
    item->setToolTip(tr("%1: sets %2%3")
                         .arg(qs(r.id), qs(r.changes(tb::default_config()).dump()),
                              r.changes_results ? tr(" (changes the numbers: gets an accuracy run)") : QString()));
    item->setData(kTitleRole, item->text());
    item->setData(kToolTipRole, item->toolTip());
  }
  rungLayout->addWidget(rungs_);
  leftLayout->addWidget(rungBox, 1);

  // The ladder settings: controls made from the engine's settings table.
  auto* settingsBox = new QGroupBox(tr("Measurement"), left);
  auto* form = new QFormLayout(settingsBox);
  for (const char* key : {"ladder_mode", "ladder_repeats", "ladder_warmup_steps", "ladder_measured_steps",
                          "ladder_accuracy"}) {
    const SettingInfo* s = TrickCatalog::instance().setting(QLatin1String(key));
    if (!s) continue;
    QWidget* w = makeSettingControl(*s, settingsBox);
    settings_.append(w);
    // A check box carries its label; the others get the form's.
    if (s->type == QLatin1String("bool")) form->addRow(QString(), w);
    else form->addRow(s->label + QLatin1Char(':'), w);
  }
  leftLayout->addWidget(settingsBox);
  auto* buttons = new QHBoxLayout;
  start_ = new QPushButton(tr("Start ladder"), left);
  start_->setToolTip(tr("Run `trainbench-engine ladder` on the baseline named above the table (the Set-up "
                        "page's configuration unless a run's Advisor chose another)."));
  stop_ = new QPushButton(tr("Stop"), left);
  stop_->setToolTip(tr("Finish the run in progress and stop; the ladder is stored as stopped."));
  stop_->setEnabled(false);
  buttons->addWidget(start_);
  buttons->addWidget(stop_);
  leftLayout->addLayout(buttons);
  splitter->addWidget(left);

  // --- right: the result
  auto* right = new QWidget(splitter);
  auto* rightLayout = new QVBoxLayout(right);
  rightLayout->setContentsMargins(0, 0, 0, 0);
  auto* top = new QHBoxLayout;
  top->addWidget(new QLabel(tr("Ladder:"), right));
  ladders_ = new QComboBox(right);
  ladders_->setToolTip(tr("Stored ladders, newest first."));
  ladders_->setMinimumContentsLength(40);
  top->addWidget(ladders_, 1);
  auto* csv = new QPushButton(tr("CSV…"), right);
  auto* md = new QPushButton(tr("Markdown…"), right);
  auto* html = new QPushButton(tr("HTML…"), right);
  csv->setToolTip(tr("The table as CSV."));
  md->setToolTip(tr("The table as Markdown, with the chart as a PNG beside it."));
  html->setToolTip(tr("The table and the chart in one HTML file."));
  top->addWidget(csv);
  top->addWidget(md);
  top->addWidget(html);
  rightLayout->addLayout(top);
  baselineLabel_ = new QLabel(right);
  baselineLabel_->setObjectName(QStringLiteral("ladderBaseline"));
  baselineLabel_->setWordWrap(true);
  rightLayout->addWidget(baselineLabel_);
  status_ = new QLabel(right);
  status_->setWordWrap(true);
  rightLayout->addWidget(status_);
  auto* vsplit = new QSplitter(Qt::Vertical, right);
  tableWidget_ = new QTableWidget(vsplit);
  tableWidget_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  tableWidget_->verticalHeader()->setVisible(false);
  tableWidget_->setToolTip(tr("Ratios pair run r of a rung with run r of the baseline (and of its reference), "
                              "which ran next to it: drift of the machine cancels. The range is the min-max "
                              "of the pairs; the verdict needs every pair on one side and 2% on the median."));
  vsplit->addWidget(tableWidget_);
  auto* plots = new QWidget(vsplit);
  auto* plotsLayout = new QHBoxLayout(plots);
  plotsLayout->setContentsMargins(0, 0, 0, 0);
  chart_ = new QCustomPlot(plots);
  chart_->setMinimumHeight(220);
  chart_->setToolTip(tr("Speed-up vs the baseline (samples/s), median of the paired repeats, with their "
                        "min-max. Green: faster than the rung below; red: slower; grey: no measurable change."));
  accuracy_ = new QCustomPlot(plots);
  accuracy_->setMinimumHeight(220);
  accuracy_->setToolTip(tr("Test accuracy over training time of the accuracy runs (rungs that change the numbers)."));
  plotsLayout->addWidget(chart_, 3);
  plotsLayout->addWidget(accuracy_, 2);
  vsplit->addWidget(plots);
  rightLayout->addWidget(vsplit, 1);
  splitter->addWidget(right);
  splitter->setStretchFactor(0, 1);
  splitter->setStretchFactor(1, 4);

  connect(start_, &QPushButton::clicked, this, [this] { start(); });
  connect(stop_, &QPushButton::clicked, this, &LadderView::stop);
  connect(ladders_, &QComboBox::activated, this,
          [this](int i) { showLadder(ladders_->itemData(i).toLongLong()); });
  auto saveAs = [this](const QString& filter, const QString& suffix, auto write) {
    const QString path = QFileDialog::getSaveFileName(this, tr("Export the ladder"),
                                                      QStringLiteral("ladder-%1.%2").arg(ladderId_).arg(suffix), filter);
    if (path.isEmpty()) return;
    emit statusMessage(write(path) ? tr("Wrote %1").arg(path) : tr("Could not write %1").arg(path));
  };
  connect(csv, &QPushButton::clicked, this,
          [=, this] { saveAs(tr("CSV (*.csv)"), QStringLiteral("csv"), [this](const QString& p) { return exportCsv(p); }); });
  connect(md, &QPushButton::clicked, this, [=, this] {
    saveAs(tr("Markdown (*.md)"), QStringLiteral("md"), [this](const QString& p) { return exportMarkdown(p); });
  });
  connect(html, &QPushButton::clicked, this, [=, this] {
    saveAs(tr("HTML (*.html)"), QStringLiteral("html"), [this](const QString& p) { return exportHtml(p); });
  });
  connect(&process_, &QProcess::readyReadStandardOutput, this, &LadderView::readEngineOutput);
  connect(&process_, &QProcess::finished, this, [this](int code, QProcess::ExitStatus) {
    readEngineOutput();
    start_->setEnabled(true);
    stop_->setEnabled(false);
    const QString err = QString::fromUtf8(process_.readAllStandardError()).trimmed();
    const QString status = table_.is_object() ? qs(table_.value("status", "")) : QString();
    if (code != 0 && code != 130 && !err.isEmpty()) status_->setText(tr("The engine said: %1").arg(err.right(600)));
    reloadLadders();
    if (ladderId_ > 0) showLadder(ladderId_);
    emit ladderFinished(ladderId_, code == 0 ? QStringLiteral("finished") : code == 130 ? QStringLiteral("stopped")
                                                                                         : QStringLiteral("failed"));
    Q_UNUSED(status);
  });
  render();
  showBaseline();
}

LadderView::~LadderView() {
  if (isRunning()) {
    process_.terminate();
    if (!process_.waitForFinished(3000)) process_.kill();
  }
  if (!configFile_.isEmpty()) QFile::remove(configFile_);
}

void LadderView::setDatabasePath(const QString& path) {
  databasePath_ = path;
  reloadLadders();
}

void LadderView::followBaseline(const QJsonObject& config, const QString& source) {
  baseline_ = config;
  baselineSource_ = source;
  showBaseline();
  markRungs();
}

void LadderView::setDeviceBackend(const QString& backend) {
  deviceBackend_ = backend;
  markRungs();
}

void LadderView::markRungs() {
  skipReasons_.clear();
  nlohmann::json base;
  try {
    base = RunConfig::validated(baseline_, tr("the ladder's baseline"));
  } catch (const std::exception&) {
    base = nullptr;  // the engine names what is wrong when the ladder starts
  }
  // A baseline on the CPU stays there; otherwise the machine's backend.
  const QString device = baseline_.value(QLatin1String("device")).toString();
  const std::string on = device == QLatin1String("cpu") || deviceBackend_ == QLatin1String("cpu") ? "cpu" : "cuda:0";
  for (int i = 0; i < rungs_->count(); ++i) {
    QListWidgetItem* item = rungs_->item(i);
    const QString id = item->data(Qt::UserRole).toString();
    const tb::RungDef* def = tb::find_rung(id.toStdString());
    QString reason;
    if (def && base.is_object() && !deviceBackend_.isEmpty()) {
      try {
        reason = QString::fromStdString(tb::why_skipped(*def, base, on));
      } catch (const std::exception& e) {
        reason = QString::fromUtf8(e.what());
      }
    }
    skipReasons_.insert(id, reason);
    const QString title = item->data(kTitleRole).toString(), tip = item->data(kToolTipRole).toString();
    item->setText(reason.isEmpty() ? title : tr("%1 (skipped here)").arg(title));
    item->setToolTip(reason.isEmpty() ? tip
                                      : tr("%1\nSkipped on %2: %3. The ladder records it as skipped and runs nothing "
                                           "for it.")
                                            .arg(tip, QString::fromStdString(on), reason));
    item->setForeground(reason.isEmpty() ? palette().brush(QPalette::Active, QPalette::Text)
                                         : palette().brush(QPalette::Disabled, QPalette::Text));
  }
}

void LadderView::showBaseline() {
  const SettingInfo* model = TrickCatalog::instance().setting(QStringLiteral("model"));
  const QString modelName = baseline_.value(QLatin1String("model")).toString();
  baselineLabel_->setText(
      baseline_.isEmpty()
          ? tr("<b>Baseline of a new ladder:</b> the engine's defaults.")
          : tr("<b>Baseline of a new ladder:</b> %1 — %2, batch %3, on %4.")
                .arg(baselineSource_.toHtmlEscaped(), (model ? model->optionLabel(modelName) : modelName).toHtmlEscaped())
                .arg(baseline_.value(QLatin1String("batch_size")).toInteger())
                .arg(baseline_.value(QLatin1String("device")).toString().toHtmlEscaped()));
  baselineLabel_->setToolTip(tr("Rung 0 runs this configuration; every rung adds its tricks to it. The full "
                                "configuration:\n%1")
                                 .arg(QString::fromUtf8(QJsonDocument(baseline_).toJson(QJsonDocument::Indented))));
}

QString LadderView::baselineText() const {
  QTextDocument doc;
  doc.setHtml(baselineLabel_->text());
  return doc.toPlainText();
}

void LadderView::setBaseline(const QJsonObject& config, const QString& source) {
  followBaseline(config, source.isEmpty() ? tr("as given") : source);
  for (QWidget* w : settings_) {
    const QString key = w->objectName();
    if (config.contains(key)) setSettingControlValue(w, config.value(key));
  }
  const QStringList chosen = config.value(QLatin1String("ladder_rungs")).toString().split(QLatin1Char(','), Qt::SkipEmptyParts);
  if (chosen.isEmpty()) return;
  for (int i = 0; i < rungs_->count(); ++i) {
    QListWidgetItem* item = rungs_->item(i);
    item->setCheckState(chosen.contains(item->data(Qt::UserRole).toString().trimmed()) ? Qt::Checked : Qt::Unchecked);
  }
}

QJsonObject LadderView::ladderConfig() const {
  QJsonObject c = baseline_;
  QStringList ids;
  for (int i = 0; i < rungs_->count(); ++i)
    if (rungs_->item(i)->checkState() == Qt::Checked) ids << rungs_->item(i)->data(Qt::UserRole).toString();
  c.insert(QStringLiteral("ladder_rungs"), ids.join(QLatin1Char(',')));
  for (const QWidget* w : settings_) c.insert(w->objectName(), settingControlValue(w));
  return c;
}

bool LadderView::start() {
  if (isRunning()) {
    emit statusMessage(tr("A ladder is running already."));
    return false;
  }
  if (enginePath_.isEmpty() || !QFileInfo(enginePath_).isExecutable()) {
    status_->setText(tr("No engine at '%1': set its path in the File menu.").arg(enginePath_));
    return false;
  }
  const QJsonObject config = ladderConfig();
  if (config.value(QLatin1String("ladder_rungs")).toString().isEmpty()) {
    status_->setText(tr("Check at least one rung."));
    return false;
  }
  if (!configFile_.isEmpty()) QFile::remove(configFile_);
  const QString dir = QStandardPaths::writableLocation(QStandardPaths::TempLocation);
  configFile_ = QDir(dir).filePath(QStringLiteral("trainbench-ladder-%1.json").arg(QCoreApplication::applicationPid()));
  if (!writeText(configFile_, QJsonDocument(config).toJson())) {
    status_->setText(tr("Could not write the ladder's configuration to %1").arg(configFile_));
    return false;
  }
  ladderId_ = 0;
  table_ = json();
  pending_.clear();
  process_.setProgram(enginePath_);
  process_.setArguments({QStringLiteral("--db"), databasePath_, QStringLiteral("ladder"), QStringLiteral("-c"),
                         configFile_, QStringLiteral("--events"), QStringLiteral("jsonl"), QStringLiteral("-q")});
  process_.start();
  if (!process_.waitForStarted(10000)) {
    status_->setText(tr("The engine did not start: %1").arg(process_.errorString()));
    return false;
  }
  start_->setEnabled(false);
  stop_->setEnabled(true);
  status_->setText(tr("Starting the ladder…"));
  emit statusMessage(tr("Ladder started"));
  return true;
}

void LadderView::stop() {
  if (isRunning()) process_.terminate();
}

// The engine's JSON lines: the ladder's own events carry the table; the
// runs' events say which run is in progress.
void LadderView::readEngineOutput() {
  pending_ += process_.readAllStandardOutput();
  int nl;
  bool changed = false;
  while ((nl = pending_.indexOf('\n')) >= 0) {
    const QByteArray line = pending_.left(nl);
    pending_.remove(0, nl + 1);
    const json e = json::parse(line.constData(), line.constData() + line.size(), nullptr, false);
    if (!e.is_object()) continue;
    const std::string type = e.value("type", "");
    if (type == "ladder_started") {
      ladderId_ = e.value("ladder_id", int64_t(0));
    } else if (type == "ladder_progress" || type == "ladder_finished") {
      table_ = e["table"];
      if (type == "ladder_finished") table_["status"] = e.value("status", "");
      changed = true;
    } else if (type == "run_started") {
      status_->setText(tr("Run %1 of %2: %3")
                           .arg(table_.value("runs_done", 0) + 1)
                           .arg(table_.value("runs_total", 0))
                           .arg(qs(e.value("name", ""))));
    }
  }
  if (changed) render();
}

void LadderView::reloadLadders() {
  ladders_->clear();
  if (databasePath_.isEmpty() || !QFileInfo::exists(databasePath_)) return;
  try {
    tb::RunStore store(databasePath_.toStdString(), tb::RunStore::Mode::ReadOnly);
    const auto list = store.list_ladders();
    for (auto it = list.rbegin(); it != list.rend(); ++it)
      ladders_->addItem(QStringLiteral("#%1  %2  (%3, %4)")
                            .arg(it->id)
                            .arg(qs(it->name), qs(it->status), qs(it->created_at.substr(0, 16))),
                        QVariant::fromValue<qlonglong>(it->id));
  } catch (const std::exception& e) {
    status_->setText(tr("Could not read the ladders: %1").arg(QString::fromUtf8(e.what())));
  }
  const int i = ladders_->findData(QVariant::fromValue<qlonglong>(ladderId_));
  if (i >= 0) ladders_->setCurrentIndex(i);
  // Opening a store shows its newest ladder.
  if (ladderId_ == 0 && !isRunning() && ladders_->count() > 0) showLadder(ladders_->itemData(0).toLongLong());
}

bool LadderView::showLadder(qint64 id) {
  try {
    tb::RunStore store(databasePath_.toStdString(), tb::RunStore::Mode::ReadOnly);
    const auto l = store.get_ladder(id);
    if (!l) return false;
    ladderId_ = id;
    table_ = l->result;
    table_["status"] = l->status;
  } catch (const std::exception& e) {
    status_->setText(tr("Could not read ladder %1: %2").arg(id).arg(QString::fromUtf8(e.what())));
    return false;
  }
  status_->setText(tr("Ladder #%1: %2").arg(id).arg(qs(table_.value("status", ""))));
  render();
  return true;
}

void LadderView::render() {
  const bool have = table_.is_object() && table_.contains("rows");
  const bool accuracy = have && tb::ladder_table_has_accuracy(table_);
  std::vector<std::string> header = tb::ladder_table_header(accuracy);
  tableWidget_->clear();
  tableWidget_->setColumnCount(int(header.size()));
  // "samples/s (min–max)" on two lines: the columns are as wide as their
  // numbers, and the verdict stays on screen.
  QStringList labels;
  for (const auto& h : header) labels << qs(h).replace(QStringLiteral(" ("), QStringLiteral("\n("));
  tableWidget_->setHorizontalHeaderLabels(labels);
  tableWidget_->setRowCount(have ? int(table_["rows"].size()) : 0);
  if (have) {
    int r = 0;
    for (const json& row : table_["rows"]) {
      const std::vector<std::string> cells = tb::ladder_row_cells(row, accuracy);
      if (row["status"] == "skipped") {  // the reason across the measurement columns
        for (int c : {0, 1}) {
          auto* item = new QTableWidgetItem(qs(c == 0 ? cells[0] : cells[7]));
          item->setForeground(QColor(127, 127, 127));
          tableWidget_->setItem(r, c, item);
        }
        tableWidget_->setSpan(r, 1, 1, int(cells.size()) - 1);
        ++r;
        continue;
      }
      for (size_t c = 0; c < cells.size(); ++c) {
        auto* item = new QTableWidgetItem(qs(cells[c]));
        if (c > 0 && c < 7) item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
        if (c == 7 && row.contains("verdict")) item->setForeground(verdictColor(row["verdict"]));
        if (!row["failed"].empty())
          item->setToolTip(qs(row["failed"][0].value("error", "")));
        tableWidget_->setItem(r, int(c), item);
      }
      ++r;
    }
    if (isRunning())
      status_->setText(tr("Ladder #%1: %2 of %3 runs done")
                           .arg(ladderId_)
                           .arg(table_.value("runs_done", 0))
                           .arg(table_.value("runs_total", 0)));
  }
  tableWidget_->resizeColumnsToContents();
  tableWidget_->setColumnWidth(1, std::max(tableWidget_->columnWidth(1), 50));
  if (have && !isRunning())
    status_->setText(tr("Ladder #%1: %2 — %3").arg(ladderId_).arg(qs(table_.value("status", "")), measurementText(table_)));
  renderChart();
  renderAccuracy();
}

void LadderView::renderChart() {
  chart_->clearPlottables();
  chart_->clearItems();
  auto ticker = QSharedPointer<QCPAxisTickerText>::create();
  double hi = 1.2;
  int x = 0;
  if (table_.is_object() && table_.contains("rows"))
    for (const json& row : table_["rows"]) {
      if (row["status"] == "skipped") continue;
      ++x;
      // Two lines for long titles, so every label fits under its bar.
      QString label = qs(row["title"]);
      if (label.size() > 14) {
        const int mid = label.size() / 2;
        int cut = label.lastIndexOf(QLatin1Char(' '), mid);
        const int after = label.indexOf(QLatin1Char(' '), mid);
        if (cut < 0 || (after >= 0 && after - mid < mid - cut)) cut = after;
        if (cut > 0) label[cut] = QLatin1Char('\n');
      }
      ticker->addTick(x, label);
      const json s = row.value("speedup", json());
      if (!s.is_object()) continue;
      const double med = s["median"], lo = s["min"], up = s["max"];
      auto* bar = new QCPBars(chart_->xAxis, chart_->yAxis);
      bar->setWidth(0.6);
      bar->setPen(Qt::NoPen);
      bar->setBrush(row["index"] == 0 ? QColor(31, 119, 180) : verdictColor(row.value("verdict", "")));
      bar->addData(x, med);
      auto* err = new QCPErrorBars(chart_->xAxis, chart_->yAxis);
      err->setDataPlottable(bar);
      err->addData(med - lo, up - med);
      err->setPen(QPen(palette().color(QPalette::Text), 1.5));
      hi = std::max(hi, up * 1.1);
    }
  ticker->setSubTickCount(0);
  chart_->xAxis->setTicker(ticker);
  chart_->xAxis->setRange(0.4, x + 0.6);
  chart_->yAxis->setRange(0, hi);
  chart_->yAxis->setLabel(tr("speed-up vs baseline (samples/s)"));
  auto* one = new QCPItemStraightLine(chart_);
  one->point1->setCoords(0, 1);
  one->point2->setCoords(1, 1);
  one->setPen(QPen(QColor(214, 39, 40), 1, Qt::DashLine));
  chart_->replot(QCustomPlot::rpQueuedReplot);
}

// Test accuracy against training time: the evaluation series when the run
// evaluated between epochs, else its epochs.
void LadderView::renderAccuracy() {
  accuracy_->clearGraphs();
  accuracy_->clearItems();
  accuracy_->legend->setVisible(false);
  accuracy_->xAxis->setLabel(tr("training time (s)"));
  accuracy_->yAxis->setLabel(tr("test accuracy"));
  // No accuracy runs: an accuracy axis (0 to 1) and why the plot is empty,
  // not QCustomPlot's default ranges.
  auto showEmpty = [this] {
    accuracy_->xAxis->setRange(0, 1);
    accuracy_->yAxis->setRange(0, 1);
    auto* why = new QCPItemText(accuracy_);
    why->position->setType(QCPItemPosition::ptAxisRectRatio);
    why->position->setCoords(0.5, 0.5);
    why->setText(tr("No accuracy runs.\nCheck \"%1\" to train\nthe rungs that change\nthe numbers to the end.")
                     .arg(TrickCatalog::instance().setting(QStringLiteral("ladder_accuracy"))
                              ? TrickCatalog::instance().setting(QStringLiteral("ladder_accuracy"))->label
                              : QStringLiteral("ladder_accuracy")));
    why->setColor(palette().color(QPalette::PlaceholderText));
    accuracy_->replot(QCustomPlot::rpQueuedReplot);
  };
  if (!table_.is_object() || !table_.contains("rows") || databasePath_.isEmpty()) {
    showEmpty();
    return;
  }
  const QList<QColor> colors = {QColor(31, 119, 180), QColor(255, 127, 14), QColor(44, 160, 44),
                                QColor(214, 39, 40), QColor(148, 103, 189)};
  int n = 0;
  try {
    tb::RunStore store(databasePath_.toStdString(), tb::RunStore::Mode::ReadOnly);
    for (const json& row : table_["rows"]) {
      if (!row.contains("accuracy")) continue;
      const int64_t run = row["accuracy"].value("run_id", int64_t(0));
      QVector<double> xs, ys;
      for (const auto& p : store.step_series(run, "test_accuracy")) xs << p.wall_time, ys << p.value;
      if (xs.isEmpty())
        for (const auto& p : store.epoch_series(run, "test_accuracy")) xs << p.wall_time, ys << p.value;
      if (xs.isEmpty()) continue;
      QCPGraph* g = accuracy_->addGraph();
      g->setName(qs(row["title"]));
      g->setPen(QPen(colors[n++ % colors.size()], 2));
      g->setScatterStyle(QCPScatterStyle::ssCircle);
      g->setData(xs, ys);
    }
  } catch (const std::exception&) {
    // A store without the ladder's runs (yet): no curves.
  }
  if (n == 0) {
    showEmpty();
    return;
  }
  accuracy_->legend->setVisible(true);
  accuracy_->rescaleAxes();
  // From the start of training, with room above the best point and the target drawn.
  QCPRange y = accuracy_->yAxis->range();
  double target = 0;
  for (const json& row : table_["rows"])
    if (row.contains("accuracy")) target = std::max(target, row["accuracy"].value("target_accuracy", 0.0));
  if (target > 0) {
    y.lower = std::min(y.lower, target), y.upper = std::max(y.upper, target);
    auto* line = new QCPItemStraightLine(accuracy_);
    line->point1->setCoords(0, target);
    line->point2->setCoords(1, target);
    line->setPen(QPen(QColor(127, 127, 127), 1, Qt::DashLine));
  }
  const double pad = std::max(0.01, 0.08 * y.size());
  accuracy_->yAxis->setRange(y.lower - pad, y.upper + pad);
  accuracy_->xAxis->setRange(0, accuracy_->xAxis->range().upper * 1.05);
  accuracy_->legend->setBrush(QColor(255, 255, 255, 200));
  accuracy_->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignLeft);
  accuracy_->replot(QCustomPlot::rpQueuedReplot);
}

bool LadderView::exportCsv(const QString& path) const {
  return table_.is_object() && writeText(path, QByteArray::fromStdString(tb::ladder_table_csv(table_)));
}

bool LadderView::exportMarkdown(const QString& path) const {
  if (!table_.is_object()) return false;
  const QString png = path + QStringLiteral(".png");
  const bool chart = chart_->savePng(png, 900, 420);
  QByteArray text = QStringLiteral("# %1\n\n").arg(qs(table_.value("name", "ladder"))).toUtf8();
  text += QByteArray::fromStdString(tb::ladder_table_markdown(table_));
  if (chart) text += QStringLiteral("\n![speed-up vs baseline](%1)\n").arg(QFileInfo(png).fileName()).toUtf8();
  return writeText(path, text);
}

QString LadderView::tableHtml() const {
  const bool accuracy = tb::ladder_table_has_accuracy(table_);
  QString html = QStringLiteral("<table border=\"1\" cellspacing=\"0\" cellpadding=\"4\">\n<tr>");
  for (const auto& h : tb::ladder_table_header(accuracy)) html += QStringLiteral("<th>%1</th>").arg(qs(h).toHtmlEscaped());
  html += QStringLiteral("</tr>\n");
  for (const json& row : table_["rows"]) {
    html += QStringLiteral("<tr>");
    for (const auto& c : tb::ladder_row_cells(row, accuracy)) html += QStringLiteral("<td>%1</td>").arg(qs(c).toHtmlEscaped());
    html += QStringLiteral("</tr>\n");
  }
  return html + QStringLiteral("</table>\n");
}

bool LadderView::exportHtml(const QString& path) const {
  if (!table_.is_object()) return false;
  QByteArray png;
  QBuffer buffer(&png);
  buffer.open(QIODevice::WriteOnly);
  const QPixmap pixmap = chart_->toPixmap(900, 420);
  pixmap.save(&buffer, "PNG");
  const QString title = qs(table_.value("name", "ladder")).toHtmlEscaped();
  const QString html =
      QStringLiteral("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>%1</title></head><body>\n"
                     "<h1>%1</h1>\n<p>%2.</p>\n%3"
                     "<p><img alt=\"speed-up vs baseline\" src=\"data:image/png;base64,%4\"></p>\n</body></html>\n")
          .arg(title, measurementText(table_).toHtmlEscaped(), tableHtml(), QString::fromLatin1(png.toBase64()));
  return writeText(path, html.toUtf8());
}
