// SPDX-License-Identifier: GPL-3.0-or-later
// The tensor-layout op family: channel padding (pad_channels_to),
// layout::pad_channels_forward and pad_channels_backward, on every backend,
// layout and dtype (f32, f64, f16, bf16).
//
// 1. pad_channels_op: the CPU reference against the definition, element by
//    element; NHWC gives the same logical tensors as NCHW.
// 2. pad_channels_matches_reference: every target against the CPU reference,
//    exact (pure data movement); the zero channels must be written, not left
//    as they were.
// 3. The contract's refusals: fewer channels out than in, mixed layouts,
//    mixed dtypes (f16 with bf16 among them), N/H/W that differ, undefined
//    and rank-3 operands, an integer dtype.
// GPU rows QSKIP with the reason where there is no device.
// The family's test, beside its code (docs/architecture.md, "Op families").
#include <QtTest>

#include <random>
#include <string>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/ops/layout/layout.h"
#include "tests/engine/device_fixture.h"
#include "tests/engine/low_precision.h"
#include "tests/engine/tensor_helpers.h"

using namespace tb;
using namespace tb::test;

namespace {

// Uniform values in [-1, 1) of dtype t (f16/bf16: f32 values rounded), layout l.
Tensor random_of(const Shape& s, DType t, std::mt19937_64& rng, Layout l = Layout::NCHW) {
  if (t == DType::F32 || t == DType::F64) return random_tensor(s, t, rng, l);
  return in_layout(lp_of(cpu_reference(), random_tensor(s, DType::F32, rng), t), l);
}

}  // namespace

class TestOpLayout : public QObject {
  Q_OBJECT

 private slots:
  void pad_channels_op() {
    CpuBackend& be = cpu_reference();
    for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
      std::mt19937_64 rng(9);
      const Tensor x = random_of({2, 3, 4, 5}, t, rng);
      const Tensor dy = random_of({2, 8, 4, 5}, t, rng);
      Tensor y0 = Tensor::empty({2, 8, 4, 5}, t), dx0 = like(x, Layout::NCHW);
      layout::pad_channels_forward(be, x, y0);
      layout::pad_channels_backward(be, dy, dx0);
      // Against the definition, element by element (logical order).
      for (int64_t n = 0; n < 2; ++n)
        for (int64_t c = 0; c < 8; ++c)
          for (int64_t i = 0; i < 20; ++i) {
            const double got = value_at(y0, (n * 8 + c) * 20 + i);
            const double want = c < 3 ? value_at(x, (n * 3 + c) * 20 + i) : 0.0;
            QCOMPARE(got, want);
            if (c < 3) QCOMPARE(value_at(dx0, (n * 3 + c) * 20 + i), value_at(dy, (n * 8 + c) * 20 + i));
          }
      // NHWC gives the same logical tensors.
      Tensor xn = like(x, Layout::NHWC), dyn = like(dy, Layout::NHWC);
      be.copy(x, xn);
      be.copy(dy, dyn);
      Tensor y1 = like(dy, Layout::NHWC), dx1 = like(x, Layout::NHWC);
      layout::pad_channels_forward(be, xn, y1);
      layout::pad_channels_backward(be, dyn, dx1);
      EXPECT_SAME(y0, y1, "pad forward");
      EXPECT_SAME(dx0, dx1, "pad backward");
    }
    // Errors: fewer channels out than in, mixed layouts.
    std::mt19937_64 rng(3);
    const Tensor x = random_tensor({1, 4, 2, 2}, DType::F32, rng);
    Tensor narrow = Tensor::empty({1, 2, 2, 2}, DType::F32);
    QVERIFY_THROWS_EXCEPTION(tb::Error, layout::pad_channels_forward(be, x, narrow));
    Tensor mixed = Tensor::empty({1, 8, 2, 2}, DType::F32, Device::cpu(), Layout::NHWC);
    QVERIFY_THROWS_EXCEPTION(tb::Error, layout::pad_channels_forward(be, x, mixed));
  }

  // Every target against the CPU reference, exact; the zero channels must be
  // written, not left as they were.
  void pad_channels_matches_reference_data() {
    QTest::addColumn<Target>("target");
    for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16})
      for (const Target& tg : {Target{Impl::CpuFast, Layout::NCHW, t}, Target{Impl::CpuFast, Layout::NHWC, t},
                               Target{Impl::Cuda, Layout::NCHW, t}, Target{Impl::Cuda, Layout::NHWC, t}})
        QTest::newRow(tg.name().c_str()) << tg;
  }
  void pad_channels_matches_reference() {
    FETCH_TARGET(tg, be);
    TB_GPU_TRY
    CpuBackend& cpu = cpu_reference();
    const Layout l = tg.layout;
    const DType t = tg.dtype;
    std::mt19937_64 rng(13);
    const Tensor x = random_of({3, 3, 5, 7}, t, rng, l);
    const Tensor dy = random_of({3, 8, 5, 7}, t, rng, l);
    Tensor y0 = like(dy, l), dx0 = like(x, l);
    layout::pad_channels_forward(cpu, x, y0);
    layout::pad_channels_backward(cpu, dy, dx0);
    Tensor xd = to_device(be, x, l), dyd = to_device(be, dy, l);
    // The zero channels must be written, not left as they were: y starts as dy.
    Tensor yd = to_device(be, dy, l), dxd = be.empty(x.shape(), t, l);
    layout::pad_channels_forward(be, xd, yd);
    layout::pad_channels_backward(be, dyd, dxd);
    EXPECT_SAME(y0, to_host(be, yd), qPrintable(QString::fromStdString("pad forward " + tg.name())));
    EXPECT_SAME(dx0, to_host(be, dxd), qPrintable(QString::fromStdString("pad backward " + tg.name())));
    TB_GPU_CATCH
  }

  // Each of the contract's refusals, on the reference and the fast CPU
  // backend; a refused call leaves its output as it was.
  void pad_channels_rejects_bad_operands() {
    for (bool reference : {true, false}) {
      CpuBackend& be = reference ? cpu_reference() : cpu_fast();
      std::mt19937_64 rng(5);
      const Tensor x = random_tensor({2, 3, 4, 4}, DType::F32, rng);
      const Tensor dy = random_tensor({2, 8, 4, 4}, DType::F32, rng);
      Tensor y = Tensor::empty({2, 8, 4, 4}, DType::F32);
      Tensor dx = Tensor::empty({2, 3, 4, 4}, DType::F32);
      be.fill(y, 7.0);
      be.fill(dx, 7.0);
      Tensor f64 = Tensor::empty({2, 8, 4, 4}, DType::F64);
      QVERIFY_THROWS_EXCEPTION(Error, layout::pad_channels_forward(be, x, f64));
      Tensor taller = Tensor::empty({2, 8, 5, 4}, DType::F32);
      QVERIFY_THROWS_EXCEPTION(Error, layout::pad_channels_forward(be, x, taller));
      Tensor other_batch = Tensor::empty({3, 8, 4, 4}, DType::F32);
      QVERIFY_THROWS_EXCEPTION(Error, layout::pad_channels_forward(be, x, other_batch));
      Tensor none;
      QVERIFY_THROWS_EXCEPTION(Error, layout::pad_channels_forward(be, none, y));
      QVERIFY_THROWS_EXCEPTION(Error, layout::pad_channels_backward(be, dy, none));
      Tensor rank3 = Tensor::empty({2, 8, 16}, DType::F32);
      QVERIFY_THROWS_EXCEPTION(Error, layout::pad_channels_forward(be, x, rank3));
      Tensor i32_x = Tensor::empty({2, 3, 4, 4}, DType::I32);
      Tensor i32_y = Tensor::empty({2, 8, 4, 4}, DType::I32);
      QVERIFY_THROWS_EXCEPTION(Error, layout::pad_channels_forward(be, i32_x, i32_y));
      const Tensor x16 = Tensor::zeros({2, 3, 4, 4}, DType::F16);
      Tensor y_bf16 = Tensor::zeros({2, 8, 4, 4}, DType::BF16);
      const QString m = qerror_of([&] { layout::pad_channels_forward(be, x16, y_bf16); });
      QVERIFY2(m.contains("pad_channels_forward") && m.contains("output y") &&
                   m.contains("bf16") && m.contains("f16"),
               qPrintable(m));
      Tensor narrow_dy = Tensor::empty({2, 2, 4, 4}, DType::F32);
      QVERIFY_THROWS_EXCEPTION(Error, layout::pad_channels_backward(be, narrow_dy, dx));
      Tensor nhwc_dx = Tensor::empty({2, 3, 4, 4}, DType::F32, Device::cpu(), Layout::NHWC);
      QVERIFY_THROWS_EXCEPTION(Error, layout::pad_channels_backward(be, dy, nhwc_dx));
      for (const Tensor* out : {&y, &dx})
        for (int64_t i = 0; i < out->numel(); ++i) QCOMPARE(out->data_as<float>()[i], 7.0f);
    }
  }
};

QTEST_GUILESS_MAIN(TestOpLayout)
#include "test_op_layout.moc"
