// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/data/dataset.h"

namespace tb {

// CIFAR-10 "binary version": data_batch_1.bin .. data_batch_5.bin (train,
// 50000 samples) and test_batch.bin (test, 10000). Each record is one label
// byte followed by 3072 pixel bytes already in CHW order (1024 R, G, B).
constexpr int64_t kCifarRecordBytes = 1 + 3 * 32 * 32;

// Appends the records of one batch file. Throws tb::Error naming the path if
// the size is not a whole number of records or a label is outside 0..9.
void read_cifar10_batch(const std::string& path, std::vector<uint8_t>& pixels,
                        std::vector<int32_t>& labels);

// The size check of one batch file without reading it: a whole, non-zero
// number of records. Returns the record count; throws tb::Error naming the path.
int64_t check_cifar10_batch_size(const std::string& path);

std::unique_ptr<InMemoryDataset> open_cifar10(const std::string& dir, const std::string& split);

// The problems check_cifar10_batch_size finds in a CIFAR-10 folder (the six
// batch files), one message each; a missing folder is one problem.
std::vector<std::string> check_cifar10_folder(const std::string& dir);

}  // namespace tb
