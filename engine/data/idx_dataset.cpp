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

// What an IDX header says; `bytes` holds the first n bytes of the
// (decompressed) file, n >= 16 when the file has that many.
struct IdxHeader {
  int64_t count = 0, rows = 0, cols = 0;
  uint64_t header_bytes = 0, file_bytes = 0;  // the header's length, the whole file's
};

IdxHeader parse_idx_header(const std::string& path, const uint8_t* bytes, uint64_t n,
                           uint32_t expected_magic) {
  const bool images = expected_magic == kIdxImagesMagic;
  TB_CHECK(n >= 4, path, ": truncated: expected at least 4 bytes (IDX magic number), found ", n);
  const uint32_t magic = read_be32(bytes);
  TB_CHECK(magic == expected_magic, path, ": bad magic number ", hex32(magic),
           " at offset 0, expected ", hex32(expected_magic), " (",
           images ? "an IDX image file" : "an IDX label file", ")");
  IdxHeader h;
  h.header_bytes = images ? 16 : 8;
  TB_CHECK(n >= h.header_bytes, path, ": truncated: expected at least ", h.header_bytes,
           " bytes (", images ? "IDX image header" : "IDX label header", "), found ", n);
  h.count = read_be32(bytes + 4);
  h.rows = images ? read_be32(bytes + 8) : 1;
  h.cols = images ? read_be32(bytes + 12) : 1;
  TB_CHECK(h.rows >= 1 && h.rows <= 65536 && h.cols >= 1 && h.cols <= 65536, path,
           ": bad image dimensions ", h.rows, "x", h.cols, " at offset 8 (expected 1..65536)");
  // count < 2^32 and rows * cols <= 2^32, so the product fits in 64 bits.
  h.file_bytes = h.header_bytes + uint64_t(h.count) * uint64_t(h.rows * h.cols);
  return h;
}

void check_gzip_name(const std::string& path, bool direct) {
  TB_CHECK(!(ends_with(path, ".gz") && direct), path,
           ": not a gzip file (the name ends in .gz but the gzip magic bytes 1f 8b are missing)");
}

void check_same_count(const std::string& name, const std::string& images_path, int64_t images,
                      const std::string& labels_path, int64_t labels) {
  TB_CHECK(images == labels, name, ": image count ", images, " in ", images_path,
           " does not match label count ", labels, " in ", labels_path);
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
  check_gzip_name(path, gzdirect(f.get()));
  return out;
}

IdxImages read_idx_images(const std::string& path) {
  std::vector<uint8_t> bytes = read_file_bytes(path);
  const IdxHeader h = parse_idx_header(path, bytes.data(), bytes.size(), kIdxImagesMagic);
  check_length(path, h.file_bytes, bytes.size());
  bytes.erase(bytes.begin(), bytes.begin() + 16);
  return {h.count, h.rows, h.cols, std::move(bytes)};
}

std::vector<int32_t> read_idx_labels(const std::string& path, int num_classes) {
  const std::vector<uint8_t> bytes = read_file_bytes(path);
  const IdxHeader h = parse_idx_header(path, bytes.data(), bytes.size(), kIdxLabelsMagic);
  check_length(path, h.file_bytes, bytes.size());
  std::vector<int32_t> labels(static_cast<size_t>(h.count));
  for (int64_t i = 0; i < h.count; ++i) {
    const int v = bytes[8 + i];
    TB_CHECK(v < num_classes, path, ": label ", v, " at index ", i, " (offset ", 8 + i,
             ") out of range 0..", num_classes - 1);
    labels[i] = v;
  }
  return labels;
}

int64_t check_idx_file(const std::string& path, uint32_t magic) {
  namespace fs = std::filesystem;
  std::error_code ec;
  TB_CHECK(fs::is_regular_file(path, ec), path, ": no such file");
  uint8_t head[16];
  int n = 0;
  bool direct = true;
  {
    std::unique_ptr<gzFile_s, GzCloser> f(gzopen(path.c_str(), "rb"));
    TB_CHECK(f, path, ": cannot open: ", std::strerror(errno));
    n = gzread(f.get(), head, sizeof head);
    if (n < 0) {
      int errnum = 0;
      TB_FAIL(path, ": corrupt gzip stream after 0 decompressed bytes: ", gzerror(f.get(), &errnum));
    }
    direct = gzdirect(f.get());
  }
  check_gzip_name(path, direct);
  const IdxHeader h = parse_idx_header(path, head, uint64_t(n), magic);
  const uint64_t size = fs::file_size(path, ec);
  TB_CHECK(!ec, path, ": cannot stat: ", ec.message());
  if (direct) {
    check_length(path, h.file_bytes, size);
    return h.count;
  }
  // gzip's trailer ends with the decompressed length mod 2^32 (ISIZE).
  uint32_t isize = 0;
  bool trailer = false;
  if (size >= 18) {
    std::FILE* raw = std::fopen(path.c_str(), "rb");
    uint8_t t[4] = {0, 0, 0, 0};
    trailer = raw && std::fseek(raw, -4, SEEK_END) == 0 && std::fread(t, 1, 4, raw) == 4;
    if (raw) std::fclose(raw);
    isize = uint32_t(t[0]) | (uint32_t(t[1]) << 8) | (uint32_t(t[2]) << 16) | (uint32_t(t[3]) << 24);
  }
  // Disagreeing (cut short, damaged, or several gzip members): decompress and
  // let the reader's own checks name the problem.
  if (!trailer || isize != uint32_t(h.file_bytes)) check_length(path, h.file_bytes, read_file_bytes(path).size());
  return h.count;
}

std::unique_ptr<InMemoryDataset> open_idx_dataset(const std::string& images_path,
                                                  const std::string& labels_path,
                                                  const std::string& name, int num_classes) {
  IdxImages im = read_idx_images(images_path);
  std::vector<int32_t> labels = read_idx_labels(labels_path, num_classes);
  check_same_count(name, images_path, im.count, labels_path, static_cast<int64_t>(labels.size()));
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

std::vector<std::string> check_mnist_folder(const std::string& dir, const std::string& family) {
  std::vector<std::string> problems;
  std::error_code ec;
  for (const std::string prefix : {"train", "t10k"}) {
    std::string images, labels;
    int64_t n_images = -1, n_labels = -1;
    try {
      images = find_idx_file(dir, prefix + "-images-idx3-ubyte", family);
      n_images = check_idx_file(images, kIdxImagesMagic);
    } catch (const Error& e) {
      problems.push_back(e.what());
      if (!std::filesystem::is_directory(dir, ec)) return problems;  // one problem: the folder
    }
    try {
      labels = find_idx_file(dir, prefix + "-labels-idx1-ubyte", family);
      n_labels = check_idx_file(labels, kIdxLabelsMagic);
    } catch (const Error& e) {
      problems.push_back(e.what());
    }
    try {
      if (n_images >= 0 && n_labels >= 0)
        check_same_count(family + "/" + (prefix == "train" ? "train" : "test"), images, n_images,
                         labels, n_labels);
    } catch (const Error& e) {
      problems.push_back(e.what());
    }
  }
  return problems;
}

}  // namespace tb
