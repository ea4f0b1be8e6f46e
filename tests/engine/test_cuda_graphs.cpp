// SPDX-License-Identifier: GPL-3.0-or-later
// Trick 24, cuda_graphs: whole-step capture and replay.
//   - CPU: resolve_tricks' reasons when the step cannot be captured; the CPU
//     backend refuses to capture with a clear error; StepGraphs refuses it.
//   - GPU slots (QSKIP without a device or a CUDA build): a captured chain of
//     ops replays to the eager bits; the optimizer's per-step constants in a
//     replay (AdamW bias correction advancing); training with graphs on vs off
//     gives bit-identical per-step losses and test loss, across an evaluation
//     (drop + recapture), for SGD and AdamW.
#include <QtTest>
#include <cstring>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/ops/optimizer/optimizer.h"
#include "engine/ops/pointwise/pointwise.h"
#include "engine/train/config.h"
#include "engine/train/events.h"
#include "engine/train/step_graph.h"
#include "engine/train/trainer.h"
#include "engine/train/tricks.h"
#include "tests/engine/run_fixture.h"

#ifdef TRAINBENCH_HAVE_CUDA
#include "engine/backend/cuda/caching_allocator.h"
#include "engine/backend/cuda/cuda_backend.h"
#endif

using namespace tb;
using json = nlohmann::json;

namespace {

RunConfig config(json overrides) {
  json base = {
      {"device", "cpu"},   {"dataset", "fashion-mnist"}, {"data_dir", tb::test::fashion_mnist_dir()},
      {"train_limit", 256}, {"test_limit", 64},          {"max_steps", 6},
      {"batch_size", 32},   {"model", "fmnist-cnn"},     {"seed", 7}};
  for (auto& [k, v] : overrides.items()) base[k] = v;
  return RunConfig::from_json(validate_config(base, "test"));
}

struct Outcome {
  std::vector<double> losses;
  json summary;
};

Outcome train(json overrides) {
  const tb::test::Recorder rec = tb::test::run_trainer(config(overrides).values);
  Outcome o;
  for (const json& s : rec.of("step"))
    if (s["metrics"].contains("loss")) o.losses.push_back(s["metrics"]["loss"].get<double>());
  o.summary = rec.of("finished").at(0)["summary"];
  return o;
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

#ifdef TRAINBENCH_HAVE_CUDA
Tensor upload(Backend& be, const std::vector<float>& v) {
  Tensor h = Tensor::empty({int64_t(v.size())}, DType::F32);
  std::memcpy(h.data(), v.data(), v.size() * sizeof(float));
  Tensor d = be.empty(h.shape(), DType::F32);
  be.copy(h, d);
  return d;
}

std::vector<float> download(Backend& be, const Tensor& d) {
  Tensor h = Tensor::empty(d.shape(), DType::F32);
  be.copy(d, h);
  return std::vector<float>(h.data_as<float>(), h.data_as<float>() + h.numel());
}

std::vector<float> ramp(int64_t n, float a, float b) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = a * float(i % 97) - b;
  return v;
}
#endif

}  // namespace


class TestCudaGraphs : public QObject {
  Q_OBJECT

 private slots:
  // ------------------------------------------------------------ CPU
  void blockerReasons() {
    QVERIFY(cuda_graphs_blocker(config({{"cuda_graphs", true}})).empty());
    const std::string acc =
        cuda_graphs_blocker(config({{"cuda_graphs", true}, {"accumulation_steps", 2}}));
    QVERIFY2(acc.find("accumulation_steps") != std::string::npos, acc.c_str());
    const std::string clip =
        cuda_graphs_blocker(config({{"cuda_graphs", true}, {"clip_grad_norm", 1.0}}));
    QVERIFY2(clip.find("clip_grad_norm") != std::string::npos, clip.c_str());
    const std::string anom =
        cuda_graphs_blocker(config({{"cuda_graphs", true}, {"anomaly_check", true}}));
    QVERIFY2(anom.find("anomaly_check") != std::string::npos, anom.c_str());
  }

  void resolutionOnCudaAndCpu() {
    // On a GPU device the trick is implemented: applied unless a blocker says no.
    json on = resolve_tricks(config({{"cuda_graphs", true}}), Device::cuda(0))["cuda_graphs"];
    QVERIFY2(on["applied"].get<bool>(), on.dump().c_str());
    json acc = resolve_tricks(config({{"cuda_graphs", true}, {"accumulation_steps", 2}}),
                              Device::cuda(0))["cuda_graphs"];
    QVERIFY(!acc["applied"].get<bool>());
    QVERIFY(acc["reason"].get<std::string>().find("not applied: accumulation_steps") == 0);
    json clip = resolve_tricks(config({{"cuda_graphs", true}, {"clip_grad_norm", 0.5}}),
                               Device::cuda(0))["cuda_graphs"];
    QVERIFY(!clip["applied"].get<bool>());
    json anom = resolve_tricks(config({{"cuda_graphs", true}, {"anomaly_check", true}}),
                               Device::cuda(0))["cuda_graphs"];
    QVERIFY(!anom["applied"].get<bool>());
    // Off: nothing to report beyond the default.
    json off = resolve_tricks(config({}), Device::cuda(0))["cuda_graphs"];
    QVERIFY(!off.contains("reason"));
    // The CPU backend has no graphs.
    json cpu = resolve_tricks(config({{"cuda_graphs", true}}), Device::cpu())["cuda_graphs"];
    QVERIFY(!cpu["applied"].get<bool>());
  }

  void cpuBackendRefusesCapture() {
    CpuBackend be;
    QVERIFY(!be.graphs());
    QVERIFY(!be.capabilities().graph_capture);
    try {
      StepGraphs graphs(be, 3);
      QFAIL("StepGraphs on the cpu backend did not throw");
    } catch (const Error& e) {
      const std::string m = e.what();
      QVERIFY2(m.find("cuda_graphs") != std::string::npos &&
                   m.find("cannot capture") != std::string::npos,
               m.c_str());
    }
  }

  void cpuRunIgnoresTheTrick() {
    // On the CPU the trick is reported not applied; the run is the eager one.
    Outcome a = train({{"cuda_graphs", true}}), b = train({});
    QCOMPARE(a.losses.size(), size_t(6));
    QVERIFY(a.losses == b.losses);
    QVERIFY(!a.summary.contains("cuda_graph_replays"));
  }

  // ------------------------------------------------------------ GPU slots
  void gpuReplayedOpsMatchEager() {
    NEED_GPU();
    TB_GPU_TRY
#ifdef TRAINBENCH_HAVE_CUDA
    CudaBackend be(0, {});
    const int64_t n = 100003;
    Tensor x = upload(be, ramp(n, 0.37f, 11.0f));
    Tensor y = be.empty({n}, DType::F32), z = be.empty({n}, DType::F32);
    auto chain = [&] {
      pointwise::relu_forward(be, x, y);
      pointwise::add(be, y, x, z);
      pointwise::scale(be, z, 1.5);
      pointwise::gelu_forward(be, z, y);
    };
    chain();
    const std::vector<float> eager = download(be, y);
    be.fill(y, 0.0);
    GraphCapture& graphs = *be.graphs();
    graphs.begin_capture();
    chain();
    const int id = graphs.end_capture();
    QVERIFY(bit_equal(download(be, y), std::vector<float>(size_t(n), 0.0f)));  // nothing ran
    graphs.launch(id);
    QVERIFY(bit_equal(download(be, y), eager));
    // New input values in the same buffer: the replay reads them.
    Tensor x2 = upload(be, ramp(n, -0.21f, 3.0f));
    be.copy(x2, x);
    chain();
    const std::vector<float> eager2 = download(be, y);
    be.fill(y, 0.0);
    graphs.launch(id);
    QVERIFY(bit_equal(download(be, y), eager2));
    graphs.drop_all();
    QVERIFY_THROWS_EXCEPTION(Error, graphs.launch(id));
#endif
    TB_GPU_CATCH
  }

  void gpuOptimizerConstantsPerReplay_data() {
    QTest::addColumn<int>("kind");
    QTest::newRow("sgd") << int(OptimizerKind::SGD);
    QTest::newRow("adamw") << int(OptimizerKind::AdamW);
    QTest::newRow("lamb") << int(OptimizerKind::LAMB);
  }
  void gpuOptimizerConstantsPerReplay() {
    NEED_GPU();
    TB_GPU_TRY
#ifdef TRAINBENCH_HAVE_CUDA
    QFETCH(int, kind);
    CudaBackend be(0, {});
    const int64_t n = 70000;  // two chunks
    auto make = [&](std::vector<ParamSlot>& params, std::vector<Tensor>& keep) {
      keep = {upload(be, ramp(n, 0.01f, 0.3f)), upload(be, ramp(n, 0.003f, 0.1f)),
              be.empty({n}, DType::F32), be.empty({n}, DType::F32)};
      be.fill(keep[2], 0.0), be.fill(keep[3], 0.0);
      ParamSlot s;
      s.param = keep[0], s.grad = keep[1], s.state1 = keep[2], s.state2 = keep[3];
      params = {s};
    };
    OptimizerStep st;
    st.kind = OptimizerKind(kind);
    st.momentum = 0.9f;
    st.weight_decay = 0.01f;
    auto at = [&](int64_t t) {  // lr and bias correction change per step
      st.step = t, st.lr = 0.05f / float(t);
    };
    // Eager reference first: the descriptor arrays are the backend's, one set
    // at a time, and a captured step reads them in place.
    std::vector<ParamSlot> params;
    std::vector<Tensor> keep;
    make(params, keep);
    std::vector<std::vector<float>> want;
    for (int64_t t = 1; t <= 6; ++t) {
      at(t);
      optimizer::step(be, st, params, true);
      want.push_back(download(be, keep[0]));
    }
    make(params, keep);
    at(1);
    optimizer::step(be, st, params, true);  // warm-up: uploads the descriptors
    QVERIFY(bit_equal(download(be, keep[0]), want[0]));
    at(99);  // what the capture sees must not matter: the replay reads the
             // device copy
    GraphCapture& graphs = *be.graphs();
    graphs.begin_capture();
    optimizer::step(be, st, params, true);
    const int id = graphs.end_capture();
    for (int64_t t = 2; t <= 6; ++t) {
      at(t);
      graphs.set_optimizer_constants(st);
      graphs.launch(id);
      QVERIFY2(bit_equal(download(be, keep[0]), want[size_t(t - 1)]),
               qPrintable(QString("step %1").arg(t)));
    }
    graphs.drop_all();
#endif
    TB_GPU_CATCH
  }

  // fp32 with SGD and AdamW (the counts of captures and replays derived
  // below); then the all-tricks form the benchmarks time (bf16 activations,
  // channels-last, uint8 uploads, augmentation on the device, the fused
  // epilogues; cuDNN's heuristics and determinism instead of autotuning, so
  // both runs take the same engines) and fp16 with its loss scaler, each with
  // an evaluation of 48 samples, whose last batch of 16 moves the stager's
  // and the pool's buffers before the recapture.
  void gpuTrainingBitIdentical_data() {
    QTest::addColumn<QString>("overrides");
    QTest::addColumn<bool>("exact_counts");
    QTest::newRow("sgd") << R"({"optimizer": "sgd"})" << true;
    QTest::newRow("adamw") << R"({"optimizer": "adamw"})" << true;
    QTest::newRow("all tricks bf16") << R"({"amp": "bf16", "h2d_uint8": true, "channels_last": true,
        "grad_set_to_none": true, "conv_bias_before_bn": false, "fuse_pointwise": true,
        "optimizer_foreach": true, "device_side_init": true, "gpu_augment": true,
        "sync_every_step": false, "eval_inference_mode": true, "pad_channels_to": 8,
        "test_limit": 48})" << false;
    QTest::newRow("fp16 scaler channels-last") << R"({"amp": "fp16", "channels_last": true,
        "h2d_uint8": true, "test_limit": 48})" << false;
  }
  void gpuTrainingBitIdentical() {
    NEED_GPU();
    TB_GPU_TRY
#ifdef TRAINBENCH_HAVE_CUDA
    QFETCH(QString, overrides);
    QFETCH(bool, exact_counts);
    // 256 samples / 32 = 8 steps per epoch, 2 epochs: an evaluation (drop and
    // recapture) in the middle. Both stager params get a graph per phase.
    json o = {{"device", "cuda"},     {"deterministic", true},
              {"max_steps", 0},       {"epochs", 2},
              {"log_every", 1},       {"non_blocking", true},
              {"pin_memory", true}};
    const json extra = json::parse(overrides.toStdString());  // (a temporary's items() would dangle)
    for (auto& [k, v] : extra.items()) o[k] = v;
    const int64_t unknown_frees = tb::cuda::CachingAllocator::instance().stats().unknown_frees;
    Outcome eager = train(o);
    o["cuda_graphs"] = true;
    Outcome graphs = train(o);
    QCOMPARE(eager.losses.size(), size_t(16));
    QVERIFY(graphs.losses == eager.losses);  // bit-identical doubles
    QCOMPARE(graphs.summary["final_test_loss"].get<double>(),
             eager.summary["final_test_loss"].get<double>());  // same final weights
    QCOMPARE(graphs.summary["final_test_accuracy"].get<double>(),
             eager.summary["final_test_accuracy"].get<double>());
    if (o.contains("amp") && o["amp"] == "fp16")  // the scaler's course, skips included
      QCOMPARE(graphs.summary.value("amp_skipped_steps", json()).dump(),
               eager.summary.value("amp_skipped_steps", json()).dump());
    // The graphs really ran: 2 captures per phase, the other steps replayed
    // (epoch 1: 3 warm-up + 2 captures + 3 replays; epoch 2: 1 eager + 2 + 5).
    // With the tricks' other buffers the warm-up may differ: at least one
    // capture per phase and some replays.
    if (exact_counts) {
      QCOMPARE(graphs.summary["cuda_graph_captures"].get<int64_t>(), int64_t(4));
      QCOMPARE(graphs.summary["cuda_graph_replays"].get<int64_t>(), int64_t(8));
    } else {
      QVERIFY2(graphs.summary["cuda_graph_captures"].get<int64_t>() >= 2, graphs.summary.dump().c_str());
      QVERIFY2(graphs.summary["cuda_graph_replays"].get<int64_t>() >= 4, graphs.summary.dump().c_str());
    }
    // No storage was freed twice (the allocator ignores and counts it).
    QCOMPARE(tb::cuda::CachingAllocator::instance().stats().unknown_frees, unknown_frees);
#endif
    TB_GPU_CATCH
  }
};

QTEST_GUILESS_MAIN(TestCudaGraphs)
#include "test_cuda_graphs.moc"
