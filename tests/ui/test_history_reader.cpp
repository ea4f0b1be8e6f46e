// SPDX-License-Identifier: GPL-3.0-or-later
// The history reads the run store on a worker thread, read-only: the GUI
// thread never opens the database to list runs and never waits for it (not
// even while another process holds it locked); the answers are shown on the
// GUI thread, the newest request is always answered, and a refresh keeps the
// selection and, when the same runs only changed, does not reset the table.
#include <sqlite3.h>

#include <QAtomicInt>
#include <QElapsedTimer>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTableView>
#include <QTemporaryDir>
#include <QThread>
#include <QTimer>
#include <QtTest>

#include "engine/store/run_store.h"
#include "run_history_model.h"
#include "run_history_view.h"

namespace {
qint64 addRun(tb::RunStore& store, const std::string& name, const std::string& status,
              const std::string& heartbeat = {}) {
  tb::RunRecord r;
  r.name = name;
  r.status = status;
  r.config = {{"model", "mlp"}, {"batch_size", 32}};
  r.heartbeat_at = heartbeat;
  r.started_at = heartbeat;
  r.engine_host = "another-host";  // not this one: liveness comes from the heartbeat
  return store.create_run(r);
}

std::string storedStatus(const QString& path, qint64 id) {
  tb::RunStore store(path.toStdString(), tb::RunStore::Mode::ReadOnly);
  return store.get_run(id)->recorded_status;  // runs.status as stored, not as derived
}

// Another connection (as another process would) holding the database so
// that no other connection can even read it until release().
class ExclusiveLock {
 public:
  explicit ExclusiveLock(const QString& path) {
    held_ = sqlite3_open(path.toUtf8().constData(), &db_) == SQLITE_OK &&
            sqlite3_exec(db_, "PRAGMA locking_mode=EXCLUSIVE; BEGIN EXCLUSIVE", nullptr, nullptr, nullptr) == SQLITE_OK;
  }
  ~ExclusiveLock() { release(); }
  bool held() const { return held_; }
  void release() {
    if (!db_) return;
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_close(db_);
    db_ = nullptr;
  }

 private:
  sqlite3* db_ = nullptr;
  bool held_ = false;
};

// SQLite's default VFS, wrapped to count the files SQLite opens on the GUI
// thread: any connection to the store made there (the read itself) opens one.
sqlite3_vfs* realVfs = nullptr;
sqlite3_vfs spyVfs;
QAtomicInt guiThreadOpens;

int spyOpen(sqlite3_vfs*, sqlite3_filename name, sqlite3_file* file, int flags, int* outFlags) {
  if (QThread::currentThread() == QCoreApplication::instance()->thread()) guiThreadOpens.ref();
  return realVfs->xOpen(realVfs, name, file, flags, outFlags);
}

void installSpyVfs() {
  realVfs = sqlite3_vfs_find(nullptr);
  spyVfs = *realVfs;
  spyVfs.zName = "gui-thread-spy";
  spyVfs.pNext = nullptr;
  spyVfs.xOpen = spyOpen;
  sqlite3_vfs_register(&spyVfs, /*makeDflt=*/1);
}
}  // namespace

class TestHistoryReader : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    QStandardPaths::setTestModeEnabled(true);
    QSettings().clear();
    QVERIFY(dir_.isValid());
    installSpyVfs();
  }

  // Listing the runs (first read, refresh, a reload after a commit) opens
  // nothing on the GUI thread, and the model changes only there.
  void theStoreIsReadOffTheGuiThread() {
    const QString path = dir_.filePath(QStringLiteral("threads.db"));
    {
      tb::RunStore store(path.toStdString());
      addRun(store, "one", "finished");
    }
    RunHistoryView view;
    QList<QThread*> modelThreads;
    auto record = [&modelThreads] { modelThreads << QThread::currentThread(); };
    connect(view.model(), &QAbstractItemModel::modelReset, this, record, Qt::DirectConnection);
    connect(view.model(), &QAbstractItemModel::dataChanged, this, record, Qt::DirectConnection);
    QSignalSpy reloaded(&view, &RunHistoryView::reloaded);

    guiThreadOpens.storeRelaxed(0);
    view.setDatabasePath(path);
    QCOMPARE(view.model()->rowCount(), 0);  // the answer comes through the event loop
    QTRY_COMPARE(view.model()->rowCount(), 1);
    {
      tb::RunStore store(path.toStdString());
      addRun(store, "two", "finished");
    }
    guiThreadOpens.storeRelaxed(0);  // (the writer above opened it here)
    view.reload();
    QTRY_COMPARE(view.model()->rowCount(), 2);
    reloaded.clear();
    view.reload();  // nothing changed
    QTRY_COMPARE(reloaded.count(), 1);
    QCOMPARE(reloaded.first().first().toBool(), false);
    QCOMPARE(guiThreadOpens.loadRelaxed(), 0);
    QVERIFY(!modelThreads.isEmpty());
    for (QThread* t : modelThreads) QCOMPARE(t, QCoreApplication::instance()->thread());
  }

  // Another process holds the database locked (exclusive): the worker waits
  // for it, the GUI thread does not, and the runs appear once it is free.
  void theGuiThreadNeverWaitsForTheStore() {
    const QString path = dir_.filePath(QStringLiteral("locked.db"));
    {
      tb::RunStore store(path.toStdString());
      addRun(store, "one", "finished");
    }
    ExclusiveLock lock(path);
    QVERIFY(lock.held());
    RunHistoryView view;
    QElapsedTimer timer;
    timer.start();
    view.setDatabasePath(path);
    view.reload();
    const qint64 blocked = timer.elapsed();
    // The GUI thread goes on handling events while the worker waits.
    int ticks = 0;
    QTimer tick;
    connect(&tick, &QTimer::timeout, this, [&ticks] { ++ticks; });
    tick.start(20);
    QTest::qWait(400);
    QCOMPARE(view.model()->rowCount(), 0);  // the lock holds the reader off
    QVERIFY2(ticks >= 5, qPrintable(QStringLiteral("%1 ticks in 400 ms").arg(ticks)));
    lock.release();
    QTRY_COMPARE_WITH_TIMEOUT(view.model()->rowCount(), 1, 15000);
    QVERIFY2(blocked < 1000, qPrintable(QStringLiteral("the GUI thread waited %1 ms").arg(blocked)));
  }

  // Requests made faster than the worker reads are merged, never dropped:
  // the last one is answered with what was committed before it.
  void theNewestRequestIsAlwaysAnswered() {
    const QString path = dir_.filePath(QStringLiteral("burst.db"));
    { tb::RunStore store(path.toStdString()); }
    RunHistoryView view;
    view.setDatabasePath(path);
    for (int i = 0; i < 20; ++i) {
      {
        tb::RunStore store(path.toStdString());
        addRun(store, "run " + std::to_string(i), "finished");
      }
      view.reload();
      if (i % 5 == 0) QCoreApplication::processEvents();
    }
    QTRY_COMPARE(view.model()->rowCount(), 20);
    QCOMPARE(view.model()->runs().last().name, QStringLiteral("run 19"));
  }

  // A request made while the worker is still reading (here: waiting for a
  // locked database) is answered after that read, not dropped.
  void aRequestMadeDuringAReadIsAnswered() {
    const QString locked = dir_.filePath(QStringLiteral("busy.db"));
    const QString other = dir_.filePath(QStringLiteral("other.db"));
    {
      tb::RunStore store(locked.toStdString());
      addRun(store, "in the locked one", "finished");
    }
    {
      tb::RunStore store(other.toStdString());
      addRun(store, "in the other one", "finished");
      addRun(store, "also in the other one", "finished");
    }
    ExclusiveLock lock(locked);
    QVERIFY(lock.held());
    RunHistoryView view;
    QSignalSpy reloaded(&view, &RunHistoryView::reloaded);
    view.setDatabasePath(locked);
    QTest::qWait(300);  // the worker is in that read, waiting for the lock
    QCOMPARE(reloaded.count(), 0);
    view.setDatabasePath(other);
    lock.release();
    QTRY_COMPARE_WITH_TIMEOUT(view.model()->rowCount(), 2, 15000);
    QCOMPARE(view.model()->runs().first().name, QStringLiteral("in the other one"));
  }

  // A refresh with a new run keeps the selection; one where a run only
  // changed updates its row in place (no reset, so no flicker or jump).
  void aRefreshKeepsTheSelection() {
    const QString path = dir_.filePath(QStringLiteral("selection.db"));
    qint64 first = 0, second = 0;
    {
      tb::RunStore store(path.toStdString());
      first = addRun(store, "one", "finished");
      second = addRun(store, "two", "running");
    }
    RunHistoryView view;
    view.setDatabasePath(path);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    QTRY_COMPARE(view.model()->rowCount(), 2);
    view.selectRuns({first});
    {
      tb::RunStore store(path.toStdString());
      addRun(store, "three", "finished");
    }
    view.reload();
    QTRY_COMPARE(view.model()->rowCount(), 3);
    QCOMPARE(view.selectedRunIds(), QList<qint64>{first});

    QSignalSpy resets(view.model(), &QAbstractItemModel::modelReset);
    QSignalSpy changes(view.model(), &QAbstractItemModel::dataChanged);
    {
      tb::RunStore store(path.toStdString());
      store.set_status(second, "finished");
    }
    view.reload();
    QTRY_COMPARE(view.model()->run(second)->status, QStringLiteral("finished"));
    QCOMPARE(resets.count(), 0);
    QCOMPARE(changes.count(), 1);
    QCOMPARE(view.selectedRunIds(), QList<qint64>{first});
  }

  // A reload never writes (a run whose engine is gone is shown as
  // interrupted, derived, and stays as it is in the store).
  void reloadNeverWrites() {
    const QString path = dir_.filePath(QStringLiteral("stale.db"));
    qint64 stale = 0, live = 0;
    {
      tb::RunStore store(path.toStdString());
      stale = addRun(store, "killed long ago", "running", "2020-01-01T00:00:00.000Z");
      live = addRun(store, "still going", "running");
    }
    RunHistoryView view;
    QSignalSpy reloaded(&view, &RunHistoryView::reloaded);
    view.setDatabasePath(path);
    QTRY_COMPARE(view.model()->rowCount(), 2);
    reloaded.clear();
    view.reload();
    QTRY_COMPARE(reloaded.count(), 1);
    QCOMPARE(storedStatus(path, stale), std::string("running"));  // the store is as it was
    QCOMPARE(storedStatus(path, live), std::string("running"));
    const RunSummary* shown = view.model()->run(stale);
    QVERIFY(shown);
    QCOMPARE(shown->status, QStringLiteral("interrupted"));  // derived for the view
    QVERIFY(!shown->error.isEmpty());
    QCOMPARE(view.model()->run(live)->status, QStringLiteral("running"));
  }

  // A database that does not exist yet is not created by the history; its
  // runs appear once the engine writes it.
  void aMissingDatabaseIsNotCreated() {
    const QString path = dir_.filePath(QStringLiteral("later.db"));
    RunHistoryView view;
    QSignalSpy reloaded(&view, &RunHistoryView::reloaded);
    view.setDatabasePath(path);
    QTRY_COMPARE(reloaded.count(), 1);
    QVERIFY(!QFile::exists(path));
    QCOMPARE(view.model()->rowCount(), 0);
    {
      tb::RunStore store(path.toStdString());
      addRun(store, "first", "finished");
    }
    view.show();
    QTRY_COMPARE_WITH_TIMEOUT(view.model()->rowCount(), 1, 5000);
  }

  // A database in a folder that does not exist can never be written (the
  // engine refuses to store a run there): the history says so, naming the
  // folder, rather than showing an empty store.
  void aDatabaseInAMissingFolderIsNamed() {
    const QString folder = dir_.filePath(QStringLiteral("no-such-folder"));
    RunHistoryView view;
    QSignalSpy message(&view, &RunHistoryView::statusMessage);
    QSignalSpy reloaded(&view, &RunHistoryView::reloaded);
    view.setDatabasePath(folder + QStringLiteral("/runs.db"));
    QTRY_COMPARE(reloaded.count(), 1);
    QCOMPARE(message.count(), 1);
    const QString text = message.at(0).at(0).toString();
    QVERIFY2(text.contains(folder) && text.contains(QStringLiteral("does not exist")), qPrintable(text));
    QVERIFY(!QFileInfo::exists(folder));
    QCOMPARE(view.model()->rowCount(), 0);
  }

 private:
  QTemporaryDir dir_;
};

QTEST_MAIN(TestHistoryReader)
#include "test_history_reader.moc"
