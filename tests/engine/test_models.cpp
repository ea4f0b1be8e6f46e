// SPDX-License-Identifier: GPL-3.0-or-later
// Whole networks built from the op families' layers (engine/nn/models.h), on
// the CPU and, in GPU slots, on CUDA:
// - a small Fashion-MNIST-like network: fast f32 vs reference f32 through
//   Model (same seed, same weights): logits and every parameter gradient
//   within 1e-4 of the largest reference magnitude; buffers reused;
// - fuse_pointwise: fmnist-cnn, resnet18-cifar, resnet9 and mlp built with and
//   without fusion from one seed: same parameters, loss within 1e-6 relative,
//   logits, eval logits and each gradient within 1e-4 scaled; on CUDA the
//   gradient block within network_tolerance("fp32", 84, 4608) (strict fp32);
// - the trainer: a short synthetic CPU run with fuse_pointwise on and off gives
//   the same losses within 1e-5 relative, the trick reported as applied.
// Op-level checks are in tests/engine/test_op_*.cpp.
#include <QtTest>

#include <cmath>
#include <memory>
#include <random>
#include <string>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/linear.h"
#include "engine/nn/model.h"
#include "engine/nn/models.h"
#include "engine/nn/pooling.h"
#include "engine/ops/loss/loss.h"
#include "tests/engine/device_fixture.h"
#include "tests/engine/run_fixture.h"
#include "tests/engine/tensor_helpers.h"

using namespace tb;
using namespace tb::test;
using json = nlohmann::json;

namespace {

constexpr double kFastTol = 1e-4;  // fast f32 vs reference f32

// ---------------------------------------------------------------- whole models
struct ModelRun {
  std::unique_ptr<Model> model;
  double loss = 0.0;
  Tensor logits, eval_logits, grads, params, buffers;
};

ModelRun run_model(Backend& be, const std::string& name, const Shape& in, bool fuse, int64_t batch,
                   uint64_t seed) {
  ModelOptions mo;
  mo.fuse_pointwise = fuse;
  ModelRun r;
  r.model = make_model(name, in, 10, mo);
  r.model->build(be, seed, DType::F32, Layout::NCHW);
  r.params = to_host_nchw(be, r.model->param_block());
  Shape xs{batch};
  xs.insert(xs.end(), in.begin(), in.end());
  // Made on the host, then copied to the backend's device (a no-op copy on the CPU).
  const Tensor x = to_device(be, random_tensor(xs, seed + 100, -1.0, 1.0));
  Tensor host_labels = Tensor::empty({batch}, DType::I32);
  for (int64_t n = 0; n < batch; ++n) host_labels.data_as<int32_t>()[n] = int32_t((7 * n + 3) % 10);
  const Tensor labels = to_device(be, host_labels);
  Context ctx{be};
  ctx.training = true;
  ctx.accumulate_grads = false;
  Tensor logits = r.model->forward(ctx, x);
  r.logits = to_host_nchw(be, logits);
  Tensor dlogits = be.empty(logits.shape(), DType::F32);
  Tensor stats = be.empty({2}, DType::F64);
  be.fill(stats, 0.0);
  loss::softmax_cross_entropy(be, logits, labels, 0.0f, 1.0f, dlogits, stats);
  r.loss = to_host_nchw(be, stats).data_as<double>()[0] / double(batch);
  r.model->backward(ctx, dlogits);
  r.grads = to_host_nchw(be, r.model->grad_block());
  // An eval forward with the running statistics this step left behind.
  ctx.training = false;
  r.eval_logits = to_host_nchw(be, r.model->forward(ctx, x));
  return r;
}

}  // namespace

class TestModels : public QObject {
  Q_OBJECT

 private slots:
  // Models are registered once (engine/nn/models.cpp): the settings table's
  // `model` choices and labels and the schema's "models" are the registry's,
  // and every registered model builds on the input it is made for and checks
  // the inputs it cannot take.
  void theRegistryIsTheOneListOfModels() {
    const ConfigKey* key = find_config_key("model");
    QVERIFY(key);
    QCOMPARE(key->choices, json(model_names()));
    const json schema = config_schema_json();
    QCOMPARE(schema["models"].size(), model_registry().size());
    for (size_t i = 0; i < model_registry().size(); ++i) {
      const ModelDef& m = model_registry()[i];
      QCOMPARE(key->choice_labels.at(m.name).get<std::string>(), m.label);
      QCOMPARE(schema["models"][i]["name"].get<std::string>(), m.name);
      QCOMPARE(schema["models"][i]["input_shape"], json(m.input_shape));
      QCOMPARE(find_model(m.name), &m);
      const std::unique_ptr<Model> built = make_model(m.name, m.input_shape, 10);
      QCOMPARE(built->input_shape(), m.input_shape);
      if (m.min_image_size > 0) {
        const int64_t small = m.min_image_size - 1;
        QVERIFY_THROWS_EXCEPTION(Error, make_model(m.name, {m.input_shape[0], small, small}, 10));
        QVERIFY_THROWS_EXCEPTION(Error, make_model(m.name, {m.input_shape[0] * 16}, 10));
      }
    }
    QVERIFY(!find_model("resnet50"));
    try {
      make_model("resnet50", {3, 32, 32}, 10);
      QFAIL("an unknown model was built");
    } catch (const Error& e) {
      QCOMPARE(std::string(e.what()),
               std::string("unknown model 'resnet50' (expected fmnist-cnn, resnet18-cifar, resnet9 or mlp)"));
    }
  }

  // ---------------------------------------------------------------- fast vs reference


  // A small Fashion-MNIST-like network from these layers: fast f32 vs reference f32
  // through Model (same seed, same weights), logits and every parameter gradient.
  void model_fast_matches_reference() {
    auto make = [] {
      auto m = std::make_unique<Model>("cnn", Shape{1, 12, 12}, 10);
      m->emplace<Conv2d>("conv1", 4, 3, 1, 1);
      m->emplace<MaxPool2d>("pool1", 2, 2);
      m->emplace<Conv2d>("conv2", 6, 3, 1, 1, false);
      m->emplace<AvgPool2d>("pool2", 2, 2);
      m->emplace<Flatten>("flatten");
      m->emplace<Linear>("fc", 10);
      return m;
    };
    CpuBackend &fast = cpu_fast(), &ref = cpu_reference();
    auto mf = make(), mr = make();
    mf->build(fast, 5);
    mr->build(ref, 5);
    QCOMPARE(mf->num_params(), int64_t(4 * 9 + 4 + 6 * 4 * 9 + 10 * 6 * 3 * 3 + 10));
    QCOMPARE(mf->params()[0].name, std::string("conv1.weight"));
    QCOMPARE(mf->params()[4].name, std::string("fc.bias"));  // conv2 has no bias
    QVERIFY(!mf->params()[4].weight_decay);
    std::mt19937_64 rng(25);
    Tensor x = random_tensor({5, 1, 12, 12}, DType::F32, rng);
    Tensor dlogits = random_tensor({5, 10}, DType::F32, rng);
    Context cf{fast}, cr{ref};
    Tensor yf = mf->forward(cf, x), yr = mr->forward(cr, x);
    CHECK_BELOW(scaled_diff(yr, yf), kFastTol);
    mf->backward(cf, dlogits);
    mr->backward(cr, dlogits);
    CHECK_BELOW(scaled_diff(mr->grad_block(), mf->grad_block()), kFastTol);
    // Steady state: the second pass makes the pool's block (buffers.h), the
    // third nothing.
    yf = Tensor{};
    mf->forward(cf, x);
    mf->backward(cf, dlogits);
    const int64_t made = cf.transients->allocations();
    mf->forward(cf, x);
    mf->backward(cf, dlogits);
    QCOMPARE(cf.transients->allocations(), made);
  }

  // ---------------------------------------------------------------- fused vs unfused


  void model_fused_matches_unfused_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<int>("channels");
    QTest::addColumn<int>("size");
    QTest::addColumn<int>("batch");
    QTest::newRow("fmnist-cnn 1x16x16") << "fmnist-cnn" << 1 << 16 << 6;
    QTest::newRow("resnet18-cifar 3x8x8") << "resnet18-cifar" << 3 << 8 << 4;
    QTest::newRow("resnet9 3x8x8") << "resnet9" << 3 << 8 << 4;
    QTest::newRow("mlp 1x8x8") << "mlp" << 1 << 8 << 6;
  }


  void modelFusedMatchesUnfused_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<int>("channels");
    QTest::addColumn<int>("size");
    QTest::addColumn<int>("batch");
    QTest::newRow("fmnist-cnn 1x16x16") << "fmnist-cnn" << 1 << 16 << 6;
    QTest::newRow("resnet18-cifar 3x8x8") << "resnet18-cifar" << 3 << 8 << 4;
    QTest::newRow("resnet9 3x8x8") << "resnet9" << 3 << 8 << 4;
    QTest::newRow("mlp 1x8x8") << "mlp" << 1 << 8 << 6;
  }
  // Same seed, fused vs unfused: the same parameter names, shapes and initial
  // values (bitwise), buffer names; loss within 1e-6 relative; every gradient
  // tensor, the logits and the eval logits (running statistics) within 1e-4
  // scaled. The fused layers compute the same arithmetic except for where
  // Linear adds its bias, so the observed differences are rounding-level.
  void model_fused_matches_unfused() {
    QFETCH(QString, model);
    QFETCH(int, channels);
    QFETCH(int, size);
    QFETCH(int, batch);
    CpuBackend& be = cpu_fast();
    const Shape in{channels, size, size};
    const ModelRun u = run_model(be, model.toStdString(), in, false, batch, 77);
    const ModelRun f = run_model(be, model.toStdString(), in, true, batch, 77);
    QCOMPARE(f.model->params().size(), u.model->params().size());
    for (size_t i = 0; i < u.model->params().size(); ++i) {
      QCOMPARE(QString::fromStdString(f.model->params()[i].name),
               QString::fromStdString(u.model->params()[i].name));
      QVERIFY(f.model->params()[i].value.shape() == u.model->params()[i].value.shape());
    }
    QCOMPARE(f.model->buffers().size(), u.model->buffers().size());
    for (size_t i = 0; i < u.model->buffers().size(); ++i)
      QCOMPARE(QString::fromStdString(f.model->buffers()[i].name),
               QString::fromStdString(u.model->buffers()[i].name));
    QVERIFY2(bitwise_equal(u.params, f.params), "initial parameters differ");
    // Fusion must change the layer list, or this test compares a model with itself.
    QVERIFY(f.model->layers().size() < u.model->layers().size());
    QVERIFY(std::isfinite(u.loss) && u.loss > 0.0);
    const double loss_rel = std::abs(u.loss - f.loss) / u.loss;
    QVERIFY2(loss_rel <= 1e-6, qPrintable(QString("loss %1 vs %2").arg(u.loss).arg(f.loss)));
    EXPECT_SCALED(u.logits, f.logits, 1e-4, "logits");
    EXPECT_SCALED(u.eval_logits, f.eval_logits, 1e-4, "eval logits");
    // Each gradient tensor within 1e-4 of its own largest |value|, plus 1e-6 of
    // the whole block's: a conv bias in front of BN has a gradient that is
    // rounding noise around zero, which must not be judged against itself.
    double block_max = 0.0;
    for (int64_t i = 0; i < u.grads.numel(); ++i)
      block_max = std::max(block_max, std::abs(double(u.grads.data_as<float>()[i])));
    QVERIFY(block_max > 0.0);
    double worst = 0.0;  // max |diff| / allowed, over every gradient element
    std::string worst_name;
    for (size_t i = 0; i < u.model->params().size(); ++i) {
      const auto& pu = u.model->params()[i];
      const int64_t off = pu.grad.data_as<float>() - u.model->grad_block().data_as<float>();
      const float* gu = u.grads.data_as<float>() + off;
      const float* gf = f.grads.data_as<float>() + off;
      double tmax = 0.0;
      for (int64_t j = 0; j < pu.grad.numel(); ++j) tmax = std::max(tmax, std::abs(double(gu[j])));
      const double allowed = 1e-4 * tmax + 1e-6 * block_max;
      for (int64_t j = 0; j < pu.grad.numel(); ++j) {
        const double e = std::abs(double(gu[j]) - double(gf[j])) / allowed;
        if (!(e <= worst)) worst = e, worst_name = pu.name;
      }
    }
    QVERIFY2(worst <= 1.0, qPrintable(QString("gradient %1: difference %2 x the allowed")
                                          .arg(QString::fromStdString(worst_name))
                                          .arg(worst)));
    // The fused model must really contain fused layers.
    bool has_fused = false;
    for (const auto& l : f.model->layers()) {
      const std::string k = l->kind();
      has_fused = has_fused || k == "batchnorm_relu" || k == "linear_relu" || k == "linear_gelu";
    }
    QVERIFY(has_fused);
    qInfo("%s: loss %.9g vs %.9g, worst gradient difference %.3g x the allowed (%s)",
          qPrintable(model), u.loss, f.loss, worst, worst_name.c_str());
  }

  // ---------------------------------------------------------------- trainer


  // A short CPU run on synthetic data with fuse_pointwise on and off: the same
  // losses within 1e-5 relative per step, and the trick reported as applied.
  void trainer_fused_matches_unfused() {
    for (const char* model : {"fmnist-cnn", "mlp"}) {
      std::vector<double> losses[2];
      for (int fuse = 0; fuse < 2; ++fuse) {
        json cfg = {{"device", "cpu"},
                    {"dataset", "synthetic"},
                    {"synthetic_shape", {1, 12, 12}},
                    {"synthetic_size", 96},
                    {"test_limit", 32},
                    {"max_steps", 5},
                    {"batch_size", 16},
                    {"model", model},
                    {"seed", 3},
                    {"lr", 0.05},
                    {"fuse_pointwise", fuse == 1}};
        const Recorder rec = run_trainer(cfg);
        for (const json& s : rec.of("step"))
          if (s["metrics"].contains("loss")) losses[fuse].push_back(s["metrics"]["loss"].get<double>());
        const json st = rec.of("run_started").at(0)["tricks"]["fuse_pointwise"];
        QCOMPARE(st["applied"].get<bool>(), true);
        QCOMPARE(st["requested"].get<bool>(), fuse == 1);
      }
      QCOMPARE(losses[1].size(), size_t(5));
      QCOMPARE(losses[0].size(), losses[1].size());
      for (size_t i = 0; i < losses[0].size(); ++i)
        QVERIFY2(std::abs(losses[0][i] - losses[1][i]) <= 1e-5 * std::abs(losses[0][i]),
                 qPrintable(QString("%1 step %2: unfused %3 fused %4")
                                .arg(model)
                                .arg(i)
                                .arg(losses[0][i], 0, 'g', 10)
                                .arg(losses[1][i], 0, 'g', 10)));
      QVERIFY(losses[0].front() != losses[0].back());  // it trained
    }
  }


  void cuda_model_fused_matches_unfused() {
    NEED_GPU();
    TB_GPU_TRY
    const Shape in{3, 8, 8};
    const ModelRun u = run_model(cuda_backend(), "resnet18-cifar", in, false, 4, 81);
    const ModelRun f = run_model(cuda_backend(), "resnet18-cifar", in, true, 4, 81);
    QVERIFY(bitwise_equal(u.params, f.params));
    QVERIFY2(std::abs(u.loss - f.loss) <= 1e-5 * u.loss,
             qPrintable(QString("loss %1 vs %2").arg(u.loss).arg(f.loss)));
    // Both strict fp32: ResNet-18's 84 weight/BN passes, longest reduction 512·3·3.
    const double tol = tb::test::network_tolerance("fp32", 84, 4608);
    tb::test::report_tolerance("fp32", scaled_diff(u.grads, f.grads), tol,
                               "resnet18 fused vs unfused gradient block");
    EXPECT_SCALED(u.grads, f.grads, tol, "gradient block");
    TB_GPU_CATCH
  }
};

QTEST_GUILESS_MAIN(TestModels)
#include "test_models.moc"
