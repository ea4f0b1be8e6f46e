// SPDX-License-Identifier: GPL-3.0-or-later
// The trainer's trick toggles: each pair of paths must compute the same thing
// (bitwise where the arithmetic is the same, within a stated tolerance where only
// the summation order differs).
#include <QTemporaryDir>
#include <QtTest>

#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <cmath>
#include <thread>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/metrics/process_memory.h"
#include "engine/train/config.h"
#include "engine/train/events.h"
#include "engine/train/trainer.h"
#include "tests/engine/run_fixture.h"

using namespace tb;
using json = nlohmann::json;

namespace {

struct Outcome {
  std::vector<double> losses;
  json started, summary, finished;
  std::vector<json> warnings;
};

Outcome train(json overrides) {
  json base = {{"device", "cpu"},        {"dataset", "fashion-mnist"}, {"train_limit", 512},
               {"test_limit", 128},      {"max_steps", 6},             {"batch_size", 32},
               {"model", "fmnist-cnn"},  {"seed", 7}};
  for (auto& [k, v] : overrides.items()) base[k] = v;
  const tb::test::Recorder rec = tb::test::run_trainer(base);
  Outcome o;
  for (const json& e : rec.of("step"))
    if (e["metrics"].contains("loss")) o.losses.push_back(e["metrics"]["loss"].get<double>());
  o.started = rec.of("run_started").at(0);
  o.finished = rec.of("finished").at(0);
  o.summary = o.finished["summary"];
  for (const json& e : rec.of("log"))
    if (e["level"] == "warning") o.warnings.push_back(e);
  return o;
}

double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    m = std::max(m, std::abs(a[i] - b[i]) / std::max(1e-12, std::abs(b[i])));
  return m;
}

}  // namespace

class TestTrainer : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    if (!QFile::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"))
      QSKIP("Fashion-MNIST is not installed (Debian package dataset-fashion-mnist; scripts/setup.sh)");
  }

  void lossDecreases() {
    Outcome o = train({{"max_steps", 30}, {"lr", 0.05}});
    QCOMPARE(o.losses.size(), size_t(30));
    QVERIFY2(o.losses.back() < 0.8 * o.losses.front(),
             qPrintable(QString("loss %1 -> %2").arg(o.losses.front()).arg(o.losses.back())));
    QVERIFY(std::isfinite(o.summary["final_test_accuracy"].get<double>()));
  }

  // How long the run is (epochs x steps per epoch, or max_steps) is known
  // before the first step and kept in the summary: readers show "step N of M".
  void totalStepsIsKnownAtTheStart() {
    // 256 samples / (32 x 2 accumulated) = 4 steps per epoch, 2 epochs.
    Outcome o = train({{"max_steps", 0}, {"epochs", 2}, {"train_limit", 256}, {"accumulation_steps", 2}});
    QCOMPARE(o.started["steps_per_epoch"].get<int64_t>(), int64_t(4));
    QCOMPARE(o.started["total_steps"].get<int64_t>(), int64_t(8));
    QCOMPARE(o.summary["total_steps"].get<int64_t>(), int64_t(8));
    QCOMPARE(o.summary["steps"].get<int64_t>(), int64_t(8));
    o = train({{"max_steps", 6}, {"epochs", 2}});
    QCOMPARE(o.started["total_steps"].get<int64_t>(), int64_t(6));
    QCOMPARE(o.summary["total_steps"].get<int64_t>(), int64_t(6));
  }

  // The summary says how much memory the activations took (the memory
  // plan's pool): fmnist-cnn at batch 32 keeps block1's convolution output
  // for its batch norm (32 channels × 28 × 28 f32 a sample, 3.2 MB a batch)
  // among others, so at least that was live at once, and the pool holds at
  // least what was live.
  void summaryCountsActivationMemory() {
    Outcome o = train({});
    const int64_t held = o.summary["activation_memory_bytes"].get<int64_t>();
    const int64_t live = o.summary["activation_peak_live_bytes"].get<int64_t>();
    QVERIFY2(live >= 32 * 32 * 28 * 28 * 4 && held >= live,
             qPrintable(QString("held %1 B, live %2 B").arg(held).arg(live)));
  }

  // The pool's steady state over a real loop (buffers.h): every step begins
  // with nothing alive, so the pool allocates in the first two steps (the
  // first pass's regions, then its block) and the end-of-run evaluation,
  // never again: a run twice as long allocates as often. A step that held a
  // transient across the step boundary would allocate every step (and under
  // CUDA graphs capture every step).
  void activationPoolAllocatesOnlyAtTheStart() {
    const Outcome six = train({}), twelve = train({{"max_steps", 12}});
    const int64_t a6 = six.summary["activation_allocations"].get<int64_t>();
    const int64_t a12 = twelve.summary["activation_allocations"].get<int64_t>();
    QVERIFY2(a6 > 0 && a12 == a6, qPrintable(QString("%1 and %2 allocations").arg(a6).arg(a12)));
  }

  // The device peaks probe (the layers view's roofline, once per machine)
  // copies 128 MiB into 128 more; on the CPU a run's peak memory is the
  // process's peak RSS, which counted those 256 MiB on the first run on a
  // machine (fmnist-cnn at batch 64 read 527 MiB where the same run with the
  // cache read ~300). The same run with and without the probe peaks alike,
  // and a peak from before the probe is kept.
  void peaksProbeIsNotTheRunsMemory() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString cache = dir.filePath("peaks.json");
    const QByteArray saved = qgetenv("TRAINBENCH_PEAKS_CACHE");
    qputenv("TRAINBENCH_PEAKS_CACHE", cache.toUtf8());
    (void)train({});  // probes, fills the cache and the loaders' data
    QVERIFY(QFile::exists(cache));
    reset_process_peak_rss();
    const int64_t cached = train({}).summary["peak_memory_bytes"].get<int64_t>();
    QVERIFY(QFile::remove(cache));
    reset_process_peak_rss();
    const int64_t probed = train({}).summary["peak_memory_bytes"].get<int64_t>();
    QVERIFY(QFile::exists(cache));  // it probed again
    if (saved.isNull()) qunsetenv("TRAINBENCH_PEAKS_CACHE");
    else qputenv("TRAINBENCH_PEAKS_CACHE", saved);
    QVERIFY2(probed < cached + (64 << 20),
             qPrintable(QString("peak %1 MiB with the probe, %2 without")
                            .arg(probed >> 20).arg(cached >> 20)));

    // A peak reached before a measurement of our own stays the peak. (Pages
    // of their own, touched then unmapped: a sanitizer's allocator would keep
    // freed heap memory resident.)
    auto touch_and_give_back = [](size_t bytes) {
      void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      QVERIFY(p != MAP_FAILED);
      std::memset(p, 1, bytes);
      munmap(p, bytes);
    };
    reset_process_peak_rss();
    touch_and_give_back(size_t(96) << 20);
    const int64_t before = process_peak_rss_bytes();
    QVERIFY(before >= process_rss_bytes() + (64 << 20));
    run_outside_peak_rss([&] { touch_and_give_back(size_t(160) << 20); });
    QVERIFY(process_peak_rss_bytes() >= before);
    QVERIFY(process_peak_rss_bytes() < before + (64 << 20));
  }

  void sameSeedIsBitIdentical() {
    Outcome a = train({}), b = train({});
    QCOMPARE(a.losses, b.losses);
    Outcome c = train({{"seed", 8}});
    QVERIFY(a.losses != c.losses);
  }

  void gradSetToNoneMatchesMemset() {
    // Writing the first gradient equals zeroing then adding (x + 0 == x exactly).
    QCOMPARE(train({{"grad_set_to_none", true}}).losses,
             train({{"grad_set_to_none", false}}).losses);
    QCOMPARE(train({{"grad_set_to_none", true}, {"accumulation_steps", 2}}).losses,
             train({{"grad_set_to_none", false}, {"accumulation_steps", 2}}).losses);
  }

  void workersGiveIdenticalTraining() {
    const auto a = train({{"workers", 0}}).losses;
    QCOMPARE(train({{"workers", 1}}).losses, a);
    QCOMPARE(train({{"workers", 3}}).losses, a);
  }

  void multiTensorOptimizerMatchesPerTensor() {
    for (const char* opt : {"sgd", "adamw", "rmsprop", "lars", "lamb"}) {
      json o = {{"optimizer", opt}, {"lr", std::string(opt) == "sgd" ? 0.05 : 0.001}};
      json on = o, off = o;
      on["optimizer_foreach"] = true, off["optimizer_foreach"] = false;
      QVERIFY2(train(on).losses == train(off).losses, opt);
    }
  }

  void accumulationEqualsOneBigBatch() {
    // Without batch norm (mlp) K micro-batches of B sum to the gradient of one batch
    // of K*B; only the summation order differs (tolerance 1e-5 relative on the loss).
    json big = {{"model", "mlp"}, {"batch_size", 64}, {"accumulation_steps", 1}};
    json acc = {{"model", "mlp"}, {"batch_size", 32}, {"accumulation_steps", 2}};
    const auto a = train(big).losses, b = train(acc).losses;
    QCOMPARE(a.size(), b.size());
    QVERIFY2(max_rel_diff(a, b) < 1e-5, qPrintable(QString::number(max_rel_diff(a, b))));
  }

  void clippingAboveTheNormChangesNothing() {
    const auto plain = train({}).losses;
    QCOMPARE(train({{"clip_grad_norm", 1e6}}).losses, plain);
    QVERIFY(train({{"clip_grad_norm", 1e-3}}).losses != plain);
  }

  // Tricks 8 and 22 are cuda-only: on the CPU they are reported not applied and
  // the run is the plain NCHW, unpadded one (same parameter count, same losses).
  void channelsLastAndPaddingOnTheCpuAreNotApplied() {
    const Outcome plain = train({{"max_steps", 2}});
    const Outcome o = train({{"max_steps", 2}, {"channels_last", true}, {"pad_channels_to", 8}});
    const json& tricks = o.started["tricks"];
    for (const char* key : {"channels_last", "pad_channels_to"}) {
      QCOMPARE(tricks[key]["applied"].get<bool>(), false);
      QCOMPARE(tricks[key]["reason"].get<std::string>(),
               std::string("not applicable on the cpu backend"));
    }
    QCOMPARE(o.warnings.size(), size_t(2));
    QCOMPARE(o.started["parameters"], plain.started["parameters"]);
    QCOMPARE(o.losses, plain.losses);
  }

  // cpu_layout: the blocked activations (nChw16c) train as NCHW does, within
  // the summation order of batch norm's sums and oneDNN's kernels (1e-4
  // relative on the loss over 6 steps); the run's environment says which
  // layout ran and why; auto follows the processor (blocked with oneDNN's
  // AVX-512 kernels), and channels_last's NHWC would win over it.
  void cpuLayoutBlockedTrainsAsNchw() {
    const Outcome nchw = train({{"cpu_layout", "nchw"}});
    const Outcome blocked = train({{"cpu_layout", "blocked"}});
    QCOMPARE(nchw.started["environment"]["activation_layout"].get<std::string>(),
             std::string("NCHW"));
    QCOMPARE(blocked.started["environment"]["activation_layout"].get<std::string>(),
             std::string("nChw16c"));
    QCOMPARE(blocked.started["environment"]["activation_layout_reason"].get<std::string>(),
             std::string("cpu_layout blocked"));
    QCOMPARE(blocked.losses.size(), nchw.losses.size());
    QVERIFY2(max_rel_diff(blocked.losses, nchw.losses) < 1e-4,
             qPrintable(QString::number(max_rel_diff(blocked.losses, nchw.losses))));
    QVERIFY(!blocked.losses.empty());
    const std::string paths = blocked.finished["kernel_paths"].dump();
    QVERIFY2(paths.find("nChw16c") != std::string::npos, paths.c_str());
    const Outcome a = train({{"cpu_layout", "auto"}, {"max_steps", 1}});
    QCOMPARE(a.started["environment"]["activation_layout"].get<std::string>(),
             std::string(onednn_blocks_of_16() ? "nChw16c" : "NCHW"));
  }

  void readBackEveryNStepsGivesTheSameMeans() {
    // sync_every_step off: the loss is read every log_every steps as the mean over them.
    const auto every = train({{"sync_every_step", true}}).losses;
    const auto sparse = train({{"sync_every_step", false}, {"log_every", 3}}).losses;
    QCOMPARE(sparse.size(), size_t(2));
    const double mean0 = (every[0] + every[1] + every[2]) / 3;
    QVERIFY(std::abs(sparse[0] - mean0) < 1e-9 * std::abs(mean0) + 1e-12);
  }

  void convBiasBeforeBnOffDropsTheBiases() {
    const int64_t with = train({{"max_steps", 1}}).started["parameters"];
    const int64_t without = train({{"max_steps", 1}, {"conv_bias_before_bn", false}}).started["parameters"];
    QCOMPARE(with - without, int64_t(32 + 64));  // fmnist-cnn's two convolutions
  }

  void gpuTricksOnTheCpuAreReportedNotApplied() {
    Outcome o = train({{"max_steps", 1}, {"pin_memory", true}, {"amp", "bf16"}});
    const json& tricks = o.started["tricks"];
    QCOMPARE(tricks["pin_memory"]["applied"].get<bool>(), false);
    QCOMPARE(tricks["pin_memory"]["reason"].get<std::string>(),
             std::string("not applicable on the cpu backend"));
    QCOMPARE(tricks["amp"]["applied"].get<bool>(), false);
    QCOMPARE(tricks["workers"]["applied"].get<bool>(), true);
    QCOMPARE(o.warnings.size(), size_t(2));  // one log line each, never silent
  }

  void anomalyCheckStopsOnNonFinite() {
    try {
      // Without batch norm, lr 100 overflows float32 within a few steps (seen: loss 2.3,
      // 7e3, 1e14, 3e27, then non-finite).
      train({{"model", "mlp"}, {"lr", 100}, {"weight_decay", 0}, {"anomaly_check", true},
             {"max_steps", 20}});
      QFAIL("expected an anomaly error");
    } catch (const Error& e) {
      QVERIFY2(QString(e.what()).contains("anomaly_check"), e.what());
    }
  }

  // The bench hook (bench/step_truth.cpp): one call before every step and one
  // after each epoch's last, so consecutive calls bracket exactly one step.
  void stepBoundaryHookBracketsEveryStep() {
    json cfg = {{"device", "cpu"}, {"dataset", "fashion-mnist"}, {"train_limit", 512},
                {"test_limit", 64}, {"max_steps", 20}, {"batch_size", 32}, {"seed", 7}};
    RunConfig c = RunConfig::from_json(validate_config(cfg, "test"));  // 16 steps an epoch
    EventBus bus;
    std::atomic<bool> stop{false};
    Trainer t(c, bus, stop);
    std::vector<int64_t> seen;
    t.set_step_boundary_hook([&](Backend&, int64_t next_step) { seen.push_back(next_step); });
    t.run(0);
    std::vector<int64_t> expected;
    for (int64_t s = 1; s <= 17; ++s) expected.push_back(s);  // epoch 1, then its end
    for (int64_t s = 17; s <= 21; ++s) expected.push_back(s);  // epoch 2 (4 steps), its end
    QCOMPARE(seen, expected);
  }

  // step_time_ms is the interval between consecutive step boundaries: what
  // the loop does between two steps (here a slow event sink: the step events
  // are published inside the loop) belongs to a step, evaluations and epoch
  // ends to none. The engine's times sum to the host clock between the
  // boundaries the bench hook sees, step by step and over the run, and the
  // breakdown's parts sum to each step, none larger than it.
  void stepTimesSumToTheLoopsWallTime() {
    struct SlowSink final : EventSink {
      std::vector<json> steps;
      void on_event(const json& e) override {
        if (e["type"] != "step") return;
        steps.push_back(e);
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    };
    json cfg = {{"device", "cpu"}, {"dataset", "synthetic"}, {"synthetic_shape", {1, 8, 8}},
                {"synthetic_size", 256}, {"test_limit", 64}, {"batch_size", 32},
                {"model", "mlp"}, {"epochs", 2}, {"eval_every_steps", 3}, {"seed", 7}};
    RunConfig c = RunConfig::from_json(validate_config(cfg, "test"));  // 8 steps an epoch
    EventBus bus;
    SlowSink sink;
    bus.add(&sink);
    std::atomic<bool> stop{false};
    Trainer t(c, bus, stop);
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    std::vector<std::pair<int64_t, double>> bounds;  // next step, ms since t0
    t.set_step_boundary_hook([&](Backend&, int64_t next_step) {
      bounds.push_back({next_step, std::chrono::duration<double, std::milli>(Clock::now() - t0).count()});
    });
    t.run(0);
    QCOMPARE(sink.steps.size(), size_t(16));
    double engine_sum = 0, outside_sum = 0;
    for (const json& e : sink.steps) {
      const int64_t step = e["step"];
      const json& m = e["metrics"];
      // The outside interval: the last boundary before the step, the next one after it.
      int begin = -1;
      for (int i = 0; i < int(bounds.size()); ++i)
        if (bounds[size_t(i)].first == step) begin = i;
      QVERIFY2(begin >= 0 && begin + 1 < int(bounds.size()) && bounds[size_t(begin + 1)].first == step + 1,
               qPrintable(QString("step %1 has no adjacent boundaries").arg(step)));
      const double outside = bounds[size_t(begin + 1)].second - bounds[size_t(begin)].second;
      const double engine = m["step_time_ms"].get<double>();
      QVERIFY2(std::abs(engine - outside) <= 0.2 + 0.02 * outside,
               qPrintable(QString("step %1: engine %2 ms, outside %3 ms").arg(step).arg(engine).arg(outside)));
      engine_sum += engine, outside_sum += outside;
      double parts = 0;
      for (const char* k : {"data_wait_ms", "forward_ms", "backward_ms", "optimizer_ms", "step_end_ms", "other_ms"}) {
        QVERIFY2(m.contains(k), k);
        const double v = m[k].get<double>();
        QVERIFY2(v >= 0 && v <= engine, qPrintable(QString("step %1: %2 = %3 ms of a %4 ms step").arg(step).arg(k).arg(v).arg(engine)));
        parts += v;
      }
      QVERIFY2(std::abs(parts - engine) <= 1e-9 * engine,
               qPrintable(QString("step %1: parts %2 ms, step %3 ms").arg(step).arg(parts).arg(engine)));
    }
    // Most step events are published inside a later step (each a 2 ms sleep).
    QVERIFY2(engine_sum >= 8 * 2.0, qPrintable(QString("engine %1 ms").arg(engine_sum)));
    QVERIFY2(std::abs(engine_sum - outside_sum) <= 0.01 * outside_sum,
             qPrintable(QString("engine %1 ms, outside %2 ms").arg(engine_sum).arg(outside_sum)));
  }

  void tooSmallDataSetIsAClearError() {
    try {
      train({{"train_limit", 10}, {"batch_size", 32}});
      QFAIL("expected an error");
    } catch (const Error& e) {
      QVERIFY2(QString(e.what()).contains("not enough for one step"), e.what());
    }
  }
};

QTEST_GUILESS_MAIN(TestTrainer)
#include "test_trainer.moc"
