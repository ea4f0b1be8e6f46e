// SPDX-License-Identifier: GPL-3.0-or-later
// Mixed precision (trick 1): the precision policy, the dynamic loss scaler and
// the f32 <-> f16/bf16 casts.
//
// On the CPU backend (the reference, runs everywhere): unscaling divides by the
// scale; planted inf/NaN set found_inf; a flagged optimizer step leaves
// parameters and optimizer state bit-unchanged (every optimizer, per-tensor and
// multi-tensor); backoff halves the scale; growth doubles it after N clean
// steps; a training sequence with an overflow in the middle skips that step,
// backs off, and goes on converging. Casts: exact bits for chosen values,
// round-to-nearest-even ties, overflow, subnormals, and round-trip error bounds
// (f16: 2^-11 relative for normal values, bf16: 2^-8). The low-precision
// linear layer stays within the input rounding's bound of the fp32 layer.
//
// The cuda* slots run the same scenarios on the CUDA backend and compare with
// the CPU (scaler decisions and skipped steps exactly; parameters to 1e-6
// relative, the optimizer kernels' FMA contraction being the only difference;
// casts bit for bit except NaN payloads; the low-precision linear layer to 1e-5
// of the output's magnitude, the summation order being the only difference). Each begins with QSKIP naming the
// reason when there is no CUDA device.
//
// NOTE: written on a machine without a GPU; the cuda* slots compiled there and
// skipped. They have NOT been run on a GPU yet.
#include <QtTest>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "engine/amp/loss_scaler.h"
#include "engine/amp/precision_policy.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/optim/optimizer.h"
#include "engine/core/error.h"
#ifdef TRAINBENCH_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#endif
#include "tests/engine/gpu_slot.h"

using namespace tb;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

Tensor random_host(int64_t n, uint64_t seed, DType dt = DType::F32) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  Tensor t = Tensor::empty({n}, dt);
  for (int64_t i = 0; i < n; ++i) {
    double v = dist(rng);
    if (v == 0.0) v = 0.5;
    if (dt == DType::F64)
      t.data_as<double>()[i] = v;
    else
      t.data_as<float>()[i] = float(v);
  }
  return t;
}

Tensor to_dev(Backend& b, const Tensor& h) {
  Tensor d = b.empty(h.shape(), h.dtype(), h.layout());
  b.copy(h, d);
  return d;
}
Tensor to_host(Backend& b, const Tensor& d) {
  Tensor h = Tensor::empty(d.shape(), d.dtype(), Device::cpu(), d.layout());
  b.copy(d, h);
  b.synchronize();
  return h;
}
bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}
float f32_at(const Tensor& h, int64_t i) { return h.data_as<float>()[i]; }

LossScalerOptions opts(float init, int64_t interval) {
  LossScalerOptions o;
  o.init_scale = init;
  o.growth_interval = interval;
  return o;
}

// One parameter set (two slots: a "weight" with decay and a "bias" without),
// stored contiguously as the trainer does, so one unscale covers all gradients.
struct Params {
  Tensor p, g, s1, s2;  // blocks
  std::vector<ParamSlot> list;
};
Params make_params(Backend& b, uint64_t seed, int64_t n_w = 300, int64_t n_b = 20) {
  const int64_t n = n_w + n_b;
  Params P;
  P.p = to_dev(b, random_host(n, seed));
  P.g = to_dev(b, random_host(n, seed + 1));
  // Optimizer state as it is after some steps: positive second moments.
  Tensor s2 = random_host(n, seed + 3);
  for (int64_t i = 0; i < n; ++i) s2.data_as<float>()[i] = std::abs(s2.data_as<float>()[i]);
  P.s1 = to_dev(b, random_host(n, seed + 2));
  P.s2 = to_dev(b, s2);
  for (int k = 0; k < 2; ++k) {
    const int64_t off = k == 0 ? 0 : n_w, len = k == 0 ? n_w : n_b;
    ParamSlot s;
    s.param = Tensor::view_of(P.p, off, {len});
    s.grad = Tensor::view_of(P.g, off, {len});
    s.state1 = Tensor::view_of(P.s1, off, {len});
    s.state2 = Tensor::view_of(P.s2, off, {len});
    s.weight_decay = k == 0;
    P.list.push_back(s);
  }
  return P;
}

OptimizerStep make_step(OptimizerKind kind) {
  OptimizerStep s;
  s.kind = kind;
  s.lr = 0.05f;
  s.momentum = 0.9f;
  s.weight_decay = 0.01f;
  s.step = 3;
  return s;
}

const OptimizerKind kKinds[] = {OptimizerKind::SGD, OptimizerKind::AdamW, OptimizerKind::RMSProp,
                                OptimizerKind::LARS, OptimizerKind::LAMB};

// ------------------------------------------------------------------ scenarios
// Each runs on any backend and returns host copies, so the CPU slot checks the
// properties and the CUDA slot compares with the CPU's result.

struct UnscaleResult {
  Tensor before, after;
  bool found_inf = false;
};
UnscaleResult scenario_unscale(Backend& b, float scale) {
  LossScaler sc(b, opts(scale, 2000));
  UnscaleResult r;
  r.before = random_host(1000, 11);
  Tensor g = to_dev(b, r.before);
  sc.unscale(g);
  r.after = to_host(b, g);
  r.found_inf = sc.read_found_inf();
  return r;
}

// Plants `bad` at index `at` of a 1000-element gradient; returns found_inf.
bool scenario_planted(Backend& b, float bad, int64_t at) {
  LossScaler sc(b, opts(1024.0f, 2000));
  Tensor h = random_host(1000, 12);
  h.data_as<float>()[at] = bad;
  Tensor g = to_dev(b, h);
  sc.unscale(g);
  return sc.read_found_inf();
}

struct SkipResult {
  Tensor p0, s10, s20;  // before
  Tensor p1, s11, s21;  // after
  bool found_inf_before_update = false;
};
SkipResult scenario_step(Backend& b, OptimizerKind kind, bool multi, bool plant) {
  Params P = make_params(b, 100 + uint64_t(kind));
  LossScaler sc(b, opts(256.0f, 2000));
  if (plant) {
    Tensor h = to_host(b, P.g);
    h.data_as<float>()[307] = kNaN;  // in the bias slot
    h.data_as<float>()[5] = kInf;    // and in the weight slot
    b.copy(h, P.g);
  }
  SkipResult r;
  r.p0 = to_host(b, P.p), r.s10 = to_host(b, P.s1), r.s20 = to_host(b, P.s2);
  sc.unscale(P.g);
  sc.step(make_step(kind), P.list, multi);
  r.found_inf_before_update = sc.read_found_inf();
  sc.update();
  r.p1 = to_host(b, P.p), r.s11 = to_host(b, P.s1), r.s21 = to_host(b, P.s2);
  return r;
}

// Scale, tracker and skipped count after each of a list of updates (true = overflow).
struct ScaleTrace {
  std::vector<float> scale;
  std::vector<int64_t> tracker, skipped;
  std::vector<bool> found_inf_after;
};
ScaleTrace scenario_updates(Backend& b, const LossScalerOptions& o, const std::vector<bool>& bad) {
  LossScaler sc(b, o);
  ScaleTrace t;
  for (bool x : bad) {
    Tensor h = random_host(64, 13);
    if (x) h.data_as<float>()[7] = kInf;
    Tensor g = to_dev(b, h);
    sc.unscale(g);
    sc.update();
    t.scale.push_back(sc.read_scale());
    t.tracker.push_back(sc.read_growth_tracker());
    t.skipped.push_back(sc.read_skipped());
    t.found_inf_after.push_back(sc.read_found_inf());
  }
  return t;
}

// A small "training run": minimise ½‖p − target‖² with SGD+momentum under the
// scaler. The loss gradient (p − target) is scaled on the device like a real
// dlogits; at step `overflow_at` the scaled gradient overflows (inf planted, as
// an fp16 backward would produce).
struct TrainTrace {
  std::vector<Tensor> params;  // after each step
  std::vector<float> scale;    // after each update
  std::vector<double> loss;    // before each step
  int64_t skipped = 0;
};
TrainTrace scenario_training(Backend& b, int steps, int overflow_at) {
  const int64_t n = 64;
  Tensor target = random_host(n, 21);
  Params P = make_params(b, 22, n, 0);
  P.list.resize(1);
  P.list[0].state2 = Tensor{};
  b.fill(P.s1, 0.0);
  LossScaler sc(b, opts(65536.0f, 4));
  OptimizerStep st;
  st.kind = OptimizerKind::SGD;
  st.lr = 0.1f;
  st.momentum = 0.5f;
  TrainTrace t;
  for (int i = 0; i < steps; ++i) {
    Tensor p = to_host(b, P.p);
    Tensor g = Tensor::empty({n}, DType::F32);
    double loss = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      const float d = f32_at(p, j) - f32_at(target, j);
      g.data_as<float>()[j] = d;
      loss += 0.5 * double(d) * double(d);
    }
    if (i == overflow_at) g.data_as<float>()[n / 2] = kInf;
    t.loss.push_back(loss);
    b.copy(g, P.g);
    sc.scale_grad(P.g);  // what backward would see: the scaled loss gradient
    sc.unscale(P.g);
    st.step = i + 1;
    sc.step(st, P.list, true);
    sc.update();
    t.params.push_back(to_host(b, P.p));
    t.scale.push_back(sc.read_scale());
  }
  t.skipped = sc.read_skipped();
  return t;
}

// Values whose casts are checked bit for bit.
std::vector<float> cast_probe() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -2.5f, 0.1f, 65504.0f, 65519.0f, 65520.0f, 1e6f,
                          -1e6f, 6.103515625e-05f /*2^-14*/, 5.9604645e-08f /*2^-24*/,
                          2.9802322e-08f /*2^-25: tie -> 0*/, 4.0e-08f, 1.0f + 1.0f / 2048,
                          1.0f + 3.0f / 2048, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 3.0e38f,
                          kInf, -kInf, 1e-40f /*f32 subnormal*/};
  Tensor r = random_host(2000, 31);
  for (int64_t i = 0; i < r.numel(); ++i) v.push_back(f32_at(r, i) * float(1 << (i % 20)));
  return v;
}
Tensor host_of(const std::vector<float>& v) {
  Tensor t = Tensor::empty({int64_t(v.size())}, DType::F32);
  std::memcpy(t.data(), v.data(), v.size() * 4);
  return t;
}
// src -> dt -> f32 on backend b; returns {low-precision bits, round trip}.
std::pair<Tensor, Tensor> round_trip(Backend& b, const Tensor& src_h, DType dt) {
  Tensor src = to_dev(b, src_h);
  Tensor lo = b.empty(src.shape(), dt);
  Tensor back = b.empty(src.shape(), DType::F32);
  b.cast(src, lo);
  b.cast(lo, back);
  return {to_host(b, lo), to_host(b, back)};
}
uint16_t bits16(const Tensor& t, int64_t i) { return t.data_as<uint16_t>()[i]; }

// Linear under AMP on backend b: x (N,K), w (M,K) rounded to dt; returns
// {y, dx, dw, db} on the host (f32).
struct LinearOut {
  Tensor y, dx, dw, db;
};
LinearOut linear_lp(Backend& b, const Tensor& x, const Tensor& w, const Tensor& bias,
                    const Tensor& dy, DType dt) {
  const int64_t N = x.dim(0), K = x.dim(1), M = w.dim(0);
  Tensor xd = to_dev(b, x), wd = to_dev(b, w), bd = to_dev(b, bias), dyd = to_dev(b, dy);
  Tensor xl = b.empty({N, K}, dt), wl = b.empty({M, K}, dt);
  b.cast(xd, xl);
  b.cast(wd, wl);
  Tensor y = b.empty({N, M}, DType::F32), dx = b.empty({N, K}, DType::F32);
  Tensor dw = b.empty({M, K}, DType::F32), db = b.empty({M}, DType::F32);
  b.linear_forward_lp(xl, wl, bd, y);
  b.linear_backward_lp(xl, wl, dyd, dx, dw, db, false);
  return {to_host(b, y), to_host(b, dx), to_host(b, dw), to_host(b, db)};
}
LinearOut linear_f32(Backend& b, const Tensor& x, const Tensor& w, const Tensor& bias,
                     const Tensor& dy) {
  const int64_t N = x.dim(0), K = x.dim(1), M = w.dim(0);
  LinearOut o{Tensor::empty({N, M}, DType::F32), Tensor::empty({N, K}, DType::F32),
              Tensor::empty({M, K}, DType::F32), Tensor::empty({M}, DType::F32)};
  b.linear_forward(x, w, bias, o.y);
  b.linear_backward(x, w, dy, o.dx, o.dw, o.db, false);
  return o;
}
// Σ_k |a[i,k]|·|b[j,k]| for row-major a (I,K), b (J,K): the scale of one GEMM output.
double abs_dot(const Tensor& a, int64_t i, const Tensor& b, int64_t j, int64_t K, bool a_t = false,
               bool b_t = false, int64_t I = 0, int64_t J = 0) {
  double s = 0.0;
  for (int64_t k = 0; k < K; ++k) {
    const float av = a_t ? f32_at(a, k * I + i) : f32_at(a, i * K + k);
    const float bv = b_t ? f32_at(b, k * J + j) : f32_at(b, j * K + k);
    s += std::abs(double(av)) * std::abs(double(bv));
  }
  return s;
}

}  // namespace

class TestAmp : public QObject {
  Q_OBJECT

 private:
  CpuBackend cpu{BackendOptions{.reference = true}};
  std::unique_ptr<Backend> gpu;
  bool cuda_available = false;
  QByteArray why;

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
#else
    why = "this build has no CUDA backend (TRAINBENCH_HAVE_CUDA is not defined)";
#endif
  }

  // ------------------------------------------------------------ policy, defaults

  void policyFromConfig() {
    const PrecisionPolicy off = PrecisionPolicy::from_config("off");
    QVERIFY(!off.enabled());
    QCOMPARE(off.dtype_for(AmpOp::Conv), DType::F32);
    const PrecisionPolicy h = PrecisionPolicy::from_config("fp16");
    QCOMPARE(h.dtype_for(AmpOp::Conv), DType::F16);
    QCOMPARE(h.dtype_for(AmpOp::Linear), DType::F16);
    for (AmpOp op : {AmpOp::BatchNorm, AmpOp::Loss, AmpOp::Reduction, AmpOp::Optimizer,
                     AmpOp::Pointwise})
      QCOMPARE(h.dtype_for(op), DType::F32);
    QVERIFY(h.needs_loss_scaling());
    const PrecisionPolicy bf = PrecisionPolicy::from_config("bf16");
    QCOMPARE(bf.dtype_for(AmpOp::Linear), DType::BF16);
    QCOMPARE(bf.dtype_for(AmpOp::BatchNorm), DType::F32);
    QVERIFY(!bf.needs_loss_scaling());
    QCOMPARE(QByteArray(bf.name()), QByteArray("bf16"));
    QVERIFY_THROWS_EXCEPTION(Error, PrecisionPolicy::from_config("fp8"));
  }

  void scalerDefaults() {
    LossScaler sc(cpu);
    QCOMPARE(sc.read_scale(), 65536.0f);
    QCOMPARE(sc.options().growth_factor, 2.0f);
    QCOMPARE(sc.options().backoff_factor, 0.5f);
    QCOMPARE(sc.options().growth_interval, int64_t(2000));
    QCOMPARE(sc.read_growth_tracker(), int64_t(0));
    QVERIFY(!sc.read_found_inf());
    QVERIFY_THROWS_EXCEPTION(Error, LossScaler(cpu, opts(0.0f, 10)));
    QVERIFY_THROWS_EXCEPTION(Error, LossScaler(cpu, opts(1.0f, 0)));
  }

  // ------------------------------------------------------------ CPU reference

  void unscaleMultipliesByInverseScale() {
    const UnscaleResult r = scenario_unscale(cpu, 1024.0f);
    QVERIFY(!r.found_inf);
    for (int64_t i = 0; i < r.before.numel(); ++i)  // 1/1024 is exact: so is the product
      QCOMPARE(f32_at(r.after, i), f32_at(r.before, i) / 1024.0f);
    // f64 gradients (the reference's finite-difference dtype) too.
    LossScaler sc(cpu, opts(8.0f, 2000));
    Tensor g = random_host(100, 14, DType::F64);
    Tensor g0 = random_host(100, 14, DType::F64);
    sc.unscale(g);
    for (int64_t i = 0; i < 100; ++i) QCOMPARE(g.data_as<double>()[i], g0.data_as<double>()[i] / 8);
    QVERIFY(!sc.read_found_inf());
  }

  void plantedInfAndNanSetFoundInf() {
    for (float bad : {kInf, -kInf, kNaN})
      for (int64_t at : {int64_t(0), int64_t(517), int64_t(999)})
        QVERIFY2(scenario_planted(cpu, bad, at),
                 qPrintable(QString("value %1 at %2 not found").arg(double(bad)).arg(at)));
    // Large but finite gradients are not overflows.
    QVERIFY(!scenario_planted(cpu, 3.0e38f, 3));
  }

  void skippedStepLeavesParamsAndStateBitUnchanged() {
    for (OptimizerKind k : kKinds)
      for (bool multi : {false, true}) {
        const QString what = QString("%1 multi=%2").arg(optimizer_name(k)).arg(multi);
        const SkipResult r = scenario_step(cpu, k, multi, true);
        QVERIFY2(r.found_inf_before_update, qPrintable(what));
        QVERIFY2(same_bits(r.p0, r.p1), qPrintable(what + ": parameters changed"));
        QVERIFY2(same_bits(r.s10, r.s11), qPrintable(what + ": state1 changed"));
        QVERIFY2(same_bits(r.s20, r.s21), qPrintable(what + ": state2 changed"));
        // Control: the same step without the planted values does update.
        const SkipResult c = scenario_step(cpu, k, multi, false);
        QVERIFY2(!c.found_inf_before_update, qPrintable(what));
        QVERIFY2(!same_bits(c.p0, c.p1), qPrintable(what + ": clean step did not update"));
      }
  }

  void backoffHalvesScale() {
    const ScaleTrace t = scenario_updates(cpu, opts(65536.0f, 2000), {true, false, true, true});
    QCOMPARE(t.scale, (std::vector<float>{32768.0f, 32768.0f, 16384.0f, 8192.0f}));
    QCOMPARE(t.tracker, (std::vector<int64_t>{0, 1, 0, 0}));
    QCOMPARE(t.skipped, (std::vector<int64_t>{1, 1, 2, 3}));
    for (bool f : t.found_inf_after) QVERIFY(!f);  // update clears the flag
  }

  void growthDoublesAfterCleanSteps() {
    const std::vector<bool> bad = {false, false, false, false, false, false, true, false};
    const ScaleTrace t = scenario_updates(cpu, opts(1024.0f, 3), bad);
    QCOMPARE(t.scale, (std::vector<float>{1024, 1024, 2048, 2048, 2048, 4096, 2048, 2048}));
    QCOMPARE(t.tracker, (std::vector<int64_t>{1, 2, 0, 1, 2, 0, 0, 1}));
    // Never grows into inf.
    const ScaleTrace top = scenario_updates(cpu, opts(3.0e38f, 1), {false});
    QCOMPARE(top.scale.back(), 3.0e38f);
  }

  void overflowMidTrainingSkipsBacksOffAndContinues() {
    const int steps = 30, bad = 10;
    const TrainTrace t = scenario_training(cpu, steps, bad);
    QCOMPARE(t.skipped, int64_t(1));
    // The overflowing step is skipped: parameters as after the step before.
    QVERIFY(same_bits(t.params[bad], t.params[bad - 1]));
    // Every other step moves the parameters.
    for (int i = 1; i < steps; ++i)
      if (i != bad) QVERIFY2(!same_bits(t.params[i], t.params[i - 1]), qPrintable(QString::number(i)));
    // Scale: grows every 4 clean steps, halves at the overflow, grows again later.
    QCOMPARE(t.scale[2], 65536.0f);
    QCOMPARE(t.scale[3], 131072.0f);
    QCOMPARE(t.scale[bad - 1], 262144.0f);
    QCOMPARE(t.scale[bad], 131072.0f);
    QCOMPARE(t.scale[bad + 4], 262144.0f);
    // Training went on: the loss keeps falling after the skipped step.
    QVERIFY(t.loss[bad + 1] < t.loss[bad - 1]);
    QVERIFY2(t.loss.back() < 1e-3 * t.loss.front(),
             qPrintable(QString("loss %1 -> %2").arg(t.loss.front()).arg(t.loss.back())));
  }

  void castsRoundToNearestEven() {
    const std::vector<float> v = cast_probe();
    const Tensor src = host_of(v);
    const auto [h, hb] = round_trip(cpu, src, DType::F16);
    const auto [b, bb] = round_trip(cpu, src, DType::BF16);
    // f16 bits of chosen values.
    QCOMPARE(bits16(h, 2), uint16_t(0x3c00));   // 1
    QCOMPARE(bits16(h, 3), uint16_t(0xc100));   // -2.5
    QCOMPARE(bits16(h, 4), uint16_t(0x2e66));   // 0.1
    QCOMPARE(bits16(h, 5), uint16_t(0x7bff));   // 65504, the largest
    QCOMPARE(bits16(h, 6), uint16_t(0x7bff));   // 65519 rounds down
    QCOMPARE(bits16(h, 7), uint16_t(0x7c00));   // 65520 ties to even: inf
    QCOMPARE(bits16(h, 8), uint16_t(0x7c00));   // overflow
    QCOMPARE(bits16(h, 9), uint16_t(0xfc00));
    QCOMPARE(bits16(h, 10), uint16_t(0x0400));  // 2^-14, smallest normal
    QCOMPARE(bits16(h, 11), uint16_t(0x0001));  // 2^-24, smallest subnormal
    QCOMPARE(bits16(h, 12), uint16_t(0x0000));  // 2^-25 ties to even: 0
    QCOMPARE(bits16(h, 13), uint16_t(0x0001));  // 4e-8 rounds up to 2^-24
    QCOMPARE(bits16(h, 14), uint16_t(0x3c00));  // 1 + 2^-11: tie, to even
    QCOMPARE(bits16(h, 15), uint16_t(0x3c02));  // 1 + 3·2^-11: tie, to even
    QCOMPARE(bits16(h, 1), uint16_t(0x8000));   // -0
    // bf16
    QCOMPARE(bits16(b, 2), uint16_t(0x3f80));
    QCOMPARE(bits16(b, 16), uint16_t(0x3f80));  // 1 + 2^-8: tie, to even
    QCOMPARE(bits16(b, 17), uint16_t(0x3f82));  // 1 + 3·2^-8
    QVERIFY(std::isfinite(f32_at(bb, 18)));      // bf16 keeps f32's range
    QVERIFY(std::isinf(f32_at(bb, 19)) && std::isinf(f32_at(hb, 19)));
    // NaN stays NaN.
    const auto [hn, hnb] = round_trip(cpu, host_of({kNaN, -kNaN}), DType::F16);
    const auto [bn, bnb] = round_trip(cpu, host_of({kNaN, -kNaN}), DType::BF16);
    QVERIFY(std::isnan(f32_at(hnb, 0)) && std::isnan(f32_at(hnb, 1)));
    QVERIFY(std::isnan(f32_at(bnb, 0)) && std::isnan(f32_at(bnb, 1)));
    // Round-trip error bounds: half an ulp relative (f16 normals 2^-11, bf16
    // 2^-8); f16 subnormals within 2^-25 absolute.
    for (size_t i = 0; i < v.size(); ++i) {
      const float x = v[i];
      if (!std::isfinite(x)) continue;
      const float eb = std::abs(f32_at(bb, int64_t(i)) - x);
      if (std::abs(x) >= 1e-37f) QVERIFY2(eb <= std::ldexp(std::abs(x), -8), qPrintable(QString::number(x)));
      if (std::abs(x) > 65504.0f) continue;
      const float eh = std::abs(f32_at(hb, int64_t(i)) - x);
      const float tol = std::abs(x) >= 6.103515625e-05f ? std::ldexp(std::abs(x), -11) : 2.9802322e-08f;
      QVERIFY2(eh <= tol, qPrintable(QString("%1 -> %2").arg(double(x)).arg(double(f32_at(hb, int64_t(i))))));
    }
  }

  void optimizerFrontEndSkipsOnFoundInf() {
    // Optimizer::step(lr, gs, scaler_state): the trainer's entry under fp16.
    Tensor p = random_host(50, 61), g = random_host(50, 62);
    std::vector<ParamInfo> infos{{"w", p, g, true}};
    OptimizerConfig oc;
    oc.kind = OptimizerKind::AdamW;
    Optimizer opt(oc, infos, cpu);
    LossScaler sc(cpu, opts(4.0f, 2000));
    const Tensor p0 = random_host(50, 61);
    g.data_as<float>()[17] = kNaN;
    sc.unscale(g);
    opt.step(0.1f, 1.0f, sc.state());
    QVERIFY(same_bits(p, p0));
    for (const Tensor& b : opt.state_blocks())
      for (int64_t i = 0; i < b.numel(); ++i) QCOMPARE(f32_at(b, i), 0.0f);
    sc.update();
    g.data_as<float>()[17] = 0.25f;  // clean again
    sc.unscale(g);
    opt.step(0.1f, 1.0f, sc.state());
    QVERIFY(!same_bits(p, p0));
    QCOMPARE(opt.steps(), int64_t(2));  // the host's count includes the skipped step
  }

  void argumentChecks() {
    Tensor s = Tensor::zeros({Backend::kAmpStateSize}, DType::F32);
    Tensor g = Tensor::zeros({4}, DType::F32);
    cpu.amp_unscale_and_check(g, s);  // the CPU backend implements it
    Tensor wrong = Tensor::zeros({3}, DType::F32);
    QVERIFY_THROWS_EXCEPTION(Error, cpu.amp_unscale_and_check(g, wrong));
    Tensor i32 = Tensor::zeros({4}, DType::I32);
    QVERIFY_THROWS_EXCEPTION(Error, cpu.cast(i32, g));
  }

  void linearLowPrecisionWithinRoundingOfF32() {
    const int64_t N = 16, K = 64, M = 8;
    const Tensor x = random_host(N * K, 41).reshaped({N, K}), w = random_host(M * K, 42).reshaped({M, K});
    const Tensor bias = random_host(M, 43), dy = random_host(N * M, 44).reshaped({N, M});
    const LinearOut ref = linear_f32(cpu, x, w, bias, dy);
    for (DType dt : {DType::F16, DType::BF16}) {
      // Each input rounded by at most u (half an ulp, relative): a product by
      // (1+u)²; the fp32 sums add far less. Bound: 2.5·u·Σ|a||b| per output.
      const double u = dt == DType::F16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
      const LinearOut lp = linear_lp(cpu, x, w, bias, dy, dt);
      bool any_diff = false;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t m = 0; m < M; ++m) {
          const double e = std::abs(double(f32_at(lp.y, n * M + m)) - f32_at(ref.y, n * M + m));
          any_diff |= e > 0;
          QVERIFY2(e <= 2.5 * u * abs_dot(x, n, w, m, K) + 1e-6, dtype_name(dt));
        }
      QVERIFY2(any_diff, "the inputs were not rounded");
      for (int64_t n = 0; n < N; ++n)  // dx[n,k] = Σ_m dy[n,m] w[m,k]
        for (int64_t k = 0; k < K; ++k) {
          double sc = 0.0;
          for (int64_t m = 0; m < M; ++m)
            sc += std::abs(double(f32_at(dy, n * M + m))) * std::abs(double(f32_at(w, m * K + k)));
          const double e = std::abs(double(f32_at(lp.dx, n * K + k)) - f32_at(ref.dx, n * K + k));
          QVERIFY2(e <= 2.5 * u * sc + 1e-6, dtype_name(dt));
        }
      for (int64_t m = 0; m < M; ++m)  // dw[m,k] = Σ_n dy[n,m] x[n,k]
        for (int64_t k = 0; k < K; ++k) {
          double sc = 0.0;
          for (int64_t n = 0; n < N; ++n)
            sc += std::abs(double(f32_at(dy, n * M + m))) * std::abs(double(f32_at(x, n * K + k)));
          const double e = std::abs(double(f32_at(lp.dw, m * K + k)) - f32_at(ref.dw, m * K + k));
          QVERIFY2(e <= 2.5 * u * sc + 1e-6, dtype_name(dt));
        }
      // db sums the unrounded f32 dy: the same as the fp32 layer's.
      QVERIFY(same_bits(lp.db, ref.db));
    }
    // Mixed or f32 inputs are refused.
    Tensor xf = x;
    Tensor y = Tensor::empty({N, M}, DType::F32);
    QVERIFY_THROWS_EXCEPTION(Error, cpu.linear_forward_lp(xf, w, bias, y));
  }

  // ------------------------------------------------------------ CUDA vs CPU

  void cudaUnscale() {
    NEED_GPU();
    TB_GPU_TRY
    const UnscaleResult c = scenario_unscale(cpu, 1024.0f), d = scenario_unscale(*gpu, 1024.0f);
    QCOMPARE(d.found_inf, c.found_inf);
    QVERIFY(same_bits(c.after, d.after));  // a multiplication by 2^-10: exact on both
    TB_GPU_CATCH
  }

  void cudaPlantedInfAndNan() {
    NEED_GPU();
    TB_GPU_TRY
    for (float bad : {kInf, -kInf, kNaN})
      for (int64_t at : {int64_t(0), int64_t(517), int64_t(999)})
        QVERIFY(scenario_planted(*gpu, bad, at));
    QVERIFY(!scenario_planted(*gpu, 3.0e38f, 3));
    TB_GPU_CATCH
  }

  void cudaSkippedStep() {
    NEED_GPU();
    TB_GPU_TRY
    for (OptimizerKind k : kKinds)
      for (bool multi : {false, true}) {
        const QString what = QString("%1 multi=%2").arg(optimizer_name(k)).arg(multi);
        const SkipResult r = scenario_step(*gpu, k, multi, true);
        QVERIFY2(r.found_inf_before_update, qPrintable(what));
        QVERIFY2(same_bits(r.p0, r.p1), qPrintable(what + ": parameters changed"));
        QVERIFY2(same_bits(r.s10, r.s11), qPrintable(what + ": state1 changed"));
        QVERIFY2(same_bits(r.s20, r.s21), qPrintable(what + ": state2 changed"));
        const SkipResult c = scenario_step(*gpu, k, multi, false);
        const SkipResult ref = scenario_step(cpu, k, multi, false);
        QVERIFY2(!c.found_inf_before_update, qPrintable(what));
        for (int64_t i = 0; i < ref.p1.numel(); ++i) {
          const float a = f32_at(ref.p1, i), b = f32_at(c.p1, i);
          QVERIFY2(std::abs(a - b) <= 1e-6f * std::max(1.0f, std::abs(a)),
                   qPrintable(what + QString(" p[%1]: cpu %2 cuda %3").arg(i).arg(a).arg(b)));
        }
      }
    TB_GPU_CATCH
  }

  void cudaBackoffAndGrowth() {
    NEED_GPU();
    TB_GPU_TRY
    const std::vector<bool> bad = {false, false, false, true, false, true, true, false, false};
    const ScaleTrace c = scenario_updates(cpu, opts(1024.0f, 2), bad);
    const ScaleTrace d = scenario_updates(*gpu, opts(1024.0f, 2), bad);
    QCOMPARE(d.scale, c.scale);
    QCOMPARE(d.tracker, c.tracker);
    QCOMPARE(d.skipped, c.skipped);
    QCOMPARE(d.found_inf_after, c.found_inf_after);
    TB_GPU_CATCH
  }

  void cudaOverflowMidTraining() {
    NEED_GPU();
    TB_GPU_TRY
    const int steps = 30, bad = 10;
    const TrainTrace c = scenario_training(cpu, steps, bad);
    const TrainTrace d = scenario_training(*gpu, steps, bad);
    QCOMPARE(d.skipped, c.skipped);
    QCOMPARE(d.scale, c.scale);
    QVERIFY(same_bits(d.params[bad], d.params[bad - 1]));
    for (int64_t i = 0; i < c.params.back().numel(); ++i) {
      const float a = f32_at(c.params.back(), i), b = f32_at(d.params.back(), i);
      QVERIFY2(std::abs(a - b) <= 1e-5f * std::max(1.0f, std::abs(a)),
               qPrintable(QString("p[%1]: cpu %2 cuda %3").arg(i).arg(a).arg(b)));
    }
    TB_GPU_CATCH
  }

  void cudaCastRoundTrip() {
    NEED_GPU();
    TB_GPU_TRY
    const Tensor src = host_of(cast_probe());
    for (DType dt : {DType::F16, DType::BF16}) {
      const auto [cl, cb] = round_trip(cpu, src, dt);
      const auto [gl, gb] = round_trip(*gpu, src, dt);
      // Both round to nearest even: the same bits (the probe has no NaN).
      QVERIFY2(same_bits(cl, gl), dtype_name(dt));
      QVERIFY2(same_bits(cb, gb), dtype_name(dt));
    }
    const auto [hn, hnb] = round_trip(*gpu, host_of({kNaN}), DType::F16);
    const auto [bn, bnb] = round_trip(*gpu, host_of({kNaN}), DType::BF16);
    QVERIFY(std::isnan(f32_at(hnb, 0)) && std::isnan(f32_at(bnb, 0)));
    TB_GPU_CATCH
  }

  void cudaLinearLowPrecision() {
    NEED_GPU();
    TB_GPU_TRY
    // Same rounded inputs on both: only the summation order differs (Tensor
    // Core fp32 accumulation vs the CPU's), so 1e-5 of the output's magnitude.
    const int64_t N = 64, K = 96, M = 40;
    const Tensor x = random_host(N * K, 51).reshaped({N, K}), w = random_host(M * K, 52).reshaped({M, K});
    const Tensor bias = random_host(M, 53), dy = random_host(N * M, 54).reshaped({N, M});
    for (DType dt : {DType::F16, DType::BF16}) {
      const LinearOut c = linear_lp(cpu, x, w, bias, dy, dt);
      const LinearOut d = linear_lp(*gpu, x, w, bias, dy, dt);
      for (auto [rt, gt, what] : {std::tuple{c.y, d.y, "y"}, std::tuple{c.dx, d.dx, "dx"},
                                  std::tuple{c.dw, d.dw, "dw"}, std::tuple{c.db, d.db, "db"}}) {
        double mx = 0.0;
        for (int64_t i = 0; i < rt.numel(); ++i) mx = std::max(mx, double(std::abs(f32_at(rt, i))));
        for (int64_t i = 0; i < rt.numel(); ++i)
          QVERIFY2(std::abs(double(f32_at(rt, i)) - f32_at(gt, i)) <= 1e-5 * mx,
                   qPrintable(QString("%1 %2[%3]: cpu %4 cuda %5").arg(dtype_name(dt)).arg(what)
                                  .arg(i).arg(f32_at(rt, i)).arg(f32_at(gt, i))));
      }
    }
    TB_GPU_CATCH
  }
};

QTEST_GUILESS_MAIN(TestAmp)
#include "test_amp.moc"
