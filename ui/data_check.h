// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <QObject>
#include <QStringList>
#include <QThread>

// The data folder of a run configuration checked before launch, with the
// engine's own readers (tb::check_dataset_files: the folder, every file of
// both splits, each file's header and length; no decoding), so a broken
// folder is named in the set-up page and not found out from a failed run.
class DataCheck : public QObject {
  Q_OBJECT
 public:
  explicit DataCheck(QObject* parent = nullptr);
  ~DataCheck() override;

  // Checks on a worker thread; `checked` follows with the same arguments.
  void request(const QString& dataset, const QString& folder);
  // The check itself, on any thread: the problems in words, each naming its
  // file relative to `folder`; empty when the run can open its data.
  static QStringList run(const QString& dataset, const QString& folder);

 signals:
  void checked(const QString& dataset, const QString& folder, const QStringList& problems);

 private:
  QThread thread_;
  QObject* worker_ = nullptr;
};
