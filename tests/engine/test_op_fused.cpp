// SPDX-License-Identifier: GPL-3.0-or-later
// Batch norm's epilogue (fuse_pointwise): residual add + ReLU, the batchnorm_*
// ops' Epilogue argument, and BatchNorm2d with the ReLU epilogue, against
// their unfused definition on every backend and layout. (Batch norm's plain
// op family is test_op_batchnorm, in engine/ops/batchnorm/; linear's
// epilogue is test_op_linear's linear_act_* slots, in engine/ops/linear/;
// these slots keep their suite and names for scripts/gpu-check.sh.)
//
// 1. Gradients against central finite differences, f64 on the reference
//    backend (whose fused ops are the unfused reference ops composed): BatchNorm2d
//    with and without residual, ReLU on and off, train and eval.
// 2. Typed slots over targets (backend x layout), fresh random inputs (never
//    zeros), every output compared relative to the reference tensor's largest
//    magnitude ("scaled"):
//    - bn_act_matches_reference: the fused op on the target vs the fused CPU
//      reference (f32 reference kernels: double two-pass statistics): 1e-5;
//    - bn_act_matches_unfused: fused vs unfused on the same target (the same
//      arithmetic in the same order): 1e-6, and how many combinations agree
//      bit for bit is reported;
// 3. Bad arguments refused. Whole models with and without fusion, and the
//    trainer, are in test_models.
// GPU rows QSKIP with the reason where there is no device.
#include <QtTest>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/nn/batchnorm2d.h"
#include "engine/nn/model.h"
#include "engine/ops/batchnorm/batchnorm.h"
#include "engine/ops/pointwise/pointwise.h"
#include "tests/engine/device_fixture.h"
#include "tests/engine/gradcheck.h"
#include "tests/engine/tensor_helpers.h"

using namespace tb;
using namespace tb::test;

namespace {

// ---------------------------------------------------------------- gradient check
// BatchNorm2d with an epilogue and an optional residual input r:
// L = Σ g·layer(x, r). Each
// analytic partial (dx, dr, dγ, dβ) against the central difference, f64 on the
// reference backend (whose fused ops are the unfused reference ops composed).
test::GradCheckResult gradcheck_bn_act(bool relu, bool residual, bool training, uint64_t seed) {
  const Shape shape{4, 3, 3, 2};
  const double h = 1e-6;
  CpuBackend be(BackendOptions{.reference = true});
  Model model("gradcheck", {3, 3, 2}, 0);
  auto& layer = model.emplace<BatchNorm2d>("bn", relu ? Activation::ReLU : Activation::None);
  model.build(be, seed, DType::F64);
  // Non-trivial affine parameters and running statistics (eval mode uses them).
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> pd(0.5, 1.5);
  for (const auto& p : model.params())
    for (int64_t i = 0; i < p.value.numel(); ++i) p.value.data_as<double>()[i] = pd(rng) - 0.3;
  for (const auto& b : model.buffers())
    for (int64_t i = 0; i < b.value.numel(); ++i) b.value.data_as<double>()[i] = pd(rng);
  Context ctx{be};
  ctx.training = training;
  ctx.dtype = DType::F64;

  Tensor x = random_tensor(shape, seed + 1, -1.0, 1.0, DType::F64);
  Tensor r = residual ? random_tensor(shape, seed + 2, -1.0, 1.0, DType::F64) : Tensor{};
  Tensor g = random_tensor(shape, seed + 3, -1.0, 1.0, DType::F64);
  auto loss = [&]() {
    Tensor y = layer.forward_residual(ctx, x, r);
    double s = 0.0;
    for (int64_t i = 0; i < y.numel(); ++i) s += y.data_as<double>()[i] * g.data_as<double>()[i];
    return s;
  };
  layer.forward_residual(ctx, x, r);
  Tensor dres;
  Tensor dx = clone(layer.backward_residual(ctx, g, true, residual ? &dres : nullptr));
  if (residual) dres = clone(dres);
  Tensor grads = clone(model.grad_block());

  test::GradCheckResult out;
  auto check_input = [&](Tensor& in, const Tensor& analytic, const char* what) {
    for (int64_t i = 0; i < in.numel(); ++i) {
      double& v = in.data_as<double>()[i];
      const double saved = v;
      v = saved + h;
      const double lp = loss();
      v = saved - h;
      const double lm = loss();
      v = saved;
      const double e = test::rel_error(analytic.data_as<double>()[i], (lp - lm) / (2 * h));
      if (e > out.max_rel_error_dx) {
        out.max_rel_error_dx = e;
        out.worst = std::string(what) + "[" + std::to_string(i) + "]";
      }
    }
  };
  check_input(x, dx, "dx");
  if (residual) check_input(r, dres, "dresidual");
  double* block = model.param_block().data_as<double>();
  for (int64_t i = 0; i < model.param_block().numel(); ++i) {
    const double saved = block[i];
    block[i] = saved + h;
    const double lp = loss();
    block[i] = saved - h;
    const double lm = loss();
    block[i] = saved;
    const double e = test::rel_error(grads.data_as<double>()[i], (lp - lm) / (2 * h));
    if (e > out.max_rel_error_params) {
      out.max_rel_error_params = e;
      out.worst = "param[" + std::to_string(i) + "]";
    }
  }
  return out;
}

// ---------------------------------------------------------------- unfused compositions
struct BnOut {
  Tensor y, rmean, rvar, smean, sinvstd, dx, dres, dgamma, dbeta;
};

// Random problem: x, r, dy (N, C, H, W) and per-channel vectors, f32 on the host.
struct BnCase {
  Tensor x, r, dy, gamma, beta, rmean, rvar;
  explicit BnCase(const Shape& s, uint64_t seed) {
    const int64_t C = s[1];
    x = random_tensor(s, seed, -2.0, 3.0);
    r = random_tensor(s, seed + 1);
    dy = random_tensor(s, seed + 2);
    gamma = random_tensor({C}, seed + 3, 0.5, 1.5);
    beta = random_tensor({C}, seed + 4, -0.5, 0.5);
    rmean = random_tensor({C}, seed + 5, -0.3, 0.3);
    rvar = random_tensor({C}, seed + 6, 0.5, 2.0);
  }
};

// The unfused ops, in the order the unfused layers run them (BatchNorm2d,
// ResidualBlock's add, ReLU): forward, then backward with dz = relu'(dy).
// Eval backward only covers the parameter half (as BatchNorm2d's does).
BnOut run_unfused(Backend& be, const BnCase& k, bool relu, bool residual, bool training,
                  Layout layout = Layout::NCHW) {
  auto dev = [&](const Tensor& h) {
    Tensor d = be.empty(h.shape(), h.dtype(), h.rank() == 4 ? layout : Layout::NCHW);
    be.copy(h, d);
    return d;
  };
  Tensor x = dev(k.x), r = dev(k.r), dy = dev(k.dy), gamma = dev(k.gamma), beta = dev(k.beta);
  BnOut o;
  o.rmean = dev(k.rmean), o.rvar = dev(k.rvar);
  const int64_t C = k.x.c();
  o.smean = be.empty({C}, DType::F32), o.sinvstd = be.empty({C}, DType::F32);
  o.y = be.empty(k.x.shape(), DType::F32, layout);
  if (training)
    batchnorm::forward_train(be, x, gamma, beta, o.rmean, o.rvar, 0.1f, 1e-5f, o.y, o.smean,
                               o.sinvstd);
  else
    batchnorm::forward_eval(be, x, gamma, beta, o.rmean, o.rvar, 1e-5f, o.y);
  if (residual) pointwise::add(be, o.y, r, o.y);
  if (relu) pointwise::relu_forward(be, o.y, o.y);
  if (!training) return o;
  Tensor dz = be.empty(k.x.shape(), DType::F32, layout);
  if (relu)
    pointwise::relu_backward(be, o.y, dy, dz);
  else
    be.copy(dy, dz);
  o.dres = dz;
  o.dx = be.empty(k.x.shape(), DType::F32, layout);
  o.dgamma = be.empty({C}, DType::F32), o.dbeta = be.empty({C}, DType::F32);
  batchnorm::backward(be, x, dz, gamma, o.smean, o.sinvstd, o.dx, o.dgamma, o.dbeta, false);
  return o;
}

BnOut run_fused(Backend& be, const BnCase& k, bool relu, bool residual, bool training,
                Layout layout = Layout::NCHW) {
  auto dev = [&](const Tensor& h) {
    Tensor d = be.empty(h.shape(), h.dtype(), h.rank() == 4 ? layout : Layout::NCHW);
    be.copy(h, d);
    return d;
  };
  Tensor x = dev(k.x), dy = dev(k.dy), gamma = dev(k.gamma), beta = dev(k.beta);
  Tensor r = residual ? dev(k.r) : Tensor{};
  BnOut o;
  o.rmean = dev(k.rmean), o.rvar = dev(k.rvar);
  const int64_t C = k.x.c();
  o.smean = be.empty({C}, DType::F32), o.sinvstd = be.empty({C}, DType::F32);
  o.y = be.empty(k.x.shape(), DType::F32, layout);
  const Epilogue ep{relu ? Activation::ReLU : Activation::None, r};
  if (training)
    batchnorm::forward_train(be, x, gamma, beta, o.rmean, o.rvar, 0.1f, 1e-5f, o.y, o.smean,
                               o.sinvstd, ep);
  else
    batchnorm::forward_eval(be, x, gamma, beta, o.rmean, o.rvar, 1e-5f, o.y, ep);
  if (!training) return o;
  o.dres = be.empty(k.x.shape(), DType::F32, layout);
  o.dx = be.empty(k.x.shape(), DType::F32, layout);
  o.dgamma = be.empty({C}, DType::F32), o.dbeta = be.empty({C}, DType::F32);
  batchnorm::backward(be, x, dy, gamma, o.smean, o.sinvstd, o.dx, o.dgamma, o.dbeta, false,
                        EpilogueGrad{ep.act, o.y, o.dres});
  return o;
}


// Compares every output of two runs (host copies), each within tol (scaled).
// Returns "" or the first failure; *bitwise says whether all were the same bits.
std::string compare_bn(Backend& be_a, const BnOut& a, Backend& be_b, const BnOut& b, double tol,
                       bool training, bool* bitwise = nullptr) {
  std::vector<std::pair<const char*, std::pair<Tensor, Tensor>>> pairs = {
      {"y", {a.y, b.y}}, {"running_mean", {a.rmean, b.rmean}}, {"running_var", {a.rvar, b.rvar}}};
  if (training) {
    pairs.push_back({"save_mean", {a.smean, b.smean}});
    pairs.push_back({"save_invstd", {a.sinvstd, b.sinvstd}});
    pairs.push_back({"dx", {a.dx, b.dx}});
    pairs.push_back({"dresidual", {a.dres, b.dres}});
    pairs.push_back({"dgamma", {a.dgamma, b.dgamma}});
    pairs.push_back({"dbeta", {a.dbeta, b.dbeta}});
  }
  bool same = true;
  for (auto& [what, p] : pairs) {
    Tensor ha = to_host_nchw(be_a, p.first), hb = to_host_nchw(be_b, p.second);
    same = same && bitwise_equal(ha, hb);
    const double e = scaled_diff(ha, hb);
    if (!(e <= tol))
      return std::string(what) + ": scaled difference " + std::to_string(e) + " > " +
             std::to_string(tol);
  }
  if (bitwise) *bitwise = same;
  return "";
}

}  // namespace

class TestOpFused : public QObject {
  Q_OBJECT

 private slots:
  // ---------------------------------------------------------------- gradients (f64)


  void bn_act_gradcheck_data() {
    QTest::addColumn<bool>("relu");
    QTest::addColumn<bool>("residual");
    QTest::addColumn<bool>("training");
    for (bool training : {true, false})
      for (bool residual : {false, true})
        for (bool relu : {true, false})
          QTest::newRow(qPrintable(QString("%1 %2 %3")
                                       .arg(training ? "train" : "eval")
                                       .arg(residual ? "residual" : "no-residual")
                                       .arg(relu ? "relu" : "identity")))
              << relu << residual << training;
  }


  void bnActGradcheck_data() {
    QTest::addColumn<bool>("relu");
    QTest::addColumn<bool>("residual");
    QTest::addColumn<bool>("training");
    for (bool training : {true, false})
      for (bool residual : {false, true})
        for (bool relu : {true, false})
          QTest::newRow(qPrintable(QString("%1 %2 %3")
                                       .arg(training ? "train" : "eval")
                                       .arg(residual ? "residual" : "no-residual")
                                       .arg(relu ? "relu" : "identity")))
              << relu << residual << training;
  }
  void bn_act_gradcheck() {
    QFETCH(bool, relu);
    QFETCH(bool, residual);
    QFETCH(bool, training);
    const auto r = gradcheck_bn_act(relu, residual, training, 21);
    QVERIFY2(r.max_rel_error_dx < 1e-5, qPrintable(QString::fromStdString(r.worst)));
    QVERIFY2(r.max_rel_error_params < 1e-5, qPrintable(QString::fromStdString(r.worst)));
  }


  // The fused layer through the shared single-input gradient check as well.
  void bn_act_layer_gradcheck() {
    auto r = test::gradcheck_layer(std::make_unique<BatchNorm2d>("bn", Activation::ReLU),
                                   {4, 3, 3, 2}, 7);
    QVERIFY2(r.max_rel_error_dx < 1e-5, qPrintable(QString::fromStdString(r.worst)));
    QVERIFY2(r.max_rel_error_params < 1e-5, qPrintable(QString::fromStdString(r.worst)));
  }


  // ---------------------------------------------------------------- every target

  void bn_act_matches_reference_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<Shape>("shape");
    QTest::addColumn<uint64_t>("seed");
    // The CPU backend's fused ops are NCHW only (it refuses NHWC, naming it).
    for (const Target& t : {Target{Impl::CpuFast, Layout::NCHW, DType::F32},
                            Target{Impl::Cuda, Layout::NCHW, DType::F32},
                            Target{Impl::Cuda, Layout::NHWC, DType::F32}})
      for (auto [s, seed] : {std::pair{Shape{6, 5, 7, 9}, uint64_t(43)},
                             std::pair{Shape{6, 20, 7, 9}, uint64_t(71)}})
        QTest::addRow("%s: %s", t.name().c_str(), shape_str(s).c_str()) << t << s << seed;
  }
  void bn_act_matches_reference() {
    FETCH_TARGET(t, be);
    QFETCH(Shape, shape);
    QFETCH(uint64_t, seed);
    TB_GPU_TRY
    CpuBackend& ref = cpu_reference();
    const BnCase k(shape, seed);
    for (bool training : {true, false})
      for (bool residual : {false, true})
        for (bool relu : {true, false}) {
          const std::string err =
              compare_bn(ref, run_fused(ref, k, relu, residual, training), be,
                         run_fused(be, k, relu, residual, training, t.layout), 1e-5, training);
          QVERIFY2(err.empty(), qPrintable(QString("%1 train %2 residual %3 relu %4: %5")
                                               .arg(QString::fromStdString(t.name()))
                                               .arg(training)
                                               .arg(residual)
                                               .arg(relu)
                                               .arg(QString::fromStdString(err))));
        }
    TB_GPU_CATCH
  }

  void bn_act_matches_unfused_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<Shape>("shape");
    QTest::addColumn<uint64_t>("seed");
    // 38400 elements: above the CPU's threading threshold; HW = 100 leaves a lane tail.
    for (const Target& t : {Target{Impl::CpuFast, Layout::NCHW, DType::F32},
                            Target{Impl::Cuda, Layout::NCHW, DType::F32},
                            Target{Impl::Cuda, Layout::NHWC, DType::F32}})
      for (auto [s, seed] : {std::pair{Shape{16, 24, 10, 10}, uint64_t(41)},
                             std::pair{Shape{8, 16, 10, 10}, uint64_t(73)}})
        QTest::addRow("%s: %s", t.name().c_str(), shape_str(s).c_str()) << t << s << seed;
  }
  void bn_act_matches_unfused() {
    FETCH_TARGET(t, be);
    QFETCH(Shape, shape);
    QFETCH(uint64_t, seed);
    TB_GPU_TRY
    const BnCase k(shape, seed);
    int identical = 0, total = 0;
    for (bool training : {true, false})
      for (bool residual : {false, true})
        for (bool relu : {true, false}) {
          const BnOut u = run_unfused(be, k, relu, residual, training, t.layout);
          const BnOut f = run_fused(be, k, relu, residual, training, t.layout);
          bool same = false;
          const std::string err = compare_bn(be, u, be, f, 1e-6, training, &same);
          QVERIFY2(err.empty(), qPrintable(QString("train %1 residual %2 relu %3: %4")
                                               .arg(training)
                                               .arg(residual)
                                               .arg(relu)
                                               .arg(QString::fromStdString(err))));
          identical += same, ++total;
        }
    qInfo("fused vs unfused %s: %d of %d combinations bit-identical", t.name().c_str(), identical,
          total);
    TB_GPU_CATCH
  }

  void fused_ops_reject_bad_arguments() {
    CpuBackend& be = cpu_fast();
    const BnCase k({2, 3, 4, 4}, 61);
    Tensor y = Tensor::empty({2, 3, 4, 4}, DType::F32), sm = Tensor::empty({3}, DType::F32);
    Tensor si = Tensor::empty({3}, DType::F32), rm = clone(k.rmean), rv = clone(k.rvar);
    Tensor bad_r = Tensor::empty({2, 3, 4, 5}, DType::F32);
    QVERIFY_THROWS_EXCEPTION(
        Error, batchnorm::forward_train(be, k.x, k.gamma, k.beta, rm, rv, 0.1f, 1e-5f, y, sm, si,
                                          Epilogue{Activation::ReLU, bad_r}));
    Tensor none;
    Tensor bad_g = Tensor::empty({4}, DType::F32);
    QVERIFY_THROWS_EXCEPTION(Error,
                             batchnorm::backward(be, k.x, k.dy, bad_g, sm, si, y, none, none,
                                                 false, EpilogueGrad{Activation::ReLU, y}));
  }
};

QTEST_GUILESS_MAIN(TestOpFused)
#include "test_op_fused.moc"
