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
// 6. The CUDA kernels on the CUDA emulator (tests/cuda_emulator), on any
//    machine: every op in f32, f64, f16 and bf16, written beside its operands
//    and in place over each, lengths around the pack, views that send the
//    launcher to its one-value kernel, both thread orders, against the CPU
//    reference with the GPU slots' bounds (cuda_op_differs); NaN, inf, signed
//    zeros, subnormals and overflow as the CPU has them.
// GPU rows QSKIP with the reason where there is no device.
// The family's test, beside its code (docs/architecture.md, "Op families").
#include <QtTest>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
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
#include "tests/cuda_emulator/emulated_slot.h"
#if defined(TRAINBENCH_CUDA_EMULATED)
#include "tests/cuda_emulator/begin_emulated.h"
#include "engine/ops/pointwise/pointwise.cuh"
#include "tests/cuda_emulator/end_emulated.h"
#endif

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

bool is_gelu(int op) { return op == 2 || op == 3; }

// A CUDA side's output of op `op` (kOpNames' order) against the CPU
// reference's on the same inputs in dtype dt: "" or what differs beyond the
// GPU slots' bound. ReLU (every form), add, accumulate and scale are exact:
// one correctly rounded operation in the compute type on both sides, then
// (f16/bf16) one rounding to nearest even. GELU: f32 as
// pointwise_matches_reference's CUDA rows (erfcf/expf against the
// reference's double: 1e-5 relative + 1e-6); f16/bf16 as
// pointwise_lp_cuda_matches_cpu (those f32 values, each rounded once:
// e = 1e-6 + 1e-5·max|ref|, low_precision.h). f64, which no GPU row runs
// (the emulated slots do): for |x| <= 4 and |dy| <= 1 each side's Φ(x) is
// within 1.25·2^-53 of exact (erf or erfc within an ulp, its argument's and
// 1 + erf's roundings) and x·φ(x) <= 0.25 within 11·2^-53 relative (exp's
// argument −x²/2 rounded: (x²/2 + 1)·2^-53, two products), so the two sides'
// forward differs by <= 4.5·2^-53·|x| <= 18·2^-53, the backward by
// <= 11·2^-53·|dy|, plus each side's last rounding: 2^-52·|ref| + 2^-48,
// the 2^-48 scaled by max|ref| where that exceeds 1 (large dy).
// `report`: the GPU slots' tb-tolerance lines (gpu_slot.h).
std::string cuda_op_differs(int op, DType dt, const Tensor& want, const Tensor& got,
                            const std::string& what, bool report = true) {
  if (!is_gelu(op)) {
    const double d = max_abs_diff(want, got);
    return d == 0.0 ? "" : what + ": differs by " + QString::number(d).toStdString();
  }
  const char* as = report ? precision_of(dt) : nullptr;
  const double mx = max_magnitude(want);
  const Comparison c =
      dt == DType::F32   ? compare(want, got, 1e-5, 1e-6, what, false, as)
      : dt == DType::F64 ? compare(want, got, std::ldexp(1.0, -52),
                                   std::ldexp(std::max(1.0, mx), -48), what, false, as)
                         : compare_rounded(want, got, dt, 2, 1e-6 + 1e-5 * mx, what, as);
  return c.ok ? "" : c.msg;
}

#if defined(TRAINBENCH_CUDA_EMULATED)
// cuda_op_differs for the emulated slots, whose inputs may hold NaN and inf:
// where the CPU has NaN the kernel must too (any payload: the GPU's cvt
// rounds every NaN to 0x7fff, the CPU's path keeps the input's sign), where
// it has an infinity the same one; the other elements as cuda_op_differs,
// the exact ops to the bit (signed zeros too), as
// pointwise_cuda_packs_and_tails_match_cpu holds them.
std::string emulated_op_differs(int op, DType dt, const Tensor& want, const Tensor& got,
                                const std::string& what) {
  if (want.numel() != got.numel() || want.dtype() != got.dtype())
    return what + ": " + want.describe() + " vs " + got.describe();
  Tensor w = clone(want), g = clone(got);
  const size_t es = dtype_size(dt);
  for (int64_t i = 0; i < w.numel(); ++i) {
    const double a = value_at(w, i), b = value_at(g, i);
    if ((std::isnan(a) && std::isnan(b)) || (std::isinf(a) && a == b)) {
      std::memset(static_cast<char*>(w.data()) + i * es, 0, es);
      std::memset(static_cast<char*>(g.data()) + i * es, 0, es);
    }
  }
  if (is_gelu(op)) return cuda_op_differs(op, dt, w, g, what, false);
  for (int64_t i = 0; i < w.numel(); ++i)
    if (std::memcmp(static_cast<char*>(w.data()) + i * es, static_cast<char*>(g.data()) + i * es,
                    es) != 0)
      return what + ": element " + std::to_string(i) + " cpu " +
             QString::number(value_at(want, i), 'g', 17).toStdString() + " cuda " +
             QString::number(value_at(got, i), 'g', 17).toStdString();
  return "";
}

// One op (kOpNames' order, 0-6) on host tensors: on the CPU reference, or
// with `emulated` through the emulated launchers as pointwise_cuda.cpp calls
// the real ones (n = numel, the element type by the dtype). relu_backward
// takes x as its y; accumulate adds x into out; scale scales out by alpha.
void apply_op(bool emulated, int op, const Tensor& x, const Tensor& dy, Tensor& out,
              double alpha) {
  if (!emulated) {
    Backend& r = cpu_reference();
    if (op == 0) pointwise::relu_forward(r, x, out);
    if (op == 1) pointwise::relu_backward(r, x, dy, out);
    if (op == 2) pointwise::gelu_forward(r, x, out);
    if (op == 3) pointwise::gelu_backward(r, x, dy, out);
    if (op == 4) pointwise::add(r, x, dy, out);
    if (op == 5) pointwise::accumulate(r, x, out);
    if (op == 6) pointwise::scale(r, out, alpha);
    return;
  }
  namespace emu = tb::cuda_emu;
  emu::by_element(x.dtype(), [&](auto z) {
    using T = decltype(z);
    const T *xp = x.data_as<T>(), *dp = dy.data_as<T>();
    T* o = out.data_as<T>();
    const int64_t n = x.numel();
    if (op == 0) emu::launch_relu_forward(xp, o, n, nullptr);
    if (op == 1) emu::launch_relu_backward(xp, dp, o, n, nullptr);
    if (op == 2) emu::launch_gelu_forward(xp, o, n, nullptr);
    if (op == 3) emu::launch_gelu_backward(xp, dp, o, n, nullptr);
    if (op == 4) emu::launch_add(xp, dp, o, n, nullptr);
    if (op == 5) emu::launch_accumulate(xp, o, n, nullptr);
    if (op == 6) emu::launch_scale(o, alpha, n, nullptr);
  }, /*with_f64=*/true);
}

// One launch of the emulated slots: op written into its own buffer
// (out_over 0), or in place over x (1) or dy (2).
struct EmuCase {
  int op;
  int out_over;
  double alpha;
};
const EmuCase kEmuCases[] = {{0, 0, 0}, {0, 1, 0}, {1, 0, 0}, {1, 1, 0}, {1, 2, 0},
                             {2, 0, 0}, {2, 1, 0}, {3, 0, 0}, {3, 1, 0}, {3, 2, 0},
                             {4, 0, 0}, {4, 1, 0}, {4, 2, 0}, {5, 0, 0}, {6, 0, -0.37}};

std::string emu_case_name(const EmuCase& c) {
  std::string s = kOpNames[c.op];
  if (c.op == 6) s += " by " + QString::number(c.alpha).toStdString();
  return s + (c.out_over == 1 ? " over x" : c.out_over == 2 ? " over dy" : "");
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The CUDA emulator's run of case c on views of n elements at x_at, dy_at and
// out_at into host buffers xs, ys, bs (copies), against the CPU reference's
// run on the same views: "" or what differs. The view of each buffer as
// emulated_op_differs holds it, the elements around it unchanged (no pack
// reads or writes past a view), and the launch in the kernel the launcher
// should pick (its blocks: n / V packs where every pointer the op passes is
// 16-byte aligned and n >= V, V = 16 / sizeof(T), else n single values).
std::string emulated_case_differs(const EmuCase& c, const Tensor& xs, const Tensor& ys,
                                  const Tensor& bs, int64_t n, int64_t x_at, int64_t dy_at,
                                  int64_t out_at, const std::string& what) {
  const DType dt = xs.dtype();
  const int64_t at[3] = {x_at, dy_at, out_at};
  int64_t blocks = 0, expect_blocks = 0;
  const auto run = [&](bool emulated) {
    std::vector<Tensor> buf{clone(xs), clone(ys), clone(bs)};
    const Tensor x = Tensor::view_of(buf[0], x_at, {n}), dy = Tensor::view_of(buf[1], dy_at, {n});
    Tensor out = c.out_over == 1 ? x : c.out_over == 2 ? dy : Tensor::view_of(buf[2], out_at, {n});
    if (emulated) {
      std::vector<const void*> seen{out.data()};
      if (c.op != 6) seen.push_back(x.data());
      if (c.op == 1 || c.op == 3 || c.op == 4) seen.push_back(dy.data());
      const int64_t V = 16 / int64_t(dtype_size(dt));
      bool packs = n >= V;
      for (const void* p : seen) packs = packs && aligned16(p);
      expect_blocks = ((packs ? n / V : n) + 255) / 256;
      const int64_t before = tb_emu::counters().blocks;
      apply_op(true, c.op, x, dy, out, c.alpha);
      blocks = tb_emu::counters().blocks - before;
    } else {
      apply_op(false, c.op, x, dy, out, c.alpha);
    }
    return buf;
  };
  const std::vector<Tensor> want = run(false), got = run(true);
  if (blocks != expect_blocks)
    return what + ": " + std::to_string(blocks) + " blocks, the launcher's choice gives " +
           std::to_string(expect_blocks);
  const size_t es = dtype_size(dt);
  const char* const names[3] = {"x", "dy", "out"};
  const int written = c.out_over == 1 ? 0 : c.out_over == 2 ? 1 : 2;
  for (int k = 0; k < 3; ++k) {
    const std::string in = what + ", " + names[k] + " buffer";
    if (k != written) {
      if (!bitwise_equal(want[k], got[k])) return in + ": changed, the op does not write it";
      continue;
    }
    const std::string bad = emulated_op_differs(c.op, dt, Tensor::view_of(want[k], at[k], {n}),
                                                Tensor::view_of(got[k], at[k], {n}), in);
    if (!bad.empty()) return bad;
    const auto* w = static_cast<const char*>(want[k].data());
    const auto* g = static_cast<const char*>(got[k].data());
    const size_t lo = size_t(at[k]) * es, hi = size_t(at[k] + n) * es, all = want[k].nbytes();
    if (std::memcmp(w, g, lo) != 0 || std::memcmp(w + hi, g + hi, all - hi) != 0)
      return in + ": an element outside the view changed";
  }
  return "";
}

// Host buffer of n values in dt from f32 (f64 for f64) uniform in [lo, hi).
Tensor emu_buffer(DType dt, int64_t n, uint64_t seed, double lo, double hi) {
  const Tensor f = random_tensor({n}, seed, lo, hi, dt == DType::F64 ? DType::F64 : DType::F32);
  return amp::is_low_precision(dt) ? lp_of(cpu_reference(), f, dt) : f;
}
#endif

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
      if (t.on_gpu()) {
        const std::string bad = cuda_op_differs(op, dt, want, got, what);
        QVERIFY2(bad.empty(), bad.c_str());
      } else if (exact || !is_gelu(op)) {
        const double d = max_abs_diff(want, got);
        QVERIFY2(d == 0.0, qPrintable(QString::fromStdString(what + ": differs by ") + QString::number(d)));
      } else {
        const double d = max_abs_diff(want, got);
        QVERIFY2(d < 2e-6, qPrintable(QString::fromStdString(what + ": max |diff| ") + QString::number(d)));
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
      const std::string bad = cuda_op_differs(op, dt, want, got, what);
      QVERIFY2(bad.empty(), bad.c_str());
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

  // The kernels on the CUDA emulator (tests/cuda_emulator), here on any
  // machine: every op in f32, f64, f16 and bf16, written into a buffer of its
  // own and in place over each operand, under both of the emulator's thread
  // orders, against the CPU reference with the GPU slots' bounds
  // (emulated_case_differs). Lengths: below one pack (n < V runs the one-value
  // kernel even when aligned), one pack, a pack and a tail, whole blocks of
  // packs, 4101 (a partial last block, a tail of every width) and 20011
  // (dozens of blocks). Offsets: every view aligned, every view one element
  // in (the one-value kernel), one pack in (aligned views), and one operand
  // or the output alone misaligned (still the one-value kernel).
  // What no row reaches: a second trip round the grid-stride loops, which
  // takes n > 65535 blocks of 256 (16.7M values, too many to emulate).
  void pointwise_emulated_cuda_matches_cpu_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<int64_t>("n");
    QTest::addColumn<int64_t>("x_at");
    QTest::addColumn<int64_t>("dy_at");
    QTest::addColumn<int64_t>("out_at");
    for (DType dt : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
      const Target t{Impl::Cuda, Layout::NCHW, dt};
      const int64_t V = 16 / int64_t(dtype_size(dt));
      const auto row = [&](int64_t n, int64_t xa, int64_t da, int64_t oa) {
        QTest::addRow("%s: n %lld, at %lld/%lld/%lld", dtype_name(dt), (long long)n, (long long)xa,
                      (long long)da, (long long)oa)
            << t << n << xa << da << oa;
      };
      std::vector<int64_t> lengths;
      for (int64_t n : {int64_t(1), V - 1, V, V + 1, 2 * V - 1, 512 * V, int64_t(4101),
                        int64_t(20011)})
        if (std::find(lengths.begin(), lengths.end(), n) == lengths.end()) lengths.push_back(n);
      for (int64_t n : lengths) {
        row(n, 0, 0, 0);
        row(n, 1, 1, 1);
      }
      for (const auto& at : {std::array<int64_t, 3>{V, V, V}, std::array<int64_t, 3>{0, 0, 1},
                             std::array<int64_t, 3>{0, 1, 0}, std::array<int64_t, 3>{1, 0, 0}})
        row(4101, at[0], at[1], at[2]);
    }
  }
  void pointwise_emulated_cuda_matches_cpu() {
    QFETCH(Target, target);
    QFETCH(int64_t, n);
    QFETCH(int64_t, x_at);
    QFETCH(int64_t, dy_at);
    QFETCH(int64_t, out_at);
#if defined(TRAINBENCH_CUDA_EMULATED)
    TB_EMU_TRY
    const DType dt = target.dtype;
    const int64_t V = 16 / int64_t(dtype_size(dt)), len = n + 2 * V;
    const Tensor xs = emu_buffer(dt, len, 41, -4.0, 4.0), ys = emu_buffer(dt, len, 42, -1.0, 1.0),
                 bs = emu_buffer(dt, len, 43, -1.0, 1.0);
    QVERIFY2(aligned16(xs.data()) && aligned16(ys.data()) && aligned16(bs.data()),
             "buffers not 16-byte aligned: the rows at 0 would miss the packs");
    for (tb_emu::Schedule order : {tb_emu::Schedule::forward, tb_emu::Schedule::reverse}) {
      EmulatorSchedule use(order);
      for (const EmuCase& c : kEmuCases) {
        const std::string what = emu_case_name(c) + " " + dtype_name(dt) + " [" +
                                 schedule_name(order) + "]";
        const std::string bad = emulated_case_differs(c, xs, ys, bs, n, x_at, dy_at, out_at, what);
        QVERIFY2(bad.empty(), bad.c_str());
      }
    }
    TB_EMU_CATCH
#else
    QSKIP(kNoEmulator);
#endif
  }

  // The emulated kernels on values the random rows never hold: NaN of both
  // signs, ±inf, ±0, the dtype's largest value (sums overflow), its
  // subnormals, each x beside each dy (every pair once: 13 x 13 values, a
  // tail after the packs), packed and one value at a time; scale by 0 too
  // (NaN and inf stay NaN, scale_by_zero_keeps_non_finite). The CPU's NaN and
  // inf outputs must be the kernel's, the rest as in
  // pointwise_emulated_cuda_matches_cpu.
  void pointwise_emulated_non_finite_match_cpu_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<int64_t>("at");
    for (DType dt : {DType::F32, DType::F64, DType::F16, DType::BF16})
      for (int64_t at : {int64_t(0), int64_t(1)})
        QTest::addRow("%s, at %lld", dtype_name(dt), (long long)at)
            << Target{Impl::Cuda, Layout::NCHW, dt} << at;
  }
  void pointwise_emulated_non_finite_match_cpu() {
    QFETCH(Target, target);
    QFETCH(int64_t, at);
#if defined(TRAINBENCH_CUDA_EMULATED)
    TB_EMU_TRY
    const DType dt = target.dtype;
    const double big = dt == DType::F16    ? 65504.0
                       : dt == DType::BF16 ? 0x1.fep127
                       : dt == DType::F32  ? double(std::numeric_limits<float>::max())
                                           : std::numeric_limits<double>::max();
    const double tiny = dt == DType::F16    ? 0x1p-24
                        : dt == DType::BF16 ? 0x1p-133
                        : dt == DType::F32  ? double(std::numeric_limits<float>::denorm_min())
                                            : std::numeric_limits<double>::denorm_min();
    const double values[13] = {NAN, -NAN, INFINITY, -INFINITY, 0.0,  -0.0,      big,
                               -big, tiny, -3 * tiny, 1.0,     -2.5, 0.1 * big};
    const int64_t n = 13 * 13, len = n + 2;
    const DType host = dt == DType::F64 ? DType::F64 : DType::F32;
    Tensor xh = Tensor::zeros({len}, host), yh = Tensor::zeros({len}, host);
    for (int64_t i = 0; i < n; ++i) {
      const double xv = values[i % 13], yv = values[i / 13];
      if (host == DType::F64) {
        xh.data_as<double>()[at + i] = xv, yh.data_as<double>()[at + i] = yv;
      } else {
        xh.data_as<float>()[at + i] = float(xv), yh.data_as<float>()[at + i] = float(yv);
      }
    }
    const bool lp = amp::is_low_precision(dt);
    const Tensor xs = lp ? lp_of(cpu_reference(), xh, dt) : xh;
    const Tensor ys = lp ? lp_of(cpu_reference(), yh, dt) : yh;
    for (tb_emu::Schedule order : {tb_emu::Schedule::forward, tb_emu::Schedule::reverse}) {
      EmulatorSchedule use(order);
      for (EmuCase c : kEmuCases)
        for (double alpha : {-0.37, 0.0}) {
          if (alpha == 0.0 && c.op != 6) continue;
          c.alpha = alpha;
          const std::string what = emu_case_name(c) + " " + dtype_name(dt) + " [" +
                                   schedule_name(order) + "]";
          // accumulate and scale update dy's values (the out buffer).
          const std::string bad = emulated_case_differs(c, xs, ys, ys, n, at, at, at, what);
          QVERIFY2(bad.empty(), bad.c_str());
        }
    }
    TB_EMU_CATCH
#else
    QSKIP(kNoEmulator);
#endif
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
