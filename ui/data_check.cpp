// SPDX-License-Identifier: GPL-3.0-or-later
#include "data_check.h"

#include <nlohmann/json.hpp>

#include "engine/data/dataset.h"

DataCheck::DataCheck(QObject* parent) : QObject(parent) {
  worker_ = new QObject;
  worker_->moveToThread(&thread_);
  connect(&thread_, &QThread::finished, worker_, &QObject::deleteLater);
  thread_.setObjectName(QStringLiteral("DataCheck"));
  thread_.start();
}

DataCheck::~DataCheck() {
  thread_.quit();
  thread_.wait();
}

void DataCheck::request(const QString& dataset, const QString& folder) {
  QMetaObject::invokeMethod(
      worker_, [this, dataset, folder] { emit checked(dataset, folder, run(dataset, folder)); },
      Qt::QueuedConnection);
}

QStringList DataCheck::run(const QString& dataset, const QString& folder) {
  // The spec the trainer gives open_dataset: no path means the reader's default.
  nlohmann::json spec = {{"name", dataset.toStdString()}};
  if (!folder.trimmed().isEmpty()) spec["path"] = folder.trimmed().toStdString();
  else if (dataset != QLatin1String("fashion-mnist") && dataset != QLatin1String("synthetic"))
    return {tr("No folder chosen: %1 needs the folder of its files.").arg(dataset)};
  QStringList out;
  // Files are named relative to the folder shown beside the message.
  const QString prefix = folder.trimmed().endsWith(QLatin1Char('/')) ? folder.trimmed() : folder.trimmed() + QLatin1Char('/');
  for (const std::string& problem : tb::check_dataset_files(spec)) {
    QString text = QString::fromStdString(problem);
    if (!folder.trimmed().isEmpty()) text.replace(prefix, QString());
    out << text;
  }
  return out;
}
