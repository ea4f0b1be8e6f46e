// SPDX-License-Identifier: GPL-3.0-or-later
// Fused pointwise ops and layers (trick 11) against their unfused definition:
// - finite-difference gradients (f64, reference backend) of BatchNormAct with
//   and without residual, ReLU on and off, train and eval; of LinearAct;
// - the fast fused f32 CPU kernels against the unfused fast kernels and
//   against the fused reference, on fresh random inputs (never zeros);
// - whole models (fmnist-cnn, resnet18-cifar, resnet9, mlp) built with and
//   without fusion from one seed: same parameters, loss and gradients;
// - the trainer: a short synthetic CPU run with fuse_pointwise on and off;
// - GPU slots (QSKIP without a device or without a CUDA build): the CUDA fused
//   ops against the CPU reference in NCHW and NHWC, and fused vs unfused on the GPU.
// Tolerances are stated at each check, relative to the largest magnitude of
// the reference tensor ("scaled").
#include <QtTest>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/nn/batchnorm_act.h"
#include "engine/nn/linear_act.h"
#include "engine/nn/model.h"
#include "engine/nn/models.h"
#include "engine/train/config.h"
#include "engine/train/events.h"
#include "engine/train/trainer.h"
#include "tests/engine/gradcheck.h"
#ifdef TRAINBENCH_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#endif
#include "tests/engine/gpu_slot.h"

using namespace tb;
using json = nlohmann::json;
using Act = Backend::Activation;

namespace {

template <typename T>
Tensor random_tensor(const Shape& s, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Tensor t = Tensor::empty(s, dtype_of<T>());
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = dist(rng);
    if (v == 0.0) v = 0.5 * hi;  // never an exact zero
    t.data_as<T>()[i] = T(v);
  }
  return t;
}

double val(const Tensor& t, int64_t i) {
  return t.dtype() == DType::F64 ? t.data_as<double>()[i] : double(t.data_as<float>()[i]);
}

// max |a − b| / max(max |a|, tiny), over two host tensors of the same shape.
double scaled_diff(const Tensor& ref, const Tensor& got) {
  if (ref.shape() != got.shape()) return INFINITY;
  double mx = 0.0, d = 0.0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    mx = std::max(mx, std::abs(val(ref, i)));
    const double e = std::abs(val(ref, i) - val(got, i));
    if (!(e <= d)) d = e;  // NaN propagates
  }
  return d / std::max(mx, 1e-30);
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

Tensor clone(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype(), Device::cpu(), t.layout());
  std::memcpy(c.data(), t.data(), t.nbytes());
  return c;
}

#define EXPECT_SCALED(ref, got, tol, what)                                               \
  do {                                                                                   \
    const double e_ = scaled_diff((ref), (got));                                         \
    QVERIFY2(e_ <= (tol), qPrintable(QString("%1: scaled difference %2 > %3")            \
                                         .arg(QString::fromStdString(std::string(what))) \
                                         .arg(e_)                                        \
                                         .arg(tol)));                                    \
  } while (0)

// ---------------------------------------------------------------- gradient check
// BatchNormAct with an optional residual input r: L = Σ g·layer(x, r). Each
// analytic partial (dx, dr, dγ, dβ) against the central difference, f64 on the
// reference backend (whose fused ops are the unfused reference ops composed).
test::GradCheckResult gradcheck_bn_act(bool relu, bool residual, bool training, uint64_t seed) {
  const Shape shape{4, 3, 3, 2};
  const double h = 1e-6;
  CpuBackend be(BackendOptions{.reference = true});
  Model model("gradcheck", {3, 3, 2}, 0);
  auto& layer = model.emplace<BatchNormAct>("bn", relu);
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

  Tensor x = random_tensor<double>(shape, seed + 1);
  Tensor r = residual ? random_tensor<double>(shape, seed + 2) : Tensor{};
  Tensor g = random_tensor<double>(shape, seed + 3);
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
    x = random_tensor<float>(s, seed, -2.0, 3.0);
    r = random_tensor<float>(s, seed + 1);
    dy = random_tensor<float>(s, seed + 2);
    gamma = random_tensor<float>({C}, seed + 3, 0.5, 1.5);
    beta = random_tensor<float>({C}, seed + 4, -0.5, 0.5);
    rmean = random_tensor<float>({C}, seed + 5, -0.3, 0.3);
    rvar = random_tensor<float>({C}, seed + 6, 0.5, 2.0);
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
    be.batchnorm_forward_train(x, gamma, beta, o.rmean, o.rvar, 0.1f, 1e-5f, o.y, o.smean,
                               o.sinvstd);
  else
    be.batchnorm_forward_eval(x, gamma, beta, o.rmean, o.rvar, 1e-5f, o.y);
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
  be.batchnorm_backward(x, dz, gamma, o.smean, o.sinvstd, o.dx, o.dgamma, o.dbeta, false);
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
  if (training)
    be.batchnorm_act_forward_train(x, gamma, beta, r, relu, o.rmean, o.rvar, 0.1f, 1e-5f, o.y,
                                   o.smean, o.sinvstd);
  else
    be.batchnorm_act_forward_eval(x, gamma, beta, r, relu, o.rmean, o.rvar, 1e-5f, o.y);
  if (!training) return o;
  o.dres = be.empty(k.x.shape(), DType::F32, layout);
  o.dx = be.empty(k.x.shape(), DType::F32, layout);
  o.dgamma = be.empty({C}, DType::F32), o.dbeta = be.empty({C}, DType::F32);
  be.batchnorm_act_backward(x, o.y, dy, gamma, o.smean, o.sinvstd, relu, o.dx, o.dres, o.dgamma,
                            o.dbeta, false);
  return o;
}

// Host NCHW copy of a tensor of any backend.
Tensor host(Backend& be, const Tensor& t) {
  if (!t.defined()) return t;
  Tensor h = Tensor::empty(t.shape(), t.dtype(), Device::cpu(), Layout::NCHW);
  be.copy(t, h);
  return h;
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
    Tensor ha = host(be_a, p.first), hb = host(be_b, p.second);
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
    x = random_tensor<float>({N, K}, seed, -2.0, 2.0);
    w = random_tensor<float>({M, K}, seed + 1, -0.2, 0.2);
    b = random_tensor<float>({M}, seed + 2, -0.5, 0.5);
    dy = random_tensor<float>({N, M}, seed + 3);
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

std::string compare_lin(Backend& be_a, const LinOut& a, Backend& be_b, const LinOut& b,
                        double tol) {
  const std::pair<const char*, std::pair<Tensor, Tensor>> pairs[] = {
      {"y", {a.y, b.y}}, {"dx", {a.dx, b.dx}}, {"dw", {a.dw, b.dw}}, {"db", {a.db, b.db}}};
  for (auto& [what, p] : pairs) {
    const double e = scaled_diff(host(be_a, p.first), host(be_b, p.second));
    if (!(e <= tol))
      return std::string(what) + ": scaled difference " + std::to_string(e) + " > " +
             std::to_string(tol);
  }
  return "";
}

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
  r.params = host(be, r.model->param_block());
  Shape xs{batch};
  xs.insert(xs.end(), in.begin(), in.end());
  Tensor x = random_tensor<float>(xs, seed + 100, -1.0, 1.0);
  Tensor labels = Tensor::empty({batch}, DType::I32);
  for (int64_t n = 0; n < batch; ++n) labels.data_as<int32_t>()[n] = int32_t((7 * n + 3) % 10);
  Context ctx{be};
  ctx.training = true;
  ctx.accumulate_grads = false;
  Tensor logits = r.model->forward(ctx, x);
  r.logits = host(be, logits);
  Tensor dlogits = be.empty(logits.shape(), DType::F32);
  Tensor stats = be.empty({2}, DType::F64);
  be.fill(stats, 0.0);
  be.softmax_cross_entropy(logits, labels, 0.0f, 1.0f, dlogits, stats);
  r.loss = host(be, stats).data_as<double>()[0] / double(batch);
  r.model->backward(ctx, dlogits);
  r.grads = host(be, r.model->grad_block());
  // An eval forward with the running statistics this step left behind.
  ctx.training = false;
  r.eval_logits = host(be, r.model->forward(ctx, x));
  return r;
}

// Collects the run_started event and per-step losses of a trainer run.
struct Recorder final : EventSink {
  std::vector<double> losses;
  json started;
  void on_event(const json& e) override {
    const std::string type = e["type"];
    if (type == "step" && e["metrics"].contains("loss"))
      losses.push_back(e["metrics"]["loss"].get<double>());
    if (type == "run_started") started = e;
  }
};

}  // namespace

class TestFused : public QObject {
  Q_OBJECT

 private:
  bool cuda_available = false;
  QByteArray why = "the build has no CUDA backend";
  std::unique_ptr<Backend> gpu;

#define NEED_GPU() \
  if (!cuda_available) QSKIP(("no CUDA device: " + why).constData())

 private slots:
  void initTestCase() {
#ifdef TRAINBENCH_HAVE_CUDA
    std::string reason;
    if (cuda_device_count(&reason) > 0) {
      gpu = make_cuda_backend(0, BackendOptions{});
      cuda_available = true;
    } else {
      why = QByteArray::fromStdString(reason);
    }
#endif
  }

  // ---------------------------------------------------------------- gradients (f64)

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
  void bnActGradcheck() {
    QFETCH(bool, relu);
    QFETCH(bool, residual);
    QFETCH(bool, training);
    const auto r = gradcheck_bn_act(relu, residual, training, 21);
    QVERIFY2(r.max_rel_error_dx < 1e-5, qPrintable(QString::fromStdString(r.worst)));
    QVERIFY2(r.max_rel_error_params < 1e-5, qPrintable(QString::fromStdString(r.worst)));
  }

  // The fused layer through the shared single-input gradient check as well.
  void bnActLayerGradcheck() {
    auto r = test::gradcheck_layer(std::make_unique<BatchNormAct>("bn", true), {4, 3, 3, 2}, 7);
    QVERIFY2(r.max_rel_error_dx < 1e-5, qPrintable(QString::fromStdString(r.worst)));
    QVERIFY2(r.max_rel_error_params < 1e-5, qPrintable(QString::fromStdString(r.worst)));
  }

  void linearActGradcheck() {
    for (Act act : {Act::ReLU, Act::GELU}) {
      auto r = test::gradcheck_layer(std::make_unique<LinearAct>("fc", 5, act), {4, 6}, 31);
      QVERIFY2(r.max_rel_error_dx < 1e-5, qPrintable(QString::fromStdString(r.worst)));
      QVERIFY2(r.max_rel_error_params < 1e-5, qPrintable(QString::fromStdString(r.worst)));
    }
  }

  // ---------------------------------------------------------------- CPU fast paths (f32)

  // Fused fast kernels vs the unfused fast kernels, every combination. The
  // arithmetic is the same in the same order, so the bound is tight (1e-6
  // scaled); whether they also agree bit for bit is reported, not required.
  void bnActFastMatchesUnfused() {
    CpuBackend be;  // fast f32, all threads
    // 38400 elements: above the threading threshold; HW = 100 leaves a lane tail.
    const BnCase k({16, 24, 10, 10}, 41);
    int identical = 0, total = 0;
    for (bool training : {true, false})
      for (bool residual : {false, true})
        for (bool relu : {true, false}) {
          const BnOut u = run_unfused(be, k, relu, residual, training);
          const BnOut f = run_fused(be, k, relu, residual, training);
          bool same = false;
          const std::string err = compare_bn(be, u, be, f, 1e-6, training, &same);
          QVERIFY2(err.empty(), qPrintable(QString("train %1 residual %2 relu %3: %4")
                                               .arg(training)
                                               .arg(residual)
                                               .arg(relu)
                                               .arg(QString::fromStdString(err))));
          identical += same, ++total;
        }
    qInfo("fused vs unfused fast f32: %d of %d combinations bit-identical", identical, total);
  }

  // Fused fast kernels vs the fused reference (f32 reference kernels: double
  // two-pass statistics vs the fast path's one-pass Σx, Σx²): 1e-5 scaled.
  void bnActFastMatchesReference() {
    CpuBackend fast;
    CpuBackend ref(BackendOptions{.reference = true});
    const BnCase k({6, 5, 7, 9}, 43);
    for (bool training : {true, false})
      for (bool residual : {false, true})
        for (bool relu : {true, false}) {
          const std::string err =
              compare_bn(ref, run_fused(ref, k, relu, residual, training), fast,
                         run_fused(fast, k, relu, residual, training), 1e-5, training);
          QVERIFY2(err.empty(), qPrintable(QString::fromStdString(err)));
        }
  }

  // Linear+act, fused vs unfused (both fast): the GEMM adds the bias at a
  // different point (before vs after the K sum), so allow 1e-5 scaled; fused
  // fast vs the reference loops (float sums over K = 300): 1e-4 scaled.
  void linearActFastMatchesUnfused() {
    CpuBackend fast;
    CpuBackend ref(BackendOptions{.reference = true});
    const LinCase k(33, 300, 70, 51);
    for (Act act : {Act::ReLU, Act::GELU}) {
      const LinOut u = run_linear(fast, k, act, false), f = run_linear(fast, k, act, true);
      std::string err = compare_lin(fast, u, fast, f, 1e-5);
      QVERIFY2(err.empty(), qPrintable(QString::fromStdString(err)));
      err = compare_lin(ref, run_linear(ref, k, act, true), fast, f, 1e-4);
      QVERIFY2(err.empty(), qPrintable(QString::fromStdString(err)));
    }
  }

  void fusedOpsRejectBadArguments() {
    CpuBackend be;
    const BnCase k({2, 3, 4, 4}, 61);
    Tensor y = Tensor::empty({2, 3, 4, 4}, DType::F32), sm = Tensor::empty({3}, DType::F32);
    Tensor si = Tensor::empty({3}, DType::F32), rm = clone(k.rmean), rv = clone(k.rvar);
    Tensor bad_r = Tensor::empty({2, 3, 4, 5}, DType::F32);
    QVERIFY_THROWS_EXCEPTION(
        Error, be.batchnorm_act_forward_train(k.x, k.gamma, k.beta, bad_r, true, rm, rv, 0.1f,
                                              1e-5f, y, sm, si));
    Tensor none;
    Tensor bad_g = Tensor::empty({4}, DType::F32);
    QVERIFY_THROWS_EXCEPTION(Error, be.batchnorm_act_backward(k.x, y, k.dy, bad_g, sm, si, true, y,
                                                              none, none, none, false));
    const LinCase lk(4, 6, 5, 63);
    Tensor ly = Tensor::empty({4, 5}, DType::F32), lpre = Tensor::empty({4, 5}, DType::F32);
    Tensor bad_b = Tensor::empty({6}, DType::F32);
    QVERIFY_THROWS_EXCEPTION(Error, be.linear_act_forward(lk.x, lk.w, bad_b, Act::ReLU, ly, none));
    QVERIFY_THROWS_EXCEPTION(Error, be.linear_act_forward(lk.x, lk.w, lk.b, Act::GELU, ly, none));
    QVERIFY_THROWS_EXCEPTION(Error, be.linear_act_forward(lk.x, lk.w, lk.b, Act::GELU, ly, ly));
    be.linear_act_forward(lk.x, lk.w, lk.b, Act::GELU, ly, lpre);  // the valid call works
  }

  // ---------------------------------------------------------------- whole models

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
  void modelFusedMatchesUnfused() {
    QFETCH(QString, model);
    QFETCH(int, channels);
    QFETCH(int, size);
    QFETCH(int, batch);
    CpuBackend be;
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
  void trainerFusedMatchesUnfused() {
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
        RunConfig c = RunConfig::from_json(validate_config(cfg, "test"));
        EventBus bus;
        Recorder rec;
        bus.add(&rec);
        std::atomic<bool> stop{false};
        Trainer t(c, bus, stop);
        t.run(0);
        losses[fuse] = rec.losses;
        const json& st = rec.started["tricks"]["fuse_pointwise"];
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

  // ---------------------------------------------------------------- GPU
  // CUDA fused ops vs the fused CPU reference (f32 reference kernels), NCHW
  // and NHWC: BN statistics in double on both, apply in float: 1e-5 scaled.
  void cudaBnActMatchesCpuReference() {
    NEED_GPU();
    TB_GPU_TRY
    CpuBackend ref(BackendOptions{.reference = true});
    const BnCase k({6, 20, 7, 9}, 71);
    for (Layout l : {Layout::NCHW, Layout::NHWC})
      for (bool training : {true, false})
        for (bool residual : {false, true})
          for (bool relu : {true, false}) {
            const std::string err =
                compare_bn(ref, run_fused(ref, k, relu, residual, training), *gpu,
                           run_fused(*gpu, k, relu, residual, training, l), 1e-5, training);
            QVERIFY2(
                err.empty(),
                qPrintable(QString("%1: %2").arg(layout_name(l)).arg(QString::fromStdString(err))));
          }
    TB_GPU_CATCH
  }

  // Fused vs unfused on the GPU (same statistics kernel shape, same apply
  // arithmetic): 1e-6 scaled.
  void cudaBnActMatchesUnfused() {
    NEED_GPU();
    TB_GPU_TRY
    const BnCase k({8, 16, 10, 10}, 73);
    for (Layout l : {Layout::NCHW, Layout::NHWC})
      for (bool residual : {false, true})
        for (bool relu : {true, false}) {
          const std::string err =
              compare_bn(*gpu, run_unfused(*gpu, k, relu, residual, true, l), *gpu,
                         run_fused(*gpu, k, relu, residual, true, l), 1e-6, true);
          QVERIFY2(err.empty(), qPrintable(QString::fromStdString(err)));
        }
    TB_GPU_CATCH
  }

  // Linear+act on cuBLASLt (ReLU epilogue) / GEMM + fused kernel (GELU) vs the
  // CPU reference: FP32 GEMMs in another summation order, 1e-4 scaled.
  void cudaLinearActMatchesCpuReference() {
    NEED_GPU();
    TB_GPU_TRY
    CpuBackend ref(BackendOptions{.reference = true});
    const LinCase k(33, 300, 70, 79);
    for (Act act : {Act::ReLU, Act::GELU}) {
      const LinOut g = run_linear(*gpu, k, act, true);
      std::string err = compare_lin(ref, run_linear(ref, k, act, true), *gpu, g, 1e-4);
      QVERIFY2(err.empty(), qPrintable(QString::fromStdString(err)));
      err = compare_lin(*gpu, run_linear(*gpu, k, act, false), *gpu, g, 1e-4);
      QVERIFY2(err.empty(), qPrintable(QString::fromStdString(err)));
    }
    TB_GPU_CATCH
  }

  void cudaModelFusedMatchesUnfused() {
    NEED_GPU();
    TB_GPU_TRY
    const Shape in{3, 8, 8};
    const ModelRun u = run_model(*gpu, "resnet18-cifar", in, false, 4, 81);
    const ModelRun f = run_model(*gpu, "resnet18-cifar", in, true, 4, 81);
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

QTEST_GUILESS_MAIN(TestFused)
#include "test_fused.moc"
