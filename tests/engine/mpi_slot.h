// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// NEED_CPU_DDP(): a test slot that starts `parallel: ddp` on the CPU through
// mpirun skips, with the reason, where it cannot run: a build without MPI,
// no mpirun on PATH, or no Fashion-MNIST (the runs train on it).
#include <QFile>
#include <QtTest>
#include <string>

#include "engine/parallel/launch.h"

#define TB_FASHION_MNIST_TRAIN_IMAGES "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"

#define NEED_CPU_DDP()                                                                   \
  do {                                                                                   \
    const std::string no_ddp_ = tb::ddp_unavailable_reason(tb::DeviceKind::CPU);         \
    if (!no_ddp_.empty()) QSKIP(no_ddp_.c_str());                                        \
    std::string why_;                                                                    \
    if (tb::find_mpirun(&why_).empty()) QSKIP(why_.c_str());                             \
    if (!QFile::exists(QStringLiteral(TB_FASHION_MNIST_TRAIN_IMAGES)))                   \
      QSKIP("Fashion-MNIST is not installed (dataset-fashion-mnist; scripts/setup.sh)"); \
  } while (0)
