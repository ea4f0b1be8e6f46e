// SPDX-License-Identifier: GPL-3.0-or-later
#include "run_history_view.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QItemSelectionModel>
#include <QJsonDocument>
#include <QLabel>
#include <QMenu>
#include <QSettings>
#include <QLineEdit>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollBar>
#include <QSplitter>
#include <QTableView>
#include <QTextCursor>
#include <QTimer>
#include <QVBoxLayout>
#include <exception>
#include <functional>

#include "engine/store/run_store.h"
#include "plot_export_dialog.h"
#include "run_history_filter.h"
#include "run_history_model.h"
#include "store_follower.h"

RunHistoryView::RunHistoryView(QWidget* parent) : QWidget(parent) {
  model_ = new RunHistoryModel(this);
  filter_ = new RunHistoryFilter(this);
  filter_->setSourceModel(model_);

  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  search_ = new QLineEdit(this);
  search_->setPlaceholderText(tr("Search name, model, tags, notes, settings (amp=bf16)…"));
  search_->setToolTip(tr("Every word must match the run's name, id (#12), model, data set, device, status, tags, "
                         "notes or a configuration value: 'bf16', 'batch_size=256', 'channels_last=true'."));
  search_->setClearButtonEnabled(true);
  bar->addWidget(search_, 2);
  status_ = new QComboBox(this);
  status_->addItem(tr("Any status"), QString());  // filled from the runs (any status string)
  modelFilter_ = new QComboBox(this);
  tag_ = new QComboBox(this);
  bar->addWidget(status_);
  bar->addWidget(modelFilter_);
  bar->addWidget(tag_);
  auto* refresh = new QPushButton(tr("Refresh"), this);
  refresh->setToolTip(tr("Read the run database again (F5)."));
  bar->addWidget(refresh);
  layout->addLayout(bar);

  auto* splitter = new QSplitter(Qt::Horizontal, this);
  table_ = new QTableView(splitter);
  table_->setModel(filter_);
  table_->setSortingEnabled(true);
  table_->sortByColumn(RunHistoryModel::Date, Qt::DescendingOrder);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  table_->setAlternatingRowColors(true);
  table_->verticalHeader()->hide();
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Interactive);
  table_->setContextMenuPolicy(Qt::ActionsContextMenu);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  splitter->addWidget(table_);

  auto* side = new QWidget(splitter);
  auto* sideLayout = new QVBoxLayout(side);
  details_ = new QLabel(tr("Select a run."), side);
  details_->setWordWrap(true);
  details_->setTextFormat(Qt::RichText);
  details_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  sideLayout->addWidget(details_);
  sideLayout->addWidget(new QLabel(tr("Notes:"), side));
  notes_ = new QPlainTextEdit(side);
  notes_->setPlaceholderText(tr("Notes about the selected run"));
  sideLayout->addWidget(notes_, 1);
  auto* saveNotes = new QPushButton(tr("Save notes"), side);
  sideLayout->addWidget(saveNotes);
  splitter->addWidget(side);
  splitter->setStretchFactor(0, 4);
  splitter->setStretchFactor(1, 1);
  splitter->setSizes({900, 220});
  side->setMinimumWidth(160);
  layout->addWidget(splitter, 1);

  auto* buttons = new QHBoxLayout;
  auto button = [&](const QString& text, const QString& tip, auto slot, const QKeySequence& key = {}) {
    auto* b = new QPushButton(text, this);
    b->setToolTip(tip);
    connect(b, &QPushButton::clicked, this, slot);
    buttons->addWidget(b);
    auto* action = new QAction(text, table_);
    if (!key.isEmpty()) action->setShortcut(key);
    action->setShortcutContext(Qt::WidgetWithChildrenShortcut);
    connect(action, &QAction::triggered, this, slot);
    table_->addAction(action);
    return b;
  };
  button(tr("Open dashboard"), tr("Show the plots of the selected run (Enter)."), [this] {
    const auto ids = selectedRunIds();
    if (!ids.isEmpty()) emit openRunRequested(ids.first());
  }, QKeySequence(Qt::Key_Return));
  button(tr("Compare selected"), tr("Compare two or more selected runs side by side."), [this] {
    const auto ids = selectedRunIds();
    if (ids.size() >= 2) emit compareRequested(ids);
    else emit statusMessage(tr("Select two or more runs to compare."));
  });
  button(tr("Rename…"), tr("Rename the selected run (F2)."), &RunHistoryView::renameSelected, QKeySequence(Qt::Key_F2));
  button(tr("Tags…"), tr("Set comma-separated tags on the selected runs."), &RunHistoryView::tagSelected);
  button(tr("Delete…"), tr("Delete the selected runs and all their metrics (Del)."), &RunHistoryView::deleteSelected,
         QKeySequence::Delete);
  button(tr("Export CSV…"), tr("Save the table as shown (filtered and sorted) as CSV."), &RunHistoryView::exportCsv);
  buttons->addStretch(1);
  layout->addLayout(buttons);

  connect(search_, &QLineEdit::textChanged, filter_, &RunHistoryFilter::setSearchText);
  connect(status_, &QComboBox::currentIndexChanged, this,
          [this] { filter_->setStatusFilter(status_->currentData().toString()); });
  connect(modelFilter_, &QComboBox::currentIndexChanged, this,
          [this] { filter_->setModelFilter(modelFilter_->currentData().toString()); });
  connect(tag_, &QComboBox::currentIndexChanged, this, [this] { filter_->setTagFilter(tag_->currentData().toString()); });
  connect(refresh, &QPushButton::clicked, this, &RunHistoryView::reload);
  connect(table_, &QTableView::doubleClicked, this, [this](const QModelIndex& index) {
    emit openRunRequested(index.data(RunHistoryModel::RunIdRole).toLongLong());
  });
  connect(table_->selectionModel(), &QItemSelectionModel::selectionChanged, this, &RunHistoryView::showSelectedNotes);
  connect(saveNotes, &QPushButton::clicked, this, [this] {
    if (saveNotesIfModified()) emit statusMessage(tr("Notes saved."));
  });
  // Typed notes are saved when the editor loses focus or the selection moves
  // on: nothing typed is ever dropped.
  notes_->installEventFilter(this);
  saveNotes->setToolTip(tr("Notes are also saved when you select another run or leave the notes field."));
  updateFilterChoices();

  // Runs started elsewhere (the command line, another workbench) appear on
  // their own: the store is watched for commits (StoreWatcher), and read
  // again now and then for what changes without a commit (an engine that
  // died). Typing notes is never interrupted.
  watcher_ = new StoreWatcher(this);
  reader_ = new RunListReader(this);
  connect(reader_, &RunListReader::runsRead, this, &RunHistoryView::applyRuns);
  // At most one reload a second while an engine commits batch after batch;
  // a hidden history catches up when it is shown.
  reloadSoon_ = new QTimer(this);
  reloadSoon_->setSingleShot(true);
  reloadSoon_->setInterval(1000);
  connect(reloadSoon_, &QTimer::timeout, this, [this] {
    if (isVisible() && !notes_->document()->isModified()) reload();
  });
  connect(watcher_, &StoreWatcher::changed, this, [this] {
    pendingReload_ = true;
    if (!reloadSoon_->isActive()) reloadSoon_->start();
  });
  autoRefresh_ = new QTimer(this);
  autoRefresh_->setInterval(15000);
  connect(autoRefresh_, &QTimer::timeout, this, [this] {
    if (isVisible() && !databasePath_.isEmpty() && !notes_->document()->isModified()) reload();
  });
  autoRefresh_->start();

  // Columns: a chooser on the header, remembered; a few are hidden at first.
  auto* header = table_->horizontalHeader();
  header->setContextMenuPolicy(Qt::CustomContextMenu);
  header->setToolTip(tr("Right-click to choose the columns."));
  connect(header, &QWidget::customContextMenuRequested, this, [this](const QPoint& pos) {
    QMenu menu(this);
    for (int c = 0; c < RunHistoryModel::ColumnCount; ++c) {
      QAction* a = menu.addAction(model_->headerData(c, Qt::Horizontal).toString());
      a->setCheckable(true);
      a->setChecked(!table_->isColumnHidden(c));
      connect(a, &QAction::toggled, this, [this, c](bool on) { setColumnShown(c, on); });
    }
    menu.exec(table_->horizontalHeader()->mapToGlobal(pos));
  });
  const QStringList hidden = QSettings().value(QStringLiteral("history/hiddenColumns"),
                                               QStringList{QStringLiteral("Dataset"), QStringLiteral("Device"), QStringLiteral("Tags")})
                                   .toStringList();
  for (int c = 0; c < RunHistoryModel::ColumnCount; ++c)
    table_->setColumnHidden(c, hidden.contains(columnKey(c)));
}

QString RunHistoryView::columnKey(int column) {
  static const char* keys[] = {"Id", "Name", "Date", "Model", "Dataset", "Device", "Status", "Batch", "Duration",
                               "MedianStep", "SamplesPerSecond", "PeakMemory", "FinalAccuracy", "Tags"};
  static_assert(sizeof(keys) / sizeof(keys[0]) == RunHistoryModel::ColumnCount);
  return column >= 0 && column < RunHistoryModel::ColumnCount ? QString::fromLatin1(keys[column]) : QString();
}

void RunHistoryView::setColumnShown(int column, bool shown) {
  table_->setColumnHidden(column, !shown);
  QStringList hidden;
  for (int c = 0; c < RunHistoryModel::ColumnCount; ++c)
    if (table_->isColumnHidden(c)) hidden << columnKey(c);
  QSettings().setValue(QStringLiteral("history/hiddenColumns"), hidden);
}

bool RunHistoryView::columnShown(int column) const { return !table_->isColumnHidden(column); }

void RunHistoryView::setDatabasePath(const QString& path) {
  saveNotesIfModified();
  notesRun_ = 0;
  const bool another = path != databasePath_;
  databasePath_ = path;
  if (another) {
    // Another database: the runs shown (and their ids) are not its runs, nor
    // is the one the side panel describes.
    shownPath_.clear();
    if (model_->applyRuns({})) updateFilterChoices();
    table_->clearSelection();
    showSelectedNotes();
  }
  reload();
  watcher_->watch(path);
}

void RunHistoryView::reload() {
  pendingReload_ = false;
  reader_->request(databasePath_);
}

void RunHistoryView::applyRuns(const QString& path, const QList<RunSummary>& runs, const QString& error) {
  if (path != databasePath_) return;  // an answer about the database shown before
  if (!error.isEmpty()) {
    emit statusMessage(tr("Cannot read %1: %2").arg(databasePath_, error));
    if (shownPath_ == path) {  // busy or replaced for a moment: its runs stay shown
      emit reloaded(false);
      return;
    }
  }
  shownPath_ = path;
  const QList<qint64> selected = selectedRunIds();
  const int scrolled = table_->verticalScrollBar()->value();
  const bool changed = model_->applyRuns(runs);
  if (changed) {
    updateFilterChoices();
    table_->resizeColumnsToContents();
    // Long names and device strings do not push the numbers off screen.
    for (int c = 0; c < RunHistoryModel::ColumnCount; ++c)
      table_->setColumnWidth(c, std::min(table_->columnWidth(c), 240));
    // A reset (runs added or deleted) loses both: put them back.
    selectRuns(selected);
    table_->verticalScrollBar()->setValue(scrolled);
  }
  emit reloaded(changed);
}

void RunHistoryView::updateFilterChoices() {
  auto refill = [](QComboBox* box, const QString& any, const QStringList& values) {
    const QString current = box->currentData().toString();
    const QSignalBlocker block(box);
    box->clear();
    box->addItem(any, QString());
    for (const QString& v : values) box->addItem(v, v);
    const int i = box->findData(current);
    box->setCurrentIndex(i < 0 ? 0 : i);
  };
  refill(status_, tr("Any status"), model_->statuses());
  filter_->setStatusFilter(status_->currentData().toString());
  refill(modelFilter_, tr("Any model"), model_->models());
  refill(tag_, tr("Any tag"), model_->tags());
  filter_->setModelFilter(modelFilter_->currentData().toString());
  filter_->setTagFilter(tag_->currentData().toString());
}

QList<qint64> RunHistoryView::selectedRunIds() const {
  QList<qint64> ids;
  for (const QModelIndex& index : table_->selectionModel()->selectedRows())
    ids << index.data(RunHistoryModel::RunIdRole).toLongLong();
  return ids;
}

void RunHistoryView::selectRuns(const QList<qint64>& ids) {
  QItemSelection selection;
  for (int r = 0; r < filter_->rowCount(); ++r) {
    const QModelIndex index = filter_->index(r, 0);
    if (ids.contains(index.data(RunHistoryModel::RunIdRole).toLongLong()))
      selection.select(index, filter_->index(r, filter_->columnCount() - 1));
  }
  table_->selectionModel()->select(selection, QItemSelectionModel::ClearAndSelect);
}

void RunHistoryView::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  if (pendingReload_) reload();
}

bool RunHistoryView::eventFilter(QObject* watched, QEvent* event) {
  if (watched == notes_ && event->type() == QEvent::FocusOut && saveNotesIfModified() && pendingReload_) reload();
  return QWidget::eventFilter(watched, event);
}

bool RunHistoryView::saveNotesIfModified() {
  if (notesRun_ <= 0 || !notes_->document()->isModified()) return true;
  const QString text = notes_->toPlainText();
  try {
    tb::RunStore(databasePath_.toStdString()).set_notes(notesRun_, text.toStdString());
  } catch (const std::exception& e) {
    // Kept here and shown again with the run: never dropped.
    unsavedNotes_.insert({databasePath_, notesRun_}, text);
    emit statusMessage(tr("Could not save the notes of run %1 (kept unsaved): %2")
                           .arg(notesRun_).arg(QString::fromUtf8(e.what())));
    return false;
  }
  unsavedNotes_.remove({databasePath_, notesRun_});
  model_->setNotes(notesRun_, text);
  notes_->document()->setModified(false);
  return true;
}

void RunHistoryView::showSelectedNotes() {
  const auto ids = selectedRunIds();
  const RunSummary* run = ids.isEmpty() ? nullptr : model_->run(ids.first());
  if (!run || run->id != notesRun_) saveNotesIfModified();
  if (run && run->id == notesRun_ && notes_->document()->isModified()) return;  // still typing into it
  notesRun_ = run ? run->id : 0;
  const auto unsaved = run ? unsavedNotes_.constFind({databasePath_, run->id}) : unsavedNotes_.constEnd();
  notes_->setPlainText(unsaved != unsavedNotes_.constEnd() ? *unsaved : run ? run->notes : QString());
  notes_->document()->setModified(unsaved != unsavedNotes_.constEnd());
  notes_->moveCursor(QTextCursor::End);  // typing goes on from the end
  notes_->setEnabled(run != nullptr);
  if (!run) {
    details_->setText(tr("Select a run."));
    return;
  }
  QString html = QStringLiteral("<b>%1</b> (#%2)<br>%3 on %4, %5<br>").arg(run->name.toHtmlEscaped()).arg(run->id)
                     .arg(run->model.toHtmlEscaped(), run->dataset.toHtmlEscaped(), run->device.toHtmlEscaped());
  html += tr("Status: %1").arg(run->status.toHtmlEscaped());
  if (!run->error.isEmpty())
    html += QStringLiteral("<br><span style='color:#c83232'>%1</span>").arg(run->error.left(600).toHtmlEscaped());
  details_->setText(html);
}

bool RunHistoryView::edit(const std::function<void()>& action, const QString& what) {
  try {
    action();
  } catch (const std::exception& e) {
    QMessageBox::warning(this, tr("Run database"), tr("Could not %1: %2").arg(what, QString::fromUtf8(e.what())));
    return false;
  }
  reload();
  return true;
}

bool RunHistoryView::renameRun(qint64 id, const QString& name) {
  return edit([&] { tb::RunStore(databasePath_.toStdString()).rename_run(id, name.toStdString()); }, tr("rename"));
}

bool RunHistoryView::setRunTags(qint64 id, const QString& tags) {
  return edit([&] { tb::RunStore(databasePath_.toStdString()).set_tags(id, tags.toStdString()); }, tr("set tags"));
}

bool RunHistoryView::setRunNotes(qint64 id, const QString& notes) {
  return edit([&] { tb::RunStore(databasePath_.toStdString()).set_notes(id, notes.toStdString()); }, tr("save notes"));
}

bool RunHistoryView::deleteRuns(const QList<qint64>& ids) {
  return edit([&] {
    tb::RunStore store(databasePath_.toStdString());
    for (qint64 id : ids) store.delete_run(id);
  }, tr("delete"));
}

void RunHistoryView::renameSelected() {
  const auto ids = selectedRunIds();
  if (ids.isEmpty()) return;
  const RunSummary* run = model_->run(ids.first());
  bool ok = false;
  const QString name = QInputDialog::getText(this, tr("Rename run"), tr("Name:"), QLineEdit::Normal,
                                             run ? run->name : QString(), &ok);
  if (ok && !name.trimmed().isEmpty()) renameRun(ids.first(), name.trimmed());
}

void RunHistoryView::tagSelected() {
  const auto ids = selectedRunIds();
  if (ids.isEmpty()) return;
  const RunSummary* run = model_->run(ids.first());
  bool ok = false;
  const QString tags = QInputDialog::getText(this, tr("Tags"), tr("Comma-separated tags:"), QLineEdit::Normal,
                                             run ? run->tags : QString(), &ok);
  if (!ok) return;
  for (qint64 id : ids) setRunTags(id, tags.trimmed());
}

void RunHistoryView::deleteSelected() {
  const auto ids = selectedRunIds();
  if (ids.isEmpty()) return;
  const auto answer = QMessageBox::question(
      this, tr("Delete runs"),
      tr("Delete %n run(s) with all their metrics? This cannot be undone.", nullptr, int(ids.size())),
      QMessageBox::Yes | QMessageBox::Cancel, QMessageBox::Cancel);
  if (answer == QMessageBox::Yes) deleteRuns(ids);
}

void RunHistoryView::exportCsv() { PlotExportDialog::exportTableCsv(this, filter_, QStringLiteral("runs")); }
