// SPDX-License-Identifier: GPL-3.0-or-later
// gpu_augment and device_side_init: tensors made and augmented on the device.
// The ops (augment_draw == SampleRng; augment_normalize_u8 on the CPU and CUDA
// == SampleTransform::apply + normalize, bit for bit) are in test_op_augment.
//   - BatchFormat::Uint8Raw: the data set's bytes in the loader's order, for
//     any worker count, and raw batch + the op == the Float32 loader's batch;
//   - InputStager with augment (run on the CPU backend) == the host loader;
//   - device_side_init: the same weights and buffers; the CPU trainer is
//     unaffected by both keys;
//   - GPU slots (QSKIP without a device): training runs with gpu_augment /
//     device_side_init on and off give bit-identical per-step losses
//     (deterministic = true).
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
#include "engine/ops/augment/augment.h"
#include "engine/train/config.h"
#include "engine/train/events.h"
#include "engine/train/input_stager.h"
#include "engine/train/trainer.h"
#include "engine/train/tricks.h"
#include "tests/engine/run_fixture.h"
#include "tests/engine/tensor_helpers.h"

using namespace tb;
using json = nlohmann::json;
using namespace tb::test;

namespace {

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
        while (f32.next(b)) ref.push_back(clone(b.images));
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
          augment::augment_normalize_u8(be, b.images, b.indices,
                                        augment_spec(raw.transform(), o.seed, b.epoch), scale,
                                        shift, got);
          QVERIFY2(bitwise_equal(got, ref[size_t(k)]), ("batch " + std::to_string(k)).c_str());
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
          QVERIFY(bitwise_equal(x, a.images));
          QVERIFY(bitwise_equal(y, a.labels));
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
      QVERIFY(bitwise_equal(host->param_block(), dev->param_block()));
      QCOMPARE(host->buffers().size(), dev->buffers().size());
      int64_t buffer_bytes = 0;
      for (size_t i = 0; i < host->buffers().size(); ++i) {
        QVERIFY(bitwise_equal(host->buffers()[i].value, dev->buffers()[i].value));
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
      QVERIFY(!bitwise_equal(host->param_block(), other->param_block()));
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
    QVERIFY(bitwise_equal(fetch(host->param_block()), fetch(dev->param_block())));
    for (size_t i = 0; i < host->buffers().size(); ++i)
      QVERIFY(bitwise_equal(fetch(host->buffers()[i].value), fetch(dev->buffers()[i].value)));
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
