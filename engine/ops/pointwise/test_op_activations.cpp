// SPDX-License-Identifier: GPL-3.0-or-later
// The pointwise op family (engine/ops/pointwise): ReLU and GELU
// forward/backward (and the ReLU, GELU layers), add, accumulate and scale, on
// every backend, layout and dtype.
//
// 1. Gradients of the layers against central finite differences, f64 on the
//    reference backend (gradcheck.h).
// 2. pointwise_matches_reference, one body over targets x shapes against the
//    reference kernels: ReLU (forward, backward, in place), add, accumulate
//    and scale are exact on every target; GELU (erf/exp) is exact on the exact
//    CPU targets, within 2e-6 absolute on the fast f32 path (inputs in
//    [-4, 4]) and 1e-5 relative + 1e-6 on CUDA (erff/expf).
// 3. Values computed by hand (GELU(±1), GELU'(±1), ReLU in place, add,
//    accumulate) and a shape error.
// 4. The contract's refusals (pointwise.h), checked once for every backend.
// 5. f16/bf16 operands: the CPU's widen-compute-round path against the f64
//    reference on the widened inputs (bounds derived at the slot and in
//    tests/engine/low_precision.h), mixed dtypes refused, and on a GPU the
//    CUDA kernels in f16/bf16 against the CPU's path; on a GPU, the kernels'
//    16-byte packs, tails and misaligned operands bit for bit against the CPU.
// GPU rows QSKIP with the reason where there is no device.
// The family's test, beside its code (docs/architecture.md, "Op families").
#include <QtTest>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/nn/activations.h"
#include "engine/ops/amp/amp.h"
#include "engine/ops/pointwise/pointwise.h"
#include "tests/engine/device_fixture.h"
#include "tests/engine/gradcheck.h"
#include "tests/engine/low_precision.h"
#include "tests/engine/tensor_helpers.h"

using namespace tb;
using namespace tb::test;

namespace {

const Target kTargets[] = {
    {Impl::CpuFast, Layout::NCHW, DType::F32},      {Impl::CpuFast, Layout::NCHW, DType::F64},
    {Impl::CpuReference, Layout::NHWC, DType::F32}, {Impl::CpuFast, Layout::NHWC, DType::F32},
    {Impl::Cuda, Layout::NCHW, DType::F32},         {Impl::Cuda, Layout::NHWC, DType::F32},
};

bool exact_target(const Target& t) {
  return !t.on_gpu() && (t.dtype == DType::F64 || t.impl == Impl::CpuReference);
}

// Every op of the family once on backend `on`, from host inputs x, dy, b (in
// layout l on `on`), their outputs on the host: 0 relu, 1 relu backward (its
// mask the relu's y), 2 gelu, 3 gelu backward, 4 add, 5 b += x (accumulate),
// 6 b *= -0.37 (scale), 7 relu in place.
constexpr int kOps = 8;
const char* const kOpNames[kOps] = {"relu_forward", "relu_backward", "gelu_forward",
                                    "gelu_backward", "add", "accumulate", "scale",
                                    "relu in place"};
Tensor run_op(Backend& on, int op, const Tensor& x, const Tensor& dy, const Tensor& b, Layout l) {
  const Shape& shape = x.shape();
  const Tensor xi = to_device(on, x, l), dyi = to_device(on, dy, l), bi = to_device(on, b, l);
  Tensor out = on.empty(shape, x.dtype(), shape.size() == 4 ? l : Layout::NCHW);
  if (op == 0) pointwise::relu_forward(on, xi, out);
  if (op == 1) {
    Tensor y = on.empty(shape, x.dtype(), out.layout());
    pointwise::relu_forward(on, xi, y);
    pointwise::relu_backward(on, y, dyi, out);
  }
  if (op == 2) pointwise::gelu_forward(on, xi, out);
  if (op == 3) pointwise::gelu_backward(on, xi, dyi, out);
  if (op == 4) pointwise::add(on, xi, bi, out);
  if (op == 5) {
    out = bi;
    pointwise::accumulate(on, xi, out);
  }
  if (op == 6) {
    out = bi;
    pointwise::scale(on, out, -0.37);
  }
  if (op == 7) {
    out = xi;
    pointwise::relu_forward(on, out, out);
  }
  return to_host(on, out);
}

}  // namespace

class TestOpActivations : public QObject {
  Q_OBJECT

 private slots:
  // ------------------------------------------------------------ finite differences (f64)

  void relu_gradcheck() {
    auto r = test::gradcheck_layer(std::make_unique<ReLU>("relu"), {3, 2, 3, 3}, 9);
    QVERIFY2(r.max_rel_error_dx < 1e-5, qPrintable(QString::fromStdString(r.worst)));
  }

  void gelu_gradcheck() {
    auto r = test::gradcheck_layer(std::make_unique<GELU>("gelu"), {5, 7}, 10);
    QVERIFY2(r.max_rel_error_dx < 1e-5, qPrintable(QString::fromStdString(r.worst)));
  }

  // ------------------------------------------------------------ every target vs the reference

  void pointwise_matches_reference_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<Shape>("shape");
    for (const Target& t : kTargets)
      for (const Shape& s : {Shape{70, 1000} /* > 65536: threaded */, Shape{4, 3, 17, 19}}) {
        if (t.layout == Layout::NHWC && s.size() != 4) continue;  // layouts are rank-4 only
        QTest::addRow("%s: %s", t.name().c_str(), shape_str(s).c_str()) << t << s;
      }
  }
  void pointwise_matches_reference() {
    FETCH_TARGET(t, be);
    QFETCH(Shape, shape);
    TB_GPU_TRY
    const DType dt = t.dtype;
    const Layout L = t.layout;
    const Tensor x = random_tensor(shape, 21, -4.0, 4.0, dt);
    const Tensor dy = random_tensor(shape, 22, -1.0, 1.0, dt);
    const Tensor b = random_tensor(shape, 23, -1.0, 1.0, dt);
    CpuBackend& ref = cpu_reference();
    const Tensor xd = to_device(be, x, L), dyd = to_device(be, dy, L), bd = to_device(be, b, L);
    const bool exact = exact_target(t);
    // op: 0 relu, 1 relu backward, 2 gelu, 3 gelu backward, 4 add
    auto run = [&](Backend& on, const Tensor& xi, const Tensor& dyi, const Tensor& bi, int op,
                   Layout l) {
      Tensor out = on.empty(shape, dt, shape.size() == 4 ? l : Layout::NCHW);
      if (op == 0) pointwise::relu_forward(on, xi, out);
      if (op == 1) {
        Tensor y = on.empty(shape, dt, out.layout());
        pointwise::relu_forward(on, xi, y);
        pointwise::relu_backward(on, y, dyi, out);
      }
      if (op == 2) pointwise::gelu_forward(on, xi, out);
      if (op == 3) pointwise::gelu_backward(on, xi, dyi, out);
      if (op == 4) pointwise::add(on, xi, bi, out);
      return to_host(on, out);
    };
    const char* names[] = {"relu_forward", "relu_backward", "gelu_forward", "gelu_backward", "add"};
    for (int op = 0; op < 5; ++op) {
      const Tensor want = run(ref, x, dy, b, op, Layout::NCHW);
      const Tensor got = run(be, xd, dyd, bd, op, L);
      const std::string what = std::string(names[op]) + " " + t.name();
      const bool gelu = op == 2 || op == 3;
      if (exact || !gelu) {
        const double d = max_abs_diff(want, got);
        QVERIFY2(d == 0.0, qPrintable(QString::fromStdString(what + ": differs by ") + QString::number(d)));
      } else if (!t.on_gpu()) {
        const double d = max_abs_diff(want, got);
        QVERIFY2(d < 2e-6, qPrintable(QString::fromStdString(what + ": max |diff| ") + QString::number(d)));
      } else {
        const Comparison c = compare(want, got, 1e-5, 1e-6, what, false, "fp32");
        QVERIFY2(c.ok, c.msg.c_str());
      }
    }
    // accumulate and scale in place; ReLU in place (y aliases x).
    Tensor acc_c = clone(b);
    pointwise::accumulate(ref, x, acc_c);
    pointwise::scale(ref, acc_c, -0.37);
    Tensor acc_g = to_device(be, b, L);
    pointwise::accumulate(be, xd, acc_g);
    pointwise::scale(be, acc_g, -0.37);
    EXPECT_CLOSE(acc_c, to_host(be, acc_g), 0, 0, "accumulate+scale " + t.name());
    Tensor inplace = to_device(be, x, L);
    pointwise::relu_forward(be, inplace, inplace);
    Tensor rc = like(x, Layout::NCHW);
    pointwise::relu_forward(ref, x, rc);
    EXPECT_CLOSE(rc, to_host(be, inplace), 0, 0, "relu in place " + t.name());
    TB_GPU_CATCH
  }

  // ------------------------------------------------------------ f16 / bf16

  // The CPU's f16/bf16 path against the f64 reference on the widened inputs
  // (x, dy, b rounded to the dtype, read exactly into f64): each output is
  // the f32 op's value rounded once, so |lp − ref| <= u·|ref| + (1 + u)·e
  // (+ f16's subnormal step; low_precision.h), e the f32 op's own error
  // against f64: ReLU (forward, backward, in place) none, so exact (the
  // rounding of an f16/bf16 value is itself); add and accumulate one f32
  // rounding, e = 2^-24·max|ref|; scale one, and its alpha rounded to f32:
  // e = 2·2^-24·max|ref|; GELU the fast path's
  // 2e-6 absolute on [-4, 4] (pointwise_matches_reference), the reference's
  // one rounding below it.
  void pointwise_lp_matches_widened_reference_data() {
    QTest::addColumn<Target>("target");
    for (DType dt : {DType::F16, DType::BF16})
      for (const Target& t : {Target{Impl::CpuFast, Layout::NCHW, dt},
                              Target{Impl::CpuReference, Layout::NCHW, dt},
                              Target{Impl::CpuFast, Layout::NHWC, dt}})
        QTest::newRow(t.name().c_str()) << t;
  }
  void pointwise_lp_matches_widened_reference() {
    FETCH_TARGET(t, be);
    const DType dt = t.dtype;
    const Shape shape{4, 3, 17, 19};
    CpuBackend& ref = cpu_reference();
    const Tensor x = lp_of(ref, random_tensor(shape, 21, -4.0, 4.0), dt);
    const Tensor dy = lp_of(ref, random_tensor(shape, 22), dt);
    const Tensor b = lp_of(ref, random_tensor(shape, 23), dt);
    const double u32 = std::ldexp(1.0, -24);
    for (int op = 0; op < kOps; ++op) {
      const Tensor want = run_op(ref, op, as_f64(x), as_f64(dy), as_f64(b), Layout::NCHW);
      const Tensor got = run_op(be, op, x, dy, b, t.layout);
      QCOMPARE(got.dtype(), dt);
      double mx = 0.0;
      for (int64_t i = 0; i < want.numel(); ++i) mx = std::max(mx, std::abs(value_at(want, i)));
      const double e = op == 2 || op == 3    ? 2e-6
                       : op == 4 || op == 5 ? u32 * mx
                       : op == 6            ? 2 * u32 * mx
                                            : 0.0;
      const std::string what = std::string(kOpNames[op]) + " " + t.name();
      if (e == 0.0) {
        QVERIFY2(max_abs_diff(want, as_f64(got)) == 0.0, what.c_str());
      } else {
        const Comparison c = compare_rounded(want, got, dt, 1, e, what);
        QVERIFY2(c.ok, c.msg.c_str());
      }
    }
  }

  // The operands of one op share one dtype: f16 and bf16 mixed with each
  // other or with f32 are refused naming the op and both operands.
  void pointwise_lp_refuses_mixed_dtypes() {
    CpuBackend& be = cpu_fast();
    const Tensor xb = Tensor::zeros({2, 3}, DType::BF16), xh = Tensor::zeros({2, 3}, DType::F16);
    Tensor yb = Tensor::zeros({2, 3}, DType::BF16), yh = Tensor::zeros({2, 3}, DType::F16);
    Tensor y32 = Tensor::zeros({2, 3}, DType::F32);
    const auto expect = [](const QString& m, std::initializer_list<const char*> words) {
      for (const char* w : words) QVERIFY2(m.contains(w), qPrintable(m + " (missing: " + w + ")"));
    };
    expect(qerror_of([&] { pointwise::relu_forward(be, xb, yh); }), {"relu_forward", "bf16", "f16"});
    expect(qerror_of([&] { pointwise::add(be, xb, y32, yb); }), {"add", "bf16", "f32"});
    expect(qerror_of([&] { pointwise::relu_backward(be, xh, xh, yb); }),
           {"relu_backward", "f16", "bf16"});
    expect(qerror_of([&] { pointwise::accumulate(be, y32, yh); }), {"accumulate", "f32", "f16"});
  }

  // The CUDA kernels in f16/bf16 against the CPU's path on the same rounded
  // inputs. ReLU, add, accumulate and scale compute the same f32 operations
  // (each correctly rounded on both) and round to nearest even once: the
  // same bits. GELU: the f32 values differ by what pointwise_matches_reference
  // allows CUDA's erff/expf, e = 1e-6 + 1e-5·max|ref|, and each side rounds
  // once: |cuda − cpu| <= 2u/(1 − u)·|cpu| + (1 + 2u)·e (low_precision.h).
  void pointwise_lp_cuda_matches_cpu_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<Shape>("shape");
    for (DType dt : {DType::F16, DType::BF16})
      for (const Target& t : cuda_targets(dt))
        for (const Shape& s : {Shape{70, 1000}, Shape{4, 3, 17, 19}}) {
          if (t.layout == Layout::NHWC && s.size() != 4) continue;
          QTest::addRow("%s: %s", t.name().c_str(), shape_str(s).c_str()) << t << s;
        }
  }
  void pointwise_lp_cuda_matches_cpu() {
    FETCH_TARGET(t, be);
    QFETCH(Shape, shape);
    TB_GPU_TRY
    const DType dt = t.dtype;
    CpuBackend& ref = cpu_reference();
    const uint64_t seed = 31 + uint64_t(dt == DType::BF16);
    const Tensor x = lp_of(ref, random_tensor(shape, seed, -4.0, 4.0), dt);
    const Tensor dy = lp_of(ref, random_tensor(shape, seed + 10), dt);
    const Tensor b = lp_of(ref, random_tensor(shape, seed + 20), dt);
    for (int op = 0; op < kOps; ++op) {
      const Tensor want = run_op(ref, op, x, dy, b, Layout::NCHW);
      const Tensor got = run_op(be, op, x, dy, b, t.layout);
      const std::string what = std::string(kOpNames[op]) + " " + t.name();
      if (op == 2 || op == 3) {
        double mx = 0.0;
        for (int64_t i = 0; i < want.numel(); ++i) mx = std::max(mx, std::abs(value_at(want, i)));
        const Comparison c =
            compare_rounded(want, got, dt, 2, 1e-6 + 1e-5 * mx, what, precision_of(dt));
        QVERIFY2(c.ok, c.msg.c_str());
      } else {
        const double d = max_abs_diff(want, got);
        QVERIFY2(d == 0.0, qPrintable(QString::fromStdString(what + ": differs by ") +
                                      QString::number(d)));
      }
    }
    TB_GPU_CATCH
  }

  // The CUDA kernels move 16 bytes of each operand a thread where every
  // pointer is 16-byte aligned (4 f32, 8 bf16, 2 f64 values) and one value at
  // a time otherwise, the n mod V tail one by one (pointwise.cu): lengths
  // around the pack and views one element into a buffer (every pointer
  // misaligned: the one-value kernel) give the CPU reference's bits for the
  // exact ops (ReLU both ways, add, accumulate, scale: one rounding each,
  // round to nearest even on both sides), and the elements around each view
  // keep their values (no pack reads or writes past its end).
  void pointwise_cuda_packs_and_tails_match_cpu_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<int64_t>("n");
    QTest::addColumn<int64_t>("offset");
    for (DType dt : {DType::F32, DType::BF16, DType::F64})
      for (int64_t n : {int64_t(1), int64_t(7), int64_t(8), int64_t(9), int64_t(4101), int64_t(100003)})
        for (int64_t offset : {int64_t(0), int64_t(1)}) {
          const Target t{Impl::Cuda, Layout::NCHW, dt};
          QTest::addRow("%s: n %lld, offset %lld", t.name().c_str(), (long long)n, (long long)offset)
              << t << n << offset;
        }
  }
  void pointwise_cuda_packs_and_tails_match_cpu() {
    FETCH_TARGET(t, be);
    QFETCH(int64_t, n);
    QFETCH(int64_t, offset);
    TB_GPU_TRY
    CpuBackend& ref = cpu_reference();
    const DType dt = t.dtype;
    const auto host = [&](uint64_t seed, double lo, double hi) {
      const Tensor f = random_tensor({n + 2}, seed, lo, hi, dt == DType::F64 ? DType::F64 : DType::F32);
      return dt == DType::BF16 ? lp_of(ref, f, dt) : f;
    };
    // Buffers of n + 2 elements; the op sees elements [offset, offset + n).
    const Tensor xs = host(71, -4.0, 4.0), ys = host(72, -1.0, 1.0), bs = host(73, -1.0, 1.0);
    const auto view = [&](const Tensor& whole) { return Tensor::view_of(whole, offset, {n}); };
    for (int op = 0; op < 5; ++op) {
      // On each side: x, dy (the second operand) and out as views at `offset`.
      const auto run = [&](Backend& on) {
        Tensor x = to_device(on, xs), dy = to_device(on, ys), out = to_device(on, bs);
        const Tensor xv = view(x), dyv = view(dy);
        Tensor outv = view(out);
        if (op == 0) pointwise::relu_forward(on, xv, outv);
        if (op == 1) pointwise::relu_backward(on, xv, dyv, outv);
        if (op == 2) pointwise::add(on, xv, dyv, outv);
        if (op == 3) pointwise::accumulate(on, xv, outv);
        if (op == 4) pointwise::scale(on, outv, -0.37);
        return to_host(on, out);  // the whole buffer: the view and its neighbours
      };
      const char* names[] = {"relu_forward", "relu_backward", "add", "accumulate", "scale"};
      const Tensor want = run(ref), got = run(be);
      QVERIFY2(bitwise_equal(want, got),
               qPrintable(QString("%1: differs from the CPU by %2 (n %3, offset %4)")
                              .arg(names[op])
                              .arg(max_abs_diff(want, got))
                              .arg(n)
                              .arg(offset)));
    }
    TB_GPU_CATCH
  }

  // ------------------------------------------------------------ hand-computed values

  // GELU(1) = Φ(1) = 0.8413447, GELU(−1) = −1 + 0.8413447 = −0.1586553,
  // GELU'(1) = Φ(1) + φ(1) = 0.8413447 + 0.2419707 = 1.0833155,
  // GELU'(−1) = Φ(−1) − φ(−1) = 0.1586553 − 0.2419707 = −0.0833155. ReLU of
  // {−2, 0, 3} = {0, 0, 3}, its backward passes dy where y > 0 only.
  void activation_values() {
    for (bool reference : {true, false}) {
      CpuBackend& be = reference ? cpu_reference() : cpu_fast();
      Tensor x = from_values({3}, {1, -1, 0});
      Tensor y = Tensor::empty({3}, DType::F32);
      pointwise::gelu_forward(be, x, y);
      QVERIFY(std::abs(y.data_as<float>()[0] - 0.8413447f) < 1e-6);
      QVERIFY(std::abs(y.data_as<float>()[1] + 0.1586553f) < 1e-6);
      QCOMPARE(y.data_as<float>()[2], 0.0f);
      Tensor dy = from_values({3}, {1, 1, 1});
      Tensor dx = Tensor::empty({3}, DType::F32);
      pointwise::gelu_backward(be, x, dy, dx);
      QVERIFY(std::abs(dx.data_as<float>()[0] - 1.0833155f) < 1e-6);
      QVERIFY(std::abs(dx.data_as<float>()[1] + 0.0833155f) < 1e-6);
      QVERIFY(std::abs(dx.data_as<float>()[2] - 0.5f) < 1e-6);

      Tensor r = from_values({3}, {-2, 0, 3});
      pointwise::relu_forward(be, r, r);  // in place: y aliases x
      QCOMPARE(r.data_as<float>()[0], 0.0f);
      QCOMPARE(r.data_as<float>()[1], 0.0f);
      QCOMPARE(r.data_as<float>()[2], 3.0f);
      Tensor g = from_values({3}, {5, 6, 7});
      pointwise::relu_backward(be, r, g, g);  // in place: dx aliases dy
      QCOMPARE(g.data_as<float>()[0], 0.0f);
      QCOMPARE(g.data_as<float>()[1], 0.0f);
      QCOMPARE(g.data_as<float>()[2], 7.0f);

      Tensor a = from_values({2, 2}, {1, 2, 3, 4}), b = from_values({2, 2}, {10, 20, 30, 40});
      Tensor s = Tensor::empty({2, 2}, DType::F32);
      pointwise::add(be, a, b, s);
      QCOMPARE(s.data_as<float>()[3], 44.0f);
      pointwise::accumulate(be, a, b);  // b += a
      QCOMPARE(b.data_as<float>()[0], 11.0f);
      QCOMPARE(b.data_as<float>()[3], 44.0f);
      Tensor wrong = Tensor::empty({4}, DType::F32);
      QVERIFY_THROWS_EXCEPTION(Error, pointwise::add(be, a, wrong, s));
    }
  }

  // scale is t *= alpha, IEEE included: alpha = 0 turns NaN and ±inf into
  // NaN on every target (the CPU once called cblas_sscal, which writes zeros
  // for alpha = 0 without multiplying: a loss scale backed off to 0 or a
  // zeroed gradient hid an overflow the GPU kept).
  void scale_by_zero_keeps_non_finite_data() {
    QTest::addColumn<Target>("target");
    std::vector<Target> targets;
    for (Impl i : {Impl::CpuReference, Impl::CpuFast})
      for (DType dt : {DType::F32, DType::F64, DType::BF16}) targets.push_back({i, Layout::NCHW, dt});
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) targets.push_back({Impl::Cuda, Layout::NCHW, dt});
    for (const Target& t : targets) QTest::addRow("%s", t.name().c_str()) << t;
  }
  void scale_by_zero_keeps_non_finite() {
    FETCH_TARGET(t, be);
    TB_GPU_TRY
    const std::initializer_list<double> values = {NAN, INFINITY, -INFINITY, 2.0, -3.0};
    const Tensor h = t.dtype == DType::F64 ? from_values({5}, values, DType::F64)
                     : t.dtype == DType::F32
                         ? from_values({5}, values)
                         : amp::cast_to(cpu_reference(), from_values({5}, values), t.dtype);
    Tensor d = to_device(be, h);
    pointwise::scale(be, d, 0.0);
    const Tensor back = to_host(be, d);
    const bool lp = amp::is_low_precision(t.dtype);
    const Tensor got = lp ? amp::cast_to(cpu_reference(), back, DType::F32) : back;
    std::vector<double> g(5);
    for (int i = 0; i < 5; ++i)
      g[i] = got.dtype() == DType::F64 ? got.data_as<double>()[i] : got.data_as<float>()[i];
    for (int i = 0; i < 3; ++i)
      QVERIFY2(std::isnan(g[i]), qPrintable(QString("element %1: %2").arg(i).arg(g[i])));
    QCOMPARE(g[3], 0.0);
    QCOMPARE(g[4], 0.0);
    QVERIFY(std::signbit(g[4]));  // −3 · 0 = −0
    TB_GPU_CATCH
  }

  // ------------------------------------------------------------ the contract's refusals

  // On the reference and the fast CPU backend: undefined operands (scale's
  // too, which read a null pointer before the contract was checked once for
  // every backend), integer dtypes, mixed dtypes, shapes or layouts. A refused
  // call leaves its output as it was.
  void pointwise_rejects_bad_operands() {
    for (bool reference : {true, false}) {
      CpuBackend& be = reference ? cpu_reference() : cpu_fast();
      const Tensor x = from_values({2, 2}, {1, -2, 3, -4});
      Tensor y = from_values({2, 2}, {7, 7, 7, 7});
      Tensor none;
      QVERIFY_THROWS_EXCEPTION(Error, pointwise::scale(be, none, 2.0));
      QVERIFY_THROWS_EXCEPTION(Error, pointwise::relu_forward(be, none, y));
      QVERIFY_THROWS_EXCEPTION(Error, pointwise::add(be, x, none, y));
      Tensor i32 = Tensor::empty({2, 2}, DType::I32);
      QVERIFY_THROWS_EXCEPTION(Error, pointwise::scale(be, i32, 2.0));
      QVERIFY_THROWS_EXCEPTION(Error, pointwise::accumulate(be, i32, i32));
      Tensor f64 = Tensor::empty({2, 2}, DType::F64);
      QVERIFY_THROWS_EXCEPTION(Error, pointwise::relu_forward(be, x, f64));
      Tensor longer = Tensor::empty({4}, DType::F32);
      QVERIFY_THROWS_EXCEPTION(Error, pointwise::gelu_backward(be, x, longer, y));
      QVERIFY_THROWS_EXCEPTION(Error, pointwise::relu_backward(be, x, x, longer));
      Tensor nchw = Tensor::empty({1, 2, 2, 2}, DType::F32);
      Tensor nhwc = Tensor::empty({1, 2, 2, 2}, DType::F32, Device::cpu(), Layout::NHWC);
      QVERIFY_THROWS_EXCEPTION(Error, pointwise::accumulate(be, nchw, nhwc));
      QVERIFY_THROWS_EXCEPTION(Error, pointwise::gelu_forward(be, nhwc, nchw));
      for (int64_t i = 0; i < 4; ++i) QCOMPARE(y.data_as<float>()[i], 7.0f);
    }
  }
};

QTEST_GUILESS_MAIN(TestOpActivations)
#include "test_op_activations.moc"
