// SPDX-License-Identifier: GPL-3.0-or-later
// The fused pointwise ops (fuse_pointwise): batch norm with its epilogue
// (residual add + ReLU, the batchnorm_* ops' Epilogue argument) and linear +
// ReLU/GELU (linear_act_*), and the layers (BatchNorm2d with the ReLU epilogue,
// LinearAct), against their unfused definition on every backend and layout.
// (Batch norm's plain op family is test_op_batchnorm, in engine/ops/batchnorm/;
// these slots keep their suite and names for scripts/gpu-check.sh.)
//
// 1. Gradients against central finite differences, f64 on the reference
//    backend (whose fused ops are the unfused reference ops composed): BatchNorm2d
//    with and without residual, ReLU on and off, train and eval; LinearAct.
// 2. Typed slots over targets (backend x layout), fresh random inputs (never
//    zeros), every output compared relative to the reference tensor's largest
//    magnitude ("scaled"):
//    - bn_act_matches_reference: the fused op on the target vs the fused CPU
//      reference (f32 reference kernels: double two-pass statistics): 1e-5;
//    - bn_act_matches_unfused: fused vs unfused on the same target (the same
//      arithmetic in the same order): 1e-6, and how many combinations agree
//      bit for bit is reported;
//    - linear_act_matches_reference: fused vs the fused reference (float sums
//      over K = 300 in another order): 1e-4; fused vs unfused on the target:
//      1e-5 on the CPU (the GEMM adds the bias before vs after the K sum),
//      1e-4 on CUDA (cuBLASLt's ReLU epilogue, GEMM + GELU kernel);
//    - linear_act_on_parameter_views: the same, with weights, biases and
//      gradients as views into flat blocks at 4- and 128-byte alignment (as
//      the trainer's parameters are): 1e-4.
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
#include "engine/nn/linear_act.h"
#include "engine/nn/model.h"
#include "engine/ops/batchnorm/batchnorm.h"
#include "tests/engine/device_fixture.h"
#include "tests/engine/gradcheck.h"
#include "tests/engine/tensor_helpers.h"

using namespace tb;
using namespace tb::test;
using Act = Backend::Activation;

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
  if (residual) be.add(o.y, r, o.y);
  if (relu) be.relu_forward(o.y, o.y);
  if (!training) return o;
  Tensor dz = be.empty(k.x.shape(), DType::F32, layout);
  if (relu)
    be.relu_backward(o.y, dy, dz);
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

// ---------------------------------------------------------------- linear + act
struct LinOut {
  Tensor y, dx, dw, db;
};
struct LinCase {
  Tensor x, w, b, dy;
  LinCase(int64_t N, int64_t K, int64_t M, uint64_t seed) {
    x = random_tensor({N, K}, seed, -2.0, 2.0);
    w = random_tensor({M, K}, seed + 1, -0.2, 0.2);
    b = random_tensor({M}, seed + 2, -0.5, 0.5);
    dy = random_tensor({N, M}, seed + 3);
  }
};

LinOut run_linear(Backend& be, const LinCase& k, Act act, bool fused) {
  auto dev = [&](const Tensor& h) {
    Tensor d = be.empty(h.shape(), h.dtype());
    be.copy(h, d);
    return d;
  };
  Tensor x = dev(k.x), w = dev(k.w), b = dev(k.b), dy = dev(k.dy);
  const int64_t N = k.x.dim(0), K = k.x.dim(1), M = k.w.dim(0);
  LinOut o;
  o.y = be.empty({N, M}, DType::F32);
  Tensor pre = be.empty({N, M}, DType::F32), dpre = be.empty({N, M}, DType::F32);
  o.dx = be.empty({N, K}, DType::F32), o.dw = be.empty({M, K}, DType::F32);
  o.db = be.empty({M}, DType::F32);
  if (fused) {
    Tensor p = act == Act::GELU ? pre : Tensor{};
    be.linear_act_forward(x, w, b, act, o.y, p);
    be.linear_act_backward(x, w, o.y, p, dy, act, dpre, o.dx, o.dw, o.db, false);
    return o;
  }
  be.linear_forward(x, w, b, pre);
  if (act == Act::ReLU) {
    be.relu_forward(pre, o.y);
    be.relu_backward(o.y, dy, dpre);
  } else {
    be.gelu_forward(pre, o.y);
    be.gelu_backward(pre, dy, dpre);
  }
  be.linear_backward(x, w, dpre, o.dx, o.dw, o.db, false);
  return o;
}

// run_linear's fused path with the operands placed as the trainer places
// them: w and b (and dw, db) consecutive views into one parameter block and
// one gradient block (model.cpp), x and y views too, all starting `offset`
// floats in, so aligned only to that offset (4 bytes for offset 1).
LinOut run_linear_views(Backend& be, const LinCase& k, Act act, int64_t offset) {
  const int64_t N = k.x.dim(0), K = k.x.dim(1), M = k.w.dim(0);
  auto block = [&](int64_t n) { return be.empty({offset + n}, DType::F32); };
  auto at = [&](const Tensor& base, int64_t begin, const Shape& s) {
    return Tensor::view_of(base, offset + begin, s);
  };
  const Tensor params = block(M * K + M), grads = block(M * K + M);
  const Tensor xb = block(N * K), yb = block(N * M);
  Tensor w = at(params, 0, {M, K}), b = at(params, M * K, {M}), x = at(xb, 0, {N, K});
  for (auto [dst, src] : {std::pair{&w, &k.w}, std::pair{&b, &k.b}, std::pair{&x, &k.x}})
    be.copy(*src, *dst);
  Tensor dy = be.empty({N, M}, DType::F32);
  be.copy(k.dy, dy);
  LinOut o;
  o.y = at(yb, 0, {N, M});
  o.dw = at(grads, 0, {M, K}), o.db = at(grads, M * K, {M});
  o.dx = be.empty({N, K}, DType::F32);
  Tensor pre = be.empty({N, M}, DType::F32), dpre = be.empty({N, M}, DType::F32);
  Tensor p = act == Act::GELU ? pre : Tensor{};
  be.linear_act_forward(x, w, b, act, o.y, p);
  be.linear_act_backward(x, w, o.y, p, dy, act, dpre, o.dx, o.dw, o.db, false);
  return o;
}

std::string compare_lin(Backend& be_a, const LinOut& a, Backend& be_b, const LinOut& b,
                        double tol) {
  const std::pair<const char*, std::pair<Tensor, Tensor>> pairs[] = {
      {"y", {a.y, b.y}}, {"dx", {a.dx, b.dx}}, {"dw", {a.dw, b.dw}}, {"db", {a.db, b.db}}};
  for (auto& [what, p] : pairs) {
    const double e = scaled_diff(to_host_nchw(be_a, p.first), to_host_nchw(be_b, p.second));
    if (!(e <= tol))
      return std::string(what) + ": scaled difference " + std::to_string(e) + " > " +
             std::to_string(tol);
  }
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


  void linear_act_gradcheck() {
    for (Act act : {Act::ReLU, Act::GELU}) {
      auto r = test::gradcheck_layer(std::make_unique<LinearAct>("fc", 5, act), {4, 6}, 31);
      QVERIFY2(r.max_rel_error_dx < 1e-5, qPrintable(QString::fromStdString(r.worst)));
      QVERIFY2(r.max_rel_error_params < 1e-5, qPrintable(QString::fromStdString(r.worst)));
    }
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

  void linear_act_matches_reference_data() {
    QTest::addColumn<Target>("target");
    for (const Target& t : {Target{Impl::CpuFast, Layout::NCHW, DType::F32},
                            Target{Impl::Cuda, Layout::NCHW, DType::F32}})
      QTest::newRow(t.name().c_str()) << t;
  }
  void linear_act_matches_reference() {
    FETCH_TARGET(t, be);
    TB_GPU_TRY
    CpuBackend& ref = cpu_reference();
    const LinCase k(33, 300, 70, t.on_gpu() ? 79 : 51);
    for (Act act : {Act::ReLU, Act::GELU}) {
      const LinOut u = run_linear(be, k, act, false), f = run_linear(be, k, act, true);
      std::string err = compare_lin(be, u, be, f, t.on_gpu() ? 1e-4 : 1e-5);
      QVERIFY2(err.empty(), qPrintable(QString::fromStdString(err)));
      err = compare_lin(ref, run_linear(ref, k, act, true), be, f, 1e-4);
      QVERIFY2(err.empty(), qPrintable(QString::fromStdString(err)));
    }
    TB_GPU_CATCH
  }


  // The suites above hand every op fresh, 256-byte aligned tensors; the
  // trainer's weights and biases are views into one flat block, aligned only
  // to their float offset (fmnist-cnn's fc1 weight: 128 bytes). cuBLASLt's
  // heuristics assume 256 unless told (fused_ops.cpp sets the alignments).
  void linear_act_on_parameter_views_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<int>("offset");  // floats into each block
    for (const Target& t : {Target{Impl::CpuFast, Layout::NCHW, DType::F32},
                            Target{Impl::Cuda, Layout::NCHW, DType::F32}})
      for (int offset : {1, 32})
        QTest::addRow("%s: %d-byte aligned", t.name().c_str(), 4 * offset) << t << offset;
  }
  void linear_act_on_parameter_views() {
    FETCH_TARGET(t, be);
    QFETCH(int, offset);
    TB_GPU_TRY
    CpuBackend& ref = cpu_reference();
    const LinCase k(33, 300, 70, 87);
    for (Act act : {Act::ReLU, Act::GELU}) {
      const std::string err =
          compare_lin(ref, run_linear(ref, k, act, true), be, run_linear_views(be, k, act, offset),
                      1e-4);
      QVERIFY2(err.empty(), qPrintable(QString::fromStdString(err)));
    }
    TB_GPU_CATCH
  }

  // The activation is shared with the epilogues (engine/ops/epilogue.h),
  // where None is the plain op; linear + act has nothing to fuse without one.
  void linear_act_rejects_no_activation() {
    CpuBackend& be = cpu_fast();
    const LinCase lk(4, 6, 5, 63);
    Tensor ly = Tensor::empty({4, 5}, DType::F32), lpre = Tensor::empty({4, 5}, DType::F32);
    const QString e =
        qerror_of([&] { be.linear_act_forward(lk.x, lk.w, lk.b, Act::None, ly, lpre); });
    QVERIFY2(e.contains("none") && e.contains("linear_act_forward"), qPrintable(e));
    QVERIFY_THROWS_EXCEPTION(Error, LinearAct("fc", 5, Act::None));
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
    const LinCase lk(4, 6, 5, 63);
    Tensor ly = Tensor::empty({4, 5}, DType::F32), lpre = Tensor::empty({4, 5}, DType::F32);
    Tensor bad_b = Tensor::empty({6}, DType::F32);
    QVERIFY_THROWS_EXCEPTION(Error, be.linear_act_forward(lk.x, lk.w, bad_b, Act::ReLU, ly, none));
    QVERIFY_THROWS_EXCEPTION(Error, be.linear_act_forward(lk.x, lk.w, lk.b, Act::GELU, ly, none));
    QVERIFY_THROWS_EXCEPTION(Error, be.linear_act_forward(lk.x, lk.w, lk.b, Act::GELU, ly, ly));
    be.linear_act_forward(lk.x, lk.w, lk.b, Act::GELU, ly, lpre);  // the valid call works
  }
};

QTEST_GUILESS_MAIN(TestOpFused)
#include "test_op_fused.moc"
