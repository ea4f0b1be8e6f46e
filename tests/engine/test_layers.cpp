// SPDX-License-Identifier: GPL-3.0-or-later
// Per-layer profiles (docs/layers.md): the counted work of each op family on
// small shapes against hand counts, the engine's per-model FLOPs against
// bench_models.py's, a sampled step's rows adding up to its time, the
// `layers` and `export` output, and a store from before profiles.
#include <QtTest>

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/metrics/layer_profile.h"
#include "engine/metrics/layer_profiler.h"
#include "engine/nn/activations.h"
#include "engine/nn/batchnorm2d.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/layer_work.h"
#include "engine/nn/linear.h"
#include "engine/nn/model.h"
#include "engine/nn/models.h"
#include "engine/nn/pooling.h"
#include "engine/nn/residual.h"
#include "engine/store/run_store.h"
#include "tests/engine/run_fixture.h"

using json = nlohmann::json;
using namespace tb;

namespace {

struct Result {
  int code = -1;
  QString out, err;
};

Result engine(const QStringList& args, const QProcessEnvironment& env) {
  QProcess p;
  p.setProcessEnvironment(env);
  p.start(TRAINBENCH_ENGINE_BIN, args);
  if (!p.waitForFinished(300000)) {
    p.kill();
    p.waitForFinished();
  }
  return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1,
          QString::fromUtf8(p.readAllStandardOutput()), QString::fromUtf8(p.readAllStandardError())};
}

Work work_of(const Layer& l, LayerPass pass, int64_t batch, bool need_dx = true,
             DType matmul = DType::F32) {
  WorkQuery q;
  q.pass = pass, q.batch = batch, q.need_dx = need_dx, q.matmul = matmul;
  return layer_work(l, q);
}

#define CHECK_WORK(w, matrix, other, bytes_)                     \
  do {                                                           \
    const Work w_ = (w);                                         \
    QCOMPARE(w_.matrix_flops, double(matrix));                   \
    QCOMPARE(w_.other_flops, double(other));                     \
    QCOMPARE(w_.bytes, double(bytes_));                          \
  } while (0)

// fmnist-cnn for a few steps on synthetic data, a profile every other step.
json small_run_config(int64_t steps) {
  return {{"model", "fmnist-cnn"},      {"dataset", "synthetic"},  {"synthetic_shape", {1, 28, 28}},
          {"synthetic_size", 256},      {"test_limit", 32},        {"batch_size", 16},
          {"max_steps", steps},         {"measure_every", 2},      {"device", "cpu"}};
}

}  // namespace

class TestLayers : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  QProcessEnvironment env_ = QProcessEnvironment::systemEnvironment();

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    // The peaks probe's cache in the test's own folder (written once, read after).
    qputenv("TRAINBENCH_PEAKS_CACHE", dir_.filePath("peaks.json").toUtf8());
    env_.insert("TRAINBENCH_PEAKS_CACHE", dir_.filePath("peaks.json"));
  }

  // Hand counts on a 2x2x4x4 input (docs/layers.md's table, f32 = 4 bytes).
  void countsOnSmallShapes() {
    auto cpu = make_backend("cpu", BackendOptions{});
    Model m("small", {2, 4, 4}, 5);
    auto& conv = m.emplace<Conv2d>("conv", 3, 3, 1, 1, true);  // -> (N, 3, 4, 4)
    auto& bn = m.emplace<BatchNorm2d>("bn");
    auto& relu = m.emplace<ReLU>("relu");
    auto& block = m.emplace<ResidualBlock>("res", LayerList{}, LayerList{}, true);  // relu(x + x)
    auto& pool = m.emplace<MaxPool2d>("pool", 2, 2);  // -> (N, 3, 2, 2)
    auto& flat = m.emplace<Flatten>("flatten");       // -> (N, 12)
    auto& fc = m.emplace<Linear>("fc", 5);
    m.build(*cpu, 1);
    const int64_t N = 2;
    // conv: 96 outputs of 18-term dot products; x 64, w 54, bias 3, y 96 elements
    CHECK_WORK(work_of(conv, LayerPass::Forward, N), 2 * 96 * 18, 96, (64 + 54 + 3 + 96) * 4);
    // backward of a first layer: weight gradient only (dy, x read; dw, db written)
    CHECK_WORK(work_of(conv, LayerPass::Backward, N, false), 2 * 96 * 18, 96, (96 + 64 + 54 + 3) * 4);
    // with the input gradient: w read and dx written as well
    CHECK_WORK(work_of(conv, LayerPass::Backward, N, true), 4 * 96 * 18, 96,
               (96 + 64 + 54 + 3 + 54 + 64) * 4);
    // amp bf16: x and w cast (4 bytes read, 2 written) then read at 2 bytes
    CHECK_WORK(work_of(conv, LayerPass::Forward, N, true, DType::BF16), 2 * 96 * 18, 96,
               (64 + 54) * 6 + (64 + 54) * 2 + 3 * 4 + 96 * 4);
    // batch norm (training): 5 flops an element forward, 9 backward with dx;
    // x, y (+ dy, dx) and 8 (5) per-channel values
    CHECK_WORK(work_of(bn, LayerPass::Forward, N), 0, 96 * 5, 96 * 4 * 2 + 3 * 4 * 8);
    CHECK_WORK(work_of(bn, LayerPass::Backward, N), 0, 96 * 9, 96 * 4 * 3 + 3 * 4 * 5);
    CHECK_WORK(work_of(relu, LayerPass::Forward, N), 0, 96, 96 * 4 * 2);
    CHECK_WORK(work_of(relu, LayerPass::Backward, N), 0, 96, 96 * 4 * 3);
    // the block's own add and in-place ReLU; backward: the mask and dx's add
    CHECK_WORK(work_of(block, LayerPass::Forward, N), 0, 96 * 2, 96 * 4 * (3 + 2));
    CHECK_WORK(work_of(block, LayerPass::Backward, N), 0, 96 * 2, 96 * 4 * (3 + 3));
    // max pooling 2x2: 3 compares an output, an i32 argmax written; backward scatters
    CHECK_WORK(work_of(pool, LayerPass::Forward, N), 0, 24 * 3, 96 * 4 + 24 * 8);
    CHECK_WORK(work_of(pool, LayerPass::Backward, N), 0, 24, 24 * 8 + 96 * 4);
    CHECK_WORK(work_of(flat, LayerPass::Forward, N), 0, 0, 0);  // a view
    CHECK_WORK(work_of(fc, LayerPass::Forward, N), 2 * 10 * 12, 10, (24 + 60 + 5 + 10) * 4);
    CHECK_WORK(work_of(fc, LayerPass::Backward, N), 4 * 10 * 12, 10,
               (10 + 24 + 60 + 5 + 60 + 24) * 4);
    // Twice the batch, twice the activations' work (the weights' bytes stay).
    QCOMPARE(work_of(conv, LayerPass::Forward, 2 * N).matrix_flops, 2 * 2.0 * 96 * 18);

    // model_work walks the nested layers too, and the first layer has no dx.
    const auto rows = model_work(m, WorkQuery{.batch = N});
    QCOMPARE(rows.size(), size_t(7));
    QCOMPARE(QString::fromStdString(rows[0].name), QString("conv"));
    QCOMPARE(rows[0].backward.matrix_flops, 2.0 * 96 * 18);
  }

  void unknownKindIsRefused() {
    struct Odd final : Layer {
      Odd() : Layer("odd") {}
      std::string kind() const override { return "odd"; }
      Shape setup(const Shape& in, ParamRegistry&) override { return in; }
      Tensor forward(Context&, const Tensor& x) override { return x; }
      Tensor backward(Context&, const Tensor& dy, bool) override { return dy; }
    };
    auto cpu = make_backend("cpu", BackendOptions{});
    Model m("odd", {4}, 2);
    auto& odd = m.emplace<Odd>();
    m.emplace<Linear>("fc", 2);
    m.build(*cpu, 1);
    try {
      layer_work(odd, WorkQuery{});
      QFAIL("an unknown kind was counted");
    } catch (const Error& e) {
      QVERIFY2(QString(e.what()).contains("no work count for layer kind 'odd'"), e.what());
    }
  }

  // bench_models.py's FLOPs per sample before it read the engine (its PyTorch
  // hook count at 8683e25, also in the H200 run's gpu-vs-pytorch-resnet18.json):
  // the engine's count must give the same totals.
  void modelTotalsMatchBenchModels() {
    const Result r = engine({"work", "--json"}, env_);
    QVERIFY2(r.code == 0, qPrintable(r.err));
    const json work = json::parse(r.out.toStdString());
    const std::map<std::string, std::pair<double, double>> before = {
        {"fmnist-cnn", {8482304, 24995328}},
        {"resnet18-cifar", {1110845440, 3328997376}},
        {"resnet9", {758523904, 2272032768}}};
    for (const auto& [model, totals] : before) {
      QCOMPARE(work[model]["forward"].get<double>(), totals.first);
      QCOMPARE(work[model]["train"].get<double>(), totals.second);
    }
    QCOMPARE(work["resnet18-cifar"]["input_shape"], json({3, 32, 32}));
    const Result bad = engine({"work", "--model", "resnet50"}, env_);
    QCOMPARE(bad.code, 1);
    QVERIFY2(bad.err.contains("resnet50: no such model"), qPrintable(bad.err));
  }

  // A sampled step's rows add up to its time; the rows left out of every
  // scope ("unattributed") are under 2 % of it in the least disturbed of the
  // sampled steps (work left out of every scope shows in each step; a
  // preemption on a shared machine only adds to one: 0.099 of 3.86 ms once
  // in CI, 2026-11-28); every layer has its rows; the rows' counted work is
  // the model's at the run's batch.
  void attributionSumsToTheStep() {
    test::Recorder rec = test::run_trainer(small_run_config(7));
    const auto profiles = rec.of("layer_profile");
    QCOMPARE(profiles.size(), size_t(3));  // steps 3, 5, 7 (never step 1)
    std::map<int64_t, double> step_ms;
    for (const json& s : rec.of("step")) step_ms[s["step"]] = s["metrics"]["step_time_ms"];
    auto cpu = make_backend("cpu", BackendOptions{});
    auto model = make_model("fmnist-cnn", {1, 28, 28}, 10, ModelOptions{});
    model->build(*cpu, 0);
    double counted = 0;
    for (const LayerWorkRow& w : model_work(*model, WorkQuery{.batch = 16}))
      counted += w.forward.flops() + w.backward.flops();
    std::vector<int64_t> steps;
    double least_unattributed = 1.0;  // of the step
    QString least;
    for (const json& e : profiles) {
      const LayerProfileStep p = LayerProfileStep::from_json(e);
      steps.push_back(p.step);
      double sum = 0, unattributed = 0, flops = 0;
      std::set<std::string> seen;
      for (const LayerProfileRow& r : p.rows) {
        QVERIFY2(r.time_ms >= 0, r.layer.c_str());
        sum += r.time_ms;
        if (r.phase == "unattributed") unattributed = r.time_ms;
        if (!r.layer.empty()) seen.insert(r.layer + "/" + r.phase), flops += r.flops;
        else if (r.time_ms > 0) seen.insert(r.phase);
      }
      // the step's own parts come from the trainer's phases and boundaries
      for (const char* part : {"data_wait", "loss", "optimizer", "step_end"})
        QVERIFY2(seen.count(part), part);
      QVERIFY2(std::abs(sum - p.step_time_ms) < 1e-6 * p.step_time_ms, "rows != step");
      if (unattributed / p.step_time_ms < least_unattributed) {
        least_unattributed = unattributed / p.step_time_ms;
        least = QString("unattributed %1 of %2 ms").arg(unattributed).arg(p.step_time_ms);
      }
      // the profile's step is the step event's, boundary to boundary
      QVERIFY(std::abs(p.step_time_ms - step_ms.at(p.step)) <= 0.02 * step_ms.at(p.step));
      for (const auto& l : model->layers()) {
        QVERIFY2(seen.count(l->name() + "/forward"), l->name().c_str());
        QVERIFY2(seen.count(l->name() + "/backward"), l->name().c_str());
      }
      QCOMPARE(flops, counted);
    }
    QVERIFY2(least_unattributed <= 0.02, qPrintable(least));
    QCOMPARE(steps, (std::vector<int64_t>{3, 5, 7}));
    const json summary = rec.of("finished").at(0)["summary"];
    QCOMPARE(summary["layer_profile"]["sampled_steps"].get<int64_t>(), int64_t(3));
  }

  // Residual blocks: their inner layers are rows of their own, named by the
  // path, and the block keeps its own add and ReLU.
  void nestedLayersHaveTheirRows() {
    json c = small_run_config(3);
    c["model"] = "resnet9";
    c["synthetic_shape"] = {3, 32, 32};
    c["batch_size"] = 4;
    c["test_limit"] = 4;
    test::Recorder rec = test::run_trainer(c);
    const auto profiles = rec.of("layer_profile");
    QCOMPARE(profiles.size(), size_t(1));
    const LayerProfileStep p = LayerProfileStep::from_json(profiles[0]);
    std::map<std::string, std::string> kinds;
    for (const LayerProfileRow& r : p.rows) kinds[r.layer] = r.kind;
    QCOMPARE(QString::fromStdString(kinds["layer1.residual"]), QString("residual"));
    QCOMPARE(QString::fromStdString(kinds["layer1.residual.res1.bn"]), QString("batchnorm2d"));
    QCOMPARE(QString::fromStdString(kinds["layer3.residual.res2.conv"]), QString("conv2d"));
  }

  // The profiler's arithmetic on a clock the test moves (as a GPU's events
  // would read back): each interval goes to the innermost open scope, a
  // block's inner layer is named by its path, the rest is unattributed, and a
  // profile whose marks cannot be read yet waits for take(wait).
  void marksAttributeToTheInnermostScope() {
    struct FakeClock final : ScopeClock {
      double* now;
      bool* readable;
      std::vector<double> t;
      FakeClock(double* n, bool* r) : now(n), readable(r) {}
      void mark(size_t i) override {
        if (t.size() <= i) t.resize(i + 1);
        t[i] = *now;
      }
      bool ready(size_t) override { return *readable; }
      std::vector<double> intervals(size_t n) override {
        std::vector<double> out;
        for (size_t i = 0; i + 1 < n; ++i) out.push_back(t[i + 1] - t[i]);
        return out;
      }
    };
    auto cpu = make_backend("cpu", BackendOptions{});
    Model m("small", {3, 4, 4}, 2);
    LayerList inner;
    inner.push_back(std::make_unique<Conv2d>("inner", 3, 3, 1, 1, true));
    auto& block = m.emplace<ResidualBlock>("res", std::move(inner), LayerList{}, true);
    m.emplace<Flatten>("flatten");
    m.emplace<Linear>("fc", 2);
    m.build(*cpu, 1);
    const Layer& inner_conv = *block.children().at(0);
    double now = 0;
    bool readable = false;
    LayerProfiler p(2, WorkQuery{}, std::make_unique<FakeClock>(&now, &readable));
    p.begin_step(2);  // not sampled (3, 5, ...)
    p.enter(block, LayerPass::Forward, 2, true);
    p.exit();
    p.begin_step(3);  // t = 0
    now = 1, p.begin_phase(Phase::DataWait);
    now = 3, p.end_phase(Phase::DataWait);
    now = 4, p.begin_phase(Phase::Forward);
    now = 5, p.enter(block, LayerPass::Forward, 2, true);
    now = 6, p.enter(inner_conv, LayerPass::Forward, 2, true);
    now = 10, p.exit();
    now = 11, p.exit();
    now = 12, p.end_phase(Phase::Forward);
    now = 14, p.end_work();
    now = 17, p.close_step();
    QVERIFY(!p.take());  // not readable yet
    readable = true;
    const std::optional<LayerProfileStep> s = p.take();
    QVERIFY(s);
    QCOMPARE(s->step, int64_t(3));
    QCOMPARE(s->step_time_ms, 17.0);
    std::map<std::string, double> ms;
    for (const LayerProfileRow& r : s->rows) ms[r.phase + ":" + r.layer] = r.time_ms;
    QCOMPARE(ms["data_wait:"], 2.0);
    QCOMPARE(ms["loss:"], 2.0);            // 4-5 and 11-12
    QCOMPARE(ms["forward:res"], 2.0);      // 5-6 and 10-11: the block's own
    QCOMPARE(ms["forward:res.inner"], 4.0);
    QCOMPARE(ms["step_end:"], 3.0);
    QCOMPARE(ms["unattributed:"], 4.0);   // 0-1, 3-4, 12-14
    QCOMPARE(QString::fromStdString(s->rows.back().phase), QString("unattributed"));
    WorkQuery q;
    q.batch = 2;
    QCOMPARE(s->rows[size_t(std::find_if(s->rows.begin(), s->rows.end(),
                                          [](const LayerProfileRow& r) { return r.layer == "res.inner"; }) -
                             s->rows.begin())]
                 .flops,
             layer_work(inner_conv, q).flops());
    QVERIFY(!p.take());  // once
    QCOMPARE(p.sampled_steps(), int64_t(1));
  }

  void rooflineBound() {
    DevicePeaks peaks;
    peaks.flops_per_s = 100e9, peaks.bytes_per_s = 10e9;  // ridge: 10 FLOPs a byte
    LayerProfileRow memory{"bn", "batchnorm2d", "forward", 1.0, 1e6, 1e6};    // 1 FLOP/byte
    const RooflinePoint m = roofline(memory, peaks);
    QCOMPARE(m.bound, std::string("memory"));
    QCOMPARE(m.bytes_per_s, 1e9);
    QCOMPARE(m.roofline_pct, 10.0);  // 1 GB/s of 10
    LayerProfileRow compute{"conv", "conv2d", "forward", 1.0, 5e7, 1e6};  // 50 FLOPs/byte
    const RooflinePoint c = roofline(compute, peaks);
    QCOMPARE(c.bound, std::string("compute"));
    QCOMPARE(c.roofline_pct, 50.0);  // 50 GFLOP/s of 100
    const RooflinePoint none = roofline({"", "", "optimizer", 1.0}, peaks);
    QVERIFY(none.bound.empty() && std::isnan(none.roofline_pct));
  }

  // Compare: rows matched by layer and phase; a row only one run has (the
  // ReLU fuse_pointwise folds into the batch norm) is shown as such, in
  // place: B's own rows after the row B has before them.
  void compareMatchesByLayerAndPhase() {
    const LayerProfileStep a{21, 10.0, {{"", "", "data_wait", 1.0},
                                        {"block1.bn", "batchnorm2d", "forward", 2.0},
                                        {"block1.relu", "relu", "forward", 1.0},
                                        {"fc", "linear", "forward", 2.0},
                                        {"block1.bn", "batchnorm2d", "backward", 4.0}}};
    const LayerProfileStep b{21, 8.0, {{"", "", "data_wait", 1.02},
                                       {"block1.bn", "batchnorm_relu", "forward", 2.5},
                                       {"fc", "linear", "forward", 1.0},
                                       {"fc.gelu", "gelu", "forward", 0.5},
                                       {"block1.bn", "batchnorm_relu", "backward", 4.5}}};
    const std::vector<LayerComparisonRow> rows = compare_layer_profiles(a, b);
    QStringList order;
    for (const LayerComparisonRow& r : rows)
      order << QString::fromStdString(r.layer + ":" + r.phase + ":" + layer_change_name(r.change()));
    QCOMPARE(order, (QStringList{":data_wait:about the same", "block1.bn:forward:slower",
                                 "block1.relu:forward:only in A", "fc:forward:faster",
                                 "fc.gelu:forward:only in B", "block1.bn:backward:slower"}));
    QCOMPARE(rows[1].kind_a, std::string("batchnorm2d"));
    QCOMPARE(rows[1].kind_b, std::string("batchnorm_relu"));
    QCOMPARE(rows[1].ratio(), 1.25);
    QCOMPARE(rows[3].ratio(), 0.5);
    QCOMPARE(rows[2].time_a_ms, 1.0);
    QVERIFY(std::isnan(rows[2].time_b_ms) && std::isnan(rows[2].ratio()) && rows[2].kind_b.empty());
    QVERIFY(std::isnan(rows[4].time_a_ms) && rows[4].time_b_ms == 0.5 && rows[4].kind_a.empty());
    // A row only B has before every matched one goes first; nothing matched: all listed.
    const LayerProfileStep early{1, 1.0, {{"pad_channels", "pad_channels", "forward", 0.1},
                                          {"", "", "data_wait", 1.0}}};
    const std::vector<LayerComparisonRow> first = compare_layer_profiles(a, early);
    QCOMPARE(first.front().layer, std::string("pad_channels"));
    QCOMPARE(first.size(), a.rows.size() + 1);
    QCOMPARE(compare_layer_profiles(a, LayerProfileStep{}).size(), a.rows.size());
    QCOMPARE(compare_layer_profiles(LayerProfileStep{}, b).size(), b.rows.size());
    QVERIFY(compare_layer_profiles(LayerProfileStep{}, b)[0].change() == LayerChange::OnlyB);
  }

  // `layers` and `export` on a stored run; a run without a profile says why.
  void cliTableAndJson() {
    const QString db = dir_.filePath("cli.db");
    const QStringList common = {"--db", db, "--device", "cpu", "--dataset", "synthetic", "--set",
                                "synthetic_shape=[1,28,28]", "--set", "synthetic_size=256",
                                "--set", "test_limit=32", "--set", "batch_size=16", "--set",
                                "measure_every=2", "--quiet"};
    Result r = engine(QStringList{"run"} + common + QStringList{"--set", "max_steps=5"}, env_);
    QVERIFY2(r.code == 0, qPrintable(r.err));
    r = engine({"layers", "1", "--db", db, "--json"}, env_);
    QVERIFY2(r.code == 0, qPrintable(r.err));
    const json t = json::parse(r.out.toStdString());
    QCOMPARE(t["sampled_steps"], json({3, 5}));
    QVERIFY(t["attributed_share"].get<double>() >= 0.98);
    QVERIFY(t["peaks"]["flops_per_s"].get<double>() > 0);
    QVERIFY(t["peaks"]["bytes_per_s"].get<double>() > 0);
    // Which peak the compute roof is, and where it was measured.
    QCOMPARE(t["peaks"]["dtype"], json("f32"));
    QVERIFY2(t["peaks"]["device"].get<std::string>().find("threads") != std::string::npos,
             t["peaks"].dump().c_str());
    bool conv_row = false;
    for (const json& row : t["rows"])
      if (row["layer"] == "block2.conv" && row["phase"] == "backward") {
        conv_row = true;
        QVERIFY(row["flops_per_s"].get<double>() > 0);
        QVERIFY(row["bound"] == "compute" || row["bound"] == "memory");
        QVERIFY(row["share"].get<double>() > 0 && row["share"].get<double>() < 1);
      }
    QVERIFY(conv_row);
    // The probe ran once and is cached by the device's description.
    QVERIFY(QFileInfo::exists(dir_.filePath("peaks.json")));

    r = engine({"layers", "1", "--db", db}, env_);
    QVERIFY2(r.code == 0, qPrintable(r.err));
    for (const char* text : {"% roofline", "block1.bn", "batchnorm2d", "unattributed", "GFLOP/s f32, ",
                             " threads (probe: f32 sgemm"})
      QVERIFY2(r.out.contains(text), text);

    r = engine({"export", "1", "--db", db, "--format", "json"}, env_);
    QVERIFY2(r.code == 0, qPrintable(r.err));
    const json ex = json::parse(r.out.toStdString());
    QCOMPARE(ex["layer_profile"]["rows"].size(), t["rows"].size());
    QCOMPARE(ex["layer_profile"]["steps"].size(), size_t(2));

    // Two steps: none is sampled at measure_every 2 (steps 3, 5, ...).
    r = engine(QStringList{"run"} + common + QStringList{"--set", "max_steps=2"}, env_);
    QVERIFY2(r.code == 0, qPrintable(r.err));
    r = engine({"layers", "2", "--db", db}, env_);
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("run 2 has no per-layer profile: no step was sampled"), qPrintable(r.err));
    QVERIFY2(r.err.contains("measure_every 2") && r.err.contains("re-run"), qPrintable(r.err));
    r = engine({"export", "2", "--db", db, "--format", "json"}, env_);
    QVERIFY(json::parse(r.out.toStdString())["layer_profile"].contains("not_measured"));
  }

  // The store: rows round-trip (NaN work as NULL), a step written again
  // replaces its rows, deleting the run drops them; a v4 store opens
  // read-only without the tables and is migrated by a writer.
  void storeAndMigration() {
    const std::string path = dir_.filePath("store.db").toStdString();
    {
      RunStore store(path);
      const int64_t id = store.create_run(RunRecord{});
      LayerProfileStep s{5, 10.0, {{"fc", "linear", "forward", 4.0, 100, 200},
                                   {"", "", "optimizer", 6.0}}};
      store.append_layer_profile(id, s);
      s.rows[0].time_ms = 3.0;
      store.append_layer_profile(id, s);  // replaces step 5
      const auto back = store.layer_profile(id);
      QCOMPARE(back.size(), size_t(1));
      QCOMPARE(back[0].rows.size(), size_t(2));
      QCOMPARE(back[0].rows[0].time_ms, 3.0);
      QCOMPARE(back[0].rows[0].bytes, 200.0);
      QVERIFY(std::isnan(back[0].rows[1].flops));
      store.delete_run(id);
      QVERIFY(store.layer_profile(id).empty());
      QCOMPARE(QString::fromStdString(store.integrity_check()), QString("ok"));
    }
    // Back to version 4: as a store made before profiles.
    const std::string old = dir_.filePath("v4.db").toStdString();
    {
      RunStore store(old);
      store.create_run(RunRecord{});
    }
    sqlite3* raw = nullptr;
    QCOMPARE(sqlite3_open(old.c_str(), &raw), SQLITE_OK);
    QCOMPARE(sqlite3_exec(raw,
                          "DROP TABLE layer_profile_rows; DROP TABLE layer_profile_steps; "
                          "UPDATE schema_version SET version = 4",
                          nullptr, nullptr, nullptr),
             SQLITE_OK);
    sqlite3_close(raw);
    {
      RunStore reader(old, RunStore::Mode::ReadOnly);
      QCOMPARE(reader.schema_version(), 4);
      QVERIFY(reader.layer_profile(1).empty());
    }
    const Result r = engine({"layers", "1", "--db", QString::fromStdString(old)}, env_);
    QCOMPARE(r.code, 1);
    QVERIFY2(r.err.contains("run 1 has no per-layer profile"), qPrintable(r.err));
    RunStore writer(old);
    QCOMPARE(writer.schema_version(), RunStore::kSchemaVersion);
    writer.append_layer_profile(1, {21, 1.0, {{"", "", "unattributed", 1.0}}});
    QCOMPARE(writer.layer_profile(1).size(), size_t(1));
  }
};

QTEST_GUILESS_MAIN(TestLayers)
#include "test_layers.moc"
