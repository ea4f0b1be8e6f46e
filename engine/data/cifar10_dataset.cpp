// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/data/cifar10_dataset.h"

#include <filesystem>
#include <fstream>

#include "engine/core/error.h"

namespace tb {

int64_t check_cifar10_batch_size(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  TB_CHECK(fs::is_regular_file(path, ec), path, ": no such file");
  const uintmax_t size = fs::file_size(path, ec);
  TB_CHECK(!ec, path, ": cannot stat: ", ec.message());
  const uintmax_t whole = size / kCifarRecordBytes * kCifarRecordBytes;
  TB_CHECK(size == whole, path, ": size ", size, " bytes is not a multiple of ", kCifarRecordBytes,
           " (1 label + 3072 pixel bytes): incomplete record at offset ", whole);
  TB_CHECK(size > 0, path, ": empty file (expected records of ", kCifarRecordBytes, " bytes)");
  return static_cast<int64_t>(size / kCifarRecordBytes);
}

void read_cifar10_batch(const std::string& path, std::vector<uint8_t>& pixels,
                        std::vector<int32_t>& labels) {
  const int64_t count = check_cifar10_batch_size(path);
  const uintmax_t size = uintmax_t(count) * kCifarRecordBytes;
  std::ifstream in(path, std::ios::binary);
  TB_CHECK(in, path, ": cannot open for reading");
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  TB_CHECK(in.gcount() == static_cast<std::streamsize>(size), path, ": read ", in.gcount(), " of ",
           size, " bytes");

  const size_t pix0 = pixels.size();
  pixels.resize(pix0 + static_cast<size_t>(count) * (kCifarRecordBytes - 1));
  labels.reserve(labels.size() + static_cast<size_t>(count));
  for (int64_t r = 0; r < count; ++r) {
    const uint8_t* rec = bytes.data() + r * kCifarRecordBytes;
    TB_CHECK(rec[0] <= 9, path, ": label ", int(rec[0]), " at record ", r, " (offset ",
             r * kCifarRecordBytes, ") out of range 0..9");
    labels.push_back(rec[0]);
    std::copy(rec + 1, rec + kCifarRecordBytes,
              pixels.begin() + static_cast<std::ptrdiff_t>(pix0 + r * (kCifarRecordBytes - 1)));
  }
}

namespace {
// The batch files of one split in dir; throws when the folder does not exist.
std::vector<std::string> cifar10_files(const std::string& dir, const std::string& split) {
  TB_CHECK(split == "train" || split == "test", "cifar10: unknown split '", split,
           "' (expected train or test)");
  std::error_code ec;
  TB_CHECK(std::filesystem::is_directory(dir, ec), "cifar10: folder ", dir,
           " does not exist (expected the CIFAR-10 binary version, cifar-10-batches-bin)");
  std::vector<std::string> names;
  if (split == "train")
    for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  else
    names.push_back("test_batch.bin");
  std::vector<std::string> paths;
  for (const std::string& n : names) paths.push_back((std::filesystem::path(dir) / n).string());
  return paths;
}
}  // namespace

std::unique_ptr<InMemoryDataset> open_cifar10(const std::string& dir, const std::string& split) {
  std::vector<uint8_t> pixels;
  std::vector<int32_t> labels;
  for (const std::string& f : cifar10_files(dir, split)) read_cifar10_batch(f, pixels, labels);
  return std::make_unique<InMemoryDataset>("cifar10/" + split, Shape{3, 32, 32}, 10,
                                           std::move(pixels), std::move(labels));
}

std::vector<std::string> check_cifar10_folder(const std::string& dir) {
  std::vector<std::string> problems;
  for (const char* split : {"train", "test"}) {
    std::vector<std::string> files;
    try {
      files = cifar10_files(dir, split);
    } catch (const Error& e) {
      return {e.what()};  // one problem: the folder
    }
    for (const std::string& f : files) try {
        check_cifar10_batch_size(f);
      } catch (const Error& e) {
        problems.push_back(e.what());
      }
  }
  return problems;
}

}  // namespace tb
