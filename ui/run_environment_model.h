// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A run's environment as the engine recorded it (docs/events.md): where and
// how it ran (device, instruction-set copy, threads and what decided them,
// activation layout and why, library versions, the kernel path of every
// convolution shape, cuDNN's plans), as a tree: an object's keys become
// child rows, a list of plain values one line.
#include <QJsonObject>
#include <QStandardItemModel>

class RunEnvironmentModel : public QStandardItemModel {
  Q_OBJECT
 public:
  explicit RunEnvironmentModel(QObject* parent = nullptr);
  // Rebuilds the rows when the environment differs from the one shown (a
  // followed run is set again at every poll: the tree keeps its state then).
  void setEnvironment(const QJsonObject& environment);

 private:
  QJsonObject environment_;
};
