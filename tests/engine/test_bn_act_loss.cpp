// SPDX-License-Identifier: GPL-3.0-or-later
// Batch norm, activations and the softmax cross-entropy loss on the CPU:
// gradients against central finite differences (f64, reference kernels), the
// fast f32 kernels against the reference, and values computed by hand.
#include <QtTest>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/nn/activations.h"
#include "engine/nn/batchnorm2d.h"
#include "engine/nn/model.h"
#include "tests/engine/gradcheck.h"

using namespace tb;

namespace {

template <typename T>
Tensor random_tensor(const Shape& s, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Tensor t = Tensor::empty(s, dtype_of<T>());
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<T>()[i] = T(dist(rng));
  return t;
}

template <typename T>
Tensor from_values(const Shape& s, std::initializer_list<double> v) {
  Tensor t = Tensor::empty(s, dtype_of<T>());
  int64_t i = 0;
  for (double x : v) t.data_as<T>()[i++] = T(x);
  return t;
}

// max |a − b| over two f32 tensors of the same shape
double max_abs_diff(const Tensor& a, const Tensor& b) {
  double m = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, std::abs(double(a.data_as<float>()[i]) - double(b.data_as<float>()[i])));
  return m;
}

// Mean loss of the f64 reference loss (no gradient).
double mean_loss(Backend& be, const Tensor& logits, const Tensor& labels, float smoothing) {
  Tensor stats = Tensor::zeros({2}, DType::F64);
  Tensor none;
  be.softmax_cross_entropy(logits, labels, smoothing, 1.0f, none, stats);
  return stats.data_as<double>()[0] / double(logits.dim(0));
}

}  // namespace

class TestBnActLoss : public QObject {
  Q_OBJECT

 private:
  // Finite-difference check of the loss gradient (d mean loss / d logits, times grad_scale).
  void check_loss_gradient(float smoothing, float grad_scale) {
    CpuBackend be(BackendOptions{.reference = true});
    const int64_t N = 4, K = 5;
    Tensor logits = random_tensor<double>({N, K}, 11, -3.0, 3.0);
    Tensor labels = Tensor::empty({N}, DType::I32);
    for (int64_t n = 0; n < N; ++n) labels.data_as<int32_t>()[n] = int32_t((3 * n + 1) % K);
    Tensor dlogits = Tensor::empty({N, K}, DType::F64);
    Tensor stats = Tensor::zeros({2}, DType::F64);
    be.softmax_cross_entropy(logits, labels, smoothing, grad_scale, dlogits, stats);
    const double h = 1e-6;
    double worst = 0.0;
    for (int64_t i = 0; i < logits.numel(); ++i) {
      double& z = logits.data_as<double>()[i];
      const double saved = z;
      z = saved + h;
      const double lp = mean_loss(be, logits, labels, smoothing);
      z = saved - h;
      const double lm = mean_loss(be, logits, labels, smoothing);
      z = saved;
      const double numeric = grad_scale * (lp - lm) / (2 * h);
      worst = std::max(worst, test::rel_error(dlogits.data_as<double>()[i], numeric));
    }
    QVERIFY2(worst < 1e-6, qPrintable(QString("max relative error %1").arg(worst)));
  }

 private slots:
  // ---------------------------------------------------------------- gradients (f64)

  void batchnormTrainGradcheck() {
    auto r = test::gradcheck_layer(std::make_unique<BatchNorm2d>("bn"), {4, 3, 3, 2}, 7, true);
    QVERIFY2(r.max_rel_error_dx < 1e-5, qPrintable(QString::fromStdString(r.worst)));
    QVERIFY2(r.max_rel_error_params < 1e-5, qPrintable(QString::fromStdString(r.worst)));
  }

  void batchnormEvalGradcheck() {
    auto r = test::gradcheck_layer(std::make_unique<BatchNorm2d>("bn"), {3, 2, 2, 3}, 8, false);
    QVERIFY2(r.max_rel_error_dx < 1e-5, qPrintable(QString::fromStdString(r.worst)));
    QVERIFY2(r.max_rel_error_params < 1e-5, qPrintable(QString::fromStdString(r.worst)));
  }

  void reluGradcheck() {
    auto r = test::gradcheck_layer(std::make_unique<ReLU>("relu"), {3, 2, 3, 3}, 9);
    QVERIFY2(r.max_rel_error_dx < 1e-5, qPrintable(QString::fromStdString(r.worst)));
  }

  void geluGradcheck() {
    auto r = test::gradcheck_layer(std::make_unique<GELU>("gelu"), {5, 7}, 10);
    QVERIFY2(r.max_rel_error_dx < 1e-5, qPrintable(QString::fromStdString(r.worst)));
  }

  void lossGradient() { check_loss_gradient(0.0f, 1.0f); }
  void lossGradientLabelSmoothing() { check_loss_gradient(0.1f, 1.0f); }
  void lossGradientScaled() { check_loss_gradient(0.2f, 1024.0f); }

  // Eval mode with non-trivial running statistics against the closed form
  //   dx = γ·dy/sqrt(σ²+eps), dγ = Σ dy·(x−μ)/sqrt(σ²+eps), dβ = Σ dy.
  void batchnormEvalBackwardClosedForm() {
    for (bool reference : {true, false}) {
      CpuBackend be(BackendOptions{.reference = reference});
      Model model("m", {2, 1, 3}, 0);
      model.emplace<BatchNorm2d>("bn", 0.1f, 1e-5f);
      model.build(be, 1, DType::F32);
      // params: bn.weight, bn.bias; buffers: running_mean, running_var
      float* gamma = model.params()[0].value.data_as<float>();
      float* beta = model.params()[1].value.data_as<float>();
      float* rm = model.buffers()[0].value.data_as<float>();
      float* rv = model.buffers()[1].value.data_as<float>();
      gamma[0] = 2.0f, gamma[1] = 3.0f, beta[0] = 0.5f, beta[1] = -1.0f;
      rm[0] = 0.5f, rm[1] = -1.0f, rv[0] = 4.0f, rv[1] = 0.25f;
      Context ctx{be};
      ctx.training = false;
      Tensor x = random_tensor<float>({2, 2, 1, 3}, 3);
      Tensor y = model.forward(ctx, x);
      Tensor dy = random_tensor<float>({2, 2, 1, 3}, 4);
      Tensor dx = model.layers()[0]->backward(ctx, dy, true);
      const Tensor& dgamma = model.params()[0].grad;
      const Tensor& dbeta = model.params()[1].grad;
      for (int64_t c = 0; c < 2; ++c) {
        const double s = 1.0 / std::sqrt(double(rv[c]) + 1e-5);
        double sg = 0.0, sb = 0.0;
        for (int64_t n = 0; n < 2; ++n)
          for (int64_t i = 0; i < 3; ++i) {
            const int64_t k = (n * 2 + c) * 3 + i;
            const double xv = x.data_as<float>()[k], g = dy.data_as<float>()[k];
            QVERIFY(std::abs(y.data_as<float>()[k] - (gamma[c] * (xv - rm[c]) * s + beta[c])) <
                    1e-5);
            QVERIFY(std::abs(dx.data_as<float>()[k] - gamma[c] * g * s) < 1e-5);
            sg += g * (xv - rm[c]) * s;
            sb += g;
          }
        QVERIFY(std::abs(dgamma.data_as<float>()[c] - sg) < 1e-5);
        QVERIFY(std::abs(dbeta.data_as<float>()[c] - sb) < 1e-5);
      }
      // Eval forward leaves the running statistics alone.
      QCOMPARE(rm[0], 0.5f);
      QCOMPARE(rv[1], 0.25f);
    }
  }

  // ctx.accumulate_grads: a second backward with the same dy adds the same
  // parameter gradients again (gradient accumulation through the layer).
  void batchnormAccumulatesParameterGradients() {
    for (bool training : {true, false}) {
      CpuBackend be;
      Model model("m", {3, 2, 2}, 0);
      model.emplace<BatchNorm2d>("bn");
      model.build(be, 2, DType::F32);
      Context ctx{be};
      ctx.training = training;
      Tensor x = random_tensor<float>({4, 3, 2, 2}, 5);
      Tensor dy = random_tensor<float>({4, 3, 2, 2}, 6);
      model.forward(ctx, x);
      ctx.accumulate_grads = false;
      model.layers()[0]->backward(ctx, dy, false);
      std::vector<float> once(model.grad_block().data_as<float>(),
                              model.grad_block().data_as<float>() + 6);
      ctx.accumulate_grads = true;
      model.layers()[0]->backward(ctx, dy, false);
      for (int i = 0; i < 6; ++i) {
        QVERIFY(once[size_t(i)] != 0.0f);
        QVERIFY(std::abs(model.grad_block().data_as<float>()[i] - 2.0f * once[size_t(i)]) <
                1e-5f * (1.0f + std::abs(once[size_t(i)])));
      }
    }
  }

  // ---------------------------------------------------------------- hand values

  // One channel holds {1, 2, 3, 6}: mean 3, biased var 14/4 = 3.5, unbiased 14/3.
  // The other holds {−1, −1, 1, 1}: mean 0, biased var 1, unbiased 4/3.
  // momentum 0.1 from (mean 0, var 1):
  //   running_mean = 0.9·0 + 0.1·3 = 0.3          and 0
  //   running_var  = 0.9·1 + 0.1·14/3 = 1.3666667 and 0.9 + 0.1·4/3 = 1.0333333
  // y(x=1, γ=1, β=0) = (1−3)/sqrt(3.5+1e-5) = −1.0690434
  void batchnormRunningStatistics() {
    for (bool reference : {true, false}) {
      CpuBackend be(BackendOptions{.reference = reference});
      // x (N=2, C=2, H=1, W=2) NCHW: n0c0 {1,2}, n0c1 {−1,−1}, n1c0 {3,6}, n1c1 {1,1}
      Tensor x = from_values<float>({2, 2, 1, 2}, {1, 2, -1, -1, 3, 6, 1, 1});
      Tensor gamma = from_values<float>({2}, {1, 1}), beta = from_values<float>({2}, {0, 0});
      Tensor rm = from_values<float>({2}, {0, 0}), rv = from_values<float>({2}, {1, 1});
      Tensor y = Tensor::empty(x.shape(), DType::F32);
      Tensor sm = Tensor::empty({2}, DType::F32), si = Tensor::empty({2}, DType::F32);
      be.batchnorm_forward_train(x, gamma, beta, rm, rv, 0.1f, 1e-5f, y, sm, si);
      QVERIFY(std::abs(rm.data_as<float>()[0] - 0.3) < 1e-6);
      QVERIFY(std::abs(rm.data_as<float>()[1] - 0.0) < 1e-6);
      QVERIFY(std::abs(rv.data_as<float>()[0] - 1.3666667) < 1e-6);
      QVERIFY(std::abs(rv.data_as<float>()[1] - 1.0333333) < 1e-6);
      QVERIFY(std::abs(sm.data_as<float>()[0] - 3.0) < 1e-6);
      QVERIFY(std::abs(si.data_as<float>()[0] - 1.0 / std::sqrt(3.5 + 1e-5)) < 1e-6);
      QVERIFY(std::abs(si.data_as<float>()[1] - 1.0 / std::sqrt(1.0 + 1e-5)) < 1e-6);
      QVERIFY(std::abs(y.data_as<float>()[0] - (-1.0690434)) < 1e-5);
      QVERIFY(std::abs(y.data_as<float>()[2] - (-0.999995)) < 1e-5);  // −1/sqrt(1+1e-5)
    }
  }

  // NHWC is supported (tests/engine/test_channels_last.cpp); x and y in
  // different layouts are not: that would be a hidden transpose.
  void batchnormRejectsMixedLayouts() {
    CpuBackend be;
    Tensor x = Tensor::zeros({1, 2, 2, 2}, DType::F32, Device::cpu(), Layout::NHWC);
    Tensor y = Tensor::zeros({1, 2, 2, 2}, DType::F32, Device::cpu(), Layout::NCHW);
    Tensor c = Tensor::zeros({2}, DType::F32);
    try {
      be.batchnorm_forward_eval(x, c, c, c, c, 1e-5f, y);
      QFAIL("NHWC input with an NCHW output was accepted");
    } catch (const Error& e) {
      QVERIFY(QString(e.what()).contains("NHWC"));
    }
  }

  // GELU(1) = Φ(1) = 0.8413447, GELU(−1) = −1 + 0.8413447 = −0.1586553,
  // GELU'(1) = Φ(1) + φ(1) = 0.8413447 + 0.2419707 = 1.0833155,
  // GELU'(−1) = Φ(−1) − φ(−1) = 0.1586553 − 0.2419707 = −0.0833155. ReLU of
  // {−2, 0, 3} = {0, 0, 3}, its backward passes dy where y > 0 only.
  void activationValues() {
    for (bool reference : {true, false}) {
      CpuBackend be(BackendOptions{.reference = reference});
      Tensor x = from_values<float>({3}, {1, -1, 0});
      Tensor y = Tensor::empty({3}, DType::F32);
      be.gelu_forward(x, y);
      QVERIFY(std::abs(y.data_as<float>()[0] - 0.8413447f) < 1e-6);
      QVERIFY(std::abs(y.data_as<float>()[1] + 0.1586553f) < 1e-6);
      QCOMPARE(y.data_as<float>()[2], 0.0f);
      Tensor dy = from_values<float>({3}, {1, 1, 1});
      Tensor dx = Tensor::empty({3}, DType::F32);
      be.gelu_backward(x, dy, dx);
      QVERIFY(std::abs(dx.data_as<float>()[0] - 1.0833155f) < 1e-6);
      QVERIFY(std::abs(dx.data_as<float>()[1] + 0.0833155f) < 1e-6);
      QVERIFY(std::abs(dx.data_as<float>()[2] - 0.5f) < 1e-6);

      Tensor r = from_values<float>({3}, {-2, 0, 3});
      be.relu_forward(r, r);  // in place: y aliases x
      QCOMPARE(r.data_as<float>()[0], 0.0f);
      QCOMPARE(r.data_as<float>()[1], 0.0f);
      QCOMPARE(r.data_as<float>()[2], 3.0f);
      Tensor g = from_values<float>({3}, {5, 6, 7});
      be.relu_backward(r, g, g);  // in place: dx aliases dy
      QCOMPARE(g.data_as<float>()[0], 0.0f);
      QCOMPARE(g.data_as<float>()[1], 0.0f);
      QCOMPARE(g.data_as<float>()[2], 7.0f);

      Tensor a = from_values<float>({2, 2}, {1, 2, 3, 4}),
             b = from_values<float>({2, 2}, {10, 20, 30, 40});
      Tensor s = Tensor::empty({2, 2}, DType::F32);
      be.add(a, b, s);
      QCOMPARE(s.data_as<float>()[3], 44.0f);
      be.accumulate(a, b);  // b += a
      QCOMPARE(b.data_as<float>()[0], 11.0f);
      QCOMPARE(b.data_as<float>()[3], 44.0f);
      Tensor wrong = Tensor::empty({4}, DType::F32);
      QVERIFY_THROWS_EXCEPTION(Error, be.add(a, wrong, s));
    }
  }

  // Logits (0, ln 3): p = (1/4, 3/4). Label 1:
  //   ε = 0:   loss = −ln(3/4) = 0.2876821,  dlogits = (p − onehot)/N = (0.25, −0.25)/N
  //   ε = 0.2: q = (0.1, 0.9), loss = −(0.1·ln ¼ + 0.9·ln ¾) = 0.3975433,
  //            dlogits = (0.15, −0.15)/N
  // Uniform logits give ln K for every sample, with or without smoothing.
  void lossValues() {
    for (bool reference : {true, false}) {
      CpuBackend be(BackendOptions{.reference = reference});
      Tensor logits = from_values<float>({2, 2}, {0, std::log(3.0), 0, std::log(3.0)});
      Tensor labels = Tensor::empty({2}, DType::I32);
      labels.data_as<int32_t>()[0] = 1;
      labels.data_as<int32_t>()[1] = 0;  // second sample: p_y = 1/4, wrong prediction
      Tensor d = Tensor::empty({2, 2}, DType::F32);
      Tensor stats = Tensor::zeros({2}, DType::F64);
      be.softmax_cross_entropy(logits, labels, 0.0f, 1.0f, d, stats);
      // Σ loss = −ln ¾ − ln ¼ = 0.2876821 + 1.3862944 = 1.6739765; one correct
      QVERIFY(std::abs(stats.data_as<double>()[0] - 1.6739765) < 1e-6);
      QCOMPARE(stats.data_as<double>()[1], 1.0);
      QVERIFY(std::abs(d.data_as<float>()[0] - 0.125f) < 1e-7);
      QVERIFY(std::abs(d.data_as<float>()[1] + 0.125f) < 1e-7);
      QVERIFY(std::abs(d.data_as<float>()[2] + 0.375f) < 1e-7);  // (1/4 − 1)/2
      // Stats accumulate across calls; smoothing 0.2 on sample 0 only
      Tensor one = logits.rows(0, 1), lab1 = labels.rows(0, 1), d1 = d.rows(0, 1);
      be.softmax_cross_entropy(one, lab1, 0.2f, 2.0f, d1, stats);
      QVERIFY(std::abs(stats.data_as<double>()[0] - (1.6739765 + 0.3975433)) < 1e-6);
      QCOMPARE(stats.data_as<double>()[1], 2.0);
      QVERIFY(std::abs(d.data_as<float>()[0] - 2.0f * 0.15f) < 1e-6);  // grad_scale 2, N 1
      QVERIFY(std::abs(d.data_as<float>()[1] + 2.0f * 0.15f) < 1e-6);

      const int64_t N = 3, K = 10;
      Tensor uni = Tensor::zeros({N, K}, DType::F32);
      for (int64_t i = 0; i < uni.numel(); ++i) uni.data_as<float>()[i] = 1.5f;
      Tensor ul = Tensor::zeros({N}, DType::I32);
      ul.data_as<int32_t>()[1] = 4;
      ul.data_as<int32_t>()[2] = 9;
      for (float eps : {0.0f, 0.3f}) {
        Tensor st = Tensor::zeros({2}, DType::F64);
        Tensor none;
        be.softmax_cross_entropy(uni, ul, eps, 1.0f, none, st);
        QVERIFY(std::abs(st.data_as<double>()[0] - 3.0 * std::log(10.0)) < 1e-5);
        QCOMPARE(st.data_as<double>()[1], 1.0);  // ties: the first maximum (class 0) wins
      }
      Tensor bad = Tensor::zeros({N}, DType::I32);
      bad.data_as<int32_t>()[2] = int32_t(K);
      Tensor none;
      QVERIFY_THROWS_EXCEPTION(Error, be.softmax_cross_entropy(uni, bad, 0.0f, 1.0f, none, stats));
    }
  }

  // Large logits must not overflow (max-shifted log-sum-exp).
  void lossIsStable() {
    for (bool reference : {true, false}) {
      CpuBackend be(BackendOptions{.reference = reference});
      Tensor logits = from_values<float>({1, 3}, {1000, 0, -1000});
      Tensor labels = Tensor::zeros({1}, DType::I32);
      Tensor d = Tensor::empty({1, 3}, DType::F32);
      Tensor stats = Tensor::zeros({2}, DType::F64);
      be.softmax_cross_entropy(logits, labels, 0.0f, 1.0f, d, stats);
      QVERIFY(std::isfinite(stats.data_as<double>()[0]));
      QVERIFY(stats.data_as<double>()[0] < 1e-6);
      for (int k = 0; k < 3; ++k) QVERIFY(std::abs(d.data_as<float>()[k]) < 1e-6);
    }
  }

  // ---------------------------------------------------------------- fast f32 vs reference

  // Same random inputs through both kernels. BN inputs have mean 3, std ~1.2 to
  // exercise the fast path's one-pass variance. Tolerances: absolute, on O(1)
  // outputs, ~50× the f32 rounding seen.
  void fastMatchesReference() {
    CpuBackend ref(BackendOptions{.reference = true});
    CpuBackend fast;
    const Shape xs{16, 8, 16, 16};  // 32768 elements: large enough for the threaded path
    Tensor x = random_tensor<float>(xs, 21, 1.0, 5.0);
    Tensor dy = random_tensor<float>(xs, 22);
    Tensor gamma = random_tensor<float>({8}, 23, 0.5, 1.5), beta = random_tensor<float>({8}, 24);
    struct Out {
      Tensor y, rm, rv, sm, si, dx, dg, db, ye;
    };
    auto run = [&](Backend& be) {
      Out o;
      o.y = Tensor::empty(xs, DType::F32);
      o.rm = random_tensor<float>({8}, 25), o.rv = random_tensor<float>({8}, 26, 0.5, 2.0);
      o.sm = Tensor::empty({8}, DType::F32), o.si = Tensor::empty({8}, DType::F32);
      be.batchnorm_forward_train(x, gamma, beta, o.rm, o.rv, 0.1f, 1e-5f, o.y, o.sm, o.si);
      o.dx = Tensor::empty(xs, DType::F32);
      o.dg = from_values<float>({8}, {1, 2, 3, 4, 5, 6, 7, 8});
      o.db = from_values<float>({8}, {1, 2, 3, 4, 5, 6, 7, 8});
      be.batchnorm_backward(x, dy, gamma, o.sm, o.si, o.dx, o.dg, o.db, /*accumulate=*/true);
      o.ye = Tensor::empty(xs, DType::F32);
      be.batchnorm_forward_eval(x, gamma, beta, o.rm, o.rv, 1e-5f, o.ye);
      return o;
    };
    Out a = run(ref), b = run(fast);
    QVERIFY2(max_abs_diff(a.y, b.y) < 1e-5, "bn y");
    QVERIFY2(max_abs_diff(a.sm, b.sm) < 1e-6, "bn save_mean");
    QVERIFY2(max_abs_diff(a.si, b.si) < 1e-6, "bn save_invstd");
    QVERIFY2(max_abs_diff(a.rm, b.rm) < 1e-6, "bn running_mean");
    QVERIFY2(max_abs_diff(a.rv, b.rv) < 1e-6, "bn running_var");
    QVERIFY2(max_abs_diff(a.dx, b.dx) < 1e-5, "bn dx");
    QVERIFY2(max_abs_diff(a.dg, b.dg) < 1e-4, "bn dgamma (sums of 4096 terms)");
    QVERIFY2(max_abs_diff(a.db, b.db) < 1e-4, "bn dbeta (sums of 4096 terms)");
    QVERIFY2(max_abs_diff(a.ye, b.ye) < 1e-5, "bn eval y");

    // Pointwise on inputs in [−4, 4].
    Tensor px = random_tensor<float>({70, 1000}, 31, -4.0, 4.0);  // > 65536: threaded
    Tensor pg = random_tensor<float>({70, 1000}, 32);
    auto pointwise = [&](Backend& be, int op) {
      Tensor out = Tensor::empty(px.shape(), DType::F32);
      if (op == 0) be.relu_forward(px, out);
      if (op == 1) be.gelu_forward(px, out);
      if (op == 2) be.gelu_backward(px, pg, out);
      if (op == 3) {
        Tensor y = Tensor::empty(px.shape(), DType::F32);
        be.relu_forward(px, y);
        be.relu_backward(y, pg, out);
      }
      return out;
    };
    QCOMPARE(max_abs_diff(pointwise(ref, 0), pointwise(fast, 0)), 0.0);
    QCOMPARE(max_abs_diff(pointwise(ref, 3), pointwise(fast, 3)), 0.0);
    QVERIFY2(max_abs_diff(pointwise(ref, 1), pointwise(fast, 1)) < 2e-6, "gelu forward");
    QVERIFY2(max_abs_diff(pointwise(ref, 2), pointwise(fast, 2)) < 2e-6, "gelu backward");

    // Loss on 64 × 100 logits in [−8, 8] with smoothing 0.1 and grad_scale 128.
    Tensor z = random_tensor<float>({64, 100}, 41, -8.0, 8.0);
    Tensor lab = Tensor::empty({64}, DType::I32);
    for (int i = 0; i < 64; ++i) lab.data_as<int32_t>()[i] = (i * 37) % 100;
    auto loss = [&](Backend& be, Tensor& st) {
      Tensor d = Tensor::empty(z.shape(), DType::F32);
      st = Tensor::zeros({2}, DType::F64);
      be.softmax_cross_entropy(z, lab, 0.1f, 128.0f, d, st);
      return d;
    };
    Tensor sa, sb;
    Tensor da = loss(ref, sa), db = loss(fast, sb);
    QVERIFY2(std::abs(sa.data_as<double>()[0] - sb.data_as<double>()[0]) <
                 1e-5 * sa.data_as<double>()[0],
             "loss sum");
    QCOMPARE(sa.data_as<double>()[1], sb.data_as<double>()[1]);
    QVERIFY2(max_abs_diff(da, db) < 1e-5, "dlogits");  // |dlogits| <= 2 here
  }
};

QTEST_GUILESS_MAIN(TestBnActLoss)
#include "test_bn_act_loss.moc"
