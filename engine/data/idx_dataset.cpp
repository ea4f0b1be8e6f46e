// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/data/idx_dataset.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "engine/core/error.h"

namespace tb {

namespace {

uint32_t read_be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Closes a gzFile on every exit path.
struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

void check_length(const std::string& path, uint64_t expected, uint64_t found) {
  TB_CHECK(found >= expected, path, ": truncated: expected ", expected, " bytes, found ", found);
  TB_CHECK(found == expected, path, ": ", found - expected, " bytes of trailing data: expected ",
           expected, " bytes, found ", found);
}

void check_magic(const std::string& path, const std::vector<uint8_t>& bytes, uint32_t expected,
                 const char* what) {
  TB_CHECK(bytes.size() >= 4, path,
           ": truncated: expected at least 4 bytes (IDX magic number), found ", bytes.size());
  const uint32_t magic = read_be32(bytes.data());
  TB_CHECK(magic == expected, path, ": bad magic number ", hex32(magic), " at offset 0, expected ",
           hex32(expected), " (", what, ")");
}

}  // namespace

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::error_code ec;
  TB_CHECK(std::filesystem::is_regular_file(path, ec), path, ": no such file");
  // gzopen reads plain files transparently, so one code path serves both.
  std::unique_ptr<gzFile_s, GzCloser> f(gzopen(path.c_str(), "rb"));
  TB_CHECK(f, path, ": cannot open: ", std::strerror(errno));
  gzbuffer(f.get(), 1 << 17);

  std::vector<uint8_t> out;
  std::vector<uint8_t> chunk(1 << 20);
  for (;;) {
    const int n = gzread(f.get(), chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int errnum = 0;
      const char* msg = gzerror(f.get(), &errnum);
      TB_FAIL(path, ": corrupt gzip stream after ", out.size(), " decompressed bytes: ", msg);
    }
    if (n == 0) break;
    out.insert(out.end(), chunk.data(), chunk.data() + n);
  }
  // A stream cut short ends the reads with Z_BUF_ERROR rather than a -1.
  int errnum = Z_OK;
  const char* msg = gzerror(f.get(), &errnum);
  TB_CHECK(errnum == Z_OK || errnum == Z_STREAM_END, path, ": corrupt gzip stream after ",
           out.size(), " decompressed bytes: ", msg);
  TB_CHECK(!(ends_with(path, ".gz") && gzdirect(f.get())), path,
           ": not a gzip file (the name ends in .gz but the gzip magic bytes 1f 8b are missing)");
  return out;
}

IdxImages read_idx_images(const std::string& path) {
  std::vector<uint8_t> bytes = read_file_bytes(path);
  check_magic(path, bytes, kIdxImagesMagic, "an IDX image file");
  TB_CHECK(bytes.size() >= 16, path,
           ": truncated: expected at least 16 bytes (IDX image header), found ", bytes.size());
  IdxImages im;
  im.count = read_be32(bytes.data() + 4);
  im.rows = read_be32(bytes.data() + 8);
  im.cols = read_be32(bytes.data() + 12);
  TB_CHECK(im.rows >= 1 && im.rows <= 65536 && im.cols >= 1 && im.cols <= 65536, path,
           ": bad image dimensions ", im.rows, "x", im.cols, " at offset 8 (expected 1..65536)");
  // count < 2^32 and rows * cols <= 2^32, so the product fits in 64 bits.
  const uint64_t expected = 16 + uint64_t(im.count) * uint64_t(im.rows * im.cols);
  check_length(path, expected, bytes.size());
  bytes.erase(bytes.begin(), bytes.begin() + 16);
  im.pixels = std::move(bytes);
  return im;
}

std::vector<int32_t> read_idx_labels(const std::string& path, int num_classes) {
  const std::vector<uint8_t> bytes = read_file_bytes(path);
  check_magic(path, bytes, kIdxLabelsMagic, "an IDX label file");
  TB_CHECK(bytes.size() >= 8, path,
           ": truncated: expected at least 8 bytes (IDX label header), found ", bytes.size());
  const int64_t count = read_be32(bytes.data() + 4);
  check_length(path, 8 + uint64_t(count), bytes.size());
  std::vector<int32_t> labels(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const int v = bytes[8 + i];
    TB_CHECK(v < num_classes, path, ": label ", v, " at index ", i, " (offset ", 8 + i,
             ") out of range 0..", num_classes - 1);
    labels[i] = v;
  }
  return labels;
}

std::unique_ptr<InMemoryDataset> open_idx_dataset(const std::string& images_path,
                                                  const std::string& labels_path,
                                                  const std::string& name, int num_classes) {
  IdxImages im = read_idx_images(images_path);
  std::vector<int32_t> labels = read_idx_labels(labels_path, num_classes);
  TB_CHECK(static_cast<int64_t>(labels.size()) == im.count, name, ": image count ", im.count,
           " in ", images_path, " does not match label count ", labels.size(), " in ", labels_path);
  return std::make_unique<InMemoryDataset>(name, Shape{1, im.rows, im.cols}, num_classes,
                                           std::move(im.pixels), std::move(labels));
}

namespace {

// dir/stem.gz if present, else dir/stem.
std::string find_idx_file(const std::string& dir, const std::string& stem,
                          const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const std::string& name : {stem + ".gz", stem}) {
    const fs::path p = fs::path(dir) / name;
    if (fs::exists(p, ec)) return p.string();
  }
  TB_FAIL(what, ": no ", stem, " or ", stem, ".gz in ", dir,
          fs::is_directory(dir, ec) ? "" : " (the folder does not exist)");
}

std::unique_ptr<InMemoryDataset> open_mnist_format(const std::string& dir, const std::string& split,
                                                   const std::string& family) {
  TB_CHECK(split == "train" || split == "test", family, ": unknown split '", split,
           "' (expected train or test)");
  const std::string prefix = split == "train" ? "train" : "t10k";
  const std::string images = find_idx_file(dir, prefix + "-images-idx3-ubyte", family);
  const std::string labels = find_idx_file(dir, prefix + "-labels-idx1-ubyte", family);
  return open_idx_dataset(images, labels, family + "/" + split, 10);
}

}  // namespace

std::unique_ptr<InMemoryDataset> open_fashion_mnist(const std::string& dir,
                                                    const std::string& split) {
  return open_mnist_format(dir, split, "fashion-mnist");
}

std::unique_ptr<InMemoryDataset> open_mnist(const std::string& dir, const std::string& split) {
  return open_mnist_format(dir, split, "mnist");
}

}  // namespace tb
