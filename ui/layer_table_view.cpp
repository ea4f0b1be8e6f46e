// SPDX-License-Identifier: GPL-3.0-or-later
#include "layer_table_view.h"

#include <QHeaderView>
#include <QSortFilterProxyModel>
#include <QTableView>

QTableView* makeLayerTableView(QAbstractItemModel* model, QWidget* parent) {
  auto* view = new QTableView(parent);
  auto* proxy = new QSortFilterProxyModel(view);
  proxy->setSourceModel(model);
  proxy->setSortRole(Qt::UserRole);
  view->setModel(proxy);
  view->setSortingEnabled(true);
  view->sortByColumn(-1, Qt::AscendingOrder);  // the step's order until a header is clicked
  view->setSelectionBehavior(QAbstractItemView::SelectRows);
  view->setAlternatingRowColors(true);
  view->verticalHeader()->hide();
  view->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  view->horizontalHeader()->setStretchLastSection(true);
  view->verticalHeader()->setDefaultSectionSize(view->fontMetrics().height() + 6);  // dense rows
  return view;
}
