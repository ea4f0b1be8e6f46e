// SPDX-License-Identifier: GPL-3.0-or-later
#include "store_follower.h"

#include <QFileInfo>
#include <QTimer>
#include <atomic>
#include <exception>
#include <memory>
#include <optional>

#include "engine/store/run_store.h"
#include "series_loader.h"

namespace {
// A read-only connection opened on first use; a file that does not exist yet
// (or cannot be read right now) is retried on the next poll.
class Connection {
 public:
  explicit Connection(QString path) : path_(std::move(path)) {}
  tb::RunStore* get() {
    if (!store_ && QFileInfo::exists(path_))
      store_ = std::make_unique<tb::RunStore>(path_.toStdString(), tb::RunStore::Mode::ReadOnly);
    return store_.get();
  }
  void reset() { store_.reset(); }

 private:
  QString path_;
  std::unique_ptr<tb::RunStore> store_;
};

// The worker lives on thread until the thread ends (then it is deleted there).
void startOn(QThread& thread, QObject* worker, const QString& name) {
  worker->moveToThread(&thread);
  QObject::connect(&thread, &QThread::finished, worker, &QObject::deleteLater);
  thread.setObjectName(name);
  thread.start();
}
}  // namespace

// --- StoreWatcher

class StoreWatcher::Worker : public QObject {
 public:
  explicit Worker(StoreWatcher* owner) : owner_(owner), timer_(this) {
    connect(&timer_, &QTimer::timeout, this, &Worker::poll);
  }
  void watch(const QString& path, int pollMs) {
    timer_.stop();
    connection_.emplace(path);
    version_.reset();
    if (path.isEmpty()) return;
    timer_.start(pollMs);
    poll();
  }

 private:
  void poll() {
    try {
      tb::RunStore* store = connection_->get();
      if (!store) return;
      const int64_t v = store->data_version();
      // The first look also reports: whatever was committed between the
      // reader's last read and this connection's start is not missed.
      if (!version_ || *version_ != v) emit owner_->changed();
      version_ = v;
    } catch (const std::exception&) {
      connection_->reset();  // busy, replaced or damaged: the history reports what it finds
    }
  }

  StoreWatcher* owner_;
  QTimer timer_;
  std::optional<Connection> connection_;
  std::optional<int64_t> version_;
};

StoreWatcher::StoreWatcher(QObject* parent) : QObject(parent) {
  worker_ = new Worker(this);
  startOn(thread_, worker_, QStringLiteral("StoreWatcher"));
}

StoreWatcher::~StoreWatcher() {
  thread_.quit();
  thread_.wait();
}

void StoreWatcher::watch(const QString& databasePath, int pollMs) {
  QMetaObject::invokeMethod(worker_, [w = worker_, databasePath, pollMs] { w->watch(databasePath, pollMs); },
                            Qt::QueuedConnection);
}

// --- RunListReader

namespace {
// The runs with the status readers show (the store reads a run whose engine
// is gone as "interrupted", with why).
QList<RunSummary> listRuns(const tb::RunStore& store) {
  QList<RunSummary> runs;
  for (const tb::RunRecord& r : store.list_runs()) runs.append(RunSummary::fromRecord(r));
  return runs;
}
}  // namespace

class RunListReader::Worker : public QObject {
 public:
  explicit Worker(RunListReader* owner) : owner_(owner) {}
  std::atomic<int> waiting{0};  // requests not answered yet

  void read(const QString& path) {
    if (--waiting > 0) return;  // a newer request follows: its read answers both
    if (!connection_ || path != path_) {
      connection_.emplace(path);
      path_ = path;
    }
    QString error;
    QList<RunSummary> runs;
    try {
      if (!QFileInfo::exists(path)) {  // not written yet (or removed): no runs
        connection_->reset();
        // ... and none ever: the engine stores a run only in a folder that exists.
        const QString folder = QFileInfo(path).absolutePath();
        if (!QFileInfo(folder).isDir())
          error = QStringLiteral("the folder '%1' does not exist, so no run can be stored there")
                      .arg(folder);
      } else if (const tb::RunStore* store = connection_->get()) runs = listRuns(*store);
    } catch (const std::exception& e) {
      connection_->reset();  // replaced, damaged or busy: opened afresh next time
      error = QString::fromUtf8(e.what());
    }
    emit owner_->runsRead(path, runs, error);
  }

 private:
  RunListReader* owner_;
  QString path_;
  std::optional<Connection> connection_;
};

RunListReader::RunListReader(QObject* parent) : QObject(parent) {
  qRegisterMetaType<QList<RunSummary>>();
  worker_ = new Worker(this);
  startOn(thread_, worker_, QStringLiteral("RunListReader"));
}

RunListReader::~RunListReader() {
  thread_.quit();
  thread_.wait();
}

void RunListReader::request(const QString& databasePath) {
  ++worker_->waiting;
  QMetaObject::invokeMethod(worker_, [w = worker_, databasePath] { w->read(databasePath); }, Qt::QueuedConnection);
}

QList<RunSummary> RunListReader::readRuns(const QString& databasePath, QString* error) {
  try {
    if (!QFileInfo::exists(databasePath)) return {};
    return listRuns(tb::RunStore(databasePath.toStdString(), tb::RunStore::Mode::ReadOnly));
  } catch (const std::exception& e) {
    if (error) *error = QString::fromUtf8(e.what());
    return {};
  }
}

// --- RunFollower

class RunFollower::Worker : public QObject {
 public:
  Worker(RunFollower* owner, const QString& path, qint64 runId)
      : owner_(owner), connection_(path), reader_(runId), timer_(this) {
    connect(&timer_, &QTimer::timeout, this, &Worker::poll);
  }
  void start(int pollMs) {
    timer_.start(pollMs);
    poll();
  }

 private:
  // Polls between re-reading the row although nothing was committed (the
  // engine may have died, which writes nothing).
  static constexpr int kRowEvery = 4;

  void poll() {
    try {
      tb::RunStore* store = connection_.get();
      if (!store) throw std::runtime_error("the run database does not exist");
      const int64_t v = store->data_version();
      const bool committed = !version_ || *version_ != v;
      version_ = v;
      if (!committed && ++idlePolls_ < kRowEvery) return;
      idlePolls_ = 0;
      tb::RunRecord record;
      RunSeries newer;
      if (committed) {
        newer = reader_.read(*store, &record);
      } else {
        const auto row = store->get_run(reader_.runId());
        if (!row) throw std::runtime_error("the run was deleted from the database");
        record = *row;
      }
      // The store reads a run whose engine is gone as "interrupted", with why.
      RunSummary run = RunSummary::fromRecord(record);
      const bool news = committed || run.status != lastStatus_;
      lastStatus_ = run.status;
      if (news) emit owner_->updated(newer, run);
      if (run.isTerminal()) {
        timer_.stop();
        emit owner_->ended(run);
      }
    } catch (const std::exception& e) {
      timer_.stop();
      emit owner_->failed(QString::fromUtf8(e.what()));
    }
  }

  RunFollower* owner_;
  Connection connection_;
  RunSeriesReader reader_;
  QTimer timer_;
  std::optional<int64_t> version_;
  int idlePolls_ = 0;
  QString lastStatus_;
};

RunFollower::RunFollower(const QString& databasePath, qint64 runId, QObject* parent)
    : QObject(parent), runId_(runId) {
  qRegisterMetaType<RunSeries>();
  qRegisterMetaType<RunSummary>();
  worker_ = new Worker(this, databasePath, runId);
  startOn(thread_, worker_, QStringLiteral("RunFollower"));
}

RunFollower::~RunFollower() {
  thread_.quit();
  thread_.wait();
}

void RunFollower::start(int pollMs) {
  QMetaObject::invokeMethod(worker_, [w = worker_, pollMs] { w->start(pollMs); }, Qt::QueuedConnection);
}
