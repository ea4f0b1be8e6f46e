// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

class QAbstractItemModel;
class QTableView;
class QWidget;

// The table both per-layer views show (the Layers tab, Compare's layers of A
// against B): `model` through a proxy that sorts by Qt::UserRole (the
// models' numbers), in the step's order until a header is clicked, whole
// rows selected, dense rows, columns fitted to their contents.
QTableView* makeLayerTableView(QAbstractItemModel* model, QWidget* parent);
