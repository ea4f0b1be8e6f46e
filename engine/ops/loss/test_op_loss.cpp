// SPDX-License-Identifier: GPL-3.0-or-later
// The loss op family: softmax_cross_entropy (label smoothing, grad_scale, the
// loss sum and correct count accumulated across calls), on every backend and dtype.
//
// 1. The gradient against central finite differences of the mean loss, f64 on
//    the reference backend, plain, with label smoothing, and scaled.
// 2. loss_matches_reference, one body over targets x problems against the
//    reference kernel: the loss sum within 1e-5 relative and the correct count
//    exact on every target; dlogits exact on the exact CPU targets, within
//    1e-5 absolute on the fast f32 path (|dlogits| <= grad_scale) and
//    1e-5 relative + 1e-8 on CUDA. On CUDA also the host-label path without a
//    gradient, and an out-of-range label refused.
// 3. Values computed by hand and a max-shifted log-sum-exp that does not overflow.
// 4. The CUDA kernels (loss.cu: the per-warp rows kernel and the one-block
//    sum) on the CUDA emulator against the reference with the GPU slots'
//    bounds (cuda_loss_differs), both thread orders: partial blocks of rows,
//    K not a multiple of 32, over 1024 rows, logits of ±1000, ties, bad
//    device labels.
// GPU rows QSKIP with the reason where there is no device.
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/ops/loss/loss.h"
#include "tests/engine/device_fixture.h"
#include "tests/engine/gradcheck.h"
#include "tests/engine/tensor_helpers.h"
#include "tests/cuda_emulator/emulated_slot.h"
#if defined(TRAINBENCH_CUDA_EMULATED)
#include "tests/cuda_emulator/begin_emulated.h"
#include "engine/ops/loss/loss.cuh"
#include "tests/cuda_emulator/end_emulated.h"
#endif

using namespace tb;
using namespace tb::test;

namespace {

// Mean loss of the f64 reference loss (no gradient).
double mean_loss(Backend& be, const Tensor& logits, const Tensor& labels, float smoothing) {
  Tensor stats = Tensor::zeros({2}, DType::F64);
  Tensor none;
  loss::softmax_cross_entropy(be, logits, labels, smoothing, 1.0f, none, stats);
  return stats.data_as<double>()[0] / double(logits.dim(0));
}

// Finite-difference check of the loss gradient (d mean loss / d logits, times
// grad_scale); returns the largest relative error.
double loss_gradient_error(float smoothing, float grad_scale) {
  CpuBackend& be = cpu_reference();
  const int64_t N = 4, K = 5;
  Tensor logits = random_tensor({N, K}, 11, -3.0, 3.0, DType::F64);
  Tensor labels = Tensor::empty({N}, DType::I32);
  for (int64_t n = 0; n < N; ++n) labels.data_as<int32_t>()[n] = int32_t((3 * n + 1) % K);
  Tensor dlogits = Tensor::empty({N, K}, DType::F64);
  Tensor stats = Tensor::zeros({2}, DType::F64);
  loss::softmax_cross_entropy(be, logits, labels, smoothing, grad_scale, dlogits, stats);
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
  return worst;
}

struct LossCase {
  const char* name = "";
  int64_t N = 0, K = 0;
  float smoothing = 0.0f, grad_scale = 1.0f;
  double range = 6.0;  // logits uniform in [-range, range)
};

const LossCase kCases[] = {
    {"64x100 smoothing 0.1 scale 128", 64, 100, 0.1f, 128.0f, 8.0},
    {"67x10 smoothing 0.1", 67, 10, 0.1f, 0.5f, 6.0},
    {"5x1000", 5, 1000, 0.0f, 0.5f, 6.0},
    {"33x37 smoothing 0.3", 33, 37, 0.3f, 0.5f, 6.0},
};

const Target kTargets[] = {
    {Impl::CpuFast, Layout::NCHW, DType::F32},
    {Impl::CpuFast, Layout::NCHW, DType::F64},
    {Impl::Cuda, Layout::NCHW, DType::F32},
};

struct LossInputs {
  Tensor z, labels;
};

// Logits uniform in ±range, random labels, every third sample's label logit
// made the row's maximum (max(9, range)) so the count is not trivially zero.
LossInputs loss_inputs(const LossCase& c, DType dt) {
  const int64_t N = c.N, K = c.K;
  LossInputs in{random_tensor({N, K}, uint64_t(31 + K), -c.range, c.range, dt),
                Tensor::empty({N}, DType::I32)};
  std::mt19937 rng(7);
  for (int64_t n = 0; n < N; ++n) in.labels.data_as<int32_t>()[n] = int32_t(rng() % uint64_t(K));
  const double hit = std::max(9.0, c.range);
  for (int64_t n = 0; n < N; n += 3) {
    const int32_t y = in.labels.data_as<int32_t>()[n];
    if (dt == DType::F64)
      in.z.data_as<double>()[n * K + y] = hit;
    else
      in.z.data_as<float>()[n * K + y] = float(hit);
  }
  return in;
}

// The CUDA side's stats (host f64 (2)) and dlogits against the reference's:
// the loss sum within 1e-5 relative, the correct count exact, dlogits (when
// `dz_c` is defined) 1e-5 relative + 1e-8. "" or what differs.
std::string cuda_loss_differs(const Tensor& stats_c, const Tensor& stats_g, const Tensor& dz_c,
                              const Tensor& dz_g, const std::string& what) {
  const double sum_c = stats_c.data_as<double>()[0], sum_g = stats_g.data_as<double>()[0];
  if (!(std::abs(sum_g - sum_c) <= 1e-5 * std::abs(sum_c)))
    return what + ": loss sum " + std::to_string(sum_g) + " vs " + std::to_string(sum_c);
  const double count_c = stats_c.data_as<double>()[1], count_g = stats_g.data_as<double>()[1];
  if (count_g != count_c)
    return what + ": correct count " + std::to_string(count_g) + " vs " + std::to_string(count_c);
  if (!dz_c.defined()) return "";
  const Comparison cmp = compare(dz_c, dz_g, 1e-5, 1e-8, "dlogits " + what, false, "fp32");
  return cmp.ok ? "" : cmp.msg;
}

// Nine rows of 70 logits in ±1, each with tied maxima (value 5) in the same
// lane (k and k + 32), in different lanes or at both ends, and a label.
LossInputs tied_rows() {
  const int64_t N = 9, K = 70;
  LossInputs in{random_tensor({N, K}, uint64_t(91), -1.0, 1.0), Tensor::empty({N}, DType::I32)};
  // Per row: the tied positions (value 5), then the label.
  const int ties[9][3] = {{1, 33, -1}, {8, 40, -1}, {5, 34, -1}, {0, 69, -1}, {31, 32, 63},
                          {2, 34, 66}, {64, 65, -1}, {30, 62, -1}, {7, 39, -1}};
  const int32_t label_of[9] = {33, 8, 5, 69, 31, 66, 64, 62, 7};
  for (int64_t n = 0; n < N; ++n) {
    for (int k : ties[n])
      if (k >= 0) in.z.data_as<float>()[n * K + k] = 5.0f;
    in.labels.data_as<int32_t>()[n] = label_of[n];
  }
  return in;
}

#if defined(TRAINBENCH_CUDA_EMULATED)
// loss_cuda.cpp's call on the emulator: host logits, labels, dlogits (or
// undefined) and stats, and its 2·max(N, 1) doubles of row scratch.
void softmax_xent_emulated(const Tensor& z, const Tensor& labels, float smoothing,
                           float grad_scale, Tensor& dz, Tensor& stats) {
  const int64_t N = z.dim(0), K = z.dim(1);
  std::vector<double> rows(size_t(2 * std::max<int64_t>(N, 1)));
  tb::cuda_emu::launch_softmax_xent(z.data_as<float>(), labels.data_as<int32_t>(), N, K,
                                    smoothing, grad_scale,
                                    dz.defined() ? dz.data_as<float>() : nullptr, rows.data(),
                                    stats.data_as<double>(), nullptr);
}
#endif

}  // namespace

Q_DECLARE_METATYPE(LossCase)

class TestOpLoss : public QObject {
  Q_OBJECT

 private slots:
  // ------------------------------------------------------------ finite differences (f64)

  void loss_gradient_data() {
    QTest::addColumn<float>("smoothing");
    QTest::addColumn<float>("grad_scale");
    QTest::newRow("plain") << 0.0f << 1.0f;
    QTest::newRow("label smoothing") << 0.1f << 1.0f;
    QTest::newRow("scaled") << 0.2f << 1024.0f;
  }
  void loss_gradient() {
    QFETCH(float, smoothing);
    QFETCH(float, grad_scale);
    const double worst = loss_gradient_error(smoothing, grad_scale);
    QVERIFY2(worst < 1e-6, qPrintable(QString("max relative error %1").arg(worst)));
  }

  // ------------------------------------------------------------ every target vs the reference

  void loss_matches_reference_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<LossCase>("c");
    for (const Target& t : kTargets)
      for (const LossCase& c : kCases)
        QTest::addRow("%s: %s", t.name().c_str(), c.name) << t << c;
  }
  void loss_matches_reference() {
    FETCH_TARGET(t, be);
    QFETCH(LossCase, c);
    TB_GPU_TRY
    const int64_t N = c.N, K = c.K;
    const DType dt = t.dtype;
    LossInputs in = loss_inputs(c, dt);
    const Tensor& z = in.z;
    Tensor& labels = in.labels;
    // Statistics accumulate onto what is there.
    const Tensor init = from_values({2}, {1.5, 2.0}, DType::F64);
    Tensor stats_c = clone(init);
    Tensor dz_c = Tensor::empty({N, K}, dt);
    loss::softmax_cross_entropy(cpu_reference(), z, labels, c.smoothing, c.grad_scale, dz_c,
                                stats_c);
    Tensor stats_g = to_device(be, init), dz_g = be.empty({N, K}, dt);
    loss::softmax_cross_entropy(be, to_device(be, z), to_device(be, labels), c.smoothing,
                                c.grad_scale, dz_g, stats_g);
    const Tensor sg = to_host(be, stats_g);
    const std::string stats_bad = cuda_loss_differs(stats_c, sg, {}, {}, t.name());
    QVERIFY2(stats_bad.empty(), stats_bad.c_str());  // every target: sum 1e-5, count exact
    QVERIFY(stats_c.data_as<double>()[1] > 2.0);
    const Tensor dz = to_host(be, dz_g);
    const std::string what = "dlogits " + t.name();
    if (!t.on_gpu() && dt == DType::F64) {
      QVERIFY2(max_abs_diff(dz_c, dz) == 0.0, what.c_str());
    } else if (!t.on_gpu()) {
      QVERIFY2(max_abs_diff(dz_c, dz) < 1e-5, what.c_str());  // |dlogits| <= 2 here
    } else {
      const std::string bad = cuda_loss_differs(stats_c, sg, dz_c, dz, t.name());
      QVERIFY2(bad.empty(), bad.c_str());
      // Without a gradient, host labels (checked on the host).
      Tensor none;
      loss::softmax_cross_entropy(be, to_device(be, z), labels, c.smoothing, 1.0f, none, stats_g);
      QVERIFY(to_host(be, stats_g).data_as<double>()[1] > sg.data_as<double>()[1]);
      labels.data_as<int32_t>()[1] = int32_t(K);  // out of range: rejected on the host path
      QVERIFY_THROWS_EXCEPTION(tb::Error,
                               loss::softmax_cross_entropy(be, to_device(be, z), labels,
                                                           c.smoothing, 1.0f, none, stats_g));
    }
    TB_GPU_CATCH
  }

  // ------------------------------------------------------------ hand-computed values

  // Logits (0, ln 3): p = (1/4, 3/4). Label 1:
  //   ε = 0:   loss = −ln(3/4) = 0.2876821,  dlogits = (p − onehot)/N = (0.25, −0.25)/N
  //   ε = 0.2: q = (0.1, 0.9), loss = −(0.1·ln ¼ + 0.9·ln ¾) = 0.3975433,
  //            dlogits = (0.15, −0.15)/N
  // Uniform logits give ln K for every sample, with or without smoothing.
  void loss_values() {
    for (bool reference : {true, false}) {
      CpuBackend& be = reference ? cpu_reference() : cpu_fast();
      Tensor logits = from_values({2, 2}, {0, std::log(3.0), 0, std::log(3.0)});
      Tensor labels = Tensor::empty({2}, DType::I32);
      labels.data_as<int32_t>()[0] = 1;
      labels.data_as<int32_t>()[1] = 0;  // second sample: p_y = 1/4, wrong prediction
      Tensor d = Tensor::empty({2, 2}, DType::F32);
      Tensor stats = Tensor::zeros({2}, DType::F64);
      loss::softmax_cross_entropy(be, logits, labels, 0.0f, 1.0f, d, stats);
      // Σ loss = −ln ¾ − ln ¼ = 0.2876821 + 1.3862944 = 1.6739765; one correct
      QVERIFY(std::abs(stats.data_as<double>()[0] - 1.6739765) < 1e-6);
      QCOMPARE(stats.data_as<double>()[1], 1.0);
      QVERIFY(std::abs(d.data_as<float>()[0] - 0.125f) < 1e-7);
      QVERIFY(std::abs(d.data_as<float>()[1] + 0.125f) < 1e-7);
      QVERIFY(std::abs(d.data_as<float>()[2] + 0.375f) < 1e-7);  // (1/4 − 1)/2
      // Stats accumulate across calls; smoothing 0.2 on sample 0 only
      Tensor one = logits.rows(0, 1), lab1 = labels.rows(0, 1), d1 = d.rows(0, 1);
      loss::softmax_cross_entropy(be, one, lab1, 0.2f, 2.0f, d1, stats);
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
        loss::softmax_cross_entropy(be, uni, ul, eps, 1.0f, none, st);
        QVERIFY(std::abs(st.data_as<double>()[0] - 3.0 * std::log(10.0)) < 1e-5);
        QCOMPARE(st.data_as<double>()[1], 1.0);  // ties: the first maximum (class 0) wins
      }
      Tensor bad = Tensor::zeros({N}, DType::I32);
      bad.data_as<int32_t>()[2] = int32_t(K);
      Tensor none;
      QVERIFY_THROWS_EXCEPTION(
          Error, loss::softmax_cross_entropy(be, uni, bad, 0.0f, 1.0f, none, stats));
    }
  }

  // Large logits must not overflow (max-shifted log-sum-exp).
  void loss_is_stable() {
    for (bool reference : {true, false}) {
      CpuBackend& be = reference ? cpu_reference() : cpu_fast();
      Tensor logits = from_values({1, 3}, {1000, 0, -1000});
      Tensor labels = Tensor::zeros({1}, DType::I32);
      Tensor d = Tensor::empty({1, 3}, DType::F32);
      Tensor stats = Tensor::zeros({2}, DType::F64);
      loss::softmax_cross_entropy(be, logits, labels, 0.0f, 1.0f, d, stats);
      QVERIFY(std::isfinite(stats.data_as<double>()[0]));
      QVERIFY(stats.data_as<double>()[0] < 1e-6);
      for (int k = 0; k < 3; ++k) QVERIFY(std::abs(d.data_as<float>()[k]) < 1e-6);
    }
  }

  // loss.cu's per-warp argmax: tied maxima in the same lane (k and k + 32),
  // in different lanes, and at both ends of a 70-wide row; the first maximum
  // wins, as on the CPU, so the hit count is the reference's exactly. Nine
  // rows: the last block of 8 warps is partial. Then labels that live on the
  // device and are out of range: no host check can see them, so the loss sum
  // must come back NaN (not a silent wrong number) and the other rows still count.
  void loss_ties_and_device_labels_on_gpu() {
    NEED_GPU();
    TB_GPU_TRY
    Backend& be = cuda_backend();
    LossInputs in = tied_rows();
    const Tensor& z = in.z;
    Tensor& labels = in.labels;
    const int64_t N = z.dim(0), K = z.dim(1);
    Tensor stats_c = Tensor::zeros({2}, DType::F64), dz_c = Tensor::empty({N, K}, DType::F32);
    loss::softmax_cross_entropy(cpu_reference(), z, labels, 0.1f, 1.0f, dz_c, stats_c);
    QCOMPARE(stats_c.data_as<double>()[1], 5.0);  // rows 1, 2, 4, 6, 8 hit the first maximum
    const Tensor zd = to_device(be, z);
    Tensor stats_g = to_device(be, Tensor::zeros({2}, DType::F64));
    Tensor dz_g = be.empty({N, K}, DType::F32);
    loss::softmax_cross_entropy(be, zd, to_device(be, labels), 0.1f, 1.0f, dz_g, stats_g);
    const std::string bad_ties =
        cuda_loss_differs(stats_c, to_host(be, stats_g), dz_c, to_host(be, dz_g), "with ties");
    QVERIFY2(bad_ties.empty(), bad_ties.c_str());
    // Out-of-range labels on the device: rows 0 (K) and 3 (-1).
    labels.data_as<int32_t>()[0] = int32_t(K);
    labels.data_as<int32_t>()[3] = -1;
    Tensor bad = to_device(be, Tensor::zeros({2}, DType::F64));
    Tensor none;
    loss::softmax_cross_entropy(be, zd, to_device(be, labels), 0.0f, 1.0f, none, bad);
    const Tensor sb = to_host(be, bad);
    QVERIFY2(std::isnan(sb.data_as<double>()[0]),
             qPrintable(QString("loss sum %1 with bad device labels").arg(sb.data_as<double>()[0])));
    QCOMPARE(sb.data_as<double>()[1], 5.0);  // rows 0 and 3 were misses anyway
    TB_GPU_CATCH
  }

  // ------------------------------------------------------------ the CUDA kernels, emulated

  // loss.cu on the CUDA emulator (tests/cuda_emulator), here on any machine:
  // with and without dlogits, stats added onto what is there, against the
  // reference with the GPU slots' bounds (cuda_loss_differs), under both of
  // the emulator's thread orders. Beyond loss_matches_reference's cases:
  // 1100 rows (a partial last block of 8 warps; the sum kernel's 1024
  // threads take two rows or one), K = 45 and 3 (lanes with two logits,
  // lanes with none), K = 1, and logits of ±1000. dlogits starts as NaN, so
  // an element left unwritten fails.
  void loss_emulated_cuda_matches_cpu_data() {
    QTest::addColumn<LossCase>("c");
    const LossCase more[] = {{"1100x45 smoothing 0.2 scale 2", 1100, 45, 0.2f, 2.0f, 6.0},
                             {"13x3 smoothing 0.1", 13, 3, 0.1f, 1.0f, 6.0},
                             {"6x1", 6, 1, 0.0f, 1.0f, 6.0},
                             {"16x33 logits to 1000 smoothing 0.1", 16, 33, 0.1f, 1.0f, 1000.0}};
    for (const LossCase& c : kCases) QTest::addRow("%s", c.name) << c;
    for (const LossCase& c : more) QTest::addRow("%s", c.name) << c;
  }
  void loss_emulated_cuda_matches_cpu() {
    QFETCH(LossCase, c);
#if defined(TRAINBENCH_CUDA_EMULATED)
    TB_EMU_TRY
    const LossInputs in = loss_inputs(c, DType::F32);
    const Tensor init = from_values({2}, {1.5, 2.0}, DType::F64);
    for (bool grad : {true, false}) {
      const auto dlogits = [&] {
        Tensor d = grad ? Tensor::empty({c.N, c.K}, DType::F32) : Tensor{};
        if (grad) cpu_reference().fill(d, std::nan(""));
        return d;
      };
      Tensor stats_c = clone(init), dz_c = dlogits();
      loss::softmax_cross_entropy(cpu_reference(), in.z, in.labels, c.smoothing, c.grad_scale,
                                  dz_c, stats_c);
      QVERIFY(stats_c.data_as<double>()[1] > 2.0);
      for (tb_emu::Schedule order : {tb_emu::Schedule::forward, tb_emu::Schedule::reverse}) {
        EmulatorSchedule use(order);
        Tensor stats_g = clone(init), dz_g = dlogits();
        softmax_xent_emulated(in.z, in.labels, c.smoothing, c.grad_scale, dz_g, stats_g);
        const std::string bad = cuda_loss_differs(
            stats_c, stats_g, dz_c, dz_g,
            std::string(grad ? "" : "no dlogits, ") + schedule_name(order));
        QVERIFY2(bad.empty(), bad.c_str());
      }
    }
    TB_EMU_CATCH
#else
    QSKIP(kNoEmulator);
#endif
  }

  // loss_ties_and_device_labels_on_gpu on the emulator: the first of tied
  // maxima wins, in one lane, across lanes and at both ends of the row (the
  // reference's count exactly); labels out of range make the loss sum NaN
  // while the other rows still count. Both thread orders.
  void loss_emulated_ties_and_bad_labels() {
#if defined(TRAINBENCH_CUDA_EMULATED)
    TB_EMU_TRY
    LossInputs in = tied_rows();
    const int64_t N = in.z.dim(0), K = in.z.dim(1);
    Tensor stats_c = Tensor::zeros({2}, DType::F64), dz_c = Tensor::empty({N, K}, DType::F32);
    loss::softmax_cross_entropy(cpu_reference(), in.z, in.labels, 0.1f, 1.0f, dz_c, stats_c);
    QCOMPARE(stats_c.data_as<double>()[1], 5.0);  // rows 1, 2, 4, 6, 8 hit the first maximum
    for (tb_emu::Schedule order : {tb_emu::Schedule::forward, tb_emu::Schedule::reverse}) {
      EmulatorSchedule use(order);
      Tensor stats_g = Tensor::zeros({2}, DType::F64), dz_g = Tensor::empty({N, K}, DType::F32);
      softmax_xent_emulated(in.z, in.labels, 0.1f, 1.0f, dz_g, stats_g);
      const std::string bad =
          cuda_loss_differs(stats_c, stats_g, dz_c, dz_g, std::string("with ties, ") + schedule_name(order));
      QVERIFY2(bad.empty(), bad.c_str());
    }
    // Rows 0 (label K) and 3 (label -1).
    in.labels.data_as<int32_t>()[0] = int32_t(K);
    in.labels.data_as<int32_t>()[3] = -1;
    for (tb_emu::Schedule order : {tb_emu::Schedule::forward, tb_emu::Schedule::reverse}) {
      EmulatorSchedule use(order);
      Tensor stats_g = Tensor::zeros({2}, DType::F64), none;
      softmax_xent_emulated(in.z, in.labels, 0.0f, 1.0f, none, stats_g);
      QVERIFY2(std::isnan(stats_g.data_as<double>()[0]),
               qPrintable(QString("loss sum %1 with bad labels, %2")
                              .arg(stats_g.data_as<double>()[0])
                              .arg(schedule_name(order))));
      QCOMPARE(stats_g.data_as<double>()[1], 5.0);  // rows 0 and 3 were misses anyway
    }
    TB_EMU_CATCH
#else
    QSKIP(kNoEmulator);
#endif
  }
};

QTEST_GUILESS_MAIN(TestOpLoss)
#include "test_op_loss.moc"
