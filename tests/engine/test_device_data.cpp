// SPDX-License-Identifier: GPL-3.0-or-later
// Trick 15: tensors made and augmented on the device.
//   - augment_draw (host/device header) makes SampleRng's draws;
//   - CpuBackend::augment_normalize_u8 == SampleTransform::apply + normalize, bit
//     for bit, over many samples, epochs and seeds, with crop, flip and pad_to
//     on and off, 1 and 3 channels, NCHW and NHWC output;
//   - BatchFormat::Uint8Raw: the data set's bytes in the loader's order, for
//     any worker count, and raw batch + the op == the Float32 loader's batch;
//   - InputStager with augment (run on the CPU backend) == the host loader;
//   - device_side_init: the same weights and buffers; the CPU trainer is
//     unaffected by both keys;
//   - GPU slots (QSKIP without a device): the CUDA kernel == the CPU op, and
//     training runs with gpu_augment / device_side_init on and off give
//     bit-identical per-step losses (deterministic = true).
#include <QtTest>
#include <cstring>
#include <random>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/data/augment_draw.h"
#include "engine/data/loader.h"
#include "engine/data/sample_rng.h"
#include "engine/data/synthetic_dataset.h"
#include "engine/data/transforms.h"
#include "engine/nn/models.h"
#include "engine/train/config.h"
#include "engine/train/events.h"
#include "engine/train/input_stager.h"
#include "engine/train/trainer.h"
#include "engine/train/tricks.h"
#include "tests/engine/run_fixture.h"
#ifdef TRAINBENCH_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#endif

using namespace tb;
using json = nlohmann::json;
using tb::test::Recorder;
using tb::test::run_trainer;

namespace {

Tensor random_u8(const Shape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Tensor t = Tensor::empty(s, DType::U8);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<uint8_t>()[i] = uint8_t(rng() & 0xff);
  return t;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// The host loader's result for a batch of raw samples: apply + normalize per row.
Tensor host_reference(const Tensor& raw, const std::vector<int32_t>& idx, const SampleTransform& t,
                      uint64_t seed, int64_t epoch) {
  const Shape o = t.output_shape();
  Tensor out = Tensor::empty({raw.n(), o[0], o[1], o[2]}, DType::F32);
  std::vector<uint8_t> tmp(size_t(shape_numel(o)));
  const int64_t in_per = raw.c() * raw.h() * raw.w(), out_per = shape_numel(o);
  for (int64_t n = 0; n < raw.n(); ++n) {
    t.apply(raw.data_as<uint8_t>() + n * in_per, tmp.data(), seed, epoch, idx[size_t(n)]);
    t.normalize(tmp.data(), out.data_as<float>() + n * out_per);
  }
  return out;
}

Tensor clone_host(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype(), Device::cpu(), t.layout());
  std::memcpy(c.data(), t.data(), t.nbytes());
  return c;
}

Tensor indices_tensor(const std::vector<int32_t>& idx) {
  Tensor t = Tensor::empty({int64_t(idx.size())}, DType::I32);
  std::memcpy(t.data(), idx.data(), idx.size() * sizeof(int32_t));
  return t;
}

// NHWC memory of an NCHW host tensor, for comparing NHWC outputs.
Tensor to_nhwc(const Tensor& x) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), Device::cpu(), Layout::NHWC);
  CpuBackend().copy(x, y);
  return y;
}

struct Case {
  Shape chw;
  int64_t pad_to;  // 0: none
  bool crop;
  int64_t padding;
  bool flip;
  bool norm;
};

std::vector<Case> cases() {
  std::vector<Case> v;
  for (const Shape& chw : {Shape{1, 28, 28}, Shape{3, 7, 9}, Shape{3, 32, 32}})
    for (int64_t pad_to : {int64_t(0), int64_t(32)})
      for (bool crop : {false, true})
        for (bool flip : {false, true}) {
          if (pad_to > 0 && (chw[1] > pad_to || chw[2] > pad_to)) continue;
          const int64_t padding = chw[1] == 7 ? 2 : 4;
          v.push_back({chw, pad_to, crop, padding, flip, chw[0] != 1 || crop});
        }
  return v;
}

TransformOptions options_of(const Case& k) {
  TransformOptions o;
  o.pad_to_h = o.pad_to_w = k.pad_to;
  o.random_crop = k.crop;
  o.crop_padding = k.padding;
  o.random_hflip = k.flip;
  if (k.norm)
    o.norm =
        k.chw[0] == 3 ? standard_norm_stats("cifar10", 3) : standard_norm_stats("fashion-mnist", 1);
  return o;
}

json base_config() {
  return {{"device", "cpu"},
          {"dataset", "synthetic"},
          {"synthetic_shape", {1, 12, 12}},
          {"synthetic_size", 256},
          {"test_limit", 64},
          {"batch_size", 32},
          {"model", "fmnist-cnn"},
          {"seed", 3},
          {"epochs", 2},
          {"random_crop_padding", 2},
          {"horizontal_flip", true}};
}

Recorder run(const json& config) { return run_trainer(config); }

std::vector<double> losses(const Recorder& r) {
  std::vector<double> l;
  for (const json& s : r.of("step"))
    if (s["metrics"].contains("loss")) l.push_back(s["metrics"]["loss"]);
  for (const json& e : r.of("epoch"))  // evaluation runs through the same input path
    if (e["metrics"].contains("test_loss")) l.push_back(e["metrics"]["test_loss"]);
  return l;
}


}  // namespace


class TestDeviceData : public QObject {
  Q_OBJECT
 private slots:
  // --- the draws: augment_draw restates SampleRng for the transform stream.
  void augmentDrawMatchesSampleRng() {
    std::mt19937_64 pick(5);
    int flips = 0, shifted = 0;
    for (int i = 0; i < 20000; ++i) {
      AugmentSpec s;
      s.random_crop = i % 4 != 3;
      s.random_hflip = i % 4 != 2;
      s.crop_padding = int64_t(pick() % 9);
      s.seed = i % 7 == 0 ? pick() : uint64_t(i % 5);
      s.epoch = int64_t(pick() % (i % 3 == 0 ? 1000000007ull : 50));
      const uint64_t index = i % 11 == 0 ? pick() >> 33 : pick() % 70000;
      const AugmentDraw d = augment_draw(s, index);
      SampleRng rng(s.seed, uint64_t(s.epoch), index, kTransformStream);
      int64_t dy = 0, dx = 0;
      bool flip = false;
      if (s.random_crop) {
        const uint64_t n = uint64_t(2 * s.crop_padding + 1);
        dy = int64_t(rng.uniform_int(n)) - s.crop_padding;
        dx = int64_t(rng.uniform_int(n)) - s.crop_padding;
      }
      if (s.random_hflip) flip = rng.coin();
      QCOMPARE(d.dy, dy);
      QCOMPARE(d.dx, dx);
      QCOMPARE(d.flip, flip);
      flips += flip, shifted += dy != 0;
    }
    QVERIFY(flips > 5000 && shifted > 5000);  // the draws really vary
  }

  // --- the CPU op against the host loader's transform, bit for bit.
  void cpuAugmentMatchesSampleTransform() {
    CpuBackend be;
    int checked = 0;
    for (const Case& k : cases()) {
      const TransformOptions o = options_of(k);
      SampleTransform t(k.chw, o);
      std::vector<float> scale, shift;
      norm_scale_shift(o.norm, k.chw[0], scale, shift);
      const int64_t N = 37;
      Tensor raw = random_u8({N, k.chw[0], k.chw[1], k.chw[2]}, 100 + checked);
      std::mt19937_64 pick(checked);
      std::vector<int32_t> idx(static_cast<size_t>(N));
      for (auto& i : idx) i = int32_t(pick() % 2000000000);
      idx[0] = 0;
      Tensor ind = indices_tensor(idx);
      for (uint64_t seed : {uint64_t(0), uint64_t(77), ~uint64_t(0)})
        for (int64_t epoch : {int64_t(0), int64_t(1), int64_t(9), int64_t(123456)}) {
          const Tensor ref = host_reference(raw, idx, t, seed, epoch);
          Tensor got = Tensor::empty(ref.shape(), DType::F32);
          be.augment_normalize_u8(raw, ind, augment_spec(t, seed, epoch), scale, shift, got);
          const std::string what = shape_str(k.chw) + " pad_to " + std::to_string(k.pad_to) +
                                   " crop " + std::to_string(k.crop) + " flip " +
                                   std::to_string(k.flip) + " seed " + std::to_string(seed) +
                                   " epoch " + std::to_string(epoch);
          QVERIFY2(bit_equal(ref, got), what.c_str());
          Tensor got_nhwc = Tensor::empty(ref.shape(), DType::F32, Device::cpu(), Layout::NHWC);
          be.augment_normalize_u8(raw, ind, augment_spec(t, seed, epoch), scale, shift, got_nhwc);
          QVERIFY2(bit_equal(to_nhwc(ref), got_nhwc), ("nhwc " + what).c_str());
          ++checked;
        }
    }
    QVERIFY(checked >= 200);
  }

  // A wrong draw must show: shifting the epoch changes augmented images.
  void cpuAugmentDependsOnEpochAndIndex() {
    CpuBackend be;
    TransformOptions o;
    o.random_crop = true;
    o.random_hflip = true;
    SampleTransform t({3, 16, 16}, o);
    std::vector<float> scale, shift;
    norm_scale_shift(o.norm, 3, scale, shift);
    Tensor raw = random_u8({8, 3, 16, 16}, 3);
    Tensor ind = indices_tensor({0, 1, 2, 3, 4, 5, 6, 7});
    Tensor a = Tensor::empty({8, 3, 16, 16}, DType::F32), b = clone_host(a);
    be.augment_normalize_u8(raw, ind, augment_spec(t, 1, 0), scale, shift, a);
    be.augment_normalize_u8(raw, ind, augment_spec(t, 1, 1), scale, shift, b);
    QVERIFY(!bit_equal(a, b));
    Tensor ind2 = indices_tensor({1, 2, 3, 4, 5, 6, 7, 8});
    be.augment_normalize_u8(raw, ind2, augment_spec(t, 1, 0), scale, shift, b);
    QVERIFY(!bit_equal(a, b));
  }

  void augmentRejectsBadArguments() {
    CpuBackend be;
    Tensor raw = random_u8({2, 3, 8, 8}, 1);
    Tensor ind = indices_tensor({0, 1});
    AugmentSpec s;
    s.out_h = s.out_w = 8;
    std::vector<float> three(3, 1.0f), one(1, 1.0f);
    Tensor out = Tensor::empty({2, 3, 8, 8}, DType::F32);
    be.augment_normalize_u8(raw, ind, s, three, three, out);  // fine
    QVERIFY_THROWS_EXCEPTION(Error, be.augment_normalize_u8(raw, ind, s, one, one, out));
    Tensor bad_out = Tensor::empty({2, 3, 8, 9}, DType::F32);
    QVERIFY_THROWS_EXCEPTION(Error, be.augment_normalize_u8(raw, ind, s, three, three, bad_out));
    Tensor f_ind = Tensor::empty({2}, DType::F32);
    QVERIFY_THROWS_EXCEPTION(Error, be.augment_normalize_u8(raw, f_ind, s, three, three, out));
    Tensor short_ind = indices_tensor({0});
    QVERIFY_THROWS_EXCEPTION(Error, be.augment_normalize_u8(raw, short_ind, s, three, three, out));
    AugmentSpec small = s;
    small.out_h = 6;
    Tensor small_out = Tensor::empty({2, 3, 6, 8}, DType::F32);
    QVERIFY_THROWS_EXCEPTION(Error,
                             be.augment_normalize_u8(raw, ind, small, three, three, small_out));
    Tensor nhwc_raw = Tensor::empty({2, 3, 8, 8}, DType::U8, Device::cpu(), Layout::NHWC);
    QVERIFY_THROWS_EXCEPTION(Error, be.augment_normalize_u8(nhwc_raw, ind, s, three, three, out));
    Tensor neg = indices_tensor({0, -1});
    QVERIFY_THROWS_EXCEPTION(Error, be.augment_normalize_u8(raw, neg, s, three, three, out));
  }

  // --- the loader's raw mode.
  void loaderRawKeepsOrderForAnyWorkerCount() {
    SyntheticOptions so;
    so.shape = {3, 10, 10};
    so.size = 103;
    so.seed = 4;
    SyntheticDataset ds(so);
    LoaderOptions o;
    o.batch_size = 10;
    o.seed = 77;
    o.transform.pad_to_h = o.transform.pad_to_w = 16;
    o.transform.random_crop = true;
    o.transform.crop_padding = 3;
    o.transform.random_hflip = true;
    o.transform.norm = standard_norm_stats(ds.name(), 3);
    CpuBackend be;
    std::vector<float> scale, shift;
    norm_scale_shift(o.transform.norm, 3, scale, shift);
    for (int64_t epoch : {int64_t(0), int64_t(5)}) {
      // The host loader's f32 batches: what gpu_augment must reproduce.
      o.format = BatchFormat::Float32;
      o.workers = 0;
      std::vector<Tensor> ref;
      {
        DataLoader f32(ds, o);
        f32.start_epoch(epoch);
        Batch b;
        while (f32.next(b)) ref.push_back(clone_host(b.images));
      }
      QCOMPARE(ref.size(), size_t(11));
      o.format = BatchFormat::Uint8Raw;
      std::vector<uint8_t> first_bytes;
      for (int workers : {0, 1, 4}) {
        o.workers = workers;
        o.prefetch = workers == 1 ? 1 : 3;
        DataLoader raw(ds, o);
        QCOMPARE(raw.image_shape(), (Shape{3, 16, 16}));
        QCOMPARE(raw.batch_image_shape(), (Shape{3, 10, 10}));
        raw.start_epoch(epoch);
        const std::vector<int64_t> order = raw.order();
        std::vector<uint8_t> bytes;
        Batch b;
        int64_t k = 0;
        std::vector<uint8_t> px(size_t(ds.sample_numel()));
        while (raw.next(b)) {
          QCOMPARE(b.index, k);
          QCOMPARE(b.epoch, epoch);
          QCOMPARE(b.images.dtype(), DType::U8);
          QVERIFY(b.indices.defined());
          for (int64_t i = 0; i < b.images.n(); ++i) {
            const int64_t idx = order[size_t(k * 10 + i)];
            QCOMPARE(int64_t(b.indices.data_as<int32_t>()[i]), idx);
            int32_t label = -1;
            ds.get(idx, px.data(), &label);  // the data set's bytes, untouched
            QVERIFY(std::memcmp(px.data(), b.images.data_as<uint8_t>() + i * ds.sample_numel(),
                                px.size()) == 0);
            QCOMPARE(b.labels.data_as<int32_t>()[i], label);
          }
          Tensor got = Tensor::empty(ref[size_t(k)].shape(), DType::F32);
          be.augment_normalize_u8(b.images, b.indices,
                                  augment_spec(raw.transform(), o.seed, b.epoch), scale, shift,
                                  got);
          QVERIFY2(bit_equal(got, ref[size_t(k)]), ("batch " + std::to_string(k)).c_str());
          const auto* p = b.images.data_as<uint8_t>();
          bytes.insert(bytes.end(), p, p + b.images.nbytes());
          raw.recycle(std::move(b));
          ++k;
        }
        QCOMPARE(k, int64_t(11));
        if (workers == 0)
          first_bytes = bytes;
        else
          QVERIFY2(bytes == first_bytes, ("workers " + std::to_string(workers)).c_str());
      }
    }
  }

  // --- InputStager with augment on the CPU backend: the device path's logic.
  void stagerAugmentEqualsHostLoader() {
    SyntheticOptions so;
    so.shape = {1, 12, 12};
    so.size = 70;  // a smaller last batch (drop_last off)
    SyntheticDataset ds(so);
    CpuBackend be;
    for (bool augment : {false, true}) {
      LoaderOptions o;
      o.batch_size = 16;
      o.seed = 9;
      o.transform.pad_to_h = o.transform.pad_to_w = 16;
      o.transform.random_crop = true;
      o.transform.crop_padding = 2;
      o.transform.random_hflip = true;
      o.transform.norm = standard_norm_stats(ds.name(), 1);
      DataLoader f32(ds, o);
      o.format = augment ? BatchFormat::Uint8Raw : BatchFormat::Uint8;
      o.workers = 2;
      DataLoader u8(ds, o);
      InputOptions io;
      io.uint8 = true;
      io.augment = augment;
      norm_scale_shift(o.transform.norm, 1, io.scale, io.shift);
      InputStager stager(be, io);
      for (int64_t epoch : {int64_t(0), int64_t(1)}) {
        f32.start_epoch(epoch);
        u8.start_epoch(epoch);
        Batch a, b;
        int64_t batches = 0;
        while (f32.next(a)) {
          QVERIFY(u8.next(b));
          Tensor x, y;
          stager.stage(std::move(b), u8, x, y);
          QVERIFY(bit_equal(x, a.images));
          QVERIFY(bit_equal(y, a.labels));
          stager.consumed();
          f32.recycle(std::move(a));
          ++batches;
        }
        QVERIFY(!u8.next(b));
        QCOMPARE(batches, int64_t(5));
        stager.release_all();
      }
    }
    InputOptions bad;
    bad.augment = true;  // without uint8
    QVERIFY_THROWS_EXCEPTION(Error, InputStager(be, bad));
  }

  // --- device_side_init: what moved to the device gives the same values.
  void deviceSideInitSameWeights() {
    for (const char* name : {"fmnist-cnn", "resnet9", "resnet18-cifar"}) {
      CpuBackend be;
      const Shape in = std::string(name) == "fmnist-cnn" ? Shape{1, 28, 28} : Shape{3, 32, 32};
      std::unique_ptr<Model> host = make_model(name, in, 10, {});
      std::unique_ptr<Model> dev = make_model(name, in, 10, {});
      dev->set_device_side_init(true);
      host->build(be, 42);
      dev->build(be, 42);
      QVERIFY(bit_equal(host->param_block(), dev->param_block()));
      QCOMPARE(host->buffers().size(), dev->buffers().size());
      int64_t buffer_bytes = 0;
      for (size_t i = 0; i < host->buffers().size(); ++i) {
        QVERIFY(bit_equal(host->buffers()[i].value, dev->buffers()[i].value));
        buffer_bytes += int64_t(host->buffers()[i].value.nbytes());
      }
      const int64_t total = int64_t(host->param_block().nbytes()) + buffer_bytes;
      QCOMPARE(host->init_device_bytes(), int64_t(0));
      QCOMPARE(host->init_upload_bytes(), total);
      QVERIFY(dev->init_device_bytes() > 0);  // BN affine parameters and statistics
      QCOMPARE(dev->init_upload_bytes() + dev->init_device_bytes(), total);
      qInfo("%s: %lld of %lld init bytes filled on the device", name,
            static_cast<long long>(dev->init_device_bytes()), static_cast<long long>(total));
      // Another seed, other weights: the comparison above can fail.
      std::unique_ptr<Model> other = make_model(name, in, 10, {});
      other->set_device_side_init(true);
      other->build(be, 43);
      QVERIFY(!bit_equal(host->param_block(), other->param_block()));
    }
  }

  // --- the trainer on the CPU: both keys are cuda-only and change nothing.
  void cpuTrainerUnaffected() {
    const std::vector<double> base = losses(run(base_config()));
    QCOMPARE(base.size(), size_t(16 + 2));
    json c = base_config();
    c["gpu_augment"] = true;
    c["device_side_init"] = true;
    const Recorder rec = run(c);
    QVERIFY(losses(rec) == base);
    const json tricks = rec.of("run_started").at(0)["tricks"];
    for (const char* k : {"gpu_augment", "device_side_init"}) {
      QVERIFY2(!tricks[k]["applied"].get<bool>(), k);
      QVERIFY2(tricks[k]["reason"].get<std::string>().find("cpu") != std::string::npos, k);
    }
    RunConfig rc = RunConfig::from_json(validate_config(c, "test"));
    const json gpu = resolve_tricks(rc, Device::cuda(0));
    QVERIFY(gpu["gpu_augment"]["applied"].get<bool>());
    QVERIFY(gpu["device_side_init"]["applied"].get<bool>());
  }

  // ------------------------------------------------------------ GPU slots
  void gpuAugmentMatchesCpu() {
    NEED_GPU();
    TB_GPU_TRY
#ifdef TRAINBENCH_HAVE_CUDA
    CudaBackend be(0, {});
    CpuBackend cpu;
    int checked = 0;
    for (const Case& k : cases()) {
      const TransformOptions o = options_of(k);
      SampleTransform t(k.chw, o);
      std::vector<float> scale, shift;
      norm_scale_shift(o.norm, k.chw[0], scale, shift);
      const int64_t N = 67;
      Tensor raw = random_u8({N, k.chw[0], k.chw[1], k.chw[2]}, 500 + checked);
      std::mt19937_64 pick(checked);
      std::vector<int32_t> idx(static_cast<size_t>(N));
      for (auto& i : idx) i = int32_t(pick() % 2000000000);
      Tensor ind = indices_tensor(idx);
      Tensor draw = be.empty(raw.shape(), DType::U8), dind = be.empty(ind.shape(), DType::I32);
      be.copy(raw, draw);
      be.copy(ind, dind);
      for (Layout l : {Layout::NCHW, Layout::NHWC})
        for (int64_t epoch : {int64_t(0), int64_t(3), int64_t(100000)}) {
          const AugmentSpec s = augment_spec(t, 1234567, epoch);
          const Shape os{N, t.output_shape()[0], t.output_shape()[1], t.output_shape()[2]};
          Tensor ref = Tensor::empty(os, DType::F32, Device::cpu(), l);
          cpu.augment_normalize_u8(raw, ind, s, scale, shift, ref);
          Tensor dout = be.empty(os, DType::F32, l);
          be.augment_normalize_u8(draw, dind, s, scale, shift, dout);
          Tensor got = Tensor::empty(os, DType::F32, Device::cpu(), l);
          be.copy(dout, got);
          QVERIFY2(bit_equal(ref, got), (shape_str(k.chw) + " " + layout_name(l)).c_str());
          ++checked;
        }
    }
    QVERIFY(checked > 0);
#endif
    TB_GPU_CATCH
  }

  void gpuAugmentGivesBitIdenticalLosses() {
    NEED_GPU();
    TB_GPU_TRY
    auto go = [](json overrides) {
      json c = base_config();
      c["device"] = "cuda";
      c["deterministic"] = true;
      for (auto& [k, v] : overrides.items()) c[k] = v;
      return run(c);
    };
    const Recorder base_rec = go({});
    const std::vector<double> base = losses(base_rec);
    QCOMPARE(base.size(), size_t(16 + 2));
    for (json o : {json{{"gpu_augment", true}},
                   json{{"gpu_augment", true}, {"pin_memory", true}, {"non_blocking", true}},
                   json{{"gpu_augment", true}, {"h2d_uint8", true}}}) {
      const Recorder rec = go(o);
      QVERIFY2(losses(rec) == base, qPrintable(QString::fromStdString(o.dump())));
      // Raw 12x12 bytes + labels + indices per batch of 32.
      QCOMPARE(rec.of("step").at(0)["metrics"]["h2d_bytes"].get<double>(),
               32.0 * 144 + 32 * 4 + 32 * 4);
    }
    // pad_to_32: the device builds the 32x32 canvas; only 12x12 bytes travel.
    const Recorder padded_base = go({{"pad_to_32", true}});
    const Recorder padded = go({{"pad_to_32", true}, {"gpu_augment", true}});
    QVERIFY(losses(padded) == losses(padded_base));
    QCOMPARE(padded.of("step").at(0)["metrics"]["h2d_bytes"].get<double>(),
             32.0 * 144 + 32 * 4 + 32 * 4);
    QCOMPARE(padded_base.of("step").at(0)["metrics"]["h2d_bytes"].get<double>(),
             32.0 * 1024 * 4 + 32 * 4);
    TB_GPU_CATCH
  }

  void gpuDeviceSideInitSameWeightsAndLosses() {
    NEED_GPU();
    TB_GPU_TRY
#ifdef TRAINBENCH_HAVE_CUDA
    CudaBackend be(0, {});
    std::unique_ptr<Model> host = make_model("resnet9", {3, 32, 32}, 10, {});
    std::unique_ptr<Model> dev = make_model("resnet9", {3, 32, 32}, 10, {});
    dev->set_device_side_init(true);
    host->build(be, 7);
    dev->build(be, 7);
    auto fetch = [&be](const Tensor& t) {
      Tensor h = Tensor::empty(t.shape(), t.dtype(), Device::cpu(), t.layout());
      be.copy(t, h);
      return h;
    };
    QVERIFY(bit_equal(fetch(host->param_block()), fetch(dev->param_block())));
    for (size_t i = 0; i < host->buffers().size(); ++i)
      QVERIFY(bit_equal(fetch(host->buffers()[i].value), fetch(dev->buffers()[i].value)));
    QVERIFY(dev->init_device_bytes() > 0);
#endif
    json c = base_config();
    c["device"] = "cuda";
    c["deterministic"] = true;
    const std::vector<double> base = losses(run(c));
    c["device_side_init"] = true;
    QVERIFY(losses(run(c)) == base);
    TB_GPU_CATCH
  }
};

QTEST_GUILESS_MAIN(TestDeviceData)
#include "test_device_data.moc"
