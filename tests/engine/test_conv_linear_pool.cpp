// SPDX-License-Identifier: GPL-3.0-or-later
// Convolution, linear and pooling: the CPU ops and the layers that wrap them.
//
// 1. Layer backward vs central finite differences, f64 on the reference backend
//    (tests/engine/gradcheck.h): max relative error < 1e-6.
// 2. Fast f32 kernels vs the f32 reference kernels on random inputs: every
//    output and gradient within 1e-4 of the reference, relative to the largest
//    reference magnitude (float sums in a different order differ by ~1e-6).
// 3. accumulate=true adds what accumulate=false writes (within 1e-6 relative).
// 4. Hand-computed values (padding, ties, count_include_pad) and shape errors.
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/linear.h"
#include "engine/nn/model.h"
#include "engine/nn/pooling.h"
#include "tests/engine/gradcheck.h"

using namespace tb;

namespace {

constexpr double kGradTol = 1e-6;   // f64 finite differences
constexpr double kFastTol = 1e-4;   // fast f32 vs reference f32
constexpr double kAccumTol = 1e-6;  // accumulate=true vs old + written

Tensor random_tensor(const Shape& s, DType t, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  Tensor x = Tensor::empty(s, t);
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (t == DType::F64) x.data_as<double>()[i] = d(rng);
    else x.data_as<float>()[i] = float(d(rng));
  }
  return x;
}

Tensor clone(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype(), t.device(), t.layout());
  std::memcpy(c.data(), t.data(), t.nbytes());
  return c;
}

double at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::F64 ? t.data_as<double>()[i] : double(t.data_as<float>()[i]);
}

// max |a - b| / max(max |b|, 1e-30): the error relative to the reference's scale.
double scaled_error(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return INFINITY;
  double err = 0.0, scale = 1e-30;
  for (int64_t i = 0; i < b.numel(); ++i) {
    err = std::max(err, std::abs(at(a, i) - at(b, i)));
    scale = std::max(scale, std::abs(at(b, i)));
  }
  return err / scale;
}

// a + b element-wise, into a new tensor of a's dtype.
Tensor sum_of(const Tensor& a, const Tensor& b) {
  Tensor s = clone(a);
  for (int64_t i = 0; i < s.numel(); ++i) {
    if (s.dtype() == DType::F64) s.data_as<double>()[i] += b.data_as<double>()[i];
    else s.data_as<float>()[i] += b.data_as<float>()[i];
  }
  return s;
}

QString error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const tb::Error& e) {
    return QString::fromStdString(e.what());
  }
  return {};
}

#define CHECK_BELOW(value, tol)                                                              \
  QVERIFY2((value) < (tol), qPrintable(QStringLiteral(#value " = %1, tolerance %2")          \
                                           .arg(double(value), 0, 'g', 3)                    \
                                           .arg(double(tol), 0, 'g', 3)))

}  // namespace

struct ConvCase {
  int64_t N, C_in, H, W, C_out, k, stride, pad;
  bool bias;
};
Q_DECLARE_METATYPE(ConvCase)

class TestConvLinearPool : public QObject {
  Q_OBJECT

 private slots:
  // ------------------------------------------------------------ finite differences
  void gradcheck_conv_data() {
    QTest::addColumn<int64_t>("cin");
    QTest::addColumn<int64_t>("cout");
    QTest::addColumn<int64_t>("k");
    QTest::addColumn<int64_t>("stride");
    QTest::addColumn<int64_t>("pad");
    QTest::addColumn<bool>("bias");
    QTest::addColumn<int64_t>("h");
    QTest::addColumn<int64_t>("w");
    QTest::newRow("k3 s1 p1 bias") << int64_t(2) << int64_t(3) << int64_t(3) << int64_t(1)
                                   << int64_t(1) << true << int64_t(5) << int64_t(6);
    QTest::newRow("k3 s1 p0 nobias") << int64_t(2) << int64_t(3) << int64_t(3) << int64_t(1)
                                     << int64_t(0) << false << int64_t(6) << int64_t(5);
    QTest::newRow("k3 s2 p1 bias") << int64_t(3) << int64_t(2) << int64_t(3) << int64_t(2)
                                   << int64_t(1) << true << int64_t(7) << int64_t(6);
    QTest::newRow("k3 s2 p0 nobias") << int64_t(2) << int64_t(2) << int64_t(3) << int64_t(2)
                                     << int64_t(0) << false << int64_t(7) << int64_t(7);
    QTest::newRow("k1 s1 p0 bias") << int64_t(3) << int64_t(4) << int64_t(1) << int64_t(1)
                                   << int64_t(0) << true << int64_t(4) << int64_t(3);
    QTest::newRow("k1 s2 p1 nobias") << int64_t(2) << int64_t(3) << int64_t(1) << int64_t(2)
                                     << int64_t(1) << false << int64_t(5) << int64_t(4);
  }
  void gradcheck_conv() {
    QFETCH(int64_t, cin);
    QFETCH(int64_t, cout);
    QFETCH(int64_t, k);
    QFETCH(int64_t, stride);
    QFETCH(int64_t, pad);
    QFETCH(bool, bias);
    QFETCH(int64_t, h);
    QFETCH(int64_t, w);
    auto r = test::gradcheck_layer(std::make_unique<Conv2d>("conv", cout, k, stride, pad, bias),
                                   {2, cin, h, w}, 11);
    CHECK_BELOW(r.max_rel_error_dx, kGradTol);
    CHECK_BELOW(r.max_rel_error_params, kGradTol);
  }

  void gradcheck_linear() {
    for (bool bias : {true, false}) {
      auto r = test::gradcheck_layer(std::make_unique<Linear>("fc", 5, bias), {3, 7}, 12);
      CHECK_BELOW(r.max_rel_error_dx, kGradTol);
      CHECK_BELOW(r.max_rel_error_params, kGradTol);
    }
  }

  void gradcheck_pooling() {
    struct P {
      int64_t k, s, p;
    };
    // Non-overlapping, overlapping with padding, overlapping without.
    for (P q : {P{2, 2, 0}, P{3, 2, 1}, P{2, 1, 0}}) {
      auto rm = test::gradcheck_layer(std::make_unique<MaxPool2d>("mp", q.k, q.s, q.p),
                                      {2, 3, 7, 6}, 13);
      CHECK_BELOW(rm.max_rel_error_dx, kGradTol);
      auto ra = test::gradcheck_layer(std::make_unique<AvgPool2d>("ap", q.k, q.s, q.p),
                                      {2, 3, 7, 6}, 14);
      CHECK_BELOW(ra.max_rel_error_dx, kGradTol);
    }
    auto rg = test::gradcheck_layer(std::make_unique<GlobalAvgPool>("gap"), {2, 3, 4, 5}, 15);
    CHECK_BELOW(rg.max_rel_error_dx, kGradTol);
    auto rf = test::gradcheck_layer(std::make_unique<Flatten>("flat"), {2, 3, 4, 5}, 16);
    CHECK_BELOW(rf.max_rel_error_dx, kGradTol);
  }

  // ------------------------------------------------------------ hand-computed values
  void conv_known_values() {
    // x = 1..9 on a 3x3 plane, 3x3 kernel of ones, padding 1, bias 0.5:
    // each output is the sum of the pixel's in-image 3x3 neighbourhood + 0.5.
    for (bool reference : {false, true}) {
      CpuBackend be(BackendOptions{.reference = reference});
      auto g = ConvGeometry::make(1, 1, 3, 3, 1, 3, 1, 1);
      Tensor x = Tensor::empty({1, 1, 3, 3}, DType::F32);
      for (int i = 0; i < 9; ++i) x.data_as<float>()[i] = float(i + 1);
      Tensor w = Tensor::empty({1, 1, 3, 3}, DType::F32);
      be.fill(w, 1.0);
      Tensor b = Tensor::empty({1}, DType::F32);
      be.fill(b, 0.5);
      Tensor y = Tensor::empty({1, 1, 3, 3}, DType::F32);
      be.conv2d_forward(g, x, w, b, y);
      const float want[9] = {12.5f, 21.5f, 16.5f, 27.5f, 45.5f, 33.5f, 24.5f, 39.5f, 28.5f};
      for (int i = 0; i < 9; ++i) QCOMPARE(y.data_as<float>()[i], want[i]);

      // Stride 2 without padding on a 5x5 plane of 1..25, 3x3 ones: window sums.
      auto g2 = ConvGeometry::make(1, 1, 5, 5, 1, 3, 2, 0);
      Tensor x2 = Tensor::empty({1, 1, 5, 5}, DType::F32);
      for (int i = 0; i < 25; ++i) x2.data_as<float>()[i] = float(i + 1);
      Tensor y2 = Tensor::empty({1, 1, 2, 2}, DType::F32);
      be.conv2d_forward(g2, x2, w, Tensor{}, y2);
      const float want2[4] = {63.0f, 81.0f, 153.0f, 171.0f};
      for (int i = 0; i < 4; ++i) QCOMPARE(y2.data_as<float>()[i], want2[i]);
    }
  }

  void linear_known_values() {
    for (bool reference : {false, true}) {
      CpuBackend be(BackendOptions{.reference = reference});
      Tensor x = Tensor::empty({1, 2}, DType::F32), w = Tensor::empty({2, 2}, DType::F32);
      Tensor b = Tensor::empty({2}, DType::F32), y = Tensor::empty({1, 2}, DType::F32);
      const float xv[2] = {1, 2}, wv[4] = {1, 0, 1, 1}, bv[2] = {0.5f, -1};
      std::copy_n(xv, 2, x.data_as<float>());
      std::copy_n(wv, 4, w.data_as<float>());
      std::copy_n(bv, 2, b.data_as<float>());
      be.linear_forward(x, w, b, y);
      QCOMPARE(y.data_as<float>()[0], 1.5f);  // 1*1 + 2*0 + 0.5
      QCOMPARE(y.data_as<float>()[1], 2.0f);  // 1*1 + 2*1 - 1
    }
  }

  void pool_known_values() {
    for (bool reference : {false, true}) {
      CpuBackend be(BackendOptions{.reference = reference});
      // Ties: a constant plane, 2x2 windows -> the first cell of each window wins.
      auto g = PoolGeometry::make(1, 1, 4, 4, 2, 2, 0);
      Tensor x = Tensor::empty({1, 1, 4, 4}, DType::F32);
      be.fill(x, 3.0);
      Tensor y = Tensor::empty({1, 1, 2, 2}, DType::F32);
      Tensor am = Tensor::empty({1, 1, 2, 2}, DType::I32);
      be.maxpool2d_forward(g, x, y, am);
      const int32_t want_am[4] = {0, 2, 8, 10};
      for (int i = 0; i < 4; ++i) {
        QCOMPARE(y.data_as<float>()[i], 3.0f);
        QCOMPARE(am.data_as<int32_t>()[i], want_am[i]);
      }
      // Padding never wins: all-negative input, 3x3 windows, stride 2, padding 1.
      auto gp = PoolGeometry::make(1, 1, 3, 3, 3, 2, 1);
      Tensor xn = Tensor::empty({1, 1, 3, 3}, DType::F32);
      for (int i = 0; i < 9; ++i) xn.data_as<float>()[i] = -1.0f - float(i);
      Tensor yp = Tensor::empty({1, 1, 2, 2}, DType::F32);
      Tensor amp = Tensor::empty({1, 1, 2, 2}, DType::I32);
      be.maxpool2d_forward(gp, xn, yp, amp);
      // Windows cover rows/cols {0,1} or {1,2}: the top-left cell of each is largest.
      const float want_y[4] = {-1.0f, -2.0f, -4.0f, -5.0f};
      const int32_t want_amp[4] = {0, 1, 3, 4};
      for (int i = 0; i < 4; ++i) {
        QCOMPARE(yp.data_as<float>()[i], want_y[i]);
        QCOMPARE(amp.data_as<int32_t>()[i], want_amp[i]);
      }
      // Overlapping windows route gradient to a shared argmax twice.
      Tensor dy = Tensor::empty({1, 1, 2, 2}, DType::F32);
      be.fill(dy, 1.0);
      Tensor dx = Tensor::empty({1, 1, 3, 3}, DType::F32);
      Tensor x3 = Tensor::empty({1, 1, 3, 3}, DType::F32);
      be.fill(x3, 0.0);
      x3.data_as<float>()[4] = 5.0f;  // the centre is in all four windows
      be.maxpool2d_forward(gp, x3, yp, amp);
      be.maxpool2d_backward(gp, dy, amp, dx);
      QCOMPARE(dx.data_as<float>()[4], 4.0f);
      QCOMPARE(dx.data_as<float>()[0], 0.0f);

      // count_include_pad: ones, 3x3 windows, stride 1, padding 1: a corner sees 4 of 9.
      auto ga = PoolGeometry::make(1, 1, 3, 3, 3, 1, 1);
      Tensor ones = Tensor::empty({1, 1, 3, 3}, DType::F32);
      be.fill(ones, 1.0);
      Tensor ya = Tensor::empty({1, 1, 3, 3}, DType::F32);
      be.avgpool2d_forward(ga, ones, ya);
      QCOMPARE(ya.data_as<float>()[0], 4.0f / 9.0f);
      QCOMPARE(ya.data_as<float>()[1], 6.0f / 9.0f);
      QCOMPARE(ya.data_as<float>()[4], 1.0f);

      // Global average of 1..6 on a 2x3 plane is 3.5; dx spreads dy / 6.
      Tensor xg = Tensor::empty({1, 1, 2, 3}, DType::F32);
      for (int i = 0; i < 6; ++i) xg.data_as<float>()[i] = float(i + 1);
      Tensor yg = Tensor::empty({1, 1}, DType::F32);
      be.global_avgpool_forward(xg, yg);
      QCOMPARE(yg.data_as<float>()[0], 3.5f);
      Tensor dyg = Tensor::empty({1, 1}, DType::F32);
      be.fill(dyg, 6.0);
      be.global_avgpool_backward(dyg, xg);
      for (int i = 0; i < 6; ++i) QCOMPARE(xg.data_as<float>()[i], 1.0f);
    }
  }

  // ------------------------------------------------------------ fast vs reference
  void conv_fast_matches_reference_data() {
    QTest::addColumn<ConvCase>("c");
    QTest::newRow("fmnist conv1, batch 1") << ConvCase{1, 1, 28, 28, 32, 3, 1, 1, true};
    QTest::newRow("fmnist conv2, batch 3") << ConvCase{3, 32, 14, 14, 64, 3, 1, 1, true};
    // "Same" padding (stride 1, output size = input size) has a shifted-copy path.
    QTest::newRow("same, odd sizes") << ConvCase{2, 3, 7, 9, 5, 3, 1, 1, true};
    QTest::newRow("same, kernel 5 > height") << ConvCase{1, 2, 3, 4, 3, 5, 1, 2, false};
    QTest::newRow("same, height 1") << ConvCase{2, 2, 1, 5, 3, 3, 1, 1, true};
    QTest::newRow("odd, stride 2, pad 1") << ConvCase{2, 3, 7, 9, 5, 3, 2, 1, true};
    QTest::newRow("stride 2, pad 0, no bias") << ConvCase{5, 2, 8, 6, 3, 3, 2, 0, false};
    QTest::newRow("kernel 1") << ConvCase{2, 4, 5, 5, 6, 1, 1, 0, true};
    QTest::newRow("kernel 1, stride 2, pad 1") << ConvCase{3, 2, 6, 5, 3, 1, 2, 1, false};
    QTest::newRow("kernel 5, stride 3, pad 2") << ConvCase{1, 3, 11, 7, 4, 5, 3, 2, true};
    QTest::newRow("kernel = input") << ConvCase{2, 2, 3, 3, 3, 3, 1, 0, true};
    // The fast path batches 4 conv1 images per GEMM: chunks of 4, 4 and 2.
    QTest::newRow("fmnist conv1, batch 10") << ConvCase{10, 1, 28, 28, 32, 3, 1, 1, true};
    // Large images: one image per GEMM, 7 chunks accumulating into dW.
    QTest::newRow("one image per chunk") << ConvCase{7, 16, 32, 32, 8, 5, 1, 2, true};
  }
  void conv_fast_matches_reference() {
    QFETCH(ConvCase, c);
    std::mt19937_64 rng(21);
    CpuBackend fast, ref(BackendOptions{.reference = true});
    const auto g = ConvGeometry::make(c.N, c.C_in, c.H, c.W, c.C_out, c.k, c.stride, c.pad);
    Tensor x = random_tensor(g.input_shape(), DType::F32, rng);
    Tensor w = random_tensor(g.weight_shape(), DType::F32, rng);
    Tensor b = c.bias ? random_tensor({c.C_out}, DType::F32, rng) : Tensor{};
    Tensor dy = random_tensor(g.output_shape(), DType::F32, rng);

    Tensor y_f = Tensor::empty(g.output_shape(), DType::F32);
    Tensor y_r = Tensor::empty(g.output_shape(), DType::F32);
    fast.conv2d_forward(g, x, w, b, y_f);
    ref.conv2d_forward(g, x, w, b, y_r);
    CHECK_BELOW(scaled_error(y_f, y_r), kFastTol);

    auto grads = [&](Backend& be, bool accumulate, Tensor dx, Tensor dw, Tensor db) {
      be.conv2d_backward(g, x, w, dy, dx, dw, db, accumulate);
    };
    Tensor dx_f = Tensor::empty(g.input_shape(), DType::F32), dx_r = clone(dx_f);
    Tensor dw_f = Tensor::empty(g.weight_shape(), DType::F32), dw_r = clone(dw_f);
    Tensor db_f = Tensor::empty({c.C_out}, DType::F32), db_r = clone(db_f);
    grads(fast, false, dx_f, dw_f, db_f);
    grads(ref, false, dx_r, dw_r, db_r);
    CHECK_BELOW(scaled_error(dx_f, dx_r), kFastTol);
    CHECK_BELOW(scaled_error(dw_f, dw_r), kFastTol);
    CHECK_BELOW(scaled_error(db_f, db_r), kFastTol);

    // Each output alone (the others undefined) gives the same values.
    Tensor dx_only = Tensor::empty(g.input_shape(), DType::F32);
    Tensor dw_only = Tensor::empty(g.weight_shape(), DType::F32);
    grads(fast, false, dx_only, Tensor{}, Tensor{});
    grads(fast, false, Tensor{}, dw_only, Tensor{});
    CHECK_BELOW(scaled_error(dx_only, dx_f), 1e-7);
    CHECK_BELOW(scaled_error(dw_only, dw_f), 1e-7);

    // accumulate=true adds onto what is there; dx is still written.
    for (Backend* be : {static_cast<Backend*>(&fast), static_cast<Backend*>(&ref)}) {
      Tensor old_w = random_tensor(g.weight_shape(), DType::F32, rng);
      Tensor old_b = random_tensor({c.C_out}, DType::F32, rng);
      Tensor acc_w = clone(old_w), acc_b = clone(old_b);
      Tensor dx_acc = random_tensor(g.input_shape(), DType::F32, rng);
      grads(*be, true, dx_acc, acc_w, acc_b);
      Tensor& dw_written = be == &fast ? dw_f : dw_r;
      Tensor& db_written = be == &fast ? db_f : db_r;
      Tensor& dx_written = be == &fast ? dx_f : dx_r;
      CHECK_BELOW(scaled_error(acc_w, sum_of(old_w, dw_written)), kAccumTol);
      CHECK_BELOW(scaled_error(acc_b, sum_of(old_b, db_written)), kAccumTol);
      CHECK_BELOW(scaled_error(dx_acc, dx_written), 1e-7);
    }
  }

  void conv_f64_accumulate() {
    // The f64 reference keeps the accumulate contract too.
    std::mt19937_64 rng(22);
    CpuBackend be;
    const auto g = ConvGeometry::make(2, 3, 6, 5, 4, 3, 1, 1);
    Tensor x = random_tensor(g.input_shape(), DType::F64, rng);
    Tensor w = random_tensor(g.weight_shape(), DType::F64, rng);
    Tensor dy = random_tensor(g.output_shape(), DType::F64, rng);
    Tensor dw = Tensor::empty(g.weight_shape(), DType::F64), db = Tensor::empty({4}, DType::F64);
    Tensor none;
    be.conv2d_backward(g, x, w, dy, none, dw, db, false);
    Tensor acc_w = random_tensor(g.weight_shape(), DType::F64, rng);
    Tensor acc_b = random_tensor({4}, DType::F64, rng);
    Tensor old_w = clone(acc_w), old_b = clone(acc_b);
    be.conv2d_backward(g, x, w, dy, none, acc_w, acc_b, true);
    CHECK_BELOW(scaled_error(acc_w, sum_of(old_w, dw)), 1e-14);
    CHECK_BELOW(scaled_error(acc_b, sum_of(old_b, db)), 1e-14);
  }

  void empty_batch() {
    // N = 0 (the tail of an exactly divided epoch never is, but a caller may ask):
    // outputs are empty, written gradients are zero.
    for (bool reference : {false, true}) {
      CpuBackend be(BackendOptions{.reference = reference});
      const auto g = ConvGeometry::make(0, 2, 5, 5, 3, 3, 1, 1);
      Tensor x = Tensor::empty(g.input_shape(), DType::F32), w = Tensor::zeros({3, 2, 3, 3}, DType::F32);
      Tensor dy = Tensor::empty(g.output_shape(), DType::F32), dx = Tensor::empty(g.input_shape(), DType::F32);
      Tensor dw = Tensor::empty({3, 2, 3, 3}, DType::F32), db = Tensor::empty({3}, DType::F32);
      be.fill(dw, 7.0);
      be.fill(db, 7.0);
      be.conv2d_backward(g, x, w, dy, dx, dw, db, false);
      QCOMPARE(be.sum_squares(dw), 0.0);
      QCOMPARE(be.sum_squares(db), 0.0);
      Tensor lx = Tensor::empty({0, 4}, DType::F32), lw = Tensor::zeros({2, 4}, DType::F32);
      Tensor ldy = Tensor::empty({0, 2}, DType::F32), ldx = Tensor::empty({0, 4}, DType::F32);
      Tensor ldw = Tensor::empty({2, 4}, DType::F32), ldb = Tensor::empty({2}, DType::F32);
      be.fill(ldw, 7.0);
      be.fill(ldb, 7.0);
      be.linear_backward(lx, lw, ldy, ldx, ldw, ldb, false);
      QCOMPARE(be.sum_squares(ldw), 0.0);
      QCOMPARE(be.sum_squares(ldb), 0.0);
    }
  }

  void linear_fast_matches_reference() {
    struct L {
      int64_t N, K, M;
      bool bias;
    };
    std::mt19937_64 rng(23);
    CpuBackend fast, ref(BackendOptions{.reference = true});
    for (L c : {L{1, 3136, 10, true}, L{64, 3136, 10, true}, L{7, 13, 5, false}, L{3, 1, 1, true}}) {
      Tensor x = random_tensor({c.N, c.K}, DType::F32, rng);
      Tensor w = random_tensor({c.M, c.K}, DType::F32, rng);
      Tensor b = c.bias ? random_tensor({c.M}, DType::F32, rng) : Tensor{};
      Tensor dy = random_tensor({c.N, c.M}, DType::F32, rng);
      Tensor y_f = Tensor::empty({c.N, c.M}, DType::F32), y_r = clone(y_f);
      fast.linear_forward(x, w, b, y_f);
      ref.linear_forward(x, w, b, y_r);
      CHECK_BELOW(scaled_error(y_f, y_r), kFastTol);

      Tensor dx_f = Tensor::empty({c.N, c.K}, DType::F32), dx_r = clone(dx_f);
      Tensor dw_f = Tensor::empty({c.M, c.K}, DType::F32), dw_r = clone(dw_f);
      Tensor db_f = Tensor::empty({c.M}, DType::F32), db_r = clone(db_f);
      fast.linear_backward(x, w, dy, dx_f, dw_f, db_f, false);
      ref.linear_backward(x, w, dy, dx_r, dw_r, db_r, false);
      CHECK_BELOW(scaled_error(dx_f, dx_r), kFastTol);
      CHECK_BELOW(scaled_error(dw_f, dw_r), kFastTol);
      CHECK_BELOW(scaled_error(db_f, db_r), kFastTol);

      for (Backend* be : {static_cast<Backend*>(&fast), static_cast<Backend*>(&ref)}) {
        Tensor acc_w = random_tensor({c.M, c.K}, DType::F32, rng);
        Tensor acc_b = random_tensor({c.M}, DType::F32, rng);
        Tensor old_w = clone(acc_w), old_b = clone(acc_b), none;
        be->linear_backward(x, w, dy, none, acc_w, acc_b, true);
        const bool f = be == &fast;
        CHECK_BELOW(scaled_error(acc_w, sum_of(old_w, f ? dw_f : dw_r)), kAccumTol);
        CHECK_BELOW(scaled_error(acc_b, sum_of(old_b, f ? db_f : db_r)), kAccumTol);
      }
    }
  }

  void pool_fast_matches_reference() {
    struct P {
      int64_t N, C, H, W, k, s, p;
    };
    std::mt19937_64 rng(24);
    CpuBackend fast, ref(BackendOptions{.reference = true});
    // 2x2/stride 2 has its own vector path: widths 14 (whole vectors), 7 and 5 (a
    // ragged end), 3 (scalar only); then general windows.
    for (P c : {P{4, 32, 28, 28, 2, 2, 0}, P{2, 3, 14, 14, 2, 2, 0}, P{2, 3, 9, 11, 2, 2, 0},
                P{1, 2, 6, 7, 2, 2, 0}, P{1, 2, 7, 9, 3, 2, 1}, P{3, 4, 5, 5, 2, 1, 0},
                P{2, 3, 9, 8, 3, 3, 1}}) {
      const auto g = PoolGeometry::make(c.N, c.C, c.H, c.W, c.k, c.s, c.p);
      Tensor x = random_tensor(g.input_shape(), DType::F32, rng);
      Tensor dy = random_tensor(g.output_shape(), DType::F32, rng);
      Tensor y_f = Tensor::empty(g.output_shape(), DType::F32), y_r = clone(y_f);
      Tensor a_f = Tensor::empty(g.output_shape(), DType::I32), a_r = clone(a_f);
      Tensor dx_f = Tensor::empty(g.input_shape(), DType::F32), dx_r = clone(dx_f);
      fast.maxpool2d_forward(g, x, y_f, a_f);
      ref.maxpool2d_forward(g, x, y_r, a_r);
      QCOMPARE(scaled_error(y_f, y_r), 0.0);  // max pooling is exact
      QVERIFY(std::memcmp(a_f.data(), a_r.data(), a_f.nbytes()) == 0);
      fast.maxpool2d_backward(g, dy, a_f, dx_f);
      ref.maxpool2d_backward(g, dy, a_r, dx_r);
      CHECK_BELOW(scaled_error(dx_f, dx_r), 1e-7);

      fast.avgpool2d_forward(g, x, y_f);
      ref.avgpool2d_forward(g, x, y_r);
      CHECK_BELOW(scaled_error(y_f, y_r), kFastTol);
      fast.avgpool2d_backward(g, dy, dx_f);
      ref.avgpool2d_backward(g, dy, dx_r);
      CHECK_BELOW(scaled_error(dx_f, dx_r), kFastTol);
    }
  }

  void maxpool_nan_propagates() {
    // A NaN in a window propagates (argmax: its first NaN); other windows are unaffected.
    CpuBackend fast, ref(BackendOptions{.reference = true});
    std::mt19937_64 rng(26);
    for (int64_t k : {2, 3}) {
      const auto g = PoolGeometry::make(2, 2, 10, 18, k, 2, k == 3 ? 1 : 0);
      Tensor x = random_tensor(g.input_shape(), DType::F32, rng);
      float* xp = x.data_as<float>();
      xp[3] = NAN;                 // plane 0, row 0: in an SSE block
      xp[18 * 4 + 17] = NAN;       // row 4, last column: the ragged end
      xp[180 + 18 * 9 + 0] = NAN;  // plane 1, last row
      xp[180 + 18 * 9 + 1] = NAN;  // two NaNs in one window: the first wins
      Tensor y_f = Tensor::empty(g.output_shape(), DType::F32), y_r = clone(y_f);
      Tensor a_f = Tensor::empty(g.output_shape(), DType::I32), a_r = clone(a_f);
      fast.maxpool2d_forward(g, x, y_f, a_f);
      ref.maxpool2d_forward(g, x, y_r, a_r);
      QVERIFY(std::memcmp(a_f.data(), a_r.data(), a_f.nbytes()) == 0);
      int nans = 0;
      for (int64_t i = 0; i < y_f.numel(); ++i) {
        const float f = y_f.data_as<float>()[i], r = y_r.data_as<float>()[i];
        QVERIFY((f != f) == (r != r));
        if (f != f) ++nans;
        else QCOMPARE(f, r);
      }
      QVERIFY(nans >= 3);
      QCOMPARE(a_r.data_as<int32_t>()[1], 3);  // plane 0, output (0, 1) holds x[0, 3]
    }
  }

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
    CpuBackend fast, ref(BackendOptions{.reference = true});
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
    CHECK_BELOW(scaled_error(yf, yr), kFastTol);
    const void* first = yf.data();
    mf->backward(cf, dlogits);
    mr->backward(cr, dlogits);
    CHECK_BELOW(scaled_error(mf->grad_block(), mr->grad_block()), kFastTol);
    // Steady state: the second step reuses the output buffers.
    QVERIFY(mf->forward(cf, x).data() == first);
  }

  // ------------------------------------------------------------ layers
  void layer_shapes() {
    ParamRegistry reg;
    Conv2d conv("c", 8, 3, 2, 1);
    QCOMPARE(conv.setup({1, 3, 7, 8}, reg), (Shape{1, 8, 4, 4}));
    QCOMPARE(conv.kind(), std::string("conv2d"));
    QCOMPARE(reg.params().size(), size_t(2));
    QCOMPARE(reg.params()[0].spec.shape, (Shape{8, 3, 3, 3}));
    QCOMPARE(reg.params()[0].spec.fan_in, int64_t(27));
    QVERIFY(reg.params()[0].spec.init == Init::KaimingUniform);
    QVERIFY(reg.params()[1].spec.init == Init::FanInUniform);
    QVERIFY(!reg.params()[1].spec.weight_decay);
    Conv2d nobias("c2", 8, 1, 1, 0, false);
    QCOMPARE(nobias.setup({1, 3, 7, 8}, reg), (Shape{1, 8, 7, 8}));
    QCOMPARE(reg.params().size(), size_t(3));

    Linear fc("fc", 10);
    QCOMPARE(fc.setup({1, 3136}, reg), (Shape{1, 10}));
    QCOMPARE(reg.params()[3].spec.shape, (Shape{10, 3136}));
    QCOMPARE(reg.params()[4].spec.shape, (Shape{10}));

    MaxPool2d mp("mp", 2, 2);
    QCOMPARE(mp.setup({1, 32, 28, 28}, reg), (Shape{1, 32, 14, 14}));
    AvgPool2d ap("ap", 3, 2, 1);
    QCOMPARE(ap.setup({1, 4, 7, 7}, reg), (Shape{1, 4, 4, 4}));
    GlobalAvgPool gap("gap");
    QCOMPARE(gap.setup({1, 64, 7, 7}, reg), (Shape{1, 64}));
    Flatten fl("fl");
    QCOMPARE(fl.setup({1, 64, 7, 7}, reg), (Shape{1, 3136}));
    QCOMPARE(reg.params().size(), size_t(5));  // pooling and flatten have none

    // Flatten is a view: same memory forward and back.
    CpuBackend be;
    Context ctx{be};
    Tensor x = Tensor::zeros({2, 3, 4, 5}, DType::F32);
    Tensor y = fl.forward(ctx, x);
    QCOMPARE(y.shape(), (Shape{2, 60}));
    QVERIFY(y.data() == x.data());
    Tensor dx = fl.backward(ctx, y, true);
    QCOMPARE(dx.shape(), x.shape());
    QVERIFY(dx.data() == x.data());
  }

  // ------------------------------------------------------------ errors
  void shape_errors() {
    CpuBackend be;
    auto g = ConvGeometry::make(2, 3, 8, 8, 4, 3, 1, 1);
    Tensor x = Tensor::zeros({2, 3, 8, 8}, DType::F32);
    Tensor w = Tensor::zeros({4, 3, 3, 3}, DType::F32);
    Tensor y = Tensor::zeros({2, 4, 8, 8}, DType::F32);
    Tensor bad_x = Tensor::zeros({2, 2, 8, 8}, DType::F32);
    QString m = error_of([&] { be.conv2d_forward(g, bad_x, w, Tensor{}, y); });
    QVERIFY2(m.contains("[2, 2, 8, 8]") && m.contains("[2, 3, 8, 8]"), qPrintable(m));
    Tensor bad_w = Tensor::zeros({4, 3, 5, 5}, DType::F32);
    m = error_of([&] { be.conv2d_forward(g, x, bad_w, Tensor{}, y); });
    QVERIFY2(m.contains("[4, 3, 5, 5]") && m.contains("[4, 3, 3, 3]"), qPrintable(m));
    Tensor bad_b = Tensor::zeros({5}, DType::F32);
    m = error_of([&] { be.conv2d_forward(g, x, w, bad_b, y); });
    QVERIFY2(m.contains("[5]") && m.contains("4"), qPrintable(m));
    Tensor bad_dx = Tensor::zeros({2, 3, 7, 8}, DType::F32), none;
    m = error_of([&] { be.conv2d_backward(g, x, w, y, bad_dx, none, none, false); });
    QVERIFY2(m.contains("[2, 3, 7, 8]") && m.contains("[2, 3, 8, 8]"), qPrintable(m));
    Tensor y64 = Tensor::zeros({2, 4, 8, 8}, DType::F64);
    m = error_of([&] { be.conv2d_forward(g, x, w, Tensor{}, y64); });
    QVERIFY2(m.contains("f64") && m.contains("f32"), qPrintable(m));
    // NHWC x with an NCHW y: activations must share one layout.
    Tensor x_nhwc = Tensor::zeros({2, 3, 8, 8}, DType::F32, Device::cpu(), Layout::NHWC);
    m = error_of([&] { be.conv2d_forward(g, x_nhwc, w, Tensor{}, y); });
    QVERIFY2(m.contains("NHWC"), qPrintable(m));

    Tensor lx = Tensor::zeros({4, 7}, DType::F32), lw = Tensor::zeros({3, 6}, DType::F32);
    Tensor ly = Tensor::zeros({4, 3}, DType::F32);
    m = error_of([&] { be.linear_forward(lx, lw, Tensor{}, ly); });
    QVERIFY2(m.contains("[4, 7]") && m.contains("[3, 6]"), qPrintable(m));
    Tensor lw_ok = Tensor::zeros({3, 7}, DType::F32), ly_bad = Tensor::zeros({4, 2}, DType::F32);
    m = error_of([&] { be.linear_forward(lx, lw_ok, Tensor{}, ly_bad); });
    QVERIFY2(m.contains("[4, 2]") && m.contains("[4, 3]"), qPrintable(m));
    m = error_of([&] { be.linear_forward(x, lw_ok, Tensor{}, ly); });
    QVERIFY2(m.contains("[2, 3, 8, 8]"), qPrintable(m));

    auto pg = PoolGeometry::make(2, 3, 8, 8, 2, 2, 0);
    Tensor py_bad = Tensor::zeros({2, 3, 5, 4}, DType::F32);
    Tensor pam = Tensor::zeros({2, 3, 4, 4}, DType::I32);
    m = error_of([&] { be.maxpool2d_forward(pg, x, py_bad, pam); });
    QVERIFY2(m.contains("[2, 3, 5, 4]") && m.contains("[2, 3, 4, 4]"), qPrintable(m));
    m = error_of([&] { be.avgpool2d_backward(pg, py_bad, x); });
    QVERIFY2(m.contains("[2, 3, 5, 4]"), qPrintable(m));
    Tensor gy_bad = Tensor::zeros({2, 4}, DType::F32);
    m = error_of([&] { be.global_avgpool_forward(x, gy_bad); });
    QVERIFY2(m.contains("[2, 4]") && m.contains("[2, 3]"), qPrintable(m));

    // Layers name themselves and the offending shape.
    ParamRegistry reg;
    m = error_of([&] { Linear("head", 10).setup({1, 64, 7, 7}, reg); });
    QVERIFY2(m.contains("head") && m.contains("[1, 64, 7, 7]"), qPrintable(m));
    Conv2d conv("conv1", 4, 3);
    conv.setup({1, 3, 8, 8}, reg);
    Context ctx{be};
    m = error_of([&] { conv.forward(ctx, bad_x); });
    QVERIFY2(m.contains("conv1") && m.contains("[2, 2, 8, 8]"), qPrintable(m));
    m = error_of([&] { ConvGeometry::make(1, 1, 2, 2, 1, 5, 1, 0); });
    QVERIFY2(m.contains("5"), qPrintable(m));
  }
};

QTEST_GUILESS_MAIN(TestConvLinearPool)
#include "test_conv_linear_pool.moc"
