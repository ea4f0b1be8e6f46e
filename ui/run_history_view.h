// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QHash>
#include <QPair>
#include <QList>
#include <QWidget>
#include <functional>

class QComboBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QTableView;
class RunHistoryFilter;
class RunHistoryModel;
struct RunSummary;

// The run history: a sortable, searchable table over the store with filters by
// status, model and tag; rename, tags, notes and delete (confirmed); open a
// run's dashboard or compare the selected runs. The store is read on a worker
// thread, read-only (RunListReader); the GUI thread only shows what it read.
// Edits the user makes (rename, tags, notes, delete) are the only writes.
class RunHistoryView : public QWidget {
  Q_OBJECT
 public:
  explicit RunHistoryView(QWidget* parent = nullptr);

  void setDatabasePath(const QString& path);
  QString databasePath() const { return databasePath_; }
  // Asks the worker to read the store again; returns at once, and the table
  // follows when the runs are read (`reloaded`).
  void reload();

  RunHistoryModel* model() const { return model_; }
  RunHistoryFilter* filter() const { return filter_; }
  QTableView* table() const { return table_; }
  QList<qint64> selectedRunIds() const;
  void selectRuns(const QList<qint64>& ids);

  // Edits, also used by tests (no dialogs).
  bool renameRun(qint64 id, const QString& name);
  bool setRunTags(qint64 id, const QString& tags);
  bool setRunNotes(qint64 id, const QString& notes);
  bool deleteRuns(const QList<qint64>& ids);
  // Writes the notes being typed to the store (no-op when unchanged); false
  // when the store refused them (they stay in the editor).
  bool saveNotesIfModified();
  // The column chooser (right-click on the header), remembered in QSettings.
  void setColumnShown(int column, bool shown);
  bool columnShown(int column) const;

 public slots:
  void renameSelected();
  void tagSelected();
  void deleteSelected();
  void exportCsv();

 signals:
  void openRunRequested(qint64 runId);
  void compareRequested(const QList<qint64>& runIds);
  void statusMessage(const QString& message);
  // The runs of a reload are shown (changed: whether they differed).
  void reloaded(bool changed);

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;
  void showEvent(QShowEvent* event) override;

 private:
  void updateFilterChoices();
  void showSelectedNotes();
  void applyRuns(const QString& path, const QList<RunSummary>& runs, const QString& error);
  bool edit(const std::function<void()>& action, const QString& what);

  QString databasePath_;
  QString shownPath_;  // the database whose runs the table shows
  RunHistoryModel* model_;
  RunHistoryFilter* filter_;
  QTableView* table_;
  QLineEdit* search_;
  QComboBox *status_, *modelFilter_, *tag_;
  QPlainTextEdit* notes_;
  QLabel* details_;
  qint64 notesRun_ = 0;
  QHash<QPair<QString, qint64>, QString> unsavedNotes_;  // notes the store refused, by (store, run)
  class QTimer* autoRefresh_ = nullptr;
  class StoreWatcher* watcher_ = nullptr;
  class RunListReader* reader_ = nullptr;
  class QTimer* reloadSoon_ = nullptr;
  bool pendingReload_ = false;
  static QString columnKey(int column);
};
