// SPDX-License-Identifier: GPL-3.0-or-later
// Tests of engine/data: the IDX, CIFAR-10 and synthetic readers, their error
// messages on corrupt input, the transforms and the threaded loader.
#include <zlib.h>

#include <QtTest>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/error.h"
#include "engine/data/cifar10_dataset.h"
#include "engine/data/dataset.h"
#include "engine/data/idx_dataset.h"
#include "engine/data/loader.h"
#include "engine/data/synthetic_dataset.h"
#include "engine/data/transforms.h"
#include "tests/engine/tensor_helpers.h"

using namespace tb;
using tb::test::error_of;
using Bytes = std::vector<uint8_t>;

namespace {

void put_be32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}

Bytes idx_images(uint32_t count, uint32_t rows, uint32_t cols, const Bytes& pixels,
                 uint32_t magic = kIdxImagesMagic) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, count);
  put_be32(b, rows);
  put_be32(b, cols);
  b.insert(b.end(), pixels.begin(), pixels.end());
  return b;
}

Bytes idx_labels(const Bytes& labels, uint32_t magic = kIdxLabelsMagic) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, static_cast<uint32_t>(labels.size()));
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

void write_raw(const std::string& path, const Bytes& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  QVERIFY2(f.good(), path.c_str());
}

void write_gz(const std::string& path, const Bytes& b) {
  gzFile f = gzopen(path.c_str(), "wb");
  QVERIFY2(f, path.c_str());
  QCOMPARE(gzwrite(f, b.data(), static_cast<unsigned>(b.size())), int(b.size()));
  QCOMPARE(gzclose(f), Z_OK);
}

Bytes read_raw(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), {});
}

#define EXPECT_CONTAINS(msg, part)                \
  QVERIFY2((msg).find(part) != std::string::npos, \
           ("message \"" + (msg) + "\" lacks \"" + std::string(part) + "\"").c_str())

// Pixels of n images of rows x cols: a different byte pattern per image.
Bytes pattern_pixels(int n, int rows, int cols) {
  Bytes p;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < rows * cols; ++j) p.push_back(static_cast<uint8_t>(i * 31 + j * 7));
  return p;
}

// Sample i encodes its own index in its first two bytes; label i % 10.
class IndexDataset : public Dataset {
 public:
  IndexDataset(int64_t n, int64_t fail_at = -1, int sleep_us = 0)
      : n_(n), fail_at_(fail_at), sleep_us_(sleep_us) {}
  std::string name() const override { return "index-test"; }
  int64_t size() const override { return n_; }
  Shape sample_shape() const override { return {1, 2, 2}; }
  int num_classes() const override { return 10; }
  void get(int64_t index, uint8_t* pixels, int32_t* label) const override {
    check_index(index);
    if (sleep_us_) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    TB_CHECK(index != fail_at_, "index-test: corrupt sample at index ", index);
    pixels[0] = static_cast<uint8_t>(index & 0xff);
    pixels[1] = static_cast<uint8_t>(index >> 8);
    pixels[2] = 7;
    pixels[3] = 9;
    *label = static_cast<int32_t>(index % 10);
  }

 private:
  int64_t n_, fail_at_;
  int sleep_us_;
};

// Every batch of one epoch, flattened: image bytes, label bytes, batch sizes.
struct EpochDump {
  Bytes images, labels;
  std::vector<int64_t> rows, indices;
};

EpochDump run_epoch(const Dataset& ds, LoaderOptions o, int64_t epoch) {
  DataLoader loader(ds, o);
  loader.start_epoch(epoch);
  EpochDump d;
  Batch b;
  while (loader.next(b)) {
    const auto* ip = static_cast<const uint8_t*>(b.images.data());
    const auto* lp = static_cast<const uint8_t*>(b.labels.data());
    d.images.insert(d.images.end(), ip, ip + b.images.nbytes());
    d.labels.insert(d.labels.end(), lp, lp + b.labels.nbytes());
    d.rows.push_back(b.images.dim(0));
    d.indices.push_back(b.index);
    loader.recycle(std::move(b));
  }
  return d;
}

}  // namespace

class TestData : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir tmp_;
  std::string path(const std::string& name) const {
    return tmp_.filePath(QString::fromStdString(name)).toStdString();
  }

 private slots:
  void initTestCase() { QVERIFY(tmp_.isValid()); }

  // ---- IDX -----------------------------------------------------------------

  void idxRawAndGzip() {
    const Bytes px = pattern_pixels(5, 4, 3);
    const Bytes lab{3, 0, 9, 1, 5};
    write_raw(path("a-images"), idx_images(5, 4, 3, px));
    write_raw(path("a-labels"), idx_labels(lab));
    write_gz(path("a-images.gz"), idx_images(5, 4, 3, px));
    write_gz(path("a-labels.gz"), idx_labels(lab));
    for (const char* suffix : {"", ".gz"}) {
      auto ds = open_idx_dataset(path(std::string("a-images") + suffix),
                                 path(std::string("a-labels") + suffix), "tiny");
      QCOMPARE(ds->size(), int64_t(5));
      QCOMPARE(ds->sample_shape(), (Shape{1, 4, 3}));
      QCOMPARE(ds->num_classes(), 10);
      QCOMPARE(ds->name(), std::string("tiny"));
      Bytes got(12);
      int32_t label = -1;
      for (int i = 0; i < 5; ++i) {
        ds->get(i, got.data(), &label);
        QCOMPARE(label, int32_t(lab[i]));
        QVERIFY(std::equal(got.begin(), got.end(), px.begin() + i * 12));
      }
      EXPECT_CONTAINS(error_of([&] { ds->get(5, got.data(), &label); }),
                      "sample index 5 out of range 0..4");
    }
  }

  void idxFindsFilesInFolder() {
    // Train split gzip-compressed, test split raw: open_fashion_mnist takes either.
    const std::string dir = path("fm");
    std::filesystem::create_directory(dir);
    write_gz(dir + "/train-images-idx3-ubyte.gz", idx_images(3, 2, 2, pattern_pixels(3, 2, 2)));
    write_gz(dir + "/train-labels-idx1-ubyte.gz", idx_labels({1, 2, 3}));
    write_raw(dir + "/t10k-images-idx3-ubyte", idx_images(2, 2, 2, pattern_pixels(2, 2, 2)));
    write_raw(dir + "/t10k-labels-idx1-ubyte", idx_labels({4, 5}));
    auto train = open_fashion_mnist(dir, "train");
    auto test = open_fashion_mnist(dir, "test");
    QCOMPARE(train->size(), int64_t(3));
    QCOMPARE(test->size(), int64_t(2));
    QCOMPARE(train->name(), std::string("fashion-mnist/train"));
    QCOMPARE(test->labels(), (std::vector<int32_t>{4, 5}));

    std::string msg = error_of([&] { open_fashion_mnist(dir, "validation"); });
    EXPECT_CONTAINS(msg, "unknown split 'validation'");
    msg = error_of([&] { open_fashion_mnist(path("no-such-dir"), "train"); });
    EXPECT_CONTAINS(msg, "no train-images-idx3-ubyte");
    EXPECT_CONTAINS(msg, "no-such-dir");
    EXPECT_CONTAINS(msg, "does not exist");
  }

  void realFashionMnist() {
    if (!std::filesystem::exists(std::string(kFashionMnistDefaultDir) +
                                 "/train-images-idx3-ubyte.gz"))
      QSKIP(
          "Fashion-MNIST not installed in /usr/share/datasets/fashion-mnist (Debian package "
          "dataset-fashion-mnist)");
    auto train = open_fashion_mnist(kFashionMnistDefaultDir, "train");
    auto test = open_fashion_mnist(kFashionMnistDefaultDir, "test");
    QCOMPARE(train->size(), int64_t(60000));
    QCOMPARE(test->size(), int64_t(10000));
    QCOMPARE(train->sample_shape(), (Shape{1, 28, 28}));
    // Both splits are balanced: 6000 and 1000 of each of the ten classes.
    for (auto* ds : {train.get(), test.get()}) {
      std::vector<int64_t> counts(10);
      for (int32_t l : ds->labels()) {
        QVERIFY(l >= 0 && l <= 9);
        ++counts[static_cast<size_t>(l)];
      }
      for (int64_t c : counts) QCOMPARE(c, ds->size() / 10);
    }
    // The factory finds the Debian package's folder when no path is given.
    auto limited = open_dataset(nlohmann::json{{"name", "fashion-mnist"}, {"limit", 1000}}, "test");
    QCOMPARE(limited->size(), int64_t(1000));
    Bytes a(784), b(784);
    int32_t la = -1, lb = -2;
    limited->get(999, a.data(), &la);
    test->get(999, b.data(), &lb);
    QCOMPARE(a, b);
    QCOMPARE(la, lb);

    // The standard constants are what the training images measure.
    const NormStats measured = compute_norm_stats(*train);
    const NormStats standard = standard_norm_stats(train->name(), 1);
    QVERIFY2(std::abs(measured.mean[0] - standard.mean[0]) < 1e-3,
             std::to_string(measured.mean[0]).c_str());
    QVERIFY2(std::abs(measured.std[0] - standard.std[0]) < 1e-3,
             std::to_string(measured.std[0]).c_str());
  }

  void idxBadMagic() {
    write_raw(path("bm-images"), idx_images(2, 2, 2, pattern_pixels(2, 2, 2), kIdxLabelsMagic));
    std::string msg = error_of([&] { read_idx_images(path("bm-images")); });
    EXPECT_CONTAINS(msg, path("bm-images"));
    EXPECT_CONTAINS(
        msg, "bad magic number 0x00000801 at offset 0, expected 0x00000803 (an IDX image file)");
    write_gz(path("bm-labels.gz"), idx_labels({1, 2}, 0x12345678));
    msg = error_of([&] { read_idx_labels(path("bm-labels.gz")); });
    EXPECT_CONTAINS(msg, "bm-labels.gz");
    EXPECT_CONTAINS(msg, "bad magic number 0x12345678 at offset 0, expected 0x00000801");
  }

  void idxTruncated() {
    Bytes im = idx_images(3, 4, 4, pattern_pixels(3, 4, 4));
    im.resize(im.size() - 5);  // 16 + 48 - 5 = 59 bytes
    write_raw(path("tr-images"), im);
    std::string msg = error_of([&] { read_idx_images(path("tr-images")); });
    EXPECT_CONTAINS(msg, "tr-images: truncated: expected 64 bytes, found 59");

    Bytes lab = idx_labels(Bytes(100, 3));
    lab.resize(50);
    write_gz(path("tr-labels.gz"), lab);  // valid gzip, short content
    msg = error_of([&] { read_idx_labels(path("tr-labels.gz")); });
    EXPECT_CONTAINS(msg, "tr-labels.gz: truncated: expected 108 bytes, found 50");

    write_raw(path("tr-header"), Bytes{0, 0, 8, 3, 0, 0});
    msg = error_of([&] { read_idx_images(path("tr-header")); });
    EXPECT_CONTAINS(msg, "tr-header: truncated: expected at least 16 bytes");

    Bytes longer = idx_labels({1, 2});
    longer.push_back(0);
    write_raw(path("tr-long"), longer);
    msg = error_of([&] { read_idx_labels(path("tr-long")); });
    EXPECT_CONTAINS(msg, "tr-long: 1 bytes of trailing data: expected 10 bytes, found 11");
  }

  void idxBadDimensions() {
    write_raw(path("dim-images"), idx_images(0, 0, 28, {}));
    const std::string msg = error_of([&] { read_idx_images(path("dim-images")); });
    EXPECT_CONTAINS(msg, "dim-images: bad image dimensions 0x28");
  }

  void idxCountMismatch() {
    write_raw(path("cm-images"), idx_images(5, 2, 2, pattern_pixels(5, 2, 2)));
    write_raw(path("cm-labels"), idx_labels({1, 2, 3, 4}));
    const std::string msg =
        error_of([&] { open_idx_dataset(path("cm-images"), path("cm-labels"), "cm"); });
    EXPECT_CONTAINS(msg, "image count 5 in " + path("cm-images"));
    EXPECT_CONTAINS(msg, "does not match label count 4 in " + path("cm-labels"));
  }

  void idxLabelOutOfRange() {
    write_gz(path("lr-labels.gz"), idx_labels({1, 2, 3, 4, 5, 17, 6}));
    const std::string msg = error_of([&] { read_idx_labels(path("lr-labels.gz")); });
    EXPECT_CONTAINS(msg, "lr-labels.gz");
    EXPECT_CONTAINS(msg, "label 17 at index 5 (offset 13) out of range 0..9");
  }

  void idxCorruptGzip() {
    // A compressible payload, so damage hits the deflate stream or its CRC.
    const Bytes content = idx_images(20, 10, 10, Bytes(2000, 42));
    write_gz(path("good.gz"), content);
    Bytes gz = read_raw(path("good.gz"));
    QVERIFY(gz.size() > 30);

    Bytes flipped = gz;
    for (size_t i = 12; i < flipped.size() - 8; i += 3) flipped[i] ^= 0x5a;
    write_raw(path("flipped-images.gz"), flipped);
    std::string msg = error_of([&] { read_idx_images(path("flipped-images.gz")); });
    EXPECT_CONTAINS(msg, path("flipped-images.gz"));
    EXPECT_CONTAINS(msg, "corrupt gzip stream");

    Bytes cut(gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(gz.size() / 2));
    write_raw(path("cut-images.gz"), cut);
    msg = error_of([&] { read_idx_images(path("cut-images.gz")); });
    EXPECT_CONTAINS(msg, path("cut-images.gz"));
    EXPECT_CONTAINS(msg, "corrupt gzip stream");

    Bytes crc = gz;  // only the CRC-32 trailer damaged
    crc[crc.size() - 6] ^= 0xff;
    write_raw(path("crc-images.gz"), crc);
    msg = error_of([&] { read_idx_images(path("crc-images.gz")); });
    EXPECT_CONTAINS(msg, "crc-images.gz: corrupt gzip stream");

    write_raw(path("plain-images.gz"), content);  // named .gz, not compressed
    msg = error_of([&] { read_idx_images(path("plain-images.gz")); });
    EXPECT_CONTAINS(msg, "plain-images.gz: not a gzip file");

    msg = error_of([&] { read_idx_images(path("missing-images.gz")); });
    EXPECT_CONTAINS(msg, "missing-images.gz: no such file");
  }

  // ---- CIFAR-10 --------------------------------------------------------------

  void cifarGoodAndBad() {
    auto record = [](uint8_t label, uint8_t base) {
      Bytes r{label};
      for (int i = 0; i < 3072; ++i)
        r.push_back(static_cast<uint8_t>(base + i / 1024 * 100 + i % 7));
      return r;
    };
    const std::string dir = path("cifar");
    std::filesystem::create_directory(dir);
    for (int f = 1; f <= 5; ++f) {
      Bytes b = record(static_cast<uint8_t>(f), static_cast<uint8_t>(f));
      Bytes r2 = record(static_cast<uint8_t>(9 - f), 0);
      b.insert(b.end(), r2.begin(), r2.end());
      write_raw(dir + "/data_batch_" + std::to_string(f) + ".bin", b);
    }
    write_raw(dir + "/test_batch.bin", record(0, 50));
    auto train = open_cifar10(dir, "train");
    auto test = open_cifar10(dir, "test");
    QCOMPARE(train->size(), int64_t(10));
    QCOMPARE(test->size(), int64_t(1));
    QCOMPARE(train->sample_shape(), (Shape{3, 32, 32}));
    QCOMPARE(train->labels(), (std::vector<int32_t>{1, 8, 2, 7, 3, 6, 4, 5, 5, 4}));
    Bytes px(3072);
    int32_t label = -1;
    train->get(4, px.data(), &label);  // record 0 of data_batch_3
    QCOMPARE(label, 3);
    for (int i : {0, 1, 1023, 1024, 2048 + 5, 3071})  // planes R, G, B at 0, 1024, 2048
      QCOMPARE(int(px[static_cast<size_t>(i)]), 3 + i / 1024 * 100 + i % 7);

    Bytes bad = record(1, 0);
    Bytes r2 = record(2, 0);
    bad.insert(bad.end(), r2.begin(), r2.end());
    bad.resize(bad.size() + 100);  // 2 * 3073 + 100 bytes
    write_raw(path("bad_batch.bin"), bad);
    std::vector<uint8_t> pixels;
    std::vector<int32_t> labels;
    std::string msg = error_of([&] { read_cifar10_batch(path("bad_batch.bin"), pixels, labels); });
    EXPECT_CONTAINS(msg, "bad_batch.bin: size 6246 bytes is not a multiple of 3073");
    EXPECT_CONTAINS(msg, "incomplete record at offset 6146");

    Bytes badlabel = record(3, 0);
    Bytes r3 = record(10, 0);
    badlabel.insert(badlabel.end(), r3.begin(), r3.end());
    write_raw(path("label_batch.bin"), badlabel);
    msg = error_of([&] { read_cifar10_batch(path("label_batch.bin"), pixels, labels); });
    EXPECT_CONTAINS(msg, "label_batch.bin: label 10 at record 1 (offset 3073) out of range 0..9");

    std::filesystem::remove(dir + "/data_batch_4.bin");
    msg = error_of([&] { open_cifar10(dir, "train"); });
    EXPECT_CONTAINS(msg, "data_batch_4.bin: no such file");
  }

  // ---- the cheap check before a run ------------------------------------------

  // check_dataset_files finds, from headers and sizes alone, what the readers
  // would refuse, in their words, one message per file; sound files pass.
  void checkDatasetFiles() {
    namespace fs = std::filesystem;
    auto joined = [](const std::vector<std::string>& v) {
      std::string out;
      for (const std::string& s : v) out += s + "\n";
      return out;
    };
    const std::string good = path("check-good");
    fs::create_directory(good);
    write_gz(good + "/train-images-idx3-ubyte.gz", idx_images(3, 4, 4, pattern_pixels(3, 4, 4)));
    write_gz(good + "/train-labels-idx1-ubyte.gz", idx_labels({1, 2, 3}));
    write_raw(good + "/t10k-images-idx3-ubyte", idx_images(2, 4, 4, pattern_pixels(2, 4, 4)));
    write_raw(good + "/t10k-labels-idx1-ubyte", idx_labels({4, 5}));
    QVERIFY2(check_dataset_files({{"name", "mnist"}, {"path", good}}).empty(),
             joined(check_dataset_files({{"name", "mnist"}, {"path", good}})).c_str());
    QVERIFY(check_dataset_files({{"name", "synthetic"}}).empty());

    // A missing folder is one problem, in open_dataset's words.
    std::vector<std::string> p = check_dataset_files({{"name", "fashion-mnist"}, {"path", path("nowhere")}});
    QCOMPARE(p.size(), size_t(1));
    EXPECT_CONTAINS(p[0], "(the folder does not exist)");
    p = check_dataset_files({{"name", "cifar10"}, {"path", path("nowhere")}});
    QCOMPARE(p.size(), size_t(1));
    EXPECT_CONTAINS(p[0], "cifar10: folder " + path("nowhere") + " does not exist");

    // Bad magic, truncated (plain and gzip), trailing bytes, counts that differ.
    const std::string bad = path("check-bad");
    fs::create_directory(bad);
    write_raw(bad + "/train-images-idx3-ubyte", idx_images(3, 4, 4, pattern_pixels(3, 4, 4), kIdxLabelsMagic));
    Bytes labels = idx_labels({1, 2, 3});
    labels.push_back(0);
    write_raw(bad + "/train-labels-idx1-ubyte", labels);
    Bytes im = idx_images(2, 4, 4, pattern_pixels(2, 4, 4));
    im.resize(im.size() - 5);
    write_gz(bad + "/t10k-images-idx3-ubyte.gz", im);
    write_raw(bad + "/t10k-labels-idx1-ubyte", idx_labels({4, 5, 6}));
    p = check_dataset_files({{"name", "mnist"}, {"path", bad}});
    const std::string all = joined(p);
    QCOMPARE(p.size(), size_t(3));
    EXPECT_CONTAINS(all, bad + "/train-images-idx3-ubyte: bad magic number 0x00000801");
    EXPECT_CONTAINS(all, bad + "/train-labels-idx1-ubyte: 1 bytes of trailing data");
    EXPECT_CONTAINS(all, bad + "/t10k-images-idx3-ubyte.gz: truncated: expected 48 bytes, found 43");

    write_gz(bad + "/t10k-images-idx3-ubyte.gz", idx_images(2, 4, 4, pattern_pixels(2, 4, 4)));
    p = check_dataset_files({{"name", "mnist"}, {"path", bad}});
    EXPECT_CONTAINS(joined(p), "mnist/test: image count 2 in " + bad + "/t10k-images-idx3-ubyte.gz"
                               " does not match label count 3");

    // A gzip stream cut short: its trailer disagrees, so it is decompressed
    // and named as the reader names it.
    write_gz(path("whole.gz"), idx_labels(Bytes(5000, 1)));
    Bytes gz = read_raw(path("whole.gz"));
    gz.resize(gz.size() - 10);
    write_raw(bad + "/t10k-labels-idx1-ubyte.gz", gz);
    fs::remove(bad + "/t10k-labels-idx1-ubyte");
    EXPECT_CONTAINS(joined(check_dataset_files({{"name", "mnist"}, {"path", bad}})),
                    bad + "/t10k-labels-idx1-ubyte.gz: corrupt gzip stream");
    // Several gzip members: the trailer gives only the last one's length; the
    // file is still sound.
    const std::string multi = path("check-multi");
    fs::copy(good, multi, fs::copy_options::recursive);
    const Bytes three = idx_labels({1, 2, 3});
    write_gz(path("part1.gz"), Bytes(three.begin(), three.begin() + 9));
    write_gz(path("part2.gz"), Bytes(three.begin() + 9, three.end()));
    Bytes both = read_raw(path("part1.gz")), second = read_raw(path("part2.gz"));
    both.insert(both.end(), second.begin(), second.end());
    write_raw(multi + "/train-labels-idx1-ubyte.gz", both);
    QCOMPARE(read_idx_labels(multi + "/train-labels-idx1-ubyte.gz").size(), size_t(3));
    QVERIFY2(check_dataset_files({{"name", "mnist"}, {"path", multi}}).empty(),
             joined(check_dataset_files({{"name", "mnist"}, {"path", multi}})).c_str());

    // CIFAR-10: sizes only (labels are not read).
    const std::string cifar = path("check-cifar");
    fs::create_directory(cifar);
    for (int f = 1; f <= 5; ++f) write_raw(cifar + "/data_batch_" + std::to_string(f) + ".bin", Bytes(3073 * 2, 1));
    write_raw(cifar + "/data_batch_2.bin", Bytes(3073 + 7, 1));
    p = check_dataset_files({{"name", "cifar10"}, {"path", cifar}});
    QCOMPARE(p.size(), size_t(2));
    EXPECT_CONTAINS(joined(p), "data_batch_2.bin: size 3080 bytes is not a multiple of 3073");
    EXPECT_CONTAINS(joined(p), cifar + "/test_batch.bin: no such file");
    write_raw(cifar + "/data_batch_2.bin", Bytes(3073, 1));
    write_raw(cifar + "/test_batch.bin", Bytes(3073, 1));
    QVERIFY(check_dataset_files({{"name", "cifar10"}, {"path", cifar}}).empty());

    // A spec open_dataset refuses is one problem in its words.
    p = check_dataset_files({{"name", "imagenet"}});
    QCOMPARE(p.size(), size_t(1));
    EXPECT_CONTAINS(p[0], "unknown dataset name 'imagenet'");
  }

  // ---- synthetic, subsets, factory -------------------------------------------

  void syntheticDeterministicAndLearnable() {
    SyntheticOptions o;
    o.shape = {2, 6, 5};
    o.size = 400;
    o.classes = 4;
    o.seed = 11;
    SyntheticDataset a(o), b(o), test(o, "test");
    o.seed = 12;
    SyntheticDataset other(o);
    const int64_t n = a.sample_numel();
    Bytes pa(n), pb(n), pt(n), po(n);
    int32_t la, lb, lt, lo;
    int differ_test = 0, differ_seed = 0;
    for (int64_t i = 0; i < a.size(); ++i) {
      a.get(i, pa.data(), &la);
      b.get(i, pb.data(), &lb);
      test.get(i % test.size(), pt.data(), &lt);
      other.get(i, po.data(), &lo);
      QCOMPARE(pa, pb);
      QCOMPARE(la, lb);
      QCOMPARE(la, int32_t(i % 4));
      differ_test += pa != pt;
      differ_seed += pa != po;
    }
    QCOMPARE(differ_test, 400);
    QCOMPARE(differ_seed, 400);

    // Learnable: nearest class mean, fitted on train, classifies test well.
    std::vector<double> mean(static_cast<size_t>(4 * n));
    for (int64_t i = 0; i < a.size(); ++i) {
      a.get(i, pa.data(), &la);
      for (int64_t j = 0; j < n; ++j) mean[static_cast<size_t>(la * n + j)] += pa[j] / 100.0;
    }
    int correct = 0;
    for (int64_t i = 0; i < test.size(); ++i) {
      test.get(i, pt.data(), &lt);
      int best = -1;
      double best_d = 1e300;
      for (int k = 0; k < 4; ++k) {
        double d = 0;
        for (int64_t j = 0; j < n; ++j)
          d += std::pow(pt[j] - mean[static_cast<size_t>(k * n + j)], 2);
        if (d < best_d) best_d = d, best = k;
      }
      correct += best == lt;
    }
    QVERIFY2(correct >= 0.9 * double(test.size()), std::to_string(correct).c_str());

    o.shape = {3, 0, 2};
    EXPECT_CONTAINS(error_of([&] { SyntheticDataset bad(o); }), "shape must be [C, H, W]");
  }

  // The noise is a normal quantile picked by 12 random bits: the table is
  // increasing and symmetric, its first entry and its variance (the bins'
  // midpoints: a little under 1) those of Python's statistics.NormalDist, and
  // a sample's pixels scatter around their class image by the requested σ
  // (10 here, so that clamping at 0 and 255 never happens).
  void syntheticNoiseIsNormalWithTheRequestedSpread() {
    double var = 0;
    for (int j = 0; j < 4096; ++j) {
      const double z = synthetic_noise_table_value(j);
      if (j > 0) QVERIFY(z > synthetic_noise_table_value(j - 1));
      QCOMPARE(synthetic_noise_table_value(4095 - j), float(-z));
      var += z * z / 4096.0;
    }
    QVERIFY2(std::abs(var - 0.99968) < 1e-5, std::to_string(var).c_str());
    QVERIFY(std::abs(synthetic_noise_table_value(0) + 3.66833) < 1e-5);  // Φ⁻¹(0.5/4096)

    SyntheticOptions o;
    o.shape = {1, 8, 8};
    o.classes = 2;
    o.size = 4000;
    o.noise = 10.0f;
    SyntheticDataset d(o);
    const int64_t n = d.sample_numel();
    std::vector<double> sum(size_t(n), 0.0), sum2(size_t(n), 0.0);
    Bytes px(n);
    int32_t label;
    int64_t count = 0;
    for (int64_t i = 0; i < d.size(); i += 2) {  // class 0: one class image
      d.get(i, px.data(), &label);
      QCOMPARE(label, 0);
      for (int64_t j = 0; j < n; ++j) sum[size_t(j)] += px[j], sum2[size_t(j)] += double(px[j]) * px[j];
      ++count;
    }
    double spread = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double mean = sum[size_t(j)] / double(count);
      spread += std::sqrt(sum2[size_t(j)] / double(count) - mean * mean) / double(n);
    }
    // σ = 10 and the rounding's 1/12: 10.004; 2000 samples a pixel, 64 pixels.
    QVERIFY2(spread > 9.8 && spread < 10.2, std::to_string(spread).c_str());
  }

  void subsetDataset() {
    auto base = std::make_shared<IndexDataset>(50);
    SubsetDataset first(base, 7);
    QCOMPARE(first.size(), int64_t(7));
    SubsetDataset chosen(base, std::vector<int64_t>{42, 3, 42});
    QCOMPARE(chosen.size(), int64_t(3));
    Bytes px(4);
    int32_t label;
    chosen.get(0, px.data(), &label);
    QCOMPARE(int(px[0]), 42);
    QCOMPARE(label, 2);
    EXPECT_CONTAINS(error_of([&] {
                      SubsetDataset s(base, std::vector<int64_t>{1, 50});
                    }),
                    "subset index 50 (entry 1) out of range 0..49");
    EXPECT_CONTAINS(error_of([&] { SubsetDataset s(base, 51); }),
                    "first 51 samples, but it has 50");
  }

  void openDatasetFactory() {
    using nlohmann::json;
    auto train = open_dataset(
        json{{"name", "synthetic"}, {"shape", {1, 8, 8}}, {"classes", 3}, {"size", 90}}, "train");
    auto test = open_dataset(
        json{{"name", "synthetic"}, {"shape", {1, 8, 8}}, {"classes", 3}, {"size", 90}}, "test");
    QCOMPARE(train->size(), int64_t(90));
    QCOMPARE(test->size(), int64_t(18));  // default test_size = size / 5
    QCOMPARE(train->num_classes(), 3);
    QCOMPARE(train->sample_shape(), (Shape{1, 8, 8}));

    auto limited = open_dataset(json{{"name", "synthetic"}, {"size", 90}, {"limit", 10}}, "train");
    QCOMPARE(limited->size(), int64_t(10));
    QCOMPARE(limited->sample_shape(), (Shape{3, 32, 32}));
    auto over = open_dataset(json{{"name", "synthetic"}, {"size", 90}, {"limit", 1000}}, "train");
    QCOMPARE(over->size(), int64_t(90));  // limit keeps min(limit, size)

    auto fm =
        open_dataset(json{{"name", "fashion-mnist"}, {"path", path("fm")}, {"limit", 2}}, "train");
    QCOMPARE(fm->size(), int64_t(2));
    QCOMPARE(fm->sample_shape(), (Shape{1, 2, 2}));

    std::string msg = error_of([&] { open_dataset(json{{"name", "imagenet"}}, "train"); });
    EXPECT_CONTAINS(msg, "unknown dataset name 'imagenet'");
    msg = error_of([&] {
      open_dataset(json{{"name", "cifar10"}, {"path", "/x"}, {"colour", "red"}}, "train");
    });
    EXPECT_CONTAINS(msg, "unknown field 'colour' (value \"red\") for dataset 'cifar10'");
    msg = error_of([&] { open_dataset(json{{"name", "synthetic"}, {"size", "big"}}, "train"); });
    EXPECT_CONTAINS(msg, "field 'size' must be an integer, got \"big\"");
    msg = error_of([&] { open_dataset(json{{"name", "synthetic"}, {"limit", 0}}, "train"); });
    EXPECT_CONTAINS(msg, "field 'limit' = 0 out of range");
    msg = error_of([&] { open_dataset(json{{"name", "synthetic"}, {"shape", {3, 32}}}, "train"); });
    EXPECT_CONTAINS(msg, "field 'shape' must be [C, H, W]");
    msg = error_of([&] { open_dataset(json{{"name", "cifar10"}}, "train"); });
    EXPECT_CONTAINS(msg, "missing field 'path' for dataset 'cifar10'");
    msg = error_of([&] { open_dataset(json{{"path", "/x"}}, "train"); });
    EXPECT_CONTAINS(msg, "missing field 'name'");
    msg = error_of([&] { open_dataset(json{{"name", "synthetic"}}, "val"); });
    EXPECT_CONTAINS(msg, "unknown split 'val'");
  }

  // ---- transforms ------------------------------------------------------------

  void transformPrimitives() {
    const Shape chw{2, 3, 4};
    Bytes img(24);
    for (int i = 0; i < 24; ++i) img[i] = static_cast<uint8_t>(i + 1);
    Bytes a(24), b(24);
    hflip(img.data(), a.data(), chw);
    QCOMPARE(int(a[0]), 4);  // row 0 of channel 0 is 1 2 3 4
    QCOMPARE(int(a[3]), 1);
    QVERIFY(a != img);
    hflip(a.data(), b.data(), chw);
    QCOMPARE(b, img);

    crop_padded(img.data(), a.data(), chw, 0, 0, 0);
    QCOMPARE(a, img);
    crop_padded(img.data(), a.data(), chw, 2, 2, 2);  // centred window
    QCOMPARE(a, img);
    crop_padded(img.data(), a.data(), chw, 1, 0, 0);  // shifted down-right by one
    QCOMPARE(int(a[0]), 0);                           // padding
    QCOMPARE(int(a[4 + 1]), int(img[0]));             // (1,1) <- (0,0)
    QCOMPARE(int(a[12 + 4 + 1]), int(img[12]));       // channel 1 likewise
    EXPECT_CONTAINS(error_of([&] { crop_padded(img.data(), a.data(), chw, 1, 3, 0); }),
                    "outside 0..2");

    Bytes padded(2 * 5 * 8);
    pad_to(img.data(), padded.data(), chw, 5, 8);  // top 1, left 2
    QCOMPARE(int(padded[0]), 0);
    QCOMPARE(int(padded[1 * 8 + 2]), int(img[0]));
    QCOMPARE(int(padded[40 + 3 * 8 + 5]), int(img[12 + 2 * 4 + 3]));
    int nonzero = 0;
    for (uint8_t v : padded) nonzero += v != 0;
    QCOMPARE(nonzero, 24);

    const Bytes bytes{0, 255, 51, 0};
    std::vector<float> out(4);
    normalize(bytes.data(), out.data(), {1, 2, 2}, {{0.2860f}, {0.3530f}});
    QVERIFY(std::abs(out[0] - (-0.2860f / 0.3530f)) < 1e-5f);
    QVERIFY(std::abs(out[1] - ((1.0f - 0.2860f) / 0.3530f)) < 1e-5f);
    QVERIFY(std::abs(out[2] - ((0.2f - 0.2860f) / 0.3530f)) < 1e-5f);
    normalize(bytes.data(), out.data(), {1, 2, 2}, {});
    QCOMPARE(out[1], 1.0f);
    QVERIFY(std::abs(out[2] - 0.2f) < 1e-6f);
    const Bytes two{255, 0};  // two channels of one pixel each
    normalize(two.data(), out.data(), {2, 1, 1}, {{0.5f, 0.25f}, {0.5f, 0.25f}});
    QCOMPARE(out[0], 1.0f);
    QCOMPARE(out[1], -1.0f);

    const NormStats c = standard_norm_stats("cifar10/train", 3);
    QCOMPARE(c.mean.size(), size_t(3));
    QCOMPARE(c.mean[0], 0.4914f);
    QCOMPARE(standard_norm_stats("fashion-mnist/test[:100]", 1).std[0], 0.3530f);
    EXPECT_CONTAINS(error_of([&] { standard_norm_stats("cifar10", 1); }),
                    "for 3 channel(s), but the samples have 1");
    EXPECT_CONTAINS(error_of([&] { standard_norm_stats("svhn", 3); }), "'svhn'");
  }

  void sampleTransform() {
    const Shape chw{1, 6, 6};
    Bytes img(36);
    for (int i = 0; i < 36; ++i) img[i] = static_cast<uint8_t>(10 + i);
    Bytes out(36), ref(36);

    TransformOptions o;
    o.random_crop = true;
    o.crop_padding = 0;
    SampleTransform crop0(chw, o);
    for (int i = 0; i < 10; ++i) {
      crop0.apply(img.data(), out.data(), 1, 0, i);
      QCOMPARE(out, img);
    }

    // Flip only: each sample comes out either unchanged or mirrored, both occur,
    // and the choice is fixed by (seed, epoch, index).
    o = {};
    o.random_hflip = true;
    SampleTransform flip(chw, o);
    hflip(img.data(), ref.data(), chw);
    int flipped = 0, epoch_changes = 0;
    for (int i = 0; i < 100; ++i) {
      flip.apply(img.data(), out.data(), 5, 0, i);
      QVERIFY(out == img || out == ref);
      flipped += out == ref;
      Bytes again(36);
      flip.apply(img.data(), again.data(), 5, 0, i);
      QCOMPARE(again, out);
      flip.apply(img.data(), again.data(), 5, 1, i);
      epoch_changes += again != out;
    }
    QVERIFY2(flipped > 25 && flipped < 75, std::to_string(flipped).c_str());
    QVERIFY2(epoch_changes > 25, std::to_string(epoch_changes).c_str());

    // Crop with padding 2: the fused result is crop_padded at some offset.
    o = {};
    o.random_crop = true;
    o.crop_padding = 2;
    SampleTransform crop2(chw, o);
    std::set<std::pair<int, int>> offsets;
    for (int i = 0; i < 200; ++i) {
      crop2.apply(img.data(), out.data(), 9, 3, i);
      bool found = false;
      for (int dy = 0; dy <= 4 && !found; ++dy)
        for (int dx = 0; dx <= 4 && !found; ++dx) {
          crop_padded(img.data(), ref.data(), chw, 2, dy, dx);
          if (ref == out) found = true, offsets.insert({dy, dx});
        }
      QVERIFY(found);
    }
    QVERIFY2(offsets.size() >= 20, std::to_string(offsets.size()).c_str());  // of 25 possible

    // Fashion-MNIST to 32x32: pad_to, then crop and flip on the padded canvas.
    o = {};
    o.pad_to_h = o.pad_to_w = 32;
    SampleTransform pad({1, 28, 28}, o);
    QCOMPARE(pad.output_shape(), (Shape{1, 32, 32}));
    Bytes fm(28 * 28, 200), fm32(32 * 32), expect(32 * 32);
    pad.apply(fm.data(), fm32.data(), 0, 0, 0);
    pad_to(fm.data(), expect.data(), {1, 28, 28}, 32, 32);
    QCOMPARE(fm32, expect);
    QCOMPARE(int(fm32[2 * 32 + 2]), 200);
    QCOMPARE(int(fm32[2 * 32 + 1]), 0);

    o.norm = {{0.5f, 0.5f}, {0.5f, 0.5f}};
    EXPECT_CONTAINS(error_of([&] {
                      SampleTransform t({1, 28, 28}, o);
                    }),
                    "2 means and 2 stds for 1 channel(s)");
    o = {};
    o.pad_to_h = o.pad_to_w = 20;
    EXPECT_CONTAINS(error_of([&] {
                      SampleTransform t({1, 28, 28}, o);
                    }),
                    "cannot pad 28x28 samples to 20x20");
  }

  // ---- loader ----------------------------------------------------------------

  void loaderSameBytesForAnyWorkerCount() {
    SyntheticOptions so;
    so.shape = {3, 8, 8};
    so.size = 103;
    so.seed = 4;
    SyntheticDataset ds(so);
    LoaderOptions o;
    o.batch_size = 10;
    o.seed = 77;
    o.transform.random_crop = true;
    o.transform.crop_padding = 2;
    o.transform.random_hflip = true;
    o.transform.norm = standard_norm_stats(ds.name(), 3);
    for (BatchFormat format : {BatchFormat::Float32, BatchFormat::Uint8}) {
      o.format = format;
      o.workers = 0;
      const EpochDump ref = run_epoch(ds, o, 2);
      QCOMPARE(ref.rows.size(), size_t(11));
      QCOMPARE(ref.rows.back(), int64_t(3));
      QCOMPARE(ref.indices, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
      QCOMPARE(ref.images.size(), size_t(103 * 192) * (format == BatchFormat::Float32 ? 4 : 1));
      for (int workers : {1, 4}) {
        o.workers = workers;
        o.prefetch = workers == 1 ? 1 : 3;
        const EpochDump got = run_epoch(ds, o, 2);
        QVERIFY2(got.images == ref.images, ("workers " + std::to_string(workers)).c_str());
        QCOMPARE(got.labels, ref.labels);
        QCOMPARE(got.indices, ref.indices);
      }
      o.workers = 0;
      QVERIFY(run_epoch(ds, o, 3).labels != ref.labels);  // another epoch, another order
      o.seed = 78;
      QVERIFY(run_epoch(ds, o, 2).labels != ref.labels);  // another seed, another order
      o.seed = 77;
    }
  }

  void loaderEverySampleOncePerEpoch() {
    IndexDataset ds(257);
    for (int workers : {0, 3}) {
      for (bool drop_last : {false, true}) {
        LoaderOptions o;
        o.batch_size = 16;
        o.workers = workers;
        o.drop_last = drop_last;
        o.format = BatchFormat::Uint8;
        DataLoader loader(ds, o);
        QCOMPARE(loader.num_batches(), int64_t(drop_last ? 16 : 17));
        for (int64_t epoch = 0; epoch < 2; ++epoch) {
          loader.start_epoch(epoch);
          std::vector<int> seen(257);
          Batch b;
          int64_t k = 0;
          while (loader.next(b)) {
            QCOMPARE(b.index, k++);
            QCOMPARE(b.images.shape()[1], int64_t(1));
            const uint8_t* p = b.images.data_as<uint8_t>();
            for (int64_t i = 0; i < b.images.dim(0); ++i) {
              const int idx = p[i * 4] | (p[i * 4 + 1] << 8);
              QVERIFY(idx < 257);
              ++seen[static_cast<size_t>(idx)];
              QCOMPARE(b.labels.data_as<int32_t>()[i], int32_t(idx % 10));
            }
          }
          QCOMPARE(k, loader.num_batches());
          const int total = std::count(seen.begin(), seen.end(), 1);
          QCOMPARE(total, drop_last ? 256 : 257);
          QCOMPARE(int(std::count(seen.begin(), seen.end(), 0)), 257 - total);
          QVERIFY(!loader.next(b));  // stays at the end
        }
      }
    }
    LoaderOptions plain;
    plain.shuffle = false;
    plain.batch_size = 100;
    DataLoader seq(ds, plain);
    QVERIFY(error_of([&] {
              Batch b;
              seq.next(b);
            }).find("before start_epoch") != std::string::npos);
    seq.start_epoch(0);
    QCOMPARE(seq.order()[5], int64_t(5));
  }

  void loaderRethrowsWorkerErrors() {
    IndexDataset ds(200, /*fail_at=*/37);
    for (int workers : {0, 1, 4}) {
      LoaderOptions o;
      o.batch_size = 8;
      o.workers = workers;
      o.shuffle = false;
      DataLoader loader(ds, o);
      for (int round = 0; round < 2; ++round) {  // a restarted epoch fails again, cleanly
        loader.start_epoch(round);
        Batch b;
        int64_t good = 0;
        std::string msg;
        try {
          while (loader.next(b)) ++good;
        } catch (const tb::Error& e) {
          msg = e.what();
        }
        EXPECT_CONTAINS(msg, "corrupt sample at index 37");
        QCOMPARE(good, int64_t(4));  // batches 0..3 precede the bad sample, in order
        QVERIFY(!loader.next(b));    // the epoch is over
      }
    }
  }

  void loaderRestartAndShutdownMidEpoch() {
    IndexDataset slow(400, -1, 200);
    LoaderOptions o;
    o.batch_size = 10;
    o.workers = 4;
    o.prefetch = 4;
    o.format = BatchFormat::Uint8;
    LoaderOptions serial = o;
    serial.workers = 0;
    const EpochDump ref = run_epoch(slow, serial, 6);
    {
      DataLoader loader(slow, o);
      loader.start_epoch(5);
      Batch b;
      QVERIFY(loader.next(b));
      QVERIFY(loader.next(b));
      loader.start_epoch(6);  // abandon epoch 5 with work in flight
      EpochDump got;
      while (loader.next(b)) {
        const uint8_t* p = b.images.data_as<uint8_t>();
        got.images.insert(got.images.end(), p, p + b.images.nbytes());
      }
      QCOMPARE(got.images, ref.images);
      loader.start_epoch(7);
      QVERIFY(loader.next(b));
    }  // destroyed with workers busy: must join, not hang or crash
    {
      DataLoader idle(slow, o);  // destroyed before any epoch
    }
  }

  void loaderWaitTimeAndBufferReuse() {
    IndexDataset slow(64, -1, 500);
    std::atomic<int> allocations{0};
    LoaderOptions o;
    o.batch_size = 10;
    o.allocator = [&](const Shape& s, DType t) {
      ++allocations;
      return Tensor::empty(s, t);
    };
    DataLoader loader(slow, o);
    loader.start_epoch(0);
    Batch b;
    double wait = -1.0;
    QVERIFY(loader.next(b, &wait));
    QVERIFY2(wait >= 10 * 500e-6, std::to_string(wait).c_str());  // loaded 10 slow samples itself
    QCOMPARE(loader.last_wait_seconds(), wait);
    QCOMPARE(b.images.dtype(), DType::F32);
    QCOMPARE(b.images.shape(), (Shape{10, 1, 2, 2}));
    QCOMPARE(b.labels.shape(), (Shape{10}));
    loader.recycle(std::move(b));
    while (loader.next(b)) loader.recycle(std::move(b));
    QVERIFY(loader.epoch_wait_seconds() >= 64 * 500e-6);
    const int after_first = allocations.load();
    QCOMPARE(after_first, 4);  // a full and a partial batch, images + labels each
    for (int64_t epoch = 1; epoch < 3; ++epoch) {
      loader.start_epoch(epoch);
      while (loader.next(b)) loader.recycle(std::move(b));
    }
    QCOMPARE(allocations.load(), after_first);  // steady state reuses the buffers

    // With workers: at most prefetch + 1 full batches are alive at once (built,
    // queued or held by the caller), plus the partial one, so that many
    // buffers serve any number of epochs.
    IndexDataset quick(64);
    allocations = 0;
    o.workers = 2;
    o.prefetch = 3;
    DataLoader threaded(quick, o);
    for (int64_t epoch = 0; epoch < 5; ++epoch) {
      threaded.start_epoch(epoch);
      while (threaded.next(b)) threaded.recycle(std::move(b));
    }
    QVERIFY2(allocations.load() <= 2 * (3 + 1 + 1), std::to_string(allocations.load()).c_str());

    o.allocator = [](const Shape& s, DType) { return Tensor::empty(s, DType::F64); };
    DataLoader wrong(slow, o);
    wrong.start_epoch(0);
    EXPECT_CONTAINS(error_of([&] { wrong.next(b); }),
                    "batch allocator (images): expected dtype f32");
  }

  void loaderBadOptions() {
    IndexDataset ds(10);
    LoaderOptions o;
    o.batch_size = 0;
    EXPECT_CONTAINS(error_of([&] { DataLoader l(ds, o); }), "batch_size must be positive, got 0");
    o.batch_size = 4;
    o.workers = 2;
    o.prefetch = 0;
    EXPECT_CONTAINS(error_of([&] { DataLoader l(ds, o); }), "prefetch must be at least 1");
  }
};

QTEST_APPLESS_MAIN(TestData)
#include "test_data.moc"
