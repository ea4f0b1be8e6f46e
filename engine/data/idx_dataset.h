// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/data/dataset.h"

namespace tb {

// IDX is the MNIST / Fashion-MNIST file format: a big-endian header
// (magic 0x00000803 + count, rows, cols for images; 0x00000801 + count for
// labels) followed by uint8 data. Files may be gzip-compressed (detected by
// the gzip magic bytes; a name ending in ".gz" must be gzip).
// Every reader here validates the header, the exact file length and the
// label range, and throws tb::Error whose message starts with the path.

constexpr uint32_t kIdxImagesMagic = 0x00000803;
constexpr uint32_t kIdxLabelsMagic = 0x00000801;
constexpr const char* kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";

struct IdxImages {
  int64_t count = 0, rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // count * rows * cols, row-major
};

// The whole (decompressed) content of a file. Corrupt or truncated gzip
// streams throw tb::Error naming the path.
std::vector<uint8_t> read_file_bytes(const std::string& path);

IdxImages read_idx_images(const std::string& path);
// Labels must lie in [0, num_classes).
std::vector<int32_t> read_idx_labels(const std::string& path, int num_classes = 10);

// The cheap check of one IDX file, without decoding its data: the file is
// there, its header (magic, dimensions) is what `magic` says, and its length
// is the one the header needs: for a plain file its size, for a gzip file the
// length its trailer records (when that disagrees, the stream is decompressed
// to count, so a valid multi-member file is not refused). Throws tb::Error in
// the readers' words; returns the sample count.
int64_t check_idx_file(const std::string& path, uint32_t magic);

// One split from an images file and a labels file of equal count; the
// samples have shape {1, rows, cols}.
std::unique_ptr<InMemoryDataset> open_idx_dataset(const std::string& images_path,
                                                  const std::string& labels_path,
                                                  const std::string& name, int num_classes = 10);

// Finds {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] in dir.
// split is "train" (60000 samples) or "test" (10000).
std::unique_ptr<InMemoryDataset> open_fashion_mnist(
    const std::string& dir = kFashionMnistDefaultDir, const std::string& split = "train");
// Same file names and format, for the original MNIST digits.
std::unique_ptr<InMemoryDataset> open_mnist(const std::string& dir, const std::string& split);

// The problems check_idx_file finds in the four files of an MNIST-format
// folder (family: "fashion-mnist" or "mnist"), one message each; a missing
// folder is one problem. Empty when every header is sound.
std::vector<std::string> check_mnist_folder(const std::string& dir, const std::string& family);

}  // namespace tb
