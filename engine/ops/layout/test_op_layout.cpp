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
// 4. On the CUDA emulator (tests/cuda_emulator), on any machine: layout.cu's
//    padding kernels, 1/2/4/8-byte elements, blocks ending mid-way, both
//    thread orders: the CPU's bytes, every output element written. (The
//    CUDA backend's NCHW <-> NHWC transpose is test_op_tensor's.)
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
#include "tests/cuda_emulator/emulated_slot.h"
#if defined(TRAINBENCH_CUDA_EMULATED)
#include "tests/cuda_emulator/begin_emulated.h"
#include "engine/ops/layout/layout.cuh"
#include "tests/cuda_emulator/end_emulated.h"
#endif

using namespace tb;
using namespace tb::test;

namespace {

// Uniform values in [-1, 1) of dtype t (f16/bf16: f32 values rounded), layout l.
Tensor random_of(const Shape& s, DType t, std::mt19937_64& rng, Layout l = Layout::NCHW) {
  if (t == DType::F32 || t == DType::F64) return random_tensor(s, t, rng, l);
  return in_layout(lp_of(cpu_reference(), random_tensor(s, DType::F32, rng), t), l);
}

#if defined(TRAINBENCH_CUDA_EMULATED)
// Random bytes of dtype t (any bit pattern: the kernels only move them), layout l.
Tensor random_bits(const Shape& s, DType t, std::mt19937_64& rng, Layout l = Layout::NCHW) {
  Tensor x = Tensor::empty(s, t, Device::cpu(), l);
  for (size_t i = 0; i < x.nbytes(); ++i) static_cast<uint8_t*>(x.data())[i] = uint8_t(rng());
  return x;
}

// A tensor like `want` holding its bytes complemented: an element a kernel
// leaves unwritten differs from `want` whatever its value.
Tensor complement_of(const Tensor& want) {
  Tensor t = clone(want);
  for (size_t i = 0; i < t.nbytes(); ++i) static_cast<uint8_t*>(t.data())[i] ^= 0xffu;
  return t;
}

// Where two host tensors' bytes first differ, in memory order: "" or the element.
std::string bytes_differ(const Tensor& want, const Tensor& got) {
  const size_t es = dtype_size(want.dtype());
  if (want.nbytes() != got.nbytes()) return "sizes differ";
  for (size_t i = 0; i < want.nbytes(); ++i)
    if (static_cast<const uint8_t*>(want.data())[i] != static_cast<const uint8_t*>(got.data())[i])
      return "element " + std::to_string(i / es) + " (memory order) differs";
  return "";
}
#endif

// The emulated slots' padding shapes (N, C, Cp, H, W): the GPU slot's; 2574
// outputs, ending mid-block; nothing to pad (Cp == C); one pixel with 30
// zero channels.
struct PadCase {
  const char* name;
  int64_t N, C, Cp, H, W;
};
const PadCase kPadCases[] = {{"3x3->8 5x7", 3, 3, 8, 5, 7},
                             {"2x5->13 9x11", 2, 5, 13, 9, 11},
                             {"4x16->16 3x3", 4, 16, 16, 3, 3},
                             {"2x3->33 1x1", 2, 3, 33, 1, 1}};

}  // namespace

Q_DECLARE_METATYPE(PadCase)

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

  // ------------------------------------------------------------ the CUDA kernels, emulated

  // layout.cu's padding kernels on the CUDA emulator, as layout_cuda.cpp
  // calls them (the dtype's size: 2, 4 or 8 bytes), against the CPU
  // reference: the same bytes (the GPU slot's bound), under both thread
  // orders. The outputs start as the complement of the reference's bytes,
  // so every element, the zero channels too, must be written.
  void pad_channels_emulated_matches_cpu_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<PadCase>("c");
    for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16})
      for (const Target& tg : cuda_targets(t))
        for (const PadCase& c : kPadCases)
          QTest::addRow("%s: %s", tg.name().c_str(), c.name) << tg << c;
  }
  void pad_channels_emulated_matches_cpu() {
    QFETCH(Target, target);
    QFETCH(PadCase, c);
#if defined(TRAINBENCH_CUDA_EMULATED)
    TB_EMU_TRY
    const Layout l = target.layout;
    const DType t = target.dtype;
    const bool nhwc = l == Layout::NHWC;
    const int es = int(dtype_size(t));
    const int64_t HW = c.H * c.W;
    std::mt19937_64 rng(17 + uint64_t(c.Cp));
    const Tensor x = random_of({c.N, c.C, c.H, c.W}, t, rng, l);
    const Tensor dy = random_of({c.N, c.Cp, c.H, c.W}, t, rng, l);
    Tensor y0 = like(dy, l), dx0 = like(x, l);
    layout::pad_channels_forward(cpu_reference(), x, y0);
    layout::pad_channels_backward(cpu_reference(), dy, dx0);
    for (tb_emu::Schedule order : {tb_emu::Schedule::forward, tb_emu::Schedule::reverse}) {
      EmulatorSchedule use(order);
      Tensor y = complement_of(y0), dx = complement_of(dx0);
      tb::cuda_emu::launch_pad_channels_forward(x.data(), y.data(), c.N, c.C, c.Cp, HW, es, nhwc,
                                                nullptr);
      tb::cuda_emu::launch_pad_channels_backward(dy.data(), dx.data(), c.N, c.C, c.Cp, HW, es,
                                                 nhwc, nullptr);
      const std::string when = std::string(" [") + schedule_name(order) + "]";
      std::string bad = bytes_differ(y0, y);
      QVERIFY2(bad.empty(), ("pad forward: " + bad + when).c_str());
      bad = bytes_differ(dx0, dx);
      QVERIFY2(bad.empty(), ("pad backward: " + bad + when).c_str());
    }
    TB_EMU_CATCH
#else
    QSKIP(kNoEmulator);
#endif
  }
};

QTEST_GUILESS_MAIN(TestOpLayout)
#include "test_op_layout.moc"
