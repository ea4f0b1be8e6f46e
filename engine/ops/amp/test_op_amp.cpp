// SPDX-License-Identifier: GPL-3.0-or-later
// The mixed-precision op family (amp): the precision policy, the f32 <->
// f16/bf16 casts, amp_unscale_and_check (found_inf) and the dynamic loss
// scaler that drives it, on the CPU reference and on CUDA.
//
// Typed slots (a target column: cpu-ref, cuda) run one body on each target and
// compare the target with the CPU reference: unscaling divides by the scale
// (bit for bit: 1/1024 is exact); planted inf/NaN set found_inf; a flagged
// optimizer step leaves parameters and optimizer state bit-unchanged (every
// optimizer, per-tensor and multi-tensor) while a clean one updates them
// (CUDA within 1e-6 relative of the CPU: the optimizer kernels' FMA
// contraction); backoff halves the scale and growth doubles it after N clean
// steps (the same trace on every target); a training sequence with an overflow
// in the middle skips that step, backs off and goes on converging (CUDA
// parameters within 1e-5 of the CPU's). Casts: exact bits for chosen values,
// round-to-nearest-even ties, overflow, subnormals, round-trip error bounds
// (f16: 2^-11 relative for normal values, bf16: 2^-8) on the CPU; CUDA's casts
// bit for bit the CPU's except NaN payloads. The low-precision GEMM and
// convolution ops are in test_op_linear and test_op_conv (their f16/bf16 rows).
// The CUDA kernels also run on the CUDA emulator (tests/cuda_emulator), on
// any machine, against the CPU reference with the GPU slots' bounds, both
// thread orders: the casts on every f16 and bf16 value and on f32 values of
// every sign and exponent with the low bits that decide each rounding (ties,
// overflow, subnormals, NaN), and the scaler's kernels through steps of
// growth, backoff, found_inf in either of two gradient blocks, overflow and
// subnormal gradients, the growth that would reach inf.
// GPU rows QSKIP with the reason where there is no device.
#include <QtTest>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/amp/loss_scaler.h"
#include "engine/amp/precision_policy.h"
#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/ops/amp/amp.h"
#include "engine/optim/optimizer.h"
#include "tests/engine/device_fixture.h"
#include "tests/engine/tensor_helpers.h"
#include "tests/cuda_emulator/emulated_slot.h"
#if defined(TRAINBENCH_CUDA_EMULATED)
#include "tests/cuda_emulator/begin_emulated.h"
#include "engine/ops/amp/amp.cuh"
#include "tests/cuda_emulator/end_emulated.h"
#endif

using namespace tb;
using namespace tb::test;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// Uniform in [-1, 1) (never 0), n elements.
Tensor random_vector(int64_t n, uint64_t seed, DType dt = DType::F32) {
  return random_tensor({n}, seed, -1.0, 1.0, dt);
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
// `kind` says which state is a second moment: state2 (AdamW, LAMB) or, for
// RMSProp, state1 (its mean square; state2 is its momentum buffer).
Params make_params(Backend& b, uint64_t seed, int64_t n_w = 300, int64_t n_b = 20,
                   OptimizerKind kind = OptimizerKind::AdamW) {
  const int64_t n = n_w + n_b;
  Params P;
  P.p = to_device(b, random_vector(n, seed));
  P.g = to_device(b, random_vector(n, seed + 1));
  // Optimizer state as it is after some steps: positive second moments (a
  // negative mean square makes RMSProp's step NaN).
  Tensor s1 = random_vector(n, seed + 2), s2 = random_vector(n, seed + 3);
  Tensor& second = kind == OptimizerKind::RMSProp ? s1 : s2;
  for (int64_t i = 0; i < n; ++i) second.data_as<float>()[i] = std::abs(second.data_as<float>()[i]);
  P.s1 = to_device(b, s1);
  P.s2 = to_device(b, s2);
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
// Each runs on any backend and returns host copies, so a typed slot checks the
// properties on its target and compares the target with the CPU reference.

struct UnscaleResult {
  Tensor before, after;
  bool found_inf = false;
};
UnscaleResult scenario_unscale(Backend& b, float scale) {
  LossScaler sc(b, opts(scale, 2000));
  UnscaleResult r;
  r.before = random_vector(1000, 11);
  Tensor g = to_device(b, r.before);
  sc.unscale(g);
  r.after = to_host(b, g);
  r.found_inf = sc.read_found_inf();
  return r;
}

// Plants `bad` at index `at` of a 1000-element gradient; returns found_inf.
bool scenario_planted(Backend& b, float bad, int64_t at) {
  LossScaler sc(b, opts(1024.0f, 2000));
  Tensor h = random_vector(1000, 12);
  h.data_as<float>()[at] = bad;
  Tensor g = to_device(b, h);
  sc.unscale(g);
  return sc.read_found_inf();
}

struct SkipResult {
  Tensor p0, s10, s20;  // before
  Tensor p1, s11, s21;  // after
  bool found_inf_before_update = false;
};
SkipResult scenario_step(Backend& b, OptimizerKind kind, bool multi, bool plant) {
  Params P = make_params(b, 100 + uint64_t(kind), 300, 20, kind);
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
    Tensor h = random_vector(64, 13);
    if (x) h.data_as<float>()[7] = kInf;
    Tensor g = to_device(b, h);
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
  Tensor target = random_vector(n, 21);
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
  Tensor r = random_vector(2000, 31);
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
  Tensor src = to_device(b, src_h);
  Tensor lo = b.empty(src.shape(), dt);
  Tensor back = b.empty(src.shape(), DType::F32);
  amp::cast(b, src, lo);
  amp::cast(b, lo, back);
  return {to_host(b, lo), to_host(b, back)};
}
uint16_t bits16(const Tensor& t, int64_t i) { return t.data_as<uint16_t>()[i]; }

// A CUDA side's f32, f16 or bf16 output against the CPU's from the same
// inputs: the same bits, except that where the CPU has a NaN any NaN will do
// (the GPU's cvt.rn gives every NaN as 0x7fff, the CPU keeps its sign; its
// arithmetic may not keep a payload). "" or the first element that differs.
std::string bits_differ(const Tensor& cpu, const Tensor& got, const std::string& what) {
  if (cpu.dtype() != got.dtype() || cpu.numel() != got.numel())
    return what + ": " + cpu.describe() + " vs " + got.describe();
  const size_t es = dtype_size(cpu.dtype());
  const auto* c = static_cast<const char*>(cpu.data());
  const auto* g = static_cast<const char*>(got.data());
  for (int64_t i = 0; i < cpu.numel(); ++i) {
    const double a = value_at(cpu, i), b = value_at(got, i);
    if (std::isnan(a) ? std::isnan(b) : std::memcmp(c + i * es, g + i * es, es) == 0) continue;
    return what + ": element " + std::to_string(i) + " cpu " +
           QString::number(a, 'g', 9).toStdString() + " cuda " +
           QString::number(b, 'g', 9).toStdString();
  }
  return "";
}

#if defined(TRAINBENCH_CUDA_EMULATED)
// amp::cast through the emulated launchers, as amp_cuda.cpp calls them
// (host tensors).
void emulated_cast(const Tensor& src, Tensor& dst) {
  tb::cuda_emu::launch_cast(src.dtype(), dst.dtype(), src.data(), dst.data(), src.numel(),
                            nullptr);
}

// f32 values of every size a scaler meets: random in [-1, 1) times 2^-120
// to 2^79 (unscaled into f32 subnormals, scaled past f32's range), a few
// zeros of either sign.
Tensor wide_values(int64_t n, uint64_t seed) {
  Tensor t = random_vector(n, seed);
  float* p = t.data_as<float>();
  for (int64_t i = 0; i < n; ++i) {
    p[i] = std::ldexp(p[i], int((i * 37) % 200) - 120);
    if (i % 97 == 5) p[i] = i % 2 ? -0.0f : 0.0f;
  }
  return t;
}
#endif

// The targets of the typed slots: the CPU reference and CUDA (f32 master values).
void add_targets() {
  QTest::addColumn<Target>("target");
  for (const Target& t : {Target{Impl::CpuReference, Layout::NCHW, DType::F32},
                          Target{Impl::Cuda, Layout::NCHW, DType::F32}})
    QTest::newRow(t.name().c_str()) << t;
}

}  // namespace

class TestOpAmp : public QObject {
  Q_OBJECT

 private:
  CpuBackend& cpu = cpu_reference();

 private slots:
  // ------------------------------------------------------------ policy, defaults


  void policy_from_config() {
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
    // A run's amp keeps activations in its low precision; off, f32.
    QCOMPARE(off.activation_dtype(), DType::F32);
    QCOMPARE(h.activation_dtype(), DType::F16);
    QCOMPARE(bf.activation_dtype(), DType::BF16);
    PrecisionPolicy f32_form = bf;
    f32_form.activations = AmpActivations::F32;  // the earlier form, still selectable
    QCOMPARE(f32_form.activation_dtype(), DType::F32);
    // ... through the amp_activations setting; any other value names the setting.
    QCOMPARE(PrecisionPolicy::from_config("bf16", "f32").activation_dtype(), DType::F32);
    QCOMPARE(PrecisionPolicy::from_config("fp16", "low").activation_dtype(), DType::F16);
    QCOMPARE(PrecisionPolicy::from_config("off", "low").activation_dtype(), DType::F32);
    try {
      PrecisionPolicy::from_config("bf16", "half");
      QFAIL("amp_activations = half was accepted");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("amp_activations") != std::string::npos, e.what());
    }
  }


  void scaler_defaults() {
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

  // ------------------------------------------------------------ unscale, found_inf

  void unscale_multiplies_by_inverse_scale_data() { add_targets(); }
  void unscale_multiplies_by_inverse_scale() {
    FETCH_TARGET(t, be);
    TB_GPU_TRY
    const UnscaleResult r = scenario_unscale(be, 1024.0f), c = scenario_unscale(cpu, 1024.0f);
    QVERIFY(!r.found_inf);
    QCOMPARE(r.found_inf, c.found_inf);
    for (int64_t i = 0; i < r.before.numel(); ++i)  // 1/1024 is exact: so is the product
      QCOMPARE(f32_at(r.after, i), f32_at(r.before, i) / 1024.0f);
    QVERIFY(bitwise_equal(c.after, r.after));  // a multiplication by 2^-10: exact on both
    TB_GPU_CATCH
  }

  // f64 gradients (the reference's finite-difference dtype) too.
  void unscale_f64_gradients() {
    LossScaler sc(cpu, opts(8.0f, 2000));
    Tensor g = random_vector(100, 14, DType::F64);
    Tensor g0 = random_vector(100, 14, DType::F64);
    sc.unscale(g);
    for (int64_t i = 0; i < 100; ++i) QCOMPARE(g.data_as<double>()[i], g0.data_as<double>()[i] / 8);
    QVERIFY(!sc.read_found_inf());
  }

  void planted_inf_and_nan_set_found_inf_data() { add_targets(); }
  void planted_inf_and_nan_set_found_inf() {
    FETCH_TARGET(t, be);
    TB_GPU_TRY
    for (float bad : {kInf, -kInf, kNaN})
      for (int64_t at : {int64_t(0), int64_t(517), int64_t(999)})
        QVERIFY2(scenario_planted(be, bad, at),
                 qPrintable(QString("value %1 at %2 not found").arg(double(bad)).arg(at)));
    // Large but finite gradients are not overflows.
    QVERIFY(!scenario_planted(be, 3.0e38f, 3));
    TB_GPU_CATCH
  }

  // ------------------------------------------------------------ the scaler's step

  void skipped_step_leaves_params_and_state_bit_unchanged_data() { add_targets(); }
  void skipped_step_leaves_params_and_state_bit_unchanged() {
    FETCH_TARGET(t, be);
    TB_GPU_TRY
    for (OptimizerKind k : kKinds)
      for (bool multi : {false, true}) {
        const QString what = QString("%1 multi=%2").arg(optimizer_name(k)).arg(multi);
        const SkipResult r = scenario_step(be, k, multi, true);
        QVERIFY2(r.found_inf_before_update, qPrintable(what));
        QVERIFY2(bitwise_equal(r.p0, r.p1), qPrintable(what + ": parameters changed"));
        QVERIFY2(bitwise_equal(r.s10, r.s11), qPrintable(what + ": state1 changed"));
        QVERIFY2(bitwise_equal(r.s20, r.s21), qPrintable(what + ": state2 changed"));
        // Control: the same step without the planted values does update, as the CPU's.
        const SkipResult c = scenario_step(be, k, multi, false);
        const SkipResult ref = scenario_step(cpu, k, multi, false);
        QVERIFY2(!c.found_inf_before_update, qPrintable(what));
        QVERIFY2(!bitwise_equal(c.p0, c.p1), qPrintable(what + ": clean step did not update"));
        for (int64_t i = 0; i < ref.p1.numel(); ++i) {
          const float a = f32_at(ref.p1, i), b = f32_at(c.p1, i);
          QVERIFY2(std::abs(a - b) <= 1e-6f * std::max(1.0f, std::abs(a)),
                   qPrintable(what + QString(" p[%1]: cpu %2 %3 %4").arg(i).arg(a)
                                         .arg(QString::fromStdString(t.name())).arg(b)));
        }
      }
    TB_GPU_CATCH
  }

  void backoff_halves_scale_data() { add_targets(); }
  void backoff_halves_scale() {
    FETCH_TARGET(t, be);
    TB_GPU_TRY
    const ScaleTrace t1 = scenario_updates(be, opts(65536.0f, 2000), {true, false, true, true});
    QCOMPARE(t1.scale, (std::vector<float>{32768.0f, 32768.0f, 16384.0f, 8192.0f}));
    QCOMPARE(t1.tracker, (std::vector<int64_t>{0, 1, 0, 0}));
    QCOMPARE(t1.skipped, (std::vector<int64_t>{1, 1, 2, 3}));
    for (bool f : t1.found_inf_after) QVERIFY(!f);  // update clears the flag
    TB_GPU_CATCH
  }

  void growth_doubles_after_clean_steps_data() { add_targets(); }
  void growth_doubles_after_clean_steps() {
    FETCH_TARGET(t, be);
    TB_GPU_TRY
    const std::vector<bool> bad = {false, false, false, false, false, false, true, false};
    const ScaleTrace t1 = scenario_updates(be, opts(1024.0f, 3), bad);
    QCOMPARE(t1.scale, (std::vector<float>{1024, 1024, 2048, 2048, 2048, 4096, 2048, 2048}));
    QCOMPARE(t1.tracker, (std::vector<int64_t>{1, 2, 0, 1, 2, 0, 0, 1}));
    // Never grows into inf.
    const ScaleTrace top = scenario_updates(be, opts(3.0e38f, 1), {false});
    QCOMPARE(top.scale.back(), 3.0e38f);
    TB_GPU_CATCH
  }

  // Backoff and growth interleaved: the target's trace is the CPU's.
  void scaler_trace_matches_cpu_data() { add_targets(); }
  void scaler_trace_matches_cpu() {
    FETCH_TARGET(t, be);
    TB_GPU_TRY
    const std::vector<bool> bad = {false, false, false, true, false, true, true, false, false};
    const ScaleTrace c = scenario_updates(cpu, opts(1024.0f, 2), bad);
    const ScaleTrace d = scenario_updates(be, opts(1024.0f, 2), bad);
    QCOMPARE(d.scale, c.scale);
    QCOMPARE(d.tracker, c.tracker);
    QCOMPARE(d.skipped, c.skipped);
    QCOMPARE(d.found_inf_after, c.found_inf_after);
    TB_GPU_CATCH
  }

  void overflow_mid_training_skips_backs_off_and_continues_data() { add_targets(); }
  void overflow_mid_training_skips_backs_off_and_continues() {
    FETCH_TARGET(tg, be);
    TB_GPU_TRY
    const int steps = 30, bad = 10;
    const TrainTrace t = scenario_training(be, steps, bad);
    QCOMPARE(t.skipped, int64_t(1));
    // The overflowing step is skipped: parameters as after the step before.
    QVERIFY(bitwise_equal(t.params[bad], t.params[bad - 1]));
    // Every other step moves the parameters.
    for (int i = 1; i < steps; ++i)
      if (i != bad) QVERIFY2(!bitwise_equal(t.params[i], t.params[i - 1]), qPrintable(QString::number(i)));
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
    // The CPU's run: the same decisions, parameters within 1e-5.
    const TrainTrace c = scenario_training(cpu, steps, bad);
    QCOMPARE(t.skipped, c.skipped);
    QCOMPARE(t.scale, c.scale);
    for (int64_t i = 0; i < c.params.back().numel(); ++i) {
      const float a = f32_at(c.params.back(), i), b = f32_at(t.params.back(), i);
      QVERIFY2(std::abs(a - b) <= 1e-5f * std::max(1.0f, std::abs(a)),
               qPrintable(QString("p[%1]: cpu %2 %3 %4").arg(i).arg(a)
                              .arg(QString::fromStdString(tg.name())).arg(b)));
    }
    TB_GPU_CATCH
  }


  void optimizer_front_end_skips_on_found_inf() {
    // Optimizer::step(lr, gs, scaler_state): the trainer's entry under fp16.
    Tensor p = random_vector(50, 61), g = random_vector(50, 62);
    std::vector<ParamInfo> infos{{"w", p, g, true}};
    OptimizerConfig oc;
    oc.kind = OptimizerKind::AdamW;
    Optimizer opt(oc, infos, cpu);
    LossScaler sc(cpu, opts(4.0f, 2000));
    const Tensor p0 = random_vector(50, 61);
    g.data_as<float>()[17] = kNaN;
    sc.unscale(g);
    opt.step(0.1f, 1.0f, sc.state());
    QVERIFY(bitwise_equal(p, p0));
    for (const Tensor& b : opt.state_blocks())
      for (int64_t i = 0; i < b.numel(); ++i) QCOMPARE(f32_at(b, i), 0.0f);
    sc.update();
    g.data_as<float>()[17] = 0.25f;  // clean again
    sc.unscale(g);
    opt.step(0.1f, 1.0f, sc.state());
    QVERIFY(!bitwise_equal(p, p0));
    QCOMPARE(opt.steps(), int64_t(2));  // the host's count includes the skipped step
  }


  void argument_checks() {
    Tensor s = Tensor::zeros({amp::kScalerStateSize}, DType::F32);
    Tensor g = Tensor::zeros({4}, DType::F32);
    amp::unscale_and_check(cpu, g, s);  // the CPU backend implements it
    Tensor wrong = Tensor::zeros({3}, DType::F32);
    QVERIFY_THROWS_EXCEPTION(Error, amp::unscale_and_check(cpu, g, wrong));
    Tensor i32 = Tensor::zeros({4}, DType::I32);
    QVERIFY_THROWS_EXCEPTION(Error, amp::cast(cpu, i32, g));
  }

  // The family's contract checks (amp.cpp, one copy for every backend): each
  // refusal names the op and what is wrong.
  void contract_refusals_name_the_problem() {
    Tensor f16 = Tensor::zeros({4}, DType::F16), bf16 = Tensor::zeros({4}, DType::BF16);
    Tensor f32 = Tensor::zeros({4}, DType::F32), f32_5 = Tensor::zeros({5}, DType::F32);
    auto check = [](const QString& e, const char* op, const char* words) {
      QVERIFY2(e.startsWith(QString(op) + ": ") && e.contains(words), qPrintable(e));
    };
    check(qerror_of([&] { amp::cast(cpu, f16, bf16); }), "cast", "(go through f32)");
    check(qerror_of([&] { amp::cast(cpu, f32_5, f16); }), "cast", "same shape and layout");
    Tensor none;
    check(qerror_of([&] { amp::cast(cpu, none, f16); }), "cast", "source must be defined");
    Tensor s = Tensor::zeros({amp::kScalerStateSize}, DType::F32);
    Tensor s64 = Tensor::zeros({amp::kScalerStateSize}, DType::F64);
    check(qerror_of([&] { amp::scale(cpu, f32, s64); }), "amp_scale",
          "scaler state must be f32[4]");
    check(qerror_of([&] { amp::update_scale(cpu, s, 2.0f, 0.5f, 0); }), "amp_update_scale",
          "growth_interval must be > 0");
    check(qerror_of([&] { amp::unscale_and_check(cpu, f16, s); }), "amp_unscale_and_check",
          "must be f32 or f64");
    check(qerror_of([&] { amp::scale(cpu, bf16, s); }), "amp_scale", "must be f32 or f64");
  }

  // ------------------------------------------------------------ casts


  void casts_round_to_nearest_even() {
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

  // Both round to nearest even: the same bits as the CPU (the probe has no
  // NaN); NaN stays NaN.
  void cast_round_trip_matches_cpu_data() {
    QTest::addColumn<Target>("target");
    for (DType dt : {DType::F16, DType::BF16})
      QTest::newRow(Target{Impl::Cuda, Layout::NCHW, dt}.name().c_str())
          << Target{Impl::Cuda, Layout::NCHW, dt};
  }
  void cast_round_trip_matches_cpu() {
    FETCH_TARGET(t, be);
    TB_GPU_TRY
    const Tensor src = host_of(cast_probe());
    const DType dt = t.dtype;
    const auto [cl, cb] = round_trip(cpu, src, dt);
    const auto [gl, gb] = round_trip(be, src, dt);
    for (const std::string& bad : {bits_differ(cl, gl, std::string("to ") + dtype_name(dt)),
                                   bits_differ(cb, gb, std::string("back from ") + dtype_name(dt))})
      QVERIFY2(bad.empty(), bad.c_str());
    const auto [n, nb] = round_trip(be, host_of({kNaN}), dt);
    QVERIFY(std::isnan(f32_at(nb, 0)));
    TB_GPU_CATCH
  }

  // ------------------------------------------------------------ the CUDA kernels, emulated

  // The cast kernels on the CUDA emulator (tests/cuda_emulator), here on any
  // machine, against the CPU's casts with cast_round_trip_matches_cpu's bound
  // (bits_differ: the same bits, any NaN for a NaN), both thread orders:
  // every f16 or bf16 value widened; narrowed, the f32 values of every upper
  // half (sign, exponent, 7 mantissa bits: each exponent f16 rounds into a
  // subnormal, overflows or keeps, NaN and inf) with each lower half that
  // decides a rounding (exact, just above, below, at and above f16's and
  // bf16's halfway points, odd and even); the GPU slot's probe both ways and NaN.
  void amp_emulated_casts_match_cpu_data() {
    QTest::addColumn<Target>("target");
    for (DType dt : {DType::F16, DType::BF16})
      QTest::newRow(dtype_name(dt)) << Target{Impl::Cuda, Layout::NCHW, dt};
  }
  void amp_emulated_casts_match_cpu() {
    QFETCH(Target, target);
#if defined(TRAINBENCH_CUDA_EMULATED)
    TB_EMU_TRY
    const DType dt = target.dtype;
    const std::string name = dtype_name(dt);
    Tensor every = Tensor::empty({65536}, dt);
    for (int64_t i = 0; i < 65536; ++i) every.data_as<uint16_t>()[i] = uint16_t(i);
    // f16 rounds at bit 13 (halfway 0x1000), bf16 at bit 16 (halfway 0x8000).
    const uint32_t lows[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001,
                             0x3000, 0x7fff, 0x8000, 0x8001, 0xffff};
    const Tensor probe = host_of(cast_probe()), nan = host_of({kNaN, -kNaN});
    for (tb_emu::Schedule order : {tb_emu::Schedule::forward, tb_emu::Schedule::reverse}) {
      EmulatorSchedule use(order);
      const std::string in = std::string(" [") + schedule_name(order) + "]";
      const auto check = [&](const Tensor& src, DType to, const std::string& what) {
        Tensor want = Tensor::empty(src.shape(), to), got = Tensor::empty(src.shape(), to);
        amp::cast(cpu, src, want);
        // Every bit of `got` the opposite of the CPU's (never a NaN: its
        // exponent is all zeros there), so an element left unwritten shows.
        const auto* w = static_cast<const uint8_t*>(want.data());
        auto* g = static_cast<uint8_t*>(got.data());
        for (size_t i = 0; i < want.nbytes(); ++i) g[i] = uint8_t(~w[i]);
        emulated_cast(src, got);
        return bits_differ(want, got, what + in);
      };
      std::string bad = check(every, DType::F32, "every " + name + " value to f32");
      QVERIFY2(bad.empty(), bad.c_str());
      for (uint32_t low : lows) {
        Tensor src = Tensor::empty({65536}, DType::F32);
        for (uint32_t u = 0; u < 65536; ++u) {
          const uint32_t bits = (u << 16) | low;
          std::memcpy(src.data_as<float>() + u, &bits, 4);
        }
        bad = check(src, dt, "f32 to " + name + ", low half 0x" +
                                 QString::number(low, 16).toStdString());
        QVERIFY2(bad.empty(), bad.c_str());
      }
      // cast_round_trip_matches_cpu's probe, narrowed and widened back; NaN.
      for (const Tensor& src : {probe, nan}) {
        Tensor lo = Tensor::empty(src.shape(), dt);
        amp::cast(cpu, src, lo);
        for (const std::string& b : {check(src, dt, "probe to " + name),
                                     check(lo, DType::F32, "probe back from " + name)})
          QVERIFY2(b.empty(), b.c_str());
      }
    }
    TB_EMU_CATCH
#else
    QSKIP(kNoEmulator);
#endif
  }

  // The scaler's kernels on the CUDA emulator, step by step against the CPU
  // reference's (amp_cpu.cpp) from the same state: amp_scale on a tensor of
  // every magnitude (overflowing to inf at the large scales), then
  // unscale_and_check on two gradient blocks (one trainer step's), then
  // update_scale, with inf or NaN planted at a block's first, middle or last
  // element (the last in a partial block) in one block, the other or both,
  // so found_inf is set by either block and kept by a clean one after it.
  // Every output bit for bit (bits_differ: any NaN for a NaN; the GPU slots
  // hold unscaling and the scaler's trace exact) and the whole state after
  // every kernel, both thread orders. Rows: growth every 1, 2 or 3 clean
  // steps, a scale that is not a power of two (1/3 inexact, the same on both
  // sides), growth by 1.5, and scales where growth would reach inf.
  void amp_emulated_scaler_matches_cpu_data() {
    QTest::addColumn<int64_t>("n_a");
    QTest::addColumn<int64_t>("n_b");
    QTest::addColumn<float>("init");
    QTest::addColumn<float>("growth");
    QTest::addColumn<float>("backoff");
    QTest::addColumn<int64_t>("interval");
    const auto row = [](const char* name, int64_t a, int64_t b, float init, float g, float bo,
                        int64_t every) {
      QTest::newRow(name) << a << b << init << g << bo << every;
    };
    row("1 + 300 values, 2^16, x2 x0.5 every 2", 1, 300, 65536.0f, 2.0f, 0.5f, 2);
    row("4101 + 257 values, 3, x2 x0.5 every 3", 4101, 257, 3.0f, 2.0f, 0.5f, 3);
    row("20011 + 256 values, 2^24, x1.5 x0.25 every 2", 20011, 256, 16777216.0f, 1.5f, 0.25f, 2);
    row("64 + 64 values, 2^127, x2 x0.5 every 1", 64, 64, std::ldexp(1.0f, 127), 2.0f, 0.5f, 1);
    row("1000 + 3 values, 3e38, x2 x0.5 every 1", 1000, 3, 3.0e38f, 2.0f, 0.5f, 1);
  }
  void amp_emulated_scaler_matches_cpu() {
    QFETCH(int64_t, n_a);
    QFETCH(int64_t, n_b);
    QFETCH(float, init);
    QFETCH(float, growth);
    QFETCH(float, backoff);
    QFETCH(int64_t, interval);
#if defined(TRAINBENCH_CUDA_EMULATED)
    TB_EMU_TRY
    namespace emu = tb::cuda_emu;
    const int steps = 12;
    for (tb_emu::Schedule order : {tb_emu::Schedule::forward, tb_emu::Schedule::reverse}) {
      EmulatorSchedule use(order);
      Tensor sc = Tensor::zeros({amp::kScalerStateSize}, DType::F32);
      sc.data_as<float>()[0] = init;
      Tensor se = clone(sc);
      int backoffs = 0, growths = 0;
      for (int step = 0; step < steps; ++step) {
        const std::string at = "step " + std::to_string(step) + " [" + schedule_name(order) + "]";
        const auto differ = [&](const Tensor& want, const Tensor& got, const std::string& what) {
          const std::string bad = bits_differ(want, got, what + ", " + at);
          return bad.empty() ? bits_differ(sc, se, "state after " + what + ", " + at) : bad;
        };
        std::string bad;
        const Tensor t = wide_values(n_a, 500 + uint64_t(step));
        Tensor tc = clone(t), te = clone(t);
        amp::scale(cpu, tc, sc);
        emu::launch_amp_scale(te.data_as<float>(), n_a, se.data_as<float>(), nullptr);
        bad = differ(tc, te, "amp_scale");
        QVERIFY2(bad.empty(), bad.c_str());
        Tensor blocks[2] = {wide_values(n_a, 600 + uint64_t(step)),
                            wide_values(n_b, 700 + uint64_t(step))};
        const auto plant = [&](int b, int64_t i, float v) { blocks[b].data_as<float>()[i] = v; };
        if (step == 3) plant(0, n_a - 1, kNaN);
        if (step == 5) plant(1, 0, -kInf);
        if (step == 6) plant(0, n_a / 2, kInf), plant(1, n_b - 1, kNaN);
        if (step == 8) plant(0, n_a - 1, 3.0e38f), plant(1, 0, -3.0e38f);  // large, finite
        if (step == 10) plant(0, 0, -kNaN);
        for (int b = 0; b < 2; ++b) {
          Tensor gc = clone(blocks[b]), ge = clone(blocks[b]);
          amp::unscale_and_check(cpu, gc, sc);
          emu::launch_amp_unscale_check(ge.data_as<float>(), ge.numel(), se.data_as<float>(),
                                        nullptr);
          bad = differ(gc, ge, "unscale_and_check of block " + std::to_string(b));
          QVERIFY2(bad.empty(), bad.c_str());
        }
        const bool found = sc.data_as<float>()[2] != 0.0f;
        QVERIFY2(found == (step == 3 || step == 5 || step == 6 || step == 10),
                 qPrintable(QString::fromStdString("found_inf, " + at)));
        const float before = sc.data_as<float>()[0];
        amp::update_scale(cpu, sc, growth, backoff, interval);
        emu::launch_amp_update_scale(se.data_as<float>(), growth, backoff, interval, nullptr);
        bad = differ(sc, se, "update_scale");
        QVERIFY2(bad.empty(), bad.c_str());
        backoffs += found;
        growths += sc.data_as<float>()[0] > before;
        QVERIFY2(std::isfinite(sc.data_as<float>()[0]), qPrintable(QString::fromStdString(at)));
      }
      // The steps reached what they are for: backoffs and (but at the top) growth.
      QCOMPARE(backoffs, 4);
      QCOMPARE(int64_t(sc.data_as<float>()[3]), int64_t(4));
      if (init < 1e38f) QVERIFY2(growths >= 2, qPrintable(QString::number(growths)));
    }
    TB_EMU_CATCH
#else
    QSKIP(kNoEmulator);
#endif
  }
};

QTEST_GUILESS_MAIN(TestOpAmp)
#include "test_op_amp.moc"
