// SPDX-License-Identifier: GPL-3.0-or-later
// The pooling op family: max pooling (values, argmax, gradient), average
// pooling (count_include_pad), global average pooling, and the MaxPool2d,
// AvgPool2d, GlobalAvgPool and Flatten layers, on every backend, layout and dtype.
//
// 1. Gradients against central finite differences, f64 on the reference
//    backend (gradcheck.h), NCHW and NHWC: relative error < 1e-6.
// 2. pool_matches_reference, one body over targets x geometries: every output
//    of the target against the reference kernels in NCHW. Max pooling is exact
//    everywhere (values, argmax as the (H, W) plane index in both layouts, and
//    the routed gradient; the fast path's gradient within 1e-7 scaled). Average
//    and global pooling: bit-identical on the exact CPU targets (f64, NHWC,
//    the reference), 1e-4 of the largest magnitude on the fast NCHW f32 path,
//    and on CUDA 1e-5 relative + 1e-7 (average), 1e-6 relative + 1e-7 / + 0
//    (global y / dx).
// 3. Hand-computed values (ties, padding never winning, count_include_pad,
//    overlapping windows), NaN propagation, the layers' shapes and errors.
// 4. f16/bf16: the CPU's widen-compute-round path against the f64 reference
//    on the widened inputs, both layouts, both CPU paths; on a GPU the CUDA
//    kernels in f16/bf16 against the CPU's path and CUDA's refusal of f64.
//    Bounds derived at the slots and in tests/engine/low_precision.h.
// 5. The CUDA kernels on the CUDA emulator (tests/cuda_emulator), on any
//    machine: f32, f16 and bf16, NCHW and NHWC, windows hanging over the
//    borders, gaps between windows, ties, planted NaNs, both thread orders,
//    against the reference with the GPU slots' bounds (outputs_differ,
//    max_nan_differs).
// GPU rows QSKIP with the reason where there is no device.
#include <QtTest>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/nn/model.h"
#include "engine/nn/pooling.h"
#include "engine/ops/pooling/pooling.h"
#include "engine/ops/pooling/pooling_cpu.h"
#ifdef TRAINBENCH_HAVE_ONEDNN
#include "engine/ops/pooling/pooling_onednn.h"
#endif
#include "tests/engine/device_fixture.h"
#include "tests/engine/gradcheck.h"
#include "tests/engine/low_precision.h"
#include "tests/engine/tensor_helpers.h"
#include "tests/cuda_emulator/emulated_slot.h"
#if defined(TRAINBENCH_CUDA_EMULATED)
#include "tests/cuda_emulator/begin_emulated.h"
#include "engine/ops/pooling/pooling.cuh"
#include "tests/cuda_emulator/end_emulated.h"
#endif

using namespace tb;
using namespace tb::test;

namespace {

constexpr double kGradTol = 1e-6;  // f64 finite differences
constexpr double kFastTol = 1e-4;  // fast f32 vs reference f32

struct PoolCase {
  const char* name = "";
  int64_t N = 0, C = 0, H = 0, W = 0, k = 2, s = 2, p = 0;
};

// 2x2/stride 2 has its own vector path on the fast backend: widths 14 (whole
// vectors), 7 and 5 (a ragged end), 3 (scalar only); then general windows.
const PoolCase kCases[] = {
    {"fmnist pool1 2/2/0", 4, 32, 28, 28, 2, 2, 0}, {"14 wide 2/2/0", 2, 3, 14, 14, 2, 2, 0},
    {"11 wide 2/2/0", 2, 3, 9, 11, 2, 2, 0},        {"7 wide 2/2/0", 1, 2, 6, 7, 2, 2, 0},
    {"9 wide 3/2/1", 1, 2, 7, 9, 3, 2, 1},          {"overlapping 2/1/0", 3, 4, 5, 5, 2, 1, 0},
    {"3/3/1", 2, 3, 9, 8, 3, 3, 1},                 {"2/2/0", 2, 5, 9, 8, 2, 2, 0},
    {"3/2/1 overlapping", 2, 5, 9, 8, 3, 2, 1},     {"3/1/1", 2, 5, 9, 8, 3, 1, 1},
    {"k2s2p0 13x11", 3, 5, 13, 11, 2, 2, 0},        {"k3s2p1 13x11", 3, 5, 13, 11, 3, 2, 1},
    {"k3s1p1 overlap 13x11", 3, 5, 13, 11, 3, 1, 1},
    // Whole 16-channel blocks, for the CPU's blocked nChw16c too (its 2x2
    // path: odd H and W leave cells no window covers; other windows: the
    // reference).
    {"16ch 2/2/0 7x9", 2, 16, 7, 9, 2, 2, 0}, {"32ch 3/2/1 6x5", 2, 32, 6, 5, 3, 2, 1},
};

const std::vector<Target> kTargets = activation_targets();

// The reference's bits: f64, the reference backend, and NHWC on the CPU
// (which only the reference kernels take).
bool exact_target(const Target& t) {
  return !t.on_gpu() &&
         (t.dtype == DType::F64 || t.layout == Layout::NHWC || t.impl == Impl::CpuReference);
}

// One output of a target against the reference's (host tensors). `kind`:
// "max" (max-pool values and argmax), "maxdx", "avg", "gy", "gdx".
Comparison check_output(const Target& t, const std::string& kind, const std::string& out,
                        const Tensor& ref, const Tensor& got) {
  const std::string what = out + " " + t.name();
  const bool exact = exact_target(t) || kind == "max" || (t.on_gpu() && kind == "maxdx");
  if (exact) {
    const double d = max_abs_diff(ref, got);
    return {d == 0.0, what + ": differs from the reference by " + std::to_string(d)};
  }
  if (!t.on_gpu()) {
    const double e = scaled_diff(ref, got), tol = kind == "maxdx" ? 1e-7 : kFastTol;
    return {e < tol, what + ": scaled difference " + std::to_string(e)};
  }
  if (kind == "avg") return compare(ref, got, 1e-5, 1e-7, what, false, "fp32");
  if (kind == "gy") return compare(ref, got, 1e-6, 1e-7, what, false, "fp32");
  return compare(ref, got, 1e-6, 0, what, false, "fp32");  // gdx
}

// Every pooling op once on backend b from host inputs (NCHW; moved to layout
// l on b): max (y, argmax, dx from dy), average (y, dx), global (y, dx from
// gdy). Host outputs, in l.
struct PoolOut {
  Tensor my, am, mdx, ay, adx, gy, gdx;
};
PoolOut run_pool(Backend& b, const PoolGeometry& g, const Tensor& x, const Tensor& dy,
                 const Tensor& gdy, Layout l) {
  const DType dt = x.dtype();
  const Tensor xd = to_device(b, x, l), dyd = to_device(b, dy, l), gdyd = to_device(b, gdy);
  Tensor my = b.empty(g.output_shape(), dt, l), am = b.empty(g.output_shape(), DType::I32, l);
  Tensor mdx = b.empty(g.input_shape(), dt, l), ay = b.empty(g.output_shape(), dt, l);
  Tensor adx = b.empty(g.input_shape(), dt, l), gy = b.empty({g.N, g.C}, dt);
  Tensor gdx = b.empty(g.input_shape(), dt, l);
  pooling::max_forward(b, g, xd, my, am);
  pooling::max_backward(b, g, dyd, am, mdx);
  pooling::avg_forward(b, g, xd, ay);
  pooling::avg_backward(b, g, dyd, adx);
  pooling::global_avg_forward(b, xd, gy);
  pooling::global_avg_backward(b, gdyd, gdx);
  return {to_host(b, my),  to_host(b, am),  to_host(b, mdx), to_host(b, ay),
          to_host(b, adx), to_host(b, gy), to_host(b, gdx)};
}

// The cases of the f16/bf16 slots: plain, overlapping with padding, overlapping.
const PoolCase kLpCases[] = {
    {"2/2/0", 2, 5, 9, 8, 2, 2, 0},
    {"3/2/1 overlapping", 2, 5, 9, 8, 3, 2, 1},
    {"k3s1p1 overlap 13x11", 3, 5, 13, 11, 3, 1, 1},
};

// A target's outputs `o` (its layout and dtype) against the reference
// kernels' `r` (NCHW, the same inputs in the same dtype): "" or the first
// output beyond its bound. f32 and f64: check_output. f16/bf16, the CUDA
// kernels: max pooling (y, argmax, and dx: the same f32 sums in the same
// window order, check_output's exact CUDA rows) gives the same bits; average
// and global pooling's f32 values differ by at most what check_output allows
// the f32 kernels, e = 1e-7 + 1e-5·max|ref|, and each side rounds once:
// |cuda − cpu| <= 2u/(1 − u)·|cpu| + (1 + 2u)·e (low_precision.h).
std::string outputs_differ(const Target& t, const PoolOut& r, const PoolOut& o) {
  const bool lp = t.dtype == DType::F16 || t.dtype == DType::BF16;
  TB_CHECK(!lp || t.on_gpu(), "outputs_differ: the f16/bf16 bounds are the CUDA kernels'");
  // argmax: the (H, W) plane index in both layouts (as pooling.cu defines it).
  const std::tuple<const char*, const char*, const Tensor&, const Tensor&> outs[] = {
      {"max", "maxpool y", r.my, o.my},           {"max", "maxpool argmax", r.am, o.am},
      {"maxdx", "maxpool dx", r.mdx, o.mdx},      {"avg", "avgpool y", r.ay, o.ay},
      {"avg", "avgpool dx", r.adx, o.adx},        {"gy", "global avgpool y", r.gy, o.gy},
      {"gdx", "global avgpool dx", r.gdx, o.gdx}};
  for (const auto& [kind, what, want, got] : outs) {
    Comparison c;
    if (!lp) {
      c = check_output(t, kind, what, want, got);
    } else if (std::string(kind).starts_with("max")) {
      const double d = max_abs_diff(want, got);
      c = {d == 0.0, std::string(what) + " " + t.name() + ": differs by " + std::to_string(d)};
    } else {
      c = compare_rounded(want, got, t.dtype, 2, 1e-7 + 1e-5 * max_magnitude(want),
                          std::string(what) + " " + t.name(), precision_of(t.dtype));
    }
    if (!c.ok) return c.msg;
  }
  return "";
}

// The planted NaNs of the NaN slots (pooling.cu's isnan branch is reached by
// no random input): x (2, 2, 10, 18), k x k windows, stride 2, padding 1 for
// k = 3; then dy. Both from rng, in that order.
struct NanInputs {
  PoolGeometry g;
  Tensor x, dy;
};
NanInputs nan_planted(int64_t k, std::mt19937_64& rng) {
  NanInputs in;
  in.g = PoolGeometry::make(2, 2, 10, 18, k, 2, k == 3 ? 1 : 0);
  in.x = random_tensor(in.g.input_shape(), DType::F32, rng);
  float* xp = in.x.data_as<float>();
  xp[3] = NAN;
  xp[18 * 4 + 17] = NAN;
  xp[180 + 18 * 9 + 0] = NAN;
  xp[180 + 18 * 9 + 1] = NAN;  // two NaNs in one window: the first wins
  in.dy = random_tensor(in.g.output_shape(), DType::F32, rng);
  return in;
}

// Max pooling's y, argmax and dx of a CUDA side (host, NCHW) against the
// reference's: argmax the same (the window's first NaN), y NaN where the
// reference's is (at least 3 of them) and equal elsewhere, dx the same bits.
// "" or what differs.
std::string max_nan_differs(const Tensor& y_r, const Tensor& a_r, const Tensor& dx_r,
                            const Tensor& y, const Tensor& a, const Tensor& dx,
                            const std::string& what) {
  if (!bitwise_equal(a, a_r)) return what + ": argmax";
  int nans = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    const double f = value_at(y, i), r = value_at(y_r, i);
    if ((f != f) != (r != r)) return what + ": NaN at " + std::to_string(i);
    if (f != f)
      ++nans;
    else if (f != r)
      return what + ": y at " + std::to_string(i);
  }
  if (nans < 3) return what + ": " + std::to_string(nans) + " NaNs in y, not 3 or more";
  if (!bitwise_equal(dx_r, dx)) return what + ": dx";
  return "";
}

#if defined(TRAINBENCH_CUDA_EMULATED)
// A host tensor of `s` in layout l, every byte 0xff (NaN in the float
// dtypes, -1 in argmax): an element a kernel leaves unwritten shows.
Tensor poisoned(const Shape& s, DType dt, Layout l) {
  Tensor t = Tensor::empty(s, dt, Device::cpu(), l);
  std::memset(t.data(), 0xff, t.nbytes());
  return t;
}

template <typename T>
T* elements(const Tensor& t) {
  return static_cast<T*>(t.data());
}

// run_pool with the CUDA kernels on the emulator: pooling.cu's launchers on
// host tensors in layout l, as pooling_cuda.cpp calls them (each picks its
// index type, int32 for every shape here). Host outputs, in l.
template <typename T>
PoolOut run_pool_emulated_as(const PoolGeometry& g, const Tensor& x, const Tensor& dy,
                             const Tensor& gdy, Layout l) {
  namespace emu = tb::cuda_emu;
  const DType dt = x.dtype();
  const bool nhwc = l == Layout::NHWC;
  const emu::PoolDims d{g.N, g.C, g.H, g.W, g.kernel, g.stride, g.pad, g.H_out, g.W_out, nhwc};
  const Tensor xl = in_layout(x, l), dyl = in_layout(dy, l);
  PoolOut o;
  o.my = poisoned(g.output_shape(), dt, l), o.am = poisoned(g.output_shape(), DType::I32, l);
  o.mdx = poisoned(g.input_shape(), dt, l);
  o.ay = poisoned(g.output_shape(), dt, l), o.adx = poisoned(g.input_shape(), dt, l);
  o.gy = poisoned({g.N, g.C}, dt, Layout::NCHW), o.gdx = poisoned(g.input_shape(), dt, l);
  emu::launch_maxpool_forward<T>(d, elements<T>(xl), elements<T>(o.my), o.am.data_as<int32_t>(),
                                 nullptr);
  emu::launch_maxpool_backward<T>(d, elements<T>(dyl), o.am.data_as<int32_t>(),
                                  elements<T>(o.mdx), nullptr);
  emu::launch_avgpool_forward<T>(d, elements<T>(xl), elements<T>(o.ay), nullptr);
  emu::launch_avgpool_backward<T>(d, elements<T>(dyl), elements<T>(o.adx), nullptr);
  emu::launch_global_avgpool_forward<T>(elements<T>(xl), elements<T>(o.gy), g.N, g.C, g.H * g.W,
                                        nhwc, nullptr);
  emu::launch_global_avgpool_backward<T>(elements<T>(gdy), elements<T>(o.gdx), g.N, g.C,
                                         g.H * g.W, nhwc, nullptr);
  return o;
}

PoolOut run_pool_emulated(const PoolGeometry& g, const Tensor& x, const Tensor& dy,
                          const Tensor& gdy, Layout l) {
  switch (x.dtype()) {
    case DType::F32: return run_pool_emulated_as<float>(g, x, dy, gdy, l);
    case DType::F16: return run_pool_emulated_as<__half>(g, x, dy, gdy, l);
    case DType::BF16: return run_pool_emulated_as<__nv_bfloat16>(g, x, dy, gdy, l);
    default: break;
  }
  TB_FAIL("no emulated pooling kernel for ", dtype_name(x.dtype()));
}
#endif

// The emulated slots' shapes: windows over both borders (padding 1 and 2,
// partial last windows), cells no window covers (odd sizes; stride 3 over
// 2x2 windows leaves gaps), overlap, C = 5 and 3 (NHWC's channel decode),
// planes of 25 (< 32: idle lanes in the NCHW global mean's warp), 143 and
// 784 values, plane counts that leave warps of the last block idle, and
// totals that end mid-block; fmnist pool1 spans 392 blocks.
const PoolCase kEmulatedCases[] = {
    {"k3s2p1 13x11", 3, 5, 13, 11, 3, 2, 1},     {"k3s1p1 overlap 13x11", 3, 5, 13, 11, 3, 1, 1},
    {"k2s2p0 13x11", 3, 5, 13, 11, 2, 2, 0},     {"k2s3p0 gaps 10x11", 2, 3, 10, 11, 2, 3, 0},
    {"k4s2p2 7x9", 2, 3, 7, 9, 4, 2, 2},         {"overlapping 2/1/0 5x5", 3, 4, 5, 5, 2, 1, 0},
    {"fmnist pool1 2/2/0", 4, 32, 28, 28, 2, 2, 0},
};

}  // namespace

Q_DECLARE_METATYPE(PoolCase)

class TestOpPooling : public QObject {
  Q_OBJECT

 private slots:
  // ------------------------------------------------------------ finite differences

  void gradcheck_pooling_data() {
    QTest::addColumn<QString>("layer");
    QTest::addColumn<int64_t>("k");
    QTest::addColumn<int64_t>("s");
    QTest::addColumn<int64_t>("p");
    QTest::addColumn<Shape>("shape");
    QTest::addColumn<uint64_t>("seed");
    QTest::addColumn<Layout>("layout");
    struct R {
      const char* name;
      const char* layer;
      int64_t k, s, p;
      Shape shape;
      uint64_t seed;
    };
    // Non-overlapping, overlapping with padding, overlapping without.
    const R rows[] = {{"maxpool 2/2/0", "max", 2, 2, 0, {2, 3, 7, 6}, 13},
                      {"maxpool 3/2/1", "max", 3, 2, 1, {2, 3, 7, 6}, 13},
                      {"maxpool 2/1/0", "max", 2, 1, 0, {2, 3, 7, 6}, 13},
                      {"avgpool 2/2/0", "avg", 2, 2, 0, {2, 3, 7, 6}, 14},
                      {"avgpool 3/2/1", "avg", 3, 2, 1, {2, 3, 7, 6}, 14},
                      {"avgpool 2/1/0", "avg", 2, 1, 0, {2, 3, 7, 6}, 14},
                      {"global avgpool", "gap", 0, 0, 0, {2, 3, 4, 5}, 15},
                      {"flatten", "flatten", 0, 0, 0, {2, 3, 4, 5}, 16},
                      {"maxpool 3/2/1 6x5", "max", 3, 2, 1, {2, 3, 6, 5}, 77},
                      {"avgpool 3/2/1 6x5", "avg", 3, 2, 1, {2, 3, 6, 5}, 77},
                      {"global avgpool 6x5", "gap", 0, 0, 0, {2, 3, 6, 5}, 77},
                      {"flatten 6x5", "flatten", 0, 0, 0, {2, 3, 6, 5}, 77}};
    for (Layout l : {Layout::NCHW, Layout::NHWC})
      for (const R& r : rows)
        QTest::addRow("%s %s", r.name, layout_name(l))
            << QString(r.layer) << r.k << r.s << r.p << r.shape << r.seed << l;
    // The blocked layout's indexing: one block of 16 channels.
    const R blocked[] = {{"maxpool 2/2/0 16ch", "max", 2, 2, 0, {2, 16, 6, 5}, 17},
                         {"maxpool 3/2/1 16ch", "max", 3, 2, 1, {2, 16, 6, 5}, 17},
                         {"global avgpool 16ch", "gap", 0, 0, 0, {2, 16, 3, 4}, 18},
                         {"flatten 16ch", "flatten", 0, 0, 0, {2, 16, 3, 2}, 19}};
    for (const R& r : blocked)
      QTest::addRow("%s nChw16c", r.name)
          << QString(r.layer) << r.k << r.s << r.p << r.shape << r.seed << Layout::NCHW16C;
  }
  void gradcheck_pooling() {
    QFETCH(QString, layer);
    QFETCH(int64_t, k);
    QFETCH(int64_t, s);
    QFETCH(int64_t, p);
    QFETCH(Shape, shape);
    QFETCH(uint64_t, seed);
    QFETCH(Layout, layout);
    std::unique_ptr<Layer> l;
    if (layer == "max") l = std::make_unique<MaxPool2d>("pool", k, s, p);
    if (layer == "avg") l = std::make_unique<AvgPool2d>("pool", k, s, p);
    if (layer == "gap") l = std::make_unique<GlobalAvgPool>("pool");
    if (layer == "flatten") l = std::make_unique<Flatten>("flatten");
    QVERIFY(l);
    const auto r = test::gradcheck_layer(std::move(l), shape, seed, true, 1e-6, layout);
    QVERIFY2(r.max_rel_error_dx < kGradTol, qPrintable(QString("dx rel error %1 at %2")
                                                           .arg(r.max_rel_error_dx)
                                                           .arg(QString::fromStdString(r.worst))));
    QVERIFY2(r.max_rel_error_params < kGradTol,
             qPrintable(QString("param rel error %1 at %2")
                            .arg(r.max_rel_error_params)
                            .arg(QString::fromStdString(r.worst))));
  }

  // ------------------------------------------------------------ every target vs the reference

  void pool_matches_reference_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<PoolCase>("c");
    for (const Target& t : kTargets)
      for (const PoolCase& c : kCases)
        if (holds(t, c.C)) QTest::addRow("%s: %s", t.name().c_str(), c.name) << t << c;
  }
  void pool_matches_reference() {
    FETCH_TARGET(t, be);
    QFETCH(PoolCase, c);
    TB_GPU_TRY
    const auto g = PoolGeometry::make(c.N, c.C, c.H, c.W, c.k, c.s, c.p);
    const DType dt = t.dtype;
    const Layout L = t.layout;
    std::mt19937_64 rng(24 + uint64_t(c.N * 1000 + c.W * 100 + c.k * 10 + c.s));
    const Tensor x = random_tensor(g.input_shape(), dt, rng);
    const Tensor dy = random_tensor(g.output_shape(), dt, rng);
    const Tensor gdy = random_tensor({c.N, c.C}, dt, rng);

    // The oracle: the reference kernels, NCHW; then the target.
    const PoolOut r = run_pool(cpu_reference(), g, x, dy, gdy, Layout::NCHW);
    const PoolOut o = run_pool(be, g, x, dy, gdy, L);
    const std::string bad = outputs_differ(t, r, o);
    QVERIFY2(bad.empty(), bad.c_str());
    TB_GPU_CATCH
  }

  void maxpool_nan_propagates() {
    // A NaN in a window propagates (argmax: its first NaN); other windows are unaffected.
    CpuBackend &fast = cpu_fast(), &ref = cpu_reference();
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
      pooling::max_forward(fast, g, x, y_f, a_f);
      pooling::max_forward(ref, g, x, y_r, a_r);
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

  // The blocked 2x2 path (nChw16c, fast f32) with NaNs: the values, argmax
  // and the backward's dx as the NCHW reference gives them (a NaN wins, the
  // window's first; the other lanes of the same windows are unaffected).
  void maxpool_blocked_nan_matches_reference() {
    std::mt19937_64 rng(27);
    const auto g = PoolGeometry::make(2, 32, 6, 7, 2, 2, 0);
    Tensor x = random_tensor(g.input_shape(), DType::F32, rng);
    float* xp = x.data_as<float>();
    const int64_t HW = g.H * g.W;
    xp[0 * HW + 1] = NAN;                  // channel 0, (0, 1): window (0, 0)'s second cell
    xp[17 * HW + 1 * 7 + 2] = NAN;         // channel 17, row 1: the second block
    xp[17 * HW + 0 * 7 + 3] = NAN;         // window (0, 1) of channel 17: its first NaN wins
    xp[(32 + 5) * HW + 5 * 7 + 6] = NAN;   // image 1: the last row and column, no window
    const Tensor dy = random_tensor(g.output_shape(), DType::F32, rng);
    Tensor y_r = Tensor::empty(g.output_shape(), DType::F32);
    Tensor a_r = Tensor::empty(g.output_shape(), DType::I32);
    Tensor dx_r = Tensor::empty(g.input_shape(), DType::F32);
    pooling::max_forward(cpu_reference(), g, x, y_r, a_r);
    pooling::max_backward(cpu_reference(), g, dy, a_r, dx_r);
    CpuBackend& fast = cpu_fast();
    const Tensor xb = in_layout(x, Layout::NCHW16C), dyb = in_layout(dy, Layout::NCHW16C);
    Tensor y_b = like(y_r, Layout::NCHW16C), a_b = like(a_r, Layout::NCHW16C);
    Tensor dx_b = like(dx_r, Layout::NCHW16C);
    pooling::max_forward(fast, g, xb, y_b, a_b);
    pooling::max_backward(fast, g, dyb, a_b, dx_b);
    const Tensor y = to_nchw(y_b), a = to_nchw(a_b), dx = to_nchw(dx_b);
    QVERIFY(std::memcmp(a.data(), a_r.data(), a.nbytes()) == 0);
    int nans = 0;
    for (int64_t i = 0; i < y.numel(); ++i) {
      const float f = y.data_as<float>()[i], r = y_r.data_as<float>()[i];
      QVERIFY2((f != f) == (r != r), qPrintable(QString("y[%1]: %2 against %3").arg(i).arg(f).arg(r)));
      if (f != f) ++nans;
      else QCOMPARE(f, r);
    }
    QCOMPARE(nans, 2);  // the last NaN lies in no window
    QCOMPARE(a_r.data_as<int32_t>()[17 * g.H_out * g.W_out + 1], 3);  // (0, 3), before (1, 2)
    QCOMPARE(max_abs_diff(dx_r, dx), 0.0);
  }

  // The f32 NCHW average pooling's CPU paths (pooling_cpu.h), each forced
  // on every case against the reference: fast (our loops) within kFastTol
  // scaled, as the fast target; onednn elementwise within
  // (2k² + 1)·u·(the same pooling of |x|, of |dy|), u = 2^-24: both sides sum
  // the same ≤ k² cells (a recursive sum of m terms errs by at most
  // (m − 1)·u·Σ|terms|), then scale (ours a product by the rounded 1/k²: 2u;
  // oneDNN's a division: u), so 2(k² − 1) + 3 roundings of Σ|x|/k² in all;
  // the backward sums at most k² shares dy/k² per cell alike. auto takes
  // onednn exactly where oneDNN names a JIT kernel, and every choice is
  // recorded; bad settings are refused by name.
  void avg_pool_cpu_paths() {
    const double u = std::ldexp(1.0, -24);
    std::vector<std::string> paths{"fast"};
#ifdef TRAINBENCH_HAVE_ONEDNN
    paths.push_back("onednn");
#endif
    CpuBackend& ref = cpu_reference();
    auto abs_of = [](const Tensor& t) {
      Tensor a = clone(t);
      for (int64_t i = 0; i < a.numel(); ++i) a.data_as<float>()[i] = std::abs(a.data_as<float>()[i]);
      return a;
    };
    auto record_of = [](CpuBackend& be, const std::string& key) {
      const nlohmann::json rec = be.describe()["kernel_paths"]["pooling"];
      return rec.contains(key) ? rec[key] : nlohmann::json();
    };
    for (const std::string& path : paths) {
      CpuBackend be(BackendOptions{.threads = 2});
      pooling::set_cpu_avg_pool_path(be, path);
      for (const PoolCase& c : kCases) {
        const auto g = PoolGeometry::make(c.N, c.C, c.H, c.W, c.k, c.s, c.p);
        std::mt19937_64 rng(31 + uint64_t(c.N * 1000 + c.W * 100 + c.k * 10 + c.s));
        const Tensor x = random_tensor(g.input_shape(), DType::F32, rng);
        const Tensor dy = random_tensor(g.output_shape(), DType::F32, rng);
        auto pool = [&](Backend& b, const Tensor& xi, const Tensor& dyi) {
          Tensor y = Tensor::empty(g.output_shape(), DType::F32);
          Tensor dx = Tensor::empty(g.input_shape(), DType::F32);
          pooling::avg_forward(b, g, xi, y);
          pooling::avg_backward(b, g, dyi, dx);
          return std::pair{y, dx};
        };
        const auto [y, dx] = pool(be, x, dy);
        const auto [ry, rdx] = pool(ref, x, dy);
        const auto [ay, adx] = pool(ref, abs_of(x), abs_of(dy));
        const std::string name = std::string(c.name) + " " + path;
        const std::string key = detail::concat("avg forward N", c.N, " ", c.C, "x", c.H, "x", c.W,
                                               " k", c.k, " s", c.s, " p", c.p, " NCHW");
        const nlohmann::json rec = record_of(be, key);
        QVERIFY2(rec.is_object(), (name + ": no record " + key).c_str());
        if (path == "fast" || rec["path"] != "onednn") {
          // forced onednn on a shape oneDNN refuses: fast, and the record says why
          QVERIFY2(path == "fast" || rec["chosen_by"] == "oneDNN refuses this shape", rec.dump().c_str());
          for (auto [r, got] : {std::pair{ry, y}, std::pair{rdx, dx}})
            QVERIFY2(scaled_diff(r, got) < kFastTol, name.c_str());
          continue;
        }
        QCOMPARE(rec["chosen_by"].get<std::string>(), std::string("setting"));
        const double per_sum = double(2 * c.k * c.k + 1) * u;
        for (auto [r, got, a, what] : {std::tuple{ry, y, ay, "y"}, std::tuple{rdx, dx, adx, "dx"}})
          for (int64_t i = 0; i < r.numel(); ++i) {
            const double d = std::abs(double(got.data_as<float>()[i]) - r.data_as<float>()[i]);
            const double bound = per_sum * a.data_as<float>()[i];
            QVERIFY2(d <= bound, qPrintable(QString("%1 %2[%3]: differs by %4, bound %5")
                                                .arg(QString::fromStdString(name)).arg(what)
                                                .arg(i).arg(d).arg(bound)));
          }
      }
    }
    // auto: oneDNN exactly where it names a JIT kernel.
    CpuBackend be(BackendOptions{.threads = 2});
    const auto g = PoolGeometry::make(4, 32, 28, 28, 2, 2, 0);
    std::mt19937_64 rng(32);
    const Tensor x = random_tensor(g.input_shape(), DType::F32, rng);
    Tensor y = Tensor::empty(g.output_shape(), DType::F32);
    pooling::avg_forward(be, g, x, y);
    const nlohmann::json rec = record_of(be, "avg forward N4 32x28x28 k2 s2 p0 NCHW");
    QVERIFY2(rec.is_object(), be.describe().dump().c_str());
#ifdef TRAINBENCH_HAVE_ONEDNN
    const std::string impl = rec["onednn_implementation"].get<std::string>();
    QCOMPARE(rec["path"].get<std::string>(),
             std::string(pooling::onednn::is_jit(impl) ? "onednn" : "fast"));
    QVERIFY(pooling::onednn::is_jit("jit:avx512_core") && !pooling::onednn::is_jit("simple_nchw:any"));
#else
    QCOMPARE(rec["path"].get<std::string>(), std::string("fast"));
    const QString no = qerror_of([&] { pooling::set_cpu_avg_pool_path(be, "onednn"); });
    QVERIFY2(no.contains("no oneDNN"), qPrintable(no));
#endif
    QCOMPARE(rec["chosen_by"].get<std::string>(), std::string("rule"));
    const QString bad = qerror_of([&] { pooling::set_cpu_avg_pool_path(be, "fastest"); });
    QVERIFY2(bad.contains("set_cpu_avg_pool_path") && bad.contains("'fastest'"), qPrintable(bad));
  }

  // The same planted NaNs on the GPU (pooling.cu's isnan branch is reached by no
  // random input): the argmax is the reference's (first NaN of the window),
  // y is NaN where the reference's is and equal elsewhere, and the gradient
  // routed through that argmax is the reference's bit for bit.
  void maxpool_nan_matches_reference_on_gpu_data() {
    QTest::addColumn<Target>("target");
    for (const Target& t : cuda_targets()) QTest::newRow(t.name().c_str()) << t;
  }
  void maxpool_nan_matches_reference_on_gpu() {
    FETCH_TARGET(t, be);
    TB_GPU_TRY
    CpuBackend& ref = cpu_reference();
    std::mt19937_64 rng(27);
    for (int64_t k : {2, 3}) {
      const auto [g, x, dy] = nan_planted(k, rng);
      Tensor y_r = Tensor::empty(g.output_shape(), DType::F32);
      Tensor a_r = Tensor::empty(g.output_shape(), DType::I32), dx_r = like(x, Layout::NCHW);
      pooling::max_forward(ref, g, x, y_r, a_r);
      pooling::max_backward(ref, g, dy, a_r, dx_r);
      const Tensor xd = to_device(be, x, t.layout), dyd = to_device(be, dy, t.layout);
      Tensor yd = be.empty(g.output_shape(), DType::F32, t.layout);
      Tensor ad = be.empty(g.output_shape(), DType::I32, t.layout);
      Tensor dxd = be.empty(g.input_shape(), DType::F32, t.layout);
      pooling::max_forward(be, g, xd, yd, ad);
      pooling::max_backward(be, g, dyd, ad, dxd);
      const Tensor y = to_host_nchw(be, yd), a = to_host_nchw(be, ad), dx = to_host_nchw(be, dxd);
      const std::string bad =
          max_nan_differs(y_r, a_r, dx_r, y, a, dx, t.name() + " k " + std::to_string(k));
      QVERIFY2(bad.empty(), bad.c_str());
    }
    TB_GPU_CATCH
  }

  // ------------------------------------------------------------ hand-computed values

  void pool_known_values() {
    for (bool reference : {false, true}) {
      CpuBackend& be = reference ? cpu_reference() : cpu_fast();
      // Ties: a constant plane, 2x2 windows -> the first cell of each window wins.
      auto g = PoolGeometry::make(1, 1, 4, 4, 2, 2, 0);
      Tensor x = Tensor::empty({1, 1, 4, 4}, DType::F32);
      be.fill(x, 3.0);
      Tensor y = Tensor::empty({1, 1, 2, 2}, DType::F32);
      Tensor am = Tensor::empty({1, 1, 2, 2}, DType::I32);
      pooling::max_forward(be, g, x, y, am);
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
      pooling::max_forward(be, gp, xn, yp, amp);
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
      pooling::max_forward(be, gp, x3, yp, amp);
      pooling::max_backward(be, gp, dy, amp, dx);
      QCOMPARE(dx.data_as<float>()[4], 4.0f);
      QCOMPARE(dx.data_as<float>()[0], 0.0f);

      // count_include_pad: ones, 3x3 windows, stride 1, padding 1: a corner sees 4 of 9.
      auto ga = PoolGeometry::make(1, 1, 3, 3, 3, 1, 1);
      Tensor ones = Tensor::empty({1, 1, 3, 3}, DType::F32);
      be.fill(ones, 1.0);
      Tensor ya = Tensor::empty({1, 1, 3, 3}, DType::F32);
      pooling::avg_forward(be, ga, ones, ya);
      QCOMPARE(ya.data_as<float>()[0], 4.0f / 9.0f);
      QCOMPARE(ya.data_as<float>()[1], 6.0f / 9.0f);
      QCOMPARE(ya.data_as<float>()[4], 1.0f);

      // Global average of 1..6 on a 2x3 plane is 3.5; dx spreads dy / 6.
      Tensor xg = Tensor::empty({1, 1, 2, 3}, DType::F32);
      for (int i = 0; i < 6; ++i) xg.data_as<float>()[i] = float(i + 1);
      Tensor yg = Tensor::empty({1, 1}, DType::F32);
      pooling::global_avg_forward(be, xg, yg);
      QCOMPARE(yg.data_as<float>()[0], 3.5f);
      Tensor dyg = Tensor::empty({1, 1}, DType::F32);
      be.fill(dyg, 6.0);
      pooling::global_avg_backward(be, dyg, xg);
      for (int i = 0; i < 6; ++i) QCOMPARE(xg.data_as<float>()[i], 1.0f);
    }
  }

  // The argmax of an NHWC max pool is the plane index ih*W + iw (not a memory
  // offset): planted maxima at known cells.
  void maxpool_nhwc_argmax_known() {
    CpuBackend& be = cpu_reference();
    const PoolGeometry g = PoolGeometry::make(1, 3, 4, 4, 2, 2, 0);
    std::mt19937_64 rng(11);
    Tensor x = random_tensor(g.input_shape(), DType::F32, rng);  // values in [-1, 1)
    // channel c: the maximum of output cell (0, 1) at input (1, 2 + c % 2).
    for (int c = 0; c < 3; ++c) x.data_as<float>()[(c * 4 + 1) * 4 + 2 + c % 2] = 5.0f + c;
    Tensor xn = like(x, Layout::NHWC);
    be.copy(x, xn);
    Tensor y = Tensor::empty(g.output_shape(), DType::F32, Device::cpu(), Layout::NHWC);
    Tensor am = Tensor::empty(g.output_shape(), DType::I32, Device::cpu(), Layout::NHWC);
    pooling::max_forward(be, g, xn, y, am);
    for (int c = 0; c < 3; ++c) {
      const int64_t o = offset4(Layout::NHWC, 3, 2, 2, 0, c, 0, 1);
      QCOMPARE(am.data_as<int32_t>()[o], 1 * 4 + 2 + c % 2);
      QCOMPARE(y.data_as<float>()[o], 5.0f + c);
    }
  }

  // ------------------------------------------------------------ the layers

  void pooling_layer_shapes() {
    ParamRegistry reg;
    MaxPool2d mp("mp", 2, 2);
    QCOMPARE(mp.setup({1, 32, 28, 28}, reg), (Shape{1, 32, 14, 14}));
    AvgPool2d ap("ap", 3, 2, 1);
    QCOMPARE(ap.setup({1, 4, 7, 7}, reg), (Shape{1, 4, 4, 4}));
    GlobalAvgPool gap("gap");
    QCOMPARE(gap.setup({1, 64, 7, 7}, reg), (Shape{1, 64}));
    Flatten fl("fl");
    QCOMPARE(fl.setup({1, 64, 7, 7}, reg), (Shape{1, 3136}));
    QCOMPARE(reg.params().size(), size_t(0));  // pooling and flatten have none

    // Flatten is a view: same memory forward and back.
    Context ctx{cpu_fast()};
    Tensor x = Tensor::zeros({2, 3, 4, 5}, DType::F32);
    Tensor y = fl.forward(ctx, x);
    QCOMPARE(y.shape(), (Shape{2, 60}));
    QVERIFY(y.data() == x.data());
    Tensor dx = fl.backward(ctx, y, true);
    QCOMPARE(dx.shape(), x.shape());
    QVERIFY(dx.data() == x.data());
  }

  void pool_shape_errors() {
    CpuBackend& be = cpu_fast();
    Tensor x = Tensor::zeros({2, 3, 8, 8}, DType::F32);
    auto pg = PoolGeometry::make(2, 3, 8, 8, 2, 2, 0);
    Tensor py_bad = Tensor::zeros({2, 3, 5, 4}, DType::F32);
    Tensor pam = Tensor::zeros({2, 3, 4, 4}, DType::I32);
    QString m = qerror_of([&] { pooling::max_forward(be, pg, x, py_bad, pam); });
    QVERIFY2(m.contains("[2, 3, 5, 4]") && m.contains("[2, 3, 4, 4]"), qPrintable(m));
    m = qerror_of([&] { pooling::avg_backward(be, pg, py_bad, x); });
    QVERIFY2(m.contains("[2, 3, 5, 4]"), qPrintable(m));
    Tensor gy_bad = Tensor::zeros({2, 4}, DType::F32);
    m = qerror_of([&] { pooling::global_avg_forward(be, x, gy_bad); });
    QVERIFY2(m.contains("[2, 4]") && m.contains("[2, 3]"), qPrintable(m));
  }

  // ------------------------------------------------------------ f16 / bf16

  // The CPU's f16/bf16 path against the f64 reference on the widened inputs
  // (x, dy, gdy in [-1, 1) rounded to the dtype, read exactly into f64). Max
  // pooling's y and argmax: a maximum of f16/bf16 values is one of them, and
  // both sides see the same values: exact. The other outputs are the f32
  // path's value rounded once: |lp − ref| <= u·|ref| + (1 + u)·e (+ f16's
  // subnormal step, low_precision.h), e the f32 path's own error: a sum of n
  // <= k² terms of magnitude <= 1 (n − 1 roundings of at most the sum's
  // Σ|terms|), scaled by 1/k² (its rounding and the product's: 2), i.e.
  // e <= (k² + 1)·2^-24 for the windows, and the global mean's double sum
  // then one rounding of 1/HW and one of the product, e <= 2·2^-24:
  // e = (k² + 2)·2^-24 covers every output.
  void pool_lp_matches_widened_reference_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<PoolCase>("c");
    for (DType dt : {DType::F16, DType::BF16})
      for (const Target& t : {Target{Impl::CpuFast, Layout::NCHW, dt},
                              Target{Impl::CpuReference, Layout::NCHW, dt},
                              Target{Impl::CpuFast, Layout::NHWC, dt}})
        for (const PoolCase& c : kLpCases)
          QTest::addRow("%s: %s", t.name().c_str(), c.name) << t << c;
  }
  void pool_lp_matches_widened_reference() {
    FETCH_TARGET(t, be);
    QFETCH(PoolCase, c);
    const DType dt = t.dtype;
    const auto g = PoolGeometry::make(c.N, c.C, c.H, c.W, c.k, c.s, c.p);
    CpuBackend& ref = cpu_reference();
    std::mt19937_64 rng(52 + uint64_t(c.k * 10 + c.s));
    const Tensor x = lp_of(ref, random_tensor(g.input_shape(), DType::F32, rng), dt);
    const Tensor dy = lp_of(ref, random_tensor(g.output_shape(), DType::F32, rng), dt);
    const Tensor gdy = lp_of(ref, random_tensor({c.N, c.C}, DType::F32, rng), dt);
    const PoolOut r = run_pool(ref, g, as_f64(x), as_f64(dy), as_f64(gdy), Layout::NCHW);
    const PoolOut o = run_pool(be, g, x, dy, gdy, t.layout);
    QVERIFY2(max_abs_diff(r.my, as_f64(o.my)) == 0.0, "max y");
    QVERIFY2(max_abs_diff(r.am, o.am) == 0.0, "argmax");
    const double e = double(c.k * c.k + 2) * std::ldexp(1.0, -24);
    for (auto [want, got, what] :
         {std::tuple{r.mdx, o.mdx, "max dx"}, std::tuple{r.ay, o.ay, "avg y"},
          std::tuple{r.adx, o.adx, "avg dx"}, std::tuple{r.gy, o.gy, "global y"},
          std::tuple{r.gdx, o.gdx, "global dx"}}) {
      QCOMPARE(got.dtype(), dt);
      const Comparison cmp = compare_rounded(want, got, dt, 1, e, std::string(what) + " " + t.name());
      QVERIFY2(cmp.ok, cmp.msg.c_str());
    }
  }

  // The CUDA kernels in f16/bf16 against the CPU's path on the same rounded
  // inputs, with outputs_differ's bounds: max pooling the same bits; average
  // and global pooling each side's one rounding of f32 values within
  // pool_matches_reference's f32 bounds (derived at outputs_differ).
  void pool_lp_cuda_matches_cpu_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<PoolCase>("c");
    for (DType dt : {DType::F16, DType::BF16})
      for (const Target& t : cuda_targets(dt))
        for (const PoolCase& c : kLpCases)
          QTest::addRow("%s: %s", t.name().c_str(), c.name) << t << c;
  }
  void pool_lp_cuda_matches_cpu() {
    FETCH_TARGET(t, be);
    QFETCH(PoolCase, c);
    TB_GPU_TRY
    const DType dt = t.dtype;
    const auto g = PoolGeometry::make(c.N, c.C, c.H, c.W, c.k, c.s, c.p);
    CpuBackend& ref = cpu_reference();
    std::mt19937_64 rng(67 + uint64_t(c.k * 10 + c.s) + uint64_t(dt == DType::BF16));
    const Tensor x = lp_of(ref, random_tensor(g.input_shape(), DType::F32, rng), dt);
    const Tensor dy = lp_of(ref, random_tensor(g.output_shape(), DType::F32, rng), dt);
    const Tensor gdy = lp_of(ref, random_tensor({c.N, c.C}, DType::F32, rng), dt);
    const PoolOut r = run_pool(ref, g, x, dy, gdy, Layout::NCHW);
    const PoolOut o = run_pool(be, g, x, dy, gdy, t.layout);
    const std::string bad = outputs_differ(t, r, o);
    QVERIFY2(bad.empty(), bad.c_str());
    TB_GPU_CATCH
  }

  // The contract's dtypes: x, y, dx, dy share one (f16 with bf16 or f32
  // refused naming the op, the operand and the dtypes); the CPU takes all
  // four; the CUDA backend refuses f64 naming the op, the dtype and itself.
  void pool_lp_dtype_checks() {
    CpuBackend& cpu = cpu_fast();
    const auto g = PoolGeometry::make(1, 2, 4, 4, 2, 2, 0);
    const Tensor xh = Tensor::zeros(g.input_shape(), DType::F16);
    Tensor yb = Tensor::zeros(g.output_shape(), DType::BF16);
    Tensor am = Tensor::zeros(g.output_shape(), DType::I32);
    QString m = qerror_of([&] { pooling::max_forward(cpu, g, xh, yb, am); });
    QVERIFY2(m.contains("maxpool2d_forward") && m.contains("output y") && m.contains("bf16") &&
                 m.contains("f16"),
             qPrintable(m));
    Tensor dx32 = Tensor::zeros(g.input_shape(), DType::F32);
    m = qerror_of([&] { pooling::avg_backward(cpu, g, yb, dx32); });
    QVERIFY2(m.contains("avgpool2d_backward") && m.contains("dx") && m.contains("bf16"),
             qPrintable(m));
    for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16})
      QVERIFY(cpu.kernels<pooling::Kernels>().supports(t));
  }
  void pool_dtype_refused_by_backend() {
    NEED_GPU();
    TB_GPU_TRY
    Backend& be = cuda_backend();
    const auto g = PoolGeometry::make(1, 2, 4, 4, 2, 2, 0);
    const Tensor x = be.empty(g.input_shape(), DType::F64);
    Tensor y = be.empty(g.output_shape(), DType::F64);
    const QString m = qerror_of([&] { pooling::avg_forward(be, g, x, y); });
    QVERIFY2(m.contains("avgpool2d_forward") && m.contains("f64") &&
                 m.contains(QString::fromStdString(be.name())),
             qPrintable(m));
    for (DType t : {DType::F32, DType::F16, DType::BF16})
      QVERIFY(be.kernels<pooling::Kernels>().supports(t));
    QVERIFY(!be.kernels<pooling::Kernels>().supports(DType::F64));
    TB_GPU_CATCH
  }

  // The contract's checks (pooling.cpp, one copy for every backend) name the
  // op and the operand that breaks it: a dtype, an argmax that is not i32, a
  // layout differing from x's, a global-pooling input that is not rank 4.
  void pool_errors_name_the_operand() {
    for (bool reference : {false, true}) {
      CpuBackend& be = reference ? cpu_reference() : cpu_fast();
      const auto g = PoolGeometry::make(1, 2, 4, 4, 2, 2, 0);
      const Tensor x = Tensor::zeros(g.input_shape(), DType::F32);
      Tensor y = Tensor::zeros(g.output_shape(), DType::F32);
      Tensor am = Tensor::zeros(g.output_shape(), DType::I32);
      Tensor y64 = Tensor::zeros(g.output_shape(), DType::F64);
      QString m = qerror_of([&] { pooling::max_forward(be, g, x, y64, am); });
      QVERIFY2(m.contains("maxpool2d_forward") && m.contains("output y") && m.contains("f64"),
               qPrintable(m));
      Tensor am_f = Tensor::zeros(g.output_shape(), DType::F32);
      m = qerror_of([&] { pooling::max_forward(be, g, x, y, am_f); });
      QVERIFY2(m.contains("argmax") && m.contains("i32"), qPrintable(m));
      Tensor y_nhwc = Tensor::zeros(g.output_shape(), DType::F32, Device::cpu(), Layout::NHWC);
      m = qerror_of([&] { pooling::avg_forward(be, g, x, y_nhwc); });
      QVERIFY2(m.contains("avgpool2d_forward") && m.contains("output y") && m.contains("NCHW"),
               qPrintable(m));
      Tensor flat = Tensor::zeros({1, 32}, DType::F32), gy = Tensor::zeros({1, 2}, DType::F32);
      m = qerror_of([&] { pooling::global_avg_forward(be, flat, gy); });
      QVERIFY2(m.contains("global_avgpool_forward") && m.contains("(N, C, H, W)"), qPrintable(m));
      Tensor i32 = Tensor::zeros(g.input_shape(), DType::I32);
      Tensor yi = Tensor::zeros(g.output_shape(), DType::I32);
      m = qerror_of([&] { pooling::avg_forward(be, g, i32, yi); });
      // The CPU's kernels take f32, f64, f16 and bf16 (Kernels::supports).
      QVERIFY2(m.contains("avgpool2d_forward") && m.contains("i32") && m.contains("cpu"),
               qPrintable(m));
    }
  }

  // ------------------------------------------------------------ the CUDA kernels, emulated

  // pooling.cu's kernels on the CUDA emulator (tests/cuda_emulator), here on
  // any machine: f32, f16 and bf16 in both layouts, against the reference
  // with the GPU slots' bounds (outputs_differ), under both of the emulator's
  // thread orders, on kEmulatedCases' shapes; "ties" puts x in steps of 1/4,
  // so windows hold equal maxima (the first in window order must win, and dx
  // follow it). Every output starts as 0xff bytes: an element left unwritten
  // fails. Out of the emulator's reach (2^24 and about 2^31 values): the
  // grid-stride loops' second pass and by_index's int64 kernels; every shape
  // here takes the int32 ones, as on a GPU.
  void pool_emulated_cuda_matches_cpu_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<PoolCase>("c");
    QTest::addColumn<bool>("ties");
    for (DType dt : {DType::F32, DType::F16, DType::BF16})
      for (const Target& t : cuda_targets(dt)) {
        for (const PoolCase& c : kEmulatedCases)
          QTest::addRow("%s: %s", t.name().c_str(), c.name) << t << c << false;
        for (const PoolCase& c : {kEmulatedCases[1], kEmulatedCases[4]})
          QTest::addRow("%s: %s, ties", t.name().c_str(), c.name) << t << c << true;
      }
  }
  void pool_emulated_cuda_matches_cpu() {
    QFETCH(Target, target);
    QFETCH(PoolCase, c);
    QFETCH(bool, ties);
#if defined(TRAINBENCH_CUDA_EMULATED)
    TB_EMU_TRY
    const DType dt = target.dtype;
    const auto g = PoolGeometry::make(c.N, c.C, c.H, c.W, c.k, c.s, c.p);
    CpuBackend& ref = cpu_reference();
    std::mt19937_64 rng(71 + uint64_t(c.H * 100 + c.k * 10 + c.s) + uint64_t(dt));
    Tensor x32 = random_tensor(g.input_shape(), DType::F32, rng);
    if (ties)
      for (int64_t i = 0; i < x32.numel(); ++i)
        x32.data_as<float>()[i] = std::round(4.0f * x32.data_as<float>()[i]) / 4.0f;
    const auto as_dt = [&](const Tensor& f32) {
      return dt == DType::F32 ? f32 : lp_of(ref, f32, dt);
    };
    const Tensor x = as_dt(x32), dy = as_dt(random_tensor(g.output_shape(), DType::F32, rng));
    const Tensor gdy = as_dt(random_tensor({c.N, c.C}, DType::F32, rng));
    const PoolOut r = run_pool(ref, g, x, dy, gdy, Layout::NCHW);
    for (tb_emu::Schedule order : {tb_emu::Schedule::forward, tb_emu::Schedule::reverse}) {
      EmulatorSchedule use(order);
      const PoolOut o = run_pool_emulated(g, x, dy, gdy, target.layout);
      const std::string bad = outputs_differ(target, r, o);
      QVERIFY2(bad.empty(), (bad + " [" + schedule_name(order) + "]").c_str());
    }
    TB_EMU_CATCH
#else
    QSKIP(kNoEmulator);
#endif
  }

  // maxpool_nan_matches_reference_on_gpu on the emulator, and in f16 and
  // bf16 too (the planted NaNs stay NaNs), both thread orders.
  void maxpool_emulated_nan_matches_reference_data() {
    QTest::addColumn<Target>("target");
    for (DType dt : {DType::F32, DType::F16, DType::BF16})
      for (const Target& t : cuda_targets(dt)) QTest::newRow(t.name().c_str()) << t;
  }
  void maxpool_emulated_nan_matches_reference() {
    QFETCH(Target, target);
#if defined(TRAINBENCH_CUDA_EMULATED)
    TB_EMU_TRY
    const DType dt = target.dtype;
    CpuBackend& ref = cpu_reference();
    const auto as_dt = [&](const Tensor& f32) {
      return dt == DType::F32 ? f32 : lp_of(ref, f32, dt);
    };
    std::mt19937_64 rng(27);
    for (int64_t k : {2, 3}) {
      const NanInputs in = nan_planted(k, rng);
      const Tensor x = as_dt(in.x), dy = as_dt(in.dy), gdy = Tensor::zeros({in.g.N, in.g.C}, dt);
      const PoolOut r = run_pool(ref, in.g, x, dy, gdy, Layout::NCHW);
      for (tb_emu::Schedule order : {tb_emu::Schedule::forward, tb_emu::Schedule::reverse}) {
        EmulatorSchedule use(order);
        const PoolOut o = run_pool_emulated(in.g, x, dy, gdy, target.layout);
        const std::string bad =
            max_nan_differs(r.my, r.am, r.mdx, to_nchw(o.my), to_nchw(o.am), to_nchw(o.mdx),
                            target.name() + " k " + std::to_string(k) + " [" +
                                schedule_name(order) + "]");
        QVERIFY2(bad.empty(), bad.c_str());
      }
    }
    TB_EMU_CATCH
#else
    QSKIP(kNoEmulator);
#endif
  }
};

QTEST_GUILESS_MAIN(TestOpPooling)
#include "test_op_pooling.moc"
