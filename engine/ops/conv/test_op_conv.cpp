// SPDX-License-Identifier: GPL-3.0-or-later
// The convolution op family (conv.h): conv::forward/backward on every
// backend, layout and dtype (f32/f64, and f16/bf16 as the low-precision form
// of the same op), and the Conv2d layer.
//
// 1. Gradients: Conv2d's backward against central finite differences, f64 on
//    the reference backend (gradcheck.h), NCHW and NHWC: relative error < 1e-6.
// 2. conv_matches_reference, one body over targets (backend x layout x dtype;
//    device_fixture.h) x shapes: y, dx, dw, db of the target against the
//    reference kernels in NCHW, and accumulate=true against the reference's
//    accumulate. Tolerances by target:
//      cpu f64 (every CPU backend runs the reference templates for f64), and
//      NHWC on the CPU (the fast backend routes NHWC to the reference, which
//      visits the same elements in the same order): bit-identical;
//      cpu-fast NCHW f32 (im2col + OpenBLAS, other summation order): 1e-4 of
//      the largest reference magnitude;
//      cuda f32: cuDNN with strict fp32 engines (no TF32, no down-converted
//      inputs: conv_engine_filter), network_tolerance("fp32", 4, k) of the
//      largest magnitude, k the longest reduction (db included: the float
//      reference's sum over N·Ho·Wo is what rounds).
//    On the CPU also the accumulate contract (accumulate=true adds what
//    accumulate=false writes: 1e-6 scaled in f32, 1e-14 in f64, exact on the
//    exact targets; dx is written either way), each output computed alone, and
//    with NHWC activations both filter layouts (KRSC and KCRS).
// 3. f16/bf16 x and w (rounded inputs, f32 accumulation and outputs):
//    the CPU reference within 2.5u·Σ|x||w| of the f32 op on the unrounded
//    inputs (u the unit roundoff: 2^-11 f16, 2^-8 bf16); CUDA against the CPU
//    within 2u·|cpu| + 1e-5·max|cpu|, NCHW and NHWC. With low-precision
//    activations (y, dy, dx f16/bf16): the CPU reference is the f32-activation
//    form rounded once, bit for bit; CUDA against it within the roundings
//    each side makes (conv_lp_activations_match_cpu).
// 4. Hand-computed values, empty batches, shape/layout/dtype errors (a dtype
//    a backend lacks: CUDA's f64), the layer's
//    parameters; the cuDNN plan key (pointer alignments included), engine
//    filter and plan cache (autotuning given up where its workspace does not
//    fit); the convolution on weight and gradient views at
//    4-, 8- and 128-byte alignment (how the trainer's parameters sit) against
//    the reference, on the fast CPU and CUDA rows.
// 5. The CUDA bias kernels (engine/backend/cuda/bias.cu) on the CUDA emulator
//    (tests/cuda_emulator), on every machine, called as conv_cuda.cpp calls
//    them: y += b and db (+)= Σ dy, f32 and f16/bf16 activations, NCHW and
//    NHWC, written and accumulated, both thread orders, against the CPU
//    reference with the GPU slots' bounds (y also bit for bit round(y + b)),
//    and the zero-mean dy's db against its exact sum (conv_bias_*emulated*).
// GPU rows and slots QSKIP with the reason where there is no device.
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/model.h"
#include "engine/ops/amp/amp.h"
#include "engine/ops/conv/conv.h"
#include "engine/ops/conv/conv_cpu_paths.h"
#include "engine/ops/conv/conv_cudnn.h"
#ifdef TRAINBENCH_HAVE_CUDA
#include "engine/backend/cuda/caching_allocator.h"
#endif
#ifdef TRAINBENCH_HAVE_ONEDNN
#include "engine/ops/conv/conv_onednn.h"
#endif
#include "engine/ops/optimizer/optimizer.h"
#include "tests/engine/device_fixture.h"
#include "tests/engine/gradcheck.h"
#include "tests/engine/tensor_helpers.h"
#include "tests/cuda_emulator/emulated_slot.h"
#if defined(TRAINBENCH_CUDA_EMULATED)
#include "tests/cuda_emulator/begin_emulated.h"
#include "engine/backend/cuda/kernels.h"
#include "tests/cuda_emulator/end_emulated.h"
#endif

using namespace tb;
using namespace tb::test;

namespace {

constexpr double kGradTol = 1e-6;   // f64 finite differences
constexpr double kFastTol = 1e-4;   // fast f32 vs reference f32
constexpr double kAccumTol = 1e-6;  // accumulate=true vs old + written, f32

struct ConvCase {
  const char* name = "";
  int64_t N = 0, C_in = 0, H = 0, W = 0, C_out = 0, k = 0, stride = 1, pad = 0;
  bool bias = true;
  bool large = false;  // the fast path's chunking shapes: not for the f64 / NHWC reference rows
};

// The shapes every target runs (large ones: see large).
const ConvCase kCases[] = {
    {"fmnist conv1, batch 1", 1, 1, 28, 28, 32, 3, 1, 1, true},
    {"fmnist conv2, batch 3", 3, 32, 14, 14, 64, 3, 1, 1, true, true},
    // "Same" padding (stride 1, output size = input size) has a shifted-copy path.
    {"same, odd sizes", 2, 3, 7, 9, 5, 3, 1, 1, true},
    {"same, kernel 5 > height", 1, 2, 3, 4, 3, 5, 1, 2, false},
    {"same, height 1", 2, 2, 1, 5, 3, 3, 1, 1, true},
    {"odd, stride 2, pad 1", 2, 3, 7, 9, 5, 3, 2, 1, true},
    {"stride 2, pad 0, no bias", 5, 2, 8, 6, 3, 3, 2, 0, false},
    {"kernel 1", 2, 4, 5, 5, 6, 1, 1, 0, true},
    {"kernel 1, stride 2, pad 1", 3, 2, 6, 5, 3, 1, 2, 1, false},
    {"kernel 5, stride 3, pad 2", 1, 3, 11, 7, 4, 5, 3, 2, true},
    {"kernel = input", 2, 2, 3, 3, 3, 3, 1, 0, true},
    // The fast path batches 4 conv1 images per GEMM: chunks of 4, 4 and 2.
    {"fmnist conv1, batch 10", 10, 1, 28, 28, 32, 3, 1, 1, true},
    // Large images: one image per GEMM, 7 chunks accumulating into dW.
    {"one image per chunk", 7, 16, 32, 32, 8, 5, 1, 2, true, true},
    {"3x3 s1 p1", 2, 3, 9, 7, 5, 3, 1, 1, true},
    {"3x3 s2 p1", 2, 4, 9, 8, 6, 3, 2, 1, true},
    {"1x1 s1", 3, 6, 5, 5, 4, 1, 1, 0, true},
    {"1x1 s2 (shortcut)", 2, 4, 6, 6, 8, 1, 2, 0, true},
    {"5x5 s2 p2", 1, 2, 11, 10, 3, 5, 2, 2, true},
    {"3x3 s1 p0 C=1", 2, 1, 6, 6, 8, 3, 1, 0, true},
    {"3x3 same", 4, 3, 16, 16, 8, 3, 1, 1, true},
    {"3x3 stride 2 odd", 3, 5, 15, 13, 7, 3, 2, 1, true},
    {"1x1 wide", 2, 16, 7, 9, 24, 1, 1, 0, true},
    {"5x5 pad 2", 2, 8, 12, 12, 8, 5, 1, 2, true},
    {"small f64 accumulate", 2, 3, 6, 5, 4, 3, 1, 1, true},
    // Channels in whole 16-blocks: what oneDNN's Winograd takes (with AVX-512).
    {"3x3 s1 p1 16->32", 2, 16, 6, 7, 32, 3, 1, 1, true},
};

const Target kTargets[] = {
    {Impl::CpuReference, Layout::NCHW, DType::F32}, {Impl::CpuFast, Layout::NCHW, DType::F32},
    {Impl::CpuFast, Layout::NCHW, DType::F64},      {Impl::CpuReference, Layout::NHWC, DType::F32},
    {Impl::CpuReference, Layout::NHWC, DType::F64}, {Impl::CpuFast, Layout::NHWC, DType::F32},
    {Impl::CpuFast, Layout::NHWC, DType::F64},      {Impl::Cuda, Layout::NCHW, DType::F32},
    {Impl::Cuda, Layout::NHWC, DType::F32},
};

// The CPU's f32 paths a cpu-fast row can force (conv_cpu_paths.h); "auto" is
// the backend's own per-shape choice. blas on NHWC activations falls back to
// the reference (its im2col is NCHW only).
bool have_onednn() {
#ifdef TRAINBENCH_HAVE_ONEDNN
  return true;
#else
  return false;
#endif
}
std::vector<std::string> cpu_paths() {
  std::vector<std::string> p{"auto", "timed", "blas"};
  if (have_onednn()) p.insert(p.end(), {"onednn", "onednn-blocked", "onednn-winograd"});
  return p;
}

// A problem's random inputs (drawn from rng in this order) and the reference
// kernels' outputs on them, NCHW: the oracle the comparing slots share.
// *_acc: the reference's accumulate=true onto dw_old and db_old.
struct ConvOracle {
  Tensor x, w, b, dy, dw_old, db_old;     // b undefined without bias
  Tensor y, dx, dw, db, dw_acc, db_acc;
};
ConvOracle conv_oracle(const ConvGeometry& g, bool bias, DType dt, std::mt19937_64& rng) {
  ConvOracle o;
  o.x = random_tensor(g.input_shape(), dt, rng);
  o.w = random_tensor(g.weight_shape(), dt, rng);
  o.b = bias ? random_tensor({g.C_out}, dt, rng) : Tensor{};
  o.dy = random_tensor(g.output_shape(), dt, rng);
  o.dw_old = random_tensor(g.weight_shape(), dt, rng);
  o.db_old = random_tensor({g.C_out}, dt, rng);
  CpuBackend& ref = cpu_reference();
  o.y = like(o.dy, Layout::NCHW), o.dx = like(o.x, Layout::NCHW), o.dw = like(o.w, Layout::NCHW);
  o.db = Tensor::empty({g.C_out}, dt);
  conv::forward(ref, g, o.x, o.w, o.b, o.y);
  conv::backward(ref, g, o.x, o.w, o.dy, o.dx, o.dw, o.db, false);
  o.dw_acc = clone(o.dw_old), o.db_acc = clone(o.db_old);
  Tensor none;
  conv::backward(ref, g, o.x, o.w, o.dy, none, o.dw_acc, o.db_acc, true);
  return o;
}

// A CPU backend (all threads) whose convolutions take `path`, one per path.
CpuBackend& cpu_path_backend(const std::string& path) {
  static std::map<std::string, std::unique_ptr<CpuBackend>> backends;
  auto& b = backends[path];
  if (!b) {
    b = std::make_unique<CpuBackend>();
    conv::set_cpu_conv_path(*b, path);
  }
  return *b;
}

// How a row's outputs compare with the reference.
enum class Agreement {
  Exact,   // the reference templates themselves: f64, the reference, blas on NHWC,
           // auto on NHWC without oneDNN
  Blas,    // im2col + OpenBLAS (other summation order): kFastTol
  OneDnn,  // oneDNN: the CUDA rows' fp32 bound from the longest reduction
  OneDnnWinograd,  // oneDNN's Winograd: OneDnn's bound times kWinogradAllowance
  Auto,    // auto or timed: any of the last three, per shape: kFastTol (the loosest)
};

// Winograd F(4x4, 3x3) adds the rounding of its input, filter and output
// transforms (their matrices hold entries up to 8, and each transformed value
// is a short sum of scaled inputs) to the direct sum's. The allowance the
// GPU rows give cuDNN's Winograd engines: 32 times the direct bound. Measured
// here (AMD EPYC Zen 4, oneDNN 2.6.3 jit_wino_4x3, 2026-11-27): the worst
// row at 0.5 % of it (0.16 of the direct bound: the tb-tolerance lines), so
// a transposed filter or a wrong padding, off by the size of the output,
// still fails.
constexpr double kWinogradAllowance = 32;

Agreement agreement_of(const Target& t, const std::string& path) {
  if (t.impl == Impl::CpuReference || t.dtype == DType::F64) return Agreement::Exact;
  if (path == "blas") return t.layout == Layout::NHWC ? Agreement::Exact : Agreement::Blas;
  if (path == "onednn" || path == "onednn-blocked") return Agreement::OneDnn;
  if (path == "onednn-winograd") return Agreement::OneDnnWinograd;
  if (t.layout == Layout::NHWC && !have_onednn()) return Agreement::Exact;
  return Agreement::Auto;  // auto's rule, or timed
}

// The longest reduction of a convolution: C·R·S (y), K·R·S (dx) or N·Ho·Wo (dw, db).
int64_t longest_reduction(const ConvGeometry& g) {
  return std::max({g.C_in * g.KH * g.KW, g.C_out * g.KH * g.KW, g.N * g.H_out * g.W_out});
}

// The bound of a oneDNN path's outputs: the fp32 bound of the longest
// reduction (the CUDA rows' too), times the allowance for Winograd's transforms.
double onednn_tolerance(const ConvGeometry& g, Agreement a) {
  const double direct = network_tolerance("fp32", 4, longest_reduction(g));
  return a == Agreement::OneDnnWinograd ? kWinogradAllowance * direct : direct;
}

// One output of a target (on the CPU: taking `path`) against the reference's (host tensors).
Comparison check_output(const Target& t, const std::string& path, const ConvGeometry& g,
                        const std::string& out, const Tensor& ref, const Tensor& got) {
  const std::string what = "conv " + out + " " + t.name() + (path.empty() ? "" : " " + path);
  if (!t.on_gpu()) {
    switch (agreement_of(t, path)) {
      case Agreement::Exact: {
        const double d = max_abs_diff(ref, got);
        return {d == 0.0, what + ": differs from the reference by " + std::to_string(d)};
      }
      case Agreement::Blas:
      case Agreement::Auto: {
        const double e = scaled_diff(ref, got);
        return {e < kFastTol, what + ": scaled difference " + std::to_string(e)};
      }
      case Agreement::OneDnn:
      case Agreement::OneDnnWinograd: break;  // as the GPU's (Winograd: with its allowance)
    }
  }
  // The longest reduction: db too: the GPU sums in double, but the reference
  // sums N·Ho·Wo floats one by one, an error that grows with the partial sums,
  // not with |db|: "fmnist conv1, batch 10" (7840 terms) is 1.8x over a 1e-5
  // relative + 1e-5 bound.
  const Agreement a = t.on_gpu() ? Agreement::OneDnn : agreement_of(t, path);
  return compare(ref, got, onednn_tolerance(g, a), 0.0, what, true, "fp32");
}

// y = conv(x, w), no bias, on `be`: host f32 NCHW operands in, host y out.
Tensor forward_without_bias(Backend& be, const ConvGeometry& g, const Tensor& x, const Tensor& w) {
  Tensor y = be.empty(g.output_shape(), DType::F32), none;
  conv::forward(be, g, to_device(be, x), to_device(be, w), none, y);
  return to_host(be, y);
}

// The cuDNN plans a GPU backend holds for one geometry (any op, dtype or
// layout), from the environment's records: "[key: plan, ...]".
std::string cudnn_plans_of(Backend& be, const ConvGeometry& g) {
  const std::string shape = " N=" + std::to_string(g.N) + " C=" + std::to_string(g.C_in) +
                            " H=" + std::to_string(g.H) + " W=" + std::to_string(g.W) +
                            " K=" + std::to_string(g.C_out) + " R=" + std::to_string(g.KH) +
                            " S=" + std::to_string(g.KW) + " stride=" + std::to_string(g.stride) +
                            " pad=" + std::to_string(g.pad) + " ";
  std::string out = "[";
  const nlohmann::json paths = be.describe().value("kernel_paths", nlohmann::json::object());
  for (const auto& [key, r] : paths.value("convolution", nlohmann::json::object()).items())
    if (key.find(shape) != std::string::npos)
      out += (out.size() > 1 ? "; " : "") + key + ": " + r.value("plan", std::string("?"));
  return out + "]";
}

// Random f32 NCHW operands of one convolution (host).
struct ConvOperands {
  Tensor x, w, b, dy;
};
ConvOperands random_operands(const ConvGeometry& g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  ConvOperands o;
  o.x = random_tensor(g.input_shape(), DType::F32, rng);
  o.w = random_tensor(g.weight_shape(), DType::F32, rng);
  o.b = random_tensor({g.C_out}, DType::F32, rng);
  o.dy = random_tensor(g.output_shape(), DType::F32, rng);
  return o;
}

// a + b element-wise (host, f32 or f64, same layout).
Tensor sum_of(const Tensor& a, const Tensor& b) {
  Tensor s = clone(a);
  for (int64_t i = 0; i < s.numel(); ++i) {
    if (s.dtype() == DType::F64)
      s.data_as<double>()[i] += b.data_as<double>()[i];
    else
      s.data_as<float>()[i] += b.data_as<float>()[i];
  }
  return s;
}

double unit_roundoff(DType t) {
  return t == DType::F16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
}

Tensor abs_of(const Tensor& t) {
  Tensor a = Tensor::empty(t.shape(), DType::F32);
  for (int64_t i = 0; i < t.numel(); ++i) a.data_as<float>()[i] = std::abs(t.data_as<float>()[i]);
  return a;
}

float at(const Tensor& h, int64_t i) { return h.data_as<float>()[i]; }

// f32 tensor -> lp tensor on the same backend and layout.
Tensor lp_of(Backend& b, const Tensor& f, DType lp) {
  Tensor t = b.empty(f.shape(), lp, f.layout());
  amp::cast(b, f, t);
  return t;
}

struct ConvOut {
  Tensor y, dx, dw, db;  // host, f32, NCHW
};

// An f32 host NCHW copy of a tensor of b (lp widened exactly).
Tensor host_f32(Backend& b, const Tensor& t) {
  return to_host_nchw(b, t.dtype() == DType::F32 ? t : amp::cast_to(b, t, DType::F32));
}

// The lp convolution on backend b, inputs given as f32 host NCHW tensors (they
// are rounded to `lp` on b). Activations in layout l, the weight in wl. `act`:
// the activations' dtype (y, dy, dx): f32, or lp (dy rounded to it on b).
ConvOut conv_lp(Backend& b, const ConvGeometry& g, const Tensor& x, const Tensor& w,
                const Tensor& bias, const Tensor& dy, DType lp, Layout l, Layout wl,
                DType act = DType::F32) {
  const Tensor xl = lp_of(b, to_device(b, x, l), lp), wlp = lp_of(b, to_device(b, w, wl), lp);
  const Tensor bd = to_device(b, bias);
  const Tensor dyd = act == DType::F32 ? to_device(b, dy, l) : lp_of(b, to_device(b, dy, l), act);
  Tensor y = b.empty(g.output_shape(), act, l);
  Tensor dx = b.empty(g.input_shape(), act, l);
  Tensor dw = b.empty(g.weight_shape(), DType::F32, wl);
  Tensor db = b.empty({g.C_out}, DType::F32);
  conv::forward(b, g, xl, wlp, bd, y);
  conv::backward(b, g, xl, wlp, dyd, dx, dw, db, false);
  return {host_f32(b, y), host_f32(b, dx), to_host_nchw(b, dw), to_host_nchw(b, db)};
}

// f32 host tensor -> rounded to lp and widened back (exactly representable).
Tensor rounded_to(const Tensor& f, DType lp) {
  CpuBackend& ref = cpu_reference();
  return amp::cast_to(ref, amp::cast_to(ref, f, lp), DType::F32);
}

// The first element of the CUDA outputs d farther from the CPU's c than
// bound(what, c's output, i) + 1e-5·max|c's output|, described; empty when
// every element is within. An output d leaves undefined is not compared.
using BoundOf = std::function<double(const std::string& what, const Tensor& cpu, int64_t i)>;
QString first_outside(const ConvOut& c, const ConvOut& d, DType dt, Layout l, const BoundOf& bound) {
  for (auto [rt, gt, what] : {std::tuple{c.y, d.y, "y"}, std::tuple{c.dx, d.dx, "dx"},
                              std::tuple{c.dw, d.dw, "dw"}, std::tuple{c.db, d.db, "db"}}) {
    if (!gt.defined()) continue;
    double mx = 0;
    for (int64_t i = 0; i < rt.numel(); ++i) mx = std::max(mx, double(std::abs(at(rt, i))));
    for (int64_t i = 0; i < rt.numel(); ++i) {
      const double b = bound(what, rt, i) + 1e-5 * mx;
      if (std::abs(double(at(rt, i)) - at(gt, i)) > b)
        return QString("%1 %2 %3[%4]: cpu %5 cuda %6, bound %7")
            .arg(dtype_name(dt))
            .arg(layout_name(l))
            .arg(what)
            .arg(i)
            .arg(at(rt, i))
            .arg(at(gt, i))
            .arg(b);
    }
  }
  return {};
}

// conv_lp_activations_match_cpu's bound on output element i of the CPU's
// host NCHW output (derived there), before first_outside's 1e-5·max|cpu|.
BoundOf lp_activations_bound(DType dt, const ConvGeometry& g, const Tensor& bias) {
  const double u = unit_roundoff(dt);
  const int64_t plane = g.H_out * g.W_out, C_out = g.C_out;
  return [=](const std::string& what, const Tensor& r, int64_t i) -> double {
    const double v = std::abs(double(at(r, i)));
    double scale = 3 * v;
    if (what == "y") scale = 2 * std::abs(double(at(r, i)) - at(bias, (i / plane) % C_out)) + 2 * v;
    if (what == "db") scale = 0.0;
    return u * scale;
  };
}

// The f32 convolution (CPU, NCHW); with abs inputs it gives Σ|a||b| per output.
ConvOut conv_f32(Backend& b, const ConvGeometry& g, const Tensor& x, const Tensor& w,
                 const Tensor& bias, const Tensor& dy) {
  ConvOut o{Tensor::empty(g.output_shape(), DType::F32), Tensor::empty(g.input_shape(), DType::F32),
            Tensor::empty(g.weight_shape(), DType::F32), Tensor::empty({g.C_out}, DType::F32)};
  conv::forward(b, g, x, w, bias, o.y);
  conv::backward(b, g, x, w, dy, o.dx, o.dw, o.db, false);
  return o;
}

// fmnist-cnn's block1 (batch 4; padded to 8 channels) and resnet18's stem
// (3x16x16 padded to 8, batch 2): the rows test_channels_last runs.
const ConvCase kZeroMeanDyCases[] = {{"fmnist block1", 4, 1, 28, 28, 32, 3, 1, 1},
                                     {"fmnist block1 pad 8", 4, 8, 28, 28, 32, 3, 1, 1},
                                     {"resnet18 stem pad 8", 2, 8, 16, 16, 64, 3, 1, 1}};

// A dy of g (host NCHW, f32, from rng) with each channel's mean removed, as
// a training-mode batch norm's dx is; each channel's exact sum of those
// floats (double: error m·2^-53·Σ|dy|) and Σ|dy|, over m = N·Ho·Wo terms.
struct ZeroMeanDy {
  Tensor dy;
  std::vector<double> exact, magnitude;
  int64_t m = 0;
};
ZeroMeanDy zero_mean_dy(const ConvGeometry& g, std::mt19937_64& rng) {
  ZeroMeanDy z;
  z.dy = random_tensor(g.output_shape(), DType::F32, rng);
  const int64_t P = g.H_out * g.W_out;
  z.m = g.N * P;
  z.exact.assign(size_t(g.C_out), 0.0), z.magnitude.assign(size_t(g.C_out), 0.0);
  float* d = z.dy.data_as<float>();
  for (int64_t co = 0; co < g.C_out; ++co) {
    double mean = 0.0;
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t i = 0; i < P; ++i) mean += d[(n * g.C_out + co) * P + i];
    mean /= double(z.m);
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t i = 0; i < P; ++i) {
        float& v = d[(n * g.C_out + co) * P + i];
        v = float(v - mean);
        z.exact[size_t(co)] += v;
        z.magnitude[size_t(co)] += std::abs(v);
      }
  }
  return z;
}

// db (got: written, or accumulated onto db0) against the exact sums of z
// within conv_bias_grad_of_zero_mean_dy's bound, sums accumulated in
// precision u_acc: the first element outside, described ("" when none);
// *worst = the largest error / bound.
QString zero_mean_db_outside(const std::string& name, const ZeroMeanDy& z, const Tensor& db0,
                             bool accumulate, const Tensor& got, double u_acc, double* worst) {
  const double u32 = std::ldexp(1.0, -24);
  *worst = 0.0;
  QString first;
  for (int64_t co = 0; co < got.numel(); ++co) {
    const double s = z.exact[size_t(co)];
    const double b0 = accumulate ? double(db0.data_as<float>()[co]) : 0.0;
    const double want = b0 + s;
    const double bound = double(z.m) * u_acc * z.magnitude[size_t(co)] + u32 * std::abs(s) +
                         (accumulate ? u32 * (std::abs(want) + std::abs(s)) : 0.0) + 1e-30;
    const double e = std::abs(double(got.data_as<float>()[co]) - want);
    *worst = std::max(*worst, e / bound);
    if (!(e <= bound) && first.isEmpty())
      first = QString(
                  "%1 db[%2]: got %3, exact %4 (sum %5 of %6 terms, sum|dy| %7): error %8 > "
                  "bound %9")
                  .arg(QString::fromStdString(name))
                  .arg(co)
                  .arg(got.data_as<float>()[co], 0, 'g', 9)
                  .arg(want, 0, 'g', 9)
                  .arg(s, 0, 'g', 3)
                  .arg(z.m)
                  .arg(z.magnitude[size_t(co)], 0, 'g', 3)
                  .arg(e, 0, 'g', 3)
                  .arg(bound, 0, 'g', 3);
  }
  return first;
}

#if defined(TRAINBENCH_CUDA_EMULATED)
// bias.cu's add as its contract states it, on the CPU: y[n,c,i] + b[c] in
// f32, rounded once to y's dtype (the engine's rounding, amp::cast); y host
// NCHW, the result too.
Tensor bias_added(const ConvGeometry& g, const Tensor& y, const Tensor& b) {
  CpuBackend& ref = cpu_reference();
  Tensor s = host_f32(ref, y);
  const int64_t plane = g.H_out * g.W_out;
  for (int64_t i = 0; i < s.numel(); ++i) s.data_as<float>()[i] += at(b, (i / plane) % g.C_out);
  return y.dtype() == DType::F32 ? s : amp::cast_to(ref, s, y.dtype());
}

// conv_cuda.cpp's add_bias and begin_backward's bias gradient with bias.cu
// on the CUDA emulator: the launchers on host tensors (y, dy in their
// layout). The scratch is bias_grad_scratch_bytes of NaN, so a partial read
// before it is written shows.
void emulated_add_bias(const ConvGeometry& g, const Tensor& b, Tensor& y) {
  const bool nhwc = y.layout() == Layout::NHWC;
  const int64_t HW = g.H_out * g.W_out;
  if (y.dtype() == DType::F32)
    tb::cuda_emu::launch_bias_add(y.data_as<float>(), b.data_as<float>(), g.N, g.C_out, HW, nhwc,
                                  nullptr);
  else
    tb::cuda_emu::launch_bias_add_lp(y.data_as<uint16_t>(), y.dtype() == DType::BF16,
                                     b.data_as<float>(), g.N, g.C_out, HW, nhwc, nullptr);
}
void emulated_bias_grad(const ConvGeometry& g, const Tensor& dy, Tensor& db, bool accumulate) {
  const int64_t HW = g.H_out * g.W_out;
  const bool nhwc = dy.layout() == Layout::NHWC;
  std::vector<double> work(
      tb::cuda_emu::bias_grad_scratch_bytes(g.N, g.C_out, HW, nhwc) / sizeof(double), std::nan(""));
  double* scratch = work.empty() ? nullptr : work.data();
  if (dy.dtype() == DType::F32)
    tb::cuda_emu::launch_bias_grad(dy.data_as<float>(), db.data_as<float>(), g.N, g.C_out, HW, nhwc,
                                   accumulate, scratch, nullptr);
  else
    tb::cuda_emu::launch_bias_grad_lp(dy.data_as<uint16_t>(), dy.dtype() == DType::BF16,
                                      db.data_as<float>(), g.N, g.C_out, HW, nhwc, accumulate,
                                      scratch, nullptr);
}
#endif

}  // namespace

Q_DECLARE_METATYPE(ConvCase)

class TestOpConv : public QObject {
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
    QTest::addColumn<uint64_t>("seed");
    QTest::addColumn<Layout>("layout");
    struct G {
      const char* name;
      int64_t cin, cout, k, stride, pad;
      bool bias;
      int64_t h, w;
      uint64_t seed;
    };
    const G shapes[] = {{"k3 s1 p1 bias", 2, 3, 3, 1, 1, true, 5, 6, 11},
                        {"k3 s1 p0 nobias", 2, 3, 3, 1, 0, false, 6, 5, 11},
                        {"k3 s2 p1 bias", 3, 2, 3, 2, 1, true, 7, 6, 11},
                        {"k3 s2 p0 nobias", 2, 2, 3, 2, 0, false, 7, 7, 11},
                        {"k1 s1 p0 bias", 3, 4, 1, 1, 0, true, 4, 3, 11},
                        {"k1 s2 p1 nobias", 2, 3, 1, 2, 1, false, 5, 4, 11},
                        {"conv 3x3 s1 p1", 3, 4, 3, 1, 1, true, 6, 5, 77},
                        {"conv 3x3 s2 p1", 3, 4, 3, 2, 1, true, 6, 5, 77},
                        {"conv 1x1 s2", 3, 5, 1, 2, 0, false, 6, 5, 77}};
    for (Layout l : {Layout::NCHW, Layout::NHWC})
      for (const G& s : shapes)
        QTest::addRow("%s %s", s.name, layout_name(l))
            << s.cin << s.cout << s.k << s.stride << s.pad << s.bias << s.h << s.w << s.seed << l;
    // The CPU's blocked activations: where they start (x NCHW, 1 channel) and
    // between two blocked tensors.
    const G blocked[] = {{"k3 s1 p1 bias 1->16", 1, 16, 3, 1, 1, true, 5, 4, 12},
                         {"k3 s2 p1 nobias 16->16", 16, 16, 3, 2, 1, false, 5, 4, 12}};
    for (const G& s : blocked)
      QTest::addRow("%s nChw16c", s.name) << s.cin << s.cout << s.k << s.stride << s.pad << s.bias
                                          << s.h << s.w << s.seed << Layout::NCHW16C;
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
    QFETCH(uint64_t, seed);
    QFETCH(Layout, layout);
    auto r = test::gradcheck_layer(std::make_unique<Conv2d>("conv", cout, k, stride, pad, bias),
                                   {2, cin, h, w}, seed, true, 1e-6, layout);
    QVERIFY2(r.max_rel_error_dx < kGradTol, qPrintable(QString("dx rel error %1 at %2")
                                                           .arg(r.max_rel_error_dx)
                                                           .arg(QString::fromStdString(r.worst))));
    QVERIFY2(r.max_rel_error_params < kGradTol,
             qPrintable(QString("param rel error %1 at %2")
                            .arg(r.max_rel_error_params)
                            .arg(QString::fromStdString(r.worst))));
  }

  // ------------------------------------------------------------ every target vs the reference

  // The cpu-fast f32 rows once per CPU path (cpu_paths(): auto, and each path
  // forced), so that every path meets the reference and the accumulate
  // contract whichever the timing picks.
  void conv_matches_reference_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<QString>("cpu_path");
    QTest::addColumn<ConvCase>("c");
    for (const Target& t : kTargets) {
      const bool per_path = t.impl == Impl::CpuFast && t.dtype == DType::F32;
      for (const std::string& path : per_path ? cpu_paths() : std::vector<std::string>{""})
        for (const ConvCase& c : kCases) {
          // The reference templates take seconds on the large shapes.
          if (c.large && !t.on_gpu() && agreement_of(t, path) == Agreement::Exact &&
              t.impl != Impl::CpuReference)
            continue;
          if (c.large && t.impl == Impl::CpuReference && t.layout == Layout::NHWC) continue;
          QTest::addRow("%s%s%s: %s", t.name().c_str(), path.empty() ? "" : " ", path.c_str(),
                        c.name)
              << t << QString::fromStdString(path) << c;
        }
    }
  }
  void conv_matches_reference() {
    FETCH_TARGET(t, target_be);
    QFETCH(QString, cpu_path);
    QFETCH(ConvCase, c);
    const std::string path = cpu_path.toStdString();
    Backend& be = path.empty() ? target_be : cpu_path_backend(path);
    TB_GPU_TRY
    const auto g = ConvGeometry::make(c.N, c.C_in, c.H, c.W, c.C_out, c.k, c.stride, c.pad);
    std::mt19937_64 rng(21 + uint64_t(c.N * 1000 + c.C_in * 100 + c.k * 10 + c.stride));
    const DType dt = t.dtype;
    // The oracle: the reference kernels, NCHW; accumulate=true from dw_old/db_old.
    const ConvOracle o = conv_oracle(g, c.bias, dt, rng);
    const Tensor &x = o.x, &w = o.w, &b = o.b, &dy = o.dy, &dw_old = o.dw_old, &db_old = o.db_old;
    const Tensor &y0 = o.y, &dx0 = o.dx, &dw0 = o.dw, &db0 = o.db, &dw0_acc = o.dw_acc,
                 &db0_acc = o.db_acc;

    // The target; with NHWC activations on the CPU both filter layouts.
    std::vector<Layout> filter_layouts{t.layout};
    if (!t.on_gpu() && t.layout == Layout::NHWC) filter_layouts.push_back(Layout::NCHW);
    for (Layout wl : filter_layouts) {
      const Tensor xd = to_device(be, x, t.layout), wd = to_device(be, w, wl);
      const Tensor dyd = to_device(be, dy, t.layout), bd = to_device(be, b);
      Tensor y1 = be.empty(g.output_shape(), dt, t.layout);
      Tensor dx1 = be.empty(g.input_shape(), dt, t.layout), dw1 = be.empty(g.weight_shape(), dt, wl);
      Tensor db1 = be.empty({c.C_out}, dt);
      conv::forward(be, g, xd, wd, bd, y1);
      conv::backward(be, g, xd, wd, dyd, dx1, dw1, db1, false);
      const Tensor y = to_host(be, y1), dx = to_host(be, dx1), dw = to_host(be, dw1),
                   db = to_host(be, db1);
      // On the GPU a failure names the cuDNN engines this shape ran on (a
      // Winograd or FFT engine rounds more than the direct bound allows).
      const std::string f = std::string(" filters ") + layout_name(wl) +
                            (t.on_gpu() ? " " + cudnn_plans_of(be, g) : std::string());
      EXPECT_OUTPUT(t, path, g, "y" + f, y0, y);
      EXPECT_OUTPUT(t, path, g, "dx" + f, dx0, dx);
      EXPECT_OUTPUT(t, path, g, "dw" + f, dw0, dw);
      EXPECT_OUTPUT(t, path, g, "db" + f, db0, db);

      // accumulate=true against the reference's (dx written either way).
      Tensor dx_acc = to_device(be, random_tensor(g.input_shape(), dt, rng), t.layout);
      Tensor dw_acc = to_device(be, dw_old, wl), db_acc = to_device(be, db_old);
      conv::backward(be, g, xd, wd, dyd, dx_acc, dw_acc, db_acc, true);
      EXPECT_OUTPUT(t, path, g, "accumulated dw" + f, dw0_acc, to_host(be, dw_acc));
      EXPECT_OUTPUT(t, path, g, "accumulated db" + f, db0_acc, to_host(be, db_acc));
      EXPECT_OUTPUT(t, path, g, "dx with accumulate" + f, dx0, to_host(be, dx_acc));
      if (t.on_gpu()) continue;

      // The CPU's own contract: accumulate adds what accumulate=false writes
      // (exact targets: onto the written values themselves, giving 2·dw
      // bit for bit), dx is written, not added to.
      const Agreement agreement = agreement_of(t, path);
      const bool exact = agreement == Agreement::Exact;
      const double acc_tol = dt == DType::F64 ? 1e-14 : kAccumTol;
      // (old_w in dw's filter layout: sum_of adds element by element in memory order)
      const Tensor old_w =
          exact ? dw : to_host(be, to_device(be, random_tensor(g.weight_shape(), dt, rng), wl));
      const Tensor old_b = exact ? db : random_tensor({c.C_out}, dt, rng);
      Tensor acc_w = to_device(be, old_w, wl), acc_b = to_device(be, old_b);
      Tensor dx_again = to_device(be, random_tensor(g.input_shape(), dt, rng), t.layout);
      conv::backward(be, g, xd, wd, dyd, dx_again, acc_w, acc_b, true);
      const Tensor want_w = sum_of(old_w, dw), want_b = sum_of(old_b, db);
      if (exact) {
        EXPECT_SAME(want_w, to_host(be, acc_w), qPrintable(QString::fromStdString("accumulated dw " + t.name() + f)));
        EXPECT_SAME(want_b, to_host(be, acc_b), qPrintable(QString::fromStdString("accumulated db " + t.name() + f)));
        EXPECT_SAME(dx, to_host(be, dx_again), qPrintable(QString::fromStdString("dx " + t.name() + f)));
      } else {
        CHECK_BELOW(scaled_diff(want_w, to_host(be, acc_w)), acc_tol);
        CHECK_BELOW(scaled_diff(want_b, to_host(be, acc_b)), acc_tol);
        CHECK_BELOW(scaled_diff(dx, to_host(be, dx_again)), 1e-7);
      }

      // Each output alone (the others undefined) gives the same values (auto:
      // each set of outputs is its own choice, so possibly another path; oneDNN:
      // another primitive, without the bias reduction).
      const double alone_tol =
          agreement == Agreement::Auto ? kFastTol
          : agreement == Agreement::OneDnn || agreement == Agreement::OneDnnWinograd
              ? onednn_tolerance(g, agreement)
              : 1e-7;
      Tensor dx_only = be.empty(g.input_shape(), dt, t.layout);
      Tensor dw_only = be.empty(g.weight_shape(), dt, wl);
      Tensor no_dx, no_dw, no_db;
      conv::backward(be, g, xd, wd, dyd, dx_only, no_dw, no_db, false);
      conv::backward(be, g, xd, wd, dyd, no_dx, dw_only, no_db, false);
      CHECK_BELOW(scaled_diff(dx, to_host(be, dx_only)), alone_tol);
      CHECK_BELOW(scaled_diff(dw, to_host(be, dw_only)), alone_tol);
    }
    TB_GPU_CATCH
  }

  // ------------------------------------------------------------ f16 / bf16

  // f16/bf16 inputs (CPU reference) vs the f32 convolution on the unrounded inputs:
  // every element within 2.5u·Σ|a||b| (see the file comment); db bit-equal;
  // and the rounding visible (bf16's worst error above f16's, f16's above zero).
  void conv_lp_within_rounding_of_f32_data() {
    QTest::addColumn<ConvCase>("c");
    for (const ConvCase& c : {ConvCase{"4x3x10x9 k3 s1 p1", 4, 3, 10, 9, 8, 3, 1, 1},
                              ConvCase{"3x5x11x11 k3 s2 p0", 3, 5, 11, 11, 6, 3, 2, 0},
                              ConvCase{"2x16x6x6 k1", 2, 16, 6, 6, 12, 1, 1, 0},
                              ConvCase{"2x2x8x8 k5 s2 p2", 2, 2, 8, 8, 4, 5, 2, 2}})
      QTest::newRow(c.name) << c;
  }
  void conv_lp_within_rounding_of_f32() {
    QFETCH(ConvCase, c);
    CpuBackend& ref = cpu_reference();
    const ConvCase cs = c;
    const ConvGeometry g =
        ConvGeometry::make(cs.N, cs.C_in, cs.H, cs.W, cs.C_out, cs.k, cs.stride, cs.pad);
    const uint64_t seed = uint64_t(100 + cs.C_in * 7 + cs.k);
    const Tensor x = random_tensor(g.input_shape(), seed), w = random_tensor(g.weight_shape(), seed + 1);
    const Tensor bias = random_tensor({g.C_out}, seed + 2), dy = random_tensor(g.output_shape(), seed + 3);
    const ConvOut f = conv_f32(ref, g, x, w, bias, dy);
    Tensor nob;
    const ConvOut mag = conv_f32(ref, g, abs_of(x), abs_of(w), nob, abs_of(dy));
    double worst[2] = {0, 0};  // max error / bound-scale, per dtype
    int di = 0;
    for (DType dt : {DType::F16, DType::BF16}) {
      const double u = unit_roundoff(dt);
      const ConvOut lp = conv_lp(ref, g, x, w, bias, dy, dt, Layout::NCHW, Layout::NCHW);
      for (auto [a, b, s, what] :
           {std::tuple{lp.y, f.y, mag.y, "y"}, std::tuple{lp.dx, f.dx, mag.dx, "dx"},
            std::tuple{lp.dw, f.dw, mag.dw, "dw"}})
        for (int64_t i = 0; i < a.numel(); ++i) {
          const double e = std::abs(double(at(a, i)) - at(b, i));
          worst[di] = std::max(worst[di], e / at(s, i));
          QVERIFY2(e <= 2.5 * u * at(s, i) + 1e-6,
                   qPrintable(QString("%1 %2[%3]: lp %4 f32 %5 bound %6")
                                  .arg(dtype_name(dt))
                                  .arg(what)
                                  .arg(i)
                                  .arg(at(a, i))
                                  .arg(at(b, i))
                                  .arg(2.5 * u * at(s, i))));
        }
      QVERIFY2(bitwise_equal(lp.db, f.db), dtype_name(dt));
      ++di;
    }
    qInfo("conv N=%lld Cin=%lld k=%lld s=%lld: worst error / sum|a||b|: f16 %.3g (u %.3g), "
          "bf16 %.3g (u %.3g)",
          (long long)cs.N, (long long)cs.C_in, (long long)cs.k, (long long)cs.stride, worst[0],
          unit_roundoff(DType::F16), worst[1], unit_roundoff(DType::BF16));
    QVERIFY(worst[0] > 0.0);           // the inputs really were rounded
    QVERIFY(worst[1] > 2 * worst[0]);  // and bf16 more coarsely than f16
  }

  // The same rounded inputs on both; the GPU rounds each convolution's output
  // to f16/bf16 once more (conv_cuda.cpp: y = f32(lp(x∗w)) + b, dx = f32(lp(..)),
  // dw = f32(lp(..)); db from the unrounded f32 dy) and sums in another order:
  // |gpu − cpu| <= 2u·|v| + 1e-5·max|cpu|, v the value the GPU rounded: x∗w =
  // y − b for y (the bias is added after the rounding; the first GPU run failed
  // a bound taken on |y|, where b cancels most of x∗w: f16 y[14] 0.076959 vs
  // 0.0771722), the output itself for dx and dw, 0 for db. 2u: one rounding to
  // nearest (u) with as much again for an engine that rounds a split
  // reduction's partials (cuDNN does not document its epilogue). Activations
  // and filters in the target's layout.
  // The CPU's blocked activations (nChw16c): where they start (x, dx NCHW;
  // y, dy blocked) and between blocked tensors, on the fast backend (oneDNN
  // reads them as they are, auto's rule; without oneDNN the reference) within
  // kFastTol scaled of the NCHW reference, and on the reference backend and in
  // f64 bit for bit (the reference adds the same terms in the same order,
  // only the addresses differ). Accumulation adds onto old dw and db.
  void conv_blocked_matches_reference_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<ConvCase>("c");
    const ConvCase cases[] = {
        {"fmnist conv1 1->32 starts blocked", 3, 1, 28, 28, 32, 3, 1, 1, true},
        {"fmnist conv2 32->64", 2, 32, 14, 14, 64, 3, 1, 1, true},
        {"3x3 s2 p1 16->32 odd", 2, 16, 9, 7, 32, 3, 2, 1, false},
        {"1x1 s2 shortcut 16->32", 2, 16, 8, 8, 32, 1, 2, 0, false},
        {"3 channels -> 16 (CIFAR stem)", 2, 3, 8, 8, 16, 3, 1, 1, true},
    };
    for (const Target& t : {Target{Impl::CpuFast, Layout::NCHW16C, DType::F32},
                            Target{Impl::CpuReference, Layout::NCHW16C, DType::F32},
                            Target{Impl::CpuFast, Layout::NCHW16C, DType::F64}})
      for (const ConvCase& c : cases) QTest::addRow("%s: %s", t.name().c_str(), c.name) << t << c;
  }
  void conv_blocked_matches_reference() {
    FETCH_TARGET(t, be);
    QFETCH(ConvCase, c);
    const auto g = ConvGeometry::make(c.N, c.C_in, c.H, c.W, c.C_out, c.k, c.stride, c.pad);
    std::mt19937_64 rng(61 + uint64_t(c.C_in * 100 + c.C_out));
    const DType dt = t.dtype;
    const ConvOracle o = conv_oracle(g, c.bias, dt, rng);
    const Tensor &x = o.x, &w = o.w, &b = o.b, &dy = o.dy;

    const Layout xl = c.C_in % kLayoutBlock == 0 ? Layout::NCHW16C : Layout::NCHW;
    const Tensor xb = in_layout(x, xl), dyb = in_layout(dy, Layout::NCHW16C);
    Tensor y = like(dy, Layout::NCHW16C), dx = like(x, xl), dw = like(w, Layout::NCHW);
    Tensor db = Tensor::empty({c.C_out}, dt);
    Tensor bd = c.bias ? clone(b) : Tensor{};
    conv::forward(be, g, xb, w, bd, y);
    conv::backward(be, g, xb, w, dyb, dx, dw, db, false);
    Tensor dw_acc = clone(o.dw_old), db_acc = clone(o.db_old), none;
    conv::backward(be, g, xb, w, dyb, none, dw_acc, db_acc, true);
    const bool exact = dt == DType::F64 || t.impl == Impl::CpuReference;
    const std::pair<const char*, std::pair<Tensor, Tensor>> outs[] = {
        {"y", {o.y, y}}, {"dx", {o.dx, dx}}, {"dw", {o.dw, dw}}, {"db", {o.db, db}},
        {"accumulated dw", {o.dw_acc, dw_acc}}, {"accumulated db", {o.db_acc, db_acc}}};
    for (const auto& [name, pair] : outs) {
      const double e = exact ? max_abs_diff(pair.first, pair.second)
                             : scaled_diff(pair.first, pair.second);
      QVERIFY2(exact ? e == 0.0 : e < kFastTol,
               qPrintable(QString("%1 %2: %3 difference %4")
                              .arg(QString::fromStdString(t.name()), name,
                                   exact ? "absolute" : "scaled")
                              .arg(e)));
    }
  }

  // Mixed precision on the CPU's fast backend (bf16 x and w, f32 activations:
  // y, dy, dx, dw, db f32) takes oneDNN's bf16 kernels where this CPU has
  // them (AMX, AVX512_BF16), against the reference's widened f32 convolution
  // of the same bf16 inputs. The products of bf16 values are exact in f32
  // (8 + 8 significant bits), both round dy to bf16 to nearest even for
  // dgrad and wgrad, and both sum db from the unrounded dy: only the order of
  // the f32 sums differs, as between the f32 fast path and the reference
  // (kFastTol, scaled). Accumulation adds onto old dw and db (kAccumTol).
  // The record names the bf16 path and oneDNN's kernel.
  void cpu_bf16_onednn_matches_widened_data() {
    QTest::addColumn<ConvCase>("c");
    QTest::addColumn<Layout>("layout");
    const ConvCase cases[] = {
        {"fmnist conv2 32->64", 2, 32, 14, 14, 64, 3, 1, 1},
        {"3x3 s2 p1 16->32 odd", 2, 16, 9, 7, 32, 3, 2, 1},
        {"1x1 s2 shortcut 16->32", 2, 16, 8, 8, 32, 1, 2, 0, false},
        {"3 channels -> 16 (CIFAR stem)", 2, 3, 8, 8, 16, 3, 1, 1},
        {"5->7 k5 s2 p2, no bias", 3, 5, 11, 10, 7, 5, 2, 2, false},
    };
    for (const ConvCase& c : cases)
      for (Layout l : {Layout::NCHW, Layout::NHWC, Layout::NCHW16C})
        if (l != Layout::NCHW16C || (c.C_in % kLayoutBlock == 0 && c.C_out % kLayoutBlock == 0))
          QTest::addRow("%s %s", c.name, layout_name(l)) << c << l;
  }
  void cpu_bf16_onednn_matches_widened() {
    QFETCH(ConvCase, c);
    QFETCH(Layout, layout);
#ifndef TRAINBENCH_HAVE_ONEDNN
    QSKIP("this build has no oneDNN: bf16 convolutions take the widened f32 path");
#else
    const auto g = ConvGeometry::make(c.N, c.C_in, c.H, c.W, c.C_out, c.k, c.stride, c.pad);
    conv::onednn::Convolutions probe;
    if (!cpu_has_bf16_kernels() ||
        !probe.takes(g, {layout, Layout::NCHW, layout}, conv::onednn::Activations::Blocked,
                     conv::onednn::Algorithm::Direct, DType::BF16))
      QSKIP("oneDNN has no bf16 kernels of its own on this CPU (no AVX512_BF16 or AMX): the "
            "widened f32 path runs (conv_lp_within_rounding_of_f32 covers it)");
    CpuBackend be(BackendOptions{.threads = 2});
    std::mt19937_64 rng(91 + uint64_t(c.C_in * 100 + c.C_out));
    const Tensor x = random_tensor(g.input_shape(), DType::F32, rng);
    const Tensor w = random_tensor(g.weight_shape(), DType::F32, rng);
    const Tensor b = c.bias ? random_tensor({g.C_out}, DType::F32, rng) : Tensor{};
    const Tensor dy = random_tensor(g.output_shape(), DType::F32, rng);
    const ConvOut want =
        conv_lp(cpu_reference(), g, x, w, b, dy, DType::BF16, Layout::NCHW, Layout::NCHW);
    const ConvOut got = conv_lp(be, g, x, w, b, dy, DType::BF16, layout, Layout::NCHW);
    for (auto [name, ref, fast] : {std::tuple{"y", want.y, got.y}, std::tuple{"dx", want.dx, got.dx},
                                   std::tuple{"dw", want.dw, got.dw}, std::tuple{"db", want.db, got.db}}) {
      const double e = scaled_diff(ref, fast);
      QVERIFY2(e < kFastTol, qPrintable(QString("%1: scaled difference %2").arg(name).arg(e)));
    }
    // Accumulation: old + what accumulate=false wrote.
    const Tensor xb = lp_of(be, in_layout(x, layout), DType::BF16);
    const Tensor wb = lp_of(be, w, DType::BF16), dyl = in_layout(dy, layout);
    Tensor dw = random_tensor(g.weight_shape(), DType::F32, rng), db = random_tensor({g.C_out}, DType::F32, rng);
    const Tensor dw_old = clone(dw), db_old = clone(db);
    Tensor none;
    conv::backward(be, g, xb, wb, dyl, none, dw, db, true);
    for (int64_t i = 0; i < dw.numel(); ++i)
      QVERIFY(std::abs(double(at(dw, i)) - (double(at(dw_old, i)) + at(got.dw, i))) <=
              kAccumTol * (1.0 + std::abs(at(got.dw, i))));
    for (int64_t i = 0; i < db.numel(); ++i)
      QVERIFY(std::abs(double(at(db, i)) - (double(at(db_old, i)) + at(got.db, i))) <=
              kAccumTol * (1.0 + std::abs(at(got.db, i))));
    // The record: every bf16 shape on oneDNN's bf16 kernels, not its reference
    // loops (AMX ones here read "amx_bf16"; on AVX512_BF16 alone some shapes
    // may take its bf16 GEMM, "gemm:jit").
    const nlohmann::json rec = be.describe()["kernel_paths"]["convolution"];
    int bf16_rows = 0;
    for (const auto& [shape, r] : rec.items()) {
      if (shape.rfind("bf16 ", 0) != 0) continue;
      ++bf16_rows;
      QCOMPARE(QString::fromStdString(r["chosen_by"].get<std::string>()),
               QString("bf16 inputs: oneDNN's bf16 kernels"));
      const std::string impl = r["onednn_implementation"].get<std::string>();
      QVERIFY2(!impl.empty() && impl.find("ref") == std::string::npos, impl.c_str());
    }
    QCOMPARE(bf16_rows, 3);  // forward, backward (dx dw), backward (dw alone)
    qInfo("%s", rec.dump().c_str());
#endif
  }

  // Blocked activations meet NCHW only where they start: x NCHW with y
  // blocked is taken, the other mixtures are refused naming both operands.
  void conv_blocked_layout_errors() {
    CpuBackend& be = cpu_fast();
    const auto g = ConvGeometry::make(1, 16, 4, 4, 16, 3, 1, 1);
    const Tensor w = Tensor::zeros(g.weight_shape(), DType::F32);
    auto act = [&](const Shape& s, Layout l) { return Tensor::zeros(s, DType::F32, Device::cpu(), l); };
    const std::pair<Layout, Layout> refused[] = {{Layout::NCHW16C, Layout::NCHW},
                                                 {Layout::NHWC, Layout::NCHW16C},
                                                 {Layout::NCHW16C, Layout::NHWC}};
    for (const auto& [xl, yl] : refused) {
      Tensor y = act(g.output_shape(), yl);
      try {
        conv::forward(be, g, act(g.input_shape(), xl), w, Tensor{}, y);
        QFAIL(qPrintable(QString("x %1 with y %2 was accepted").arg(layout_name(xl), layout_name(yl))));
      } catch (const Error& e) {
        QVERIFY2(QString(e.what()).contains("must share one layout"), e.what());
      }
    }
    Tensor y = act(g.output_shape(), Layout::NCHW16C);
    conv::forward(be, g, act(g.input_shape(), Layout::NCHW), w, Tensor{}, y);  // where it starts
    try {
      Tensor::empty({1, 3, 4, 4}, DType::F32, Device::cpu(), Layout::NCHW16C);
      QFAIL("an nChw16c tensor of 3 channels was made");
    } catch (const Error& e) {
      QVERIFY2(QString(e.what()).contains("multiple of 16"), e.what());
    }
  }

  void conv_lp_matches_cpu_data() {
    QTest::addColumn<Target>("target");
    for (DType dt : {DType::F16, DType::BF16})
      for (const Target& t : cuda_targets(dt)) QTest::newRow(t.name().c_str()) << t;
  }
  void conv_lp_matches_cpu() {
    FETCH_TARGET(t, be);
    TB_GPU_TRY
    const ConvGeometry g = ConvGeometry::make(4, 8, 12, 12, 16, 3, 1, 1);
    const Tensor x = random_tensor(g.input_shape(), 61), w = random_tensor(g.weight_shape(), 62);
    const Tensor bias = random_tensor({g.C_out}, 63), dy = random_tensor(g.output_shape(), 64);
    const DType dt = t.dtype;
    const Layout l = t.layout;
    const double u = unit_roundoff(dt);
    const ConvOut c = conv_lp(cpu_reference(), g, x, w, bias, dy, dt, Layout::NCHW, Layout::NCHW);
    const ConvOut d = conv_lp(be, g, x, w, bias, dy, dt, l, l);
    // |v|, the value the GPU rounded to dt, for output element i (host NCHW order).
    const int64_t plane = g.H_out * g.W_out;
    const auto rounded = [&](const std::string& what, const Tensor& r, int64_t i) -> double {
      if (what == "y") return std::abs(double(at(r, i)) - at(bias, (i / plane) % g.C_out));
      if (what == "db") return 0.0;
      return std::abs(double(at(r, i)));
    };
    const QString m = first_outside(c, d, dt, l, [&](const std::string& what, const Tensor& r,
                                                     int64_t i) { return 2 * u * rounded(what, r, i); });
    QVERIFY2(m.isEmpty(), qPrintable(m));
    TB_GPU_CATCH
  }

  // Low-precision activations (y, dy, dx in x's dtype) on the CPU reference:
  // the f32-activation form's results rounded once, bit for bit. Given dy
  // already in lp, the f32 form rounds it to itself, so both forms sum the
  // same products in the same order: y = round(y_f32), dx = round(dx_f32),
  // dw and db equal (db is summed from the same dy values).
  void conv_lp_activations_round_once_data() { conv_lp_within_rounding_of_f32_data(); }
  void conv_lp_activations_round_once() {
    QFETCH(ConvCase, c);
    CpuBackend& ref = cpu_reference();
    const ConvGeometry g =
        ConvGeometry::make(c.N, c.C_in, c.H, c.W, c.C_out, c.k, c.stride, c.pad);
    const uint64_t seed = uint64_t(300 + c.C_in * 7 + c.k);
    const Tensor x = random_tensor(g.input_shape(), seed), w = random_tensor(g.weight_shape(), seed + 1);
    const Tensor bias = random_tensor({g.C_out}, seed + 2);
    for (DType dt : {DType::F16, DType::BF16}) {
      const Tensor dy = rounded_to(random_tensor(g.output_shape(), seed + 3), dt);
      const ConvOut f = conv_lp(ref, g, x, w, bias, dy, dt, Layout::NCHW, Layout::NCHW);
      const ConvOut l = conv_lp(ref, g, x, w, bias, dy, dt, Layout::NCHW, Layout::NCHW, dt);
      QVERIFY2(bitwise_equal(l.y, rounded_to(f.y, dt)), dtype_name(dt));
      QVERIFY2(bitwise_equal(l.dx, rounded_to(f.dx, dt)), dtype_name(dt));
      QVERIFY2(!bitwise_equal(l.y, f.y), "y was not rounded");
      QVERIFY2(bitwise_equal(l.dw, f.dw), dtype_name(dt));
      QVERIFY2(bitwise_equal(l.db, f.db), dtype_name(dt));
    }
  }

  // Low-precision activations, CUDA against the CPU reference on the same
  // rounded inputs (dy rounded too). The CPU rounds y = x∗w + b and dx once
  // (u each). cuDNN writes y's x∗w to lp (≤ 2u·|x∗w|, as conv_lp_matches_cpu
  // allows for an engine that rounds partials), then bias.cu adds b and rounds
  // again (u·|y|); dx is cuDNN's output (≤ 2u); dw is rounded to lp and
  // widened (≤ 2u); db sums the same lp dy in double. With the summation
  // order's 1e-5·max|cpu| (lp_activations_bound):
  //   y  |gpu − cpu| ≤ 2u·|y − b| + 2u·|y|     dx, dw  ≤ 3u·|v|     db  ≤ 0
  void conv_lp_activations_match_cpu_data() { conv_lp_matches_cpu_data(); }
  void conv_lp_activations_match_cpu() {
    FETCH_TARGET(t, be);
    TB_GPU_TRY
    const ConvGeometry g = ConvGeometry::make(4, 8, 12, 12, 16, 3, 1, 1);
    const Tensor x = random_tensor(g.input_shape(), 71), w = random_tensor(g.weight_shape(), 72);
    const Tensor bias = random_tensor({g.C_out}, 73), dy = random_tensor(g.output_shape(), 74);
    const DType dt = t.dtype;
    const Layout l = t.layout;
    const ConvOut c =
        conv_lp(cpu_reference(), g, x, w, bias, dy, dt, Layout::NCHW, Layout::NCHW, dt);
    const ConvOut d = conv_lp(be, g, x, w, bias, dy, dt, l, l, dt);
    const QString m = first_outside(c, d, dt, l, lp_activations_bound(dt, g, bias));
    QVERIFY2(m.isEmpty(), qPrintable(m));
    TB_GPU_CATCH
  }

  // accumulate=true adds into dw and db; dx is written either way.
  void conv_lp_accumulates() {
    CpuBackend& ref = cpu_reference();
    const ConvGeometry g = ConvGeometry::make(2, 3, 7, 7, 4, 3, 1, 1);
    const Tensor x = lp_of(ref, random_tensor(g.input_shape(), 7), DType::BF16);
    const Tensor w = lp_of(ref, random_tensor(g.weight_shape(), 8), DType::BF16);
    const Tensor dy = random_tensor(g.output_shape(), 9);
    const Tensor dw0 = random_tensor(g.weight_shape(), 10), db0 = random_tensor({g.C_out}, 11);
    Tensor dx = Tensor::empty(g.input_shape(), DType::F32),
           dw = Tensor::empty(g.weight_shape(), DType::F32);
    Tensor db = Tensor::empty({g.C_out}, DType::F32);
    conv::backward(ref, g, x, w, dy, dx, dw, db, false);
    Tensor dwa = clone(dw0), dba = clone(db0);
    Tensor dx2 = Tensor::empty(g.input_shape(), DType::F32);
    conv::backward(ref, g, x, w, dy, dx2, dwa, dba, true);
    QVERIFY(bitwise_equal(dx, dx2));
    for (int64_t i = 0; i < dw.numel(); ++i)
      QVERIFY(std::abs(at(dwa, i) - (at(dw0, i) + at(dw, i))) <=
              1e-6f * (1 + std::abs(at(dwa, i))));
    for (int64_t i = 0; i < db.numel(); ++i)
      QVERIFY(std::abs(at(dba, i) - (at(db0, i) + at(db, i))) <=
              1e-6f * (1 + std::abs(at(dba, i))));
  }

  // One op for every dtype: x's dtype says which form runs, and the operands
  // that do not fit it are refused naming the op and the operand.
  void conv_lp_argument_checks() {
    CpuBackend& ref = cpu_reference();
    const ConvGeometry g = ConvGeometry::make(1, 2, 5, 5, 3, 3, 1, 1);
    const Tensor xf = random_tensor(g.input_shape(), 1), wf = random_tensor(g.weight_shape(), 2);
    const Tensor x16 = lp_of(ref, xf, DType::F16), wb16 = lp_of(ref, wf, DType::BF16);
    Tensor none, y = Tensor::empty(g.output_shape(), DType::F32);
    QString m = qerror_of([&] { conv::forward(ref, g, xf, lp_of(ref, wf, DType::F16), none, y); });
    QVERIFY2(m.contains("conv2d_forward") && m.contains("weight f16") && m.contains("x f32"),
             qPrintable(m));  // f32 x, f16 weight
    QVERIFY_THROWS_EXCEPTION(Error, conv::forward(ref, g, x16, wb16, none, y));  // mixed
    const Tensor w16 = lp_of(ref, wf, DType::F16);
    Tensor yb16 = Tensor::empty(g.output_shape(), DType::BF16);
    m = qerror_of([&] { conv::forward(ref, g, x16, w16, none, yb16); });  // y in another lp
    QVERIFY2(m.contains("output y bf16") && m.contains("must be f32"), qPrintable(m));
    const Tensor b16 = Tensor::empty({g.C_out}, DType::F16);
    Tensor y16 = Tensor::empty(g.output_shape(), DType::F16);
    m = qerror_of([&] { conv::forward(ref, g, x16, w16, b16, y16); });  // lp bias
    QVERIFY2(m.contains("bias f16") && m.contains("must be f32"), qPrintable(m));
    Tensor dx, dw, db;
    const Tensor dy16 = lp_of(ref, random_tensor(g.output_shape(), 3), DType::F16);
    Tensor dx32 = Tensor::empty(g.input_shape(), DType::F32);
    m = qerror_of([&] { conv::backward(ref, g, x16, w16, dy16, dx32, dw, db, false); });
    QVERIFY2(m.contains("conv2d_backward") && m.contains("dx f32") && m.contains("must be f16"),
             qPrintable(m));  // dx follows dy's form
    Tensor dw16 = Tensor::empty(g.weight_shape(), DType::F16);
    const Tensor dy = random_tensor(g.output_shape(), 3);
    QVERIFY_THROWS_EXCEPTION(Error, conv::backward(ref, g, x16, w16, dy, dx, dw16, db, false));
    QVERIFY_THROWS_EXCEPTION(Error, conv::backward(ref, g, x16, w16, dy16, dx, dw16, db, false));
    // Both combinations run: f32 activations, and f16 ones.
    conv::forward(ref, g, x16, w16, none, y16);
    Tensor dx16 = Tensor::empty(g.input_shape(), DType::F16);
    conv::backward(ref, g, x16, w16, dy16, dx16, dw, db, false);
    // A dtype no convolution takes is refused by name.
    const Tensor xi = Tensor::zeros(g.input_shape(), DType::I32);
    m = qerror_of([&] { conv::forward(ref, g, xi, wf, none, y); });
    QVERIFY2(m.contains("conv2d_forward") && m.contains("i32"), qPrintable(m));
    // And the same f16 operands run as the low-precision form: y f32.
    conv::forward(ref, g, x16, w16, none, y);
  }

  // A backend refuses a dtype it lacks, naming the op, the dtype and itself:
  // the CUDA backend has no f64 convolutions (the CPU has all four).
  void conv_dtype_refused_by_backend() {
    NEED_GPU();
    TB_GPU_TRY
    Backend& be = cuda_backend();
    const ConvGeometry g = ConvGeometry::make(1, 2, 5, 5, 3, 3, 1, 1);
    const Tensor x = be.empty(g.input_shape(), DType::F64), w = be.empty(g.weight_shape(), DType::F64);
    Tensor y = be.empty(g.output_shape(), DType::F64), none;
    const QString m = qerror_of([&] { conv::forward(be, g, x, w, none, y); });
    QVERIFY2(m.contains("conv2d_forward") && m.contains("f64") &&
                 m.contains(QString::fromStdString(be.name())),
             qPrintable(m));
    QVERIFY(be.has_kernels<conv::Kernels>());
    QVERIFY(!be.kernels<conv::Kernels>().supports(DType::F64));
    QVERIFY(cpu_reference().kernels<conv::Kernels>().supports(DType::F64));
    TB_GPU_CATCH
  }

  // ------------------------------------------------------------ hand-computed values

  void conv_known_values() {
    // x = 1..9 on a 3x3 plane, 3x3 kernel of ones, padding 1, bias 0.5:
    // each output is the sum of the pixel's in-image 3x3 neighbourhood + 0.5.
    for (bool reference : {false, true}) {
      CpuBackend& be = reference ? cpu_reference() : cpu_fast();
      auto g = ConvGeometry::make(1, 1, 3, 3, 1, 3, 1, 1);
      Tensor x = Tensor::empty({1, 1, 3, 3}, DType::F32);
      for (int i = 0; i < 9; ++i) x.data_as<float>()[i] = float(i + 1);
      Tensor w = Tensor::empty({1, 1, 3, 3}, DType::F32);
      be.fill(w, 1.0);
      Tensor b = Tensor::empty({1}, DType::F32);
      be.fill(b, 0.5);
      Tensor y = Tensor::empty({1, 1, 3, 3}, DType::F32);
      conv::forward(be, g, x, w, b, y);
      const float want[9] = {12.5f, 21.5f, 16.5f, 27.5f, 45.5f, 33.5f, 24.5f, 39.5f, 28.5f};
      for (int i = 0; i < 9; ++i) QCOMPARE(y.data_as<float>()[i], want[i]);

      // Stride 2 without padding on a 5x5 plane of 1..25, 3x3 ones: window sums.
      auto g2 = ConvGeometry::make(1, 1, 5, 5, 1, 3, 2, 0);
      Tensor x2 = Tensor::empty({1, 1, 5, 5}, DType::F32);
      for (int i = 0; i < 25; ++i) x2.data_as<float>()[i] = float(i + 1);
      Tensor y2 = Tensor::empty({1, 1, 2, 2}, DType::F32);
      conv::forward(be, g2, x2, w, Tensor{}, y2);
      const float want2[4] = {63.0f, 81.0f, 153.0f, 171.0f};
      for (int i = 0; i < 4; ++i) QCOMPARE(y2.data_as<float>()[i], want2[i]);
    }
  }

  void conv_empty_batch() {
    // N = 0 (the tail of an exactly divided epoch never is, but a caller may ask):
    // outputs are empty, written gradients are zero.
    for (bool reference : {false, true}) {
      CpuBackend& be = reference ? cpu_reference() : cpu_fast();
      const auto g = ConvGeometry::make(0, 2, 5, 5, 3, 3, 1, 1);
      Tensor x = Tensor::empty(g.input_shape(), DType::F32), w = Tensor::zeros({3, 2, 3, 3}, DType::F32);
      Tensor dy = Tensor::empty(g.output_shape(), DType::F32), dx = Tensor::empty(g.input_shape(), DType::F32);
      Tensor dw = Tensor::empty({3, 2, 3, 3}, DType::F32), db = Tensor::empty({3}, DType::F32);
      be.fill(dw, 7.0);
      be.fill(db, 7.0);
      conv::backward(be, g, x, w, dy, dx, dw, db, false);
      QCOMPARE(optimizer::sum_squares(be, dw), 0.0);
      QCOMPARE(optimizer::sum_squares(be, db), 0.0);
    }
  }

  // ------------------------------------------------------------ the layer

  void conv_layer_shapes() {
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
  }

  // ------------------------------------------------------------ errors

  void conv_shape_errors() {
    CpuBackend& be = cpu_fast();
    auto g = ConvGeometry::make(2, 3, 8, 8, 4, 3, 1, 1);
    Tensor x = Tensor::zeros({2, 3, 8, 8}, DType::F32);
    Tensor w = Tensor::zeros({4, 3, 3, 3}, DType::F32);
    Tensor y = Tensor::zeros({2, 4, 8, 8}, DType::F32);
    Tensor bad_x = Tensor::zeros({2, 2, 8, 8}, DType::F32);
    QString m = qerror_of([&] { conv::forward(be, g, bad_x, w, Tensor{}, y); });
    QVERIFY2(m.contains("[2, 2, 8, 8]") && m.contains("[2, 3, 8, 8]"), qPrintable(m));
    Tensor bad_w = Tensor::zeros({4, 3, 5, 5}, DType::F32);
    m = qerror_of([&] { conv::forward(be, g, x, bad_w, Tensor{}, y); });
    QVERIFY2(m.contains("[4, 3, 5, 5]") && m.contains("[4, 3, 3, 3]"), qPrintable(m));
    Tensor bad_b = Tensor::zeros({5}, DType::F32);
    m = qerror_of([&] { conv::forward(be, g, x, w, bad_b, y); });
    QVERIFY2(m.contains("[5]") && m.contains("4"), qPrintable(m));
    Tensor bad_dx = Tensor::zeros({2, 3, 7, 8}, DType::F32), none;
    m = qerror_of([&] { conv::backward(be, g, x, w, y, bad_dx, none, none, false); });
    QVERIFY2(m.contains("[2, 3, 7, 8]") && m.contains("[2, 3, 8, 8]"), qPrintable(m));
    Tensor y64 = Tensor::zeros({2, 4, 8, 8}, DType::F64);
    m = qerror_of([&] { conv::forward(be, g, x, w, Tensor{}, y64); });
    QVERIFY2(m.contains("f64") && m.contains("f32"), qPrintable(m));
    // NHWC x with an NCHW y: activations must share one layout.
    Tensor x_nhwc = Tensor::zeros({2, 3, 8, 8}, DType::F32, Device::cpu(), Layout::NHWC);
    m = qerror_of([&] { conv::forward(be, g, x_nhwc, w, Tensor{}, y); });
    QVERIFY2(m.contains("NHWC"), qPrintable(m));

    // The layer names itself and the offending shape.
    ParamRegistry reg;
    Conv2d conv("conv1", 4, 3);
    conv.setup({1, 3, 8, 8}, reg);
    Context ctx{be};
    m = qerror_of([&] { conv.forward(ctx, bad_x); });
    QVERIFY2(m.contains("conv1") && m.contains("[2, 2, 8, 8]"), qPrintable(m));
    m = qerror_of([&] { ConvGeometry::make(1, 1, 2, 2, 1, 5, 1, 0); });
    QVERIFY2(m.contains("5"), qPrintable(m));
    // A kernel one row too big under stride 2: the division alone would round
    // the output's size up to 1 and read past the input.
    m = qerror_of([&] { ConvGeometry::make(1, 1, 2, 2, 1, 3, 2, 0); });
    QVERIFY2(m.contains("does not fit input 2x2"), qPrintable(m));
  }

  void conv_layout_errors() {
    CpuBackend& be = cpu_reference();
    const ConvGeometry g = ConvGeometry::make(1, 2, 4, 4, 3, 3, 1, 1);
    std::mt19937_64 rng(7);
    const Tensor x = random_tensor(g.input_shape(), DType::F32, rng, Layout::NHWC);
    const Tensor w = random_tensor(g.weight_shape(), DType::F32, rng, Layout::NHWC);
    Tensor y_nchw = Tensor::empty(g.output_shape(), DType::F32);  // mixed activations
    QVERIFY_THROWS_EXCEPTION(tb::Error, conv::forward(be, g, x, w, Tensor{}, y_nchw));
    Tensor dy = random_tensor(g.output_shape(), DType::F32, rng, Layout::NHWC);
    Tensor dx_nchw = Tensor::empty(g.input_shape(), DType::F32), none;
    QVERIFY_THROWS_EXCEPTION(tb::Error,
                             conv::backward(be, g, x, w, dy, dx_nchw, none, none, false));
  }

  // ------------------------------------------------------------ cuDNN plans (no device needed)

  // Which cuDNN engines each convolution key may use (numerical and behaviour
  // notes), decided without a GPU.
  void conv_engine_filter() {
    using namespace tb::cuda;
    ConvPlanKey k;
    k.dtype = DType::F32;
    ConvEngineFilter f = tb::cuda::conv_engine_filter(k);
    QVERIFY(f.no_down_convert && f.no_tensor_core);  // strict fp32: no TF32, no narrowing
    QVERIFY(!f.no_reduced_precision_reduction && !f.no_nondeterministic);
    QVERIFY(!f.no_runtime_compiled);
    QCOMPARE(f.max_candidates, 1);
    QVERIFY(!tb::cuda::conv_engine_filter(k, /*allow_tf32=*/true).no_tensor_core);
    QVERIFY(tb::cuda::conv_engine_filter(k, true).no_down_convert);
    for (DType t : {DType::F16, DType::BF16}) {
      k.dtype = t;
      f = tb::cuda::conv_engine_filter(k);
      QVERIFY(f.no_reduced_precision_reduction);  // fp32 accumulation
      QVERIFY(!f.no_tensor_core && !f.no_down_convert);
    }
    k.dtype = DType::F64;
    f = tb::cuda::conv_engine_filter(k);
    QVERIFY(f.no_down_convert && !f.no_tensor_core && !f.no_reduced_precision_reduction);
    k.dtype = DType::F32;
    k.deterministic = true;
    QVERIFY(tb::cuda::conv_engine_filter(k).no_nondeterministic);
    k.benchmark = true;
    f = tb::cuda::conv_engine_filter(k);
    QVERIFY(f.no_runtime_compiled);  // no NVRTC compiles while autotuning
    QCOMPARE(f.max_candidates, kAutotuneCandidates);
    QVERIFY(kAutotuneCandidates > 1 && kAutotuneCandidates <= 16);
    QCOMPARE(QString::fromStdString(f.str()),
             QStringLiteral("no DOWN_CONVERT_INPUTS, no TENSOR_CORE (TF32 off), no "
                            "NONDETERMINISTIC, no RUNTIME_COMPILATION, 10 candidates at most, "
                            "workspace <= 1024 MiB"));
    QCOMPARE(f.max_workspace_bytes, int64_t(1) << 30);
  }

  // ------------------------------------------------------------ CPU path choice

  // auto: the rule (oneDNN where built and its direct kernels run, else blas
  // or the reference), recorded per shape. timed: the first call of a shape
  // times every candidate (blas, and both oneDNN forms where built) and keeps
  // the fastest; the record names the shape, the path, how it was chosen and
  // the timings; later calls reuse it. A forced path is recorded as the
  // setting; one that cannot take a shape falls back to the reference, saying
  // so; bad settings are refused by name.
  // auto's rule takes oneDNN's Winograd where oneDNN has its kernels (3x3,
  // stride 1, channels in whole 16-blocks, AVX-512) and the direct kernels
  // elsewhere, fmnist-cnn's 1 -> 32 first layer among them (its channel
  // padding made Winograd 8x slower); the record names Winograd's kernels.
  void cpu_conv_auto_takes_winograd_where_it_can() {
#ifdef TRAINBENCH_HAVE_ONEDNN
    if (!conv::onednn::has_direct_kernels()) QSKIP("oneDNN's direct kernels need AVX2: auto takes blas");
    CpuBackend be(BackendOptions{.threads = 2});
    auto path_of = [&](const ConvGeometry& g) {
      const auto [x, w, b, dy] = random_operands(g, 7);
      Tensor y = like(dy, Layout::NCHW);
      conv::forward(be, g, x, w, b, y);
      const std::string key = detail::concat("forward N", g.N, " ", g.C_in, "x", g.H, "x", g.W,
                                             " -> ", g.C_out, " k", g.KH, " s", g.stride, " p",
                                             g.pad, " NCHW/KCRS bias");
      const nlohmann::json rec = be.describe()["kernel_paths"]["convolution"];
      if (!rec.contains(key)) QTest::qFail(qPrintable(QString::fromStdString(key + " not in " + rec.dump())), __FILE__, __LINE__);
      return rec.value(key, nlohmann::json{{"path", "none"}, {"onednn_implementation", ""}});
    };
    const auto wino = ConvGeometry::make(2, 32, 14, 14, 64, 3, 1, 1);
    conv::onednn::Convolutions probe;
    const bool takes = probe.takes(wino, {}, conv::onednn::Activations::Blocked,
                                   conv::onednn::Algorithm::Winograd);
    // oneDNN 2.6's Winograd is AVX-512 code: where the CPU has it, it must be taken.
    if (onednn_blocks_of_16()) QVERIFY2(takes, "oneDNN has AVX-512 but no Winograd for 32->64 3x3");
    const nlohmann::json r = path_of(wino);
    QCOMPARE(QString::fromStdString(r["path"].get<std::string>()),
             takes ? QString("onednn-winograd") : QString("onednn-blocked"));
    if (takes)
      QVERIFY2(r["onednn_implementation"].get<std::string>().find("wino") != std::string::npos,
               r.dump().c_str());
    for (const ConvGeometry& g : {ConvGeometry::make(2, 1, 28, 28, 32, 3, 1, 1),   // 1 channel
                                  ConvGeometry::make(2, 32, 15, 15, 64, 3, 2, 1),  // stride 2
                                  ConvGeometry::make(2, 32, 14, 14, 64, 1, 1, 0)}) {  // 1x1
      QVERIFY(!probe.takes(g, {}, conv::onednn::Activations::Blocked,
                           conv::onednn::Algorithm::Winograd));
      QCOMPARE(QString::fromStdString(path_of(g)["path"].get<std::string>()),
               QString(g.C_in < conv::kBlasForwardChannels ? "blas" : "onednn-blocked"));
    }
#else
    QSKIP("this build has no oneDNN");
#endif
  }

  // A model's first layer between NCHW tensors takes blas by rule: forward
  // below kBlasForwardChannels input channels, backward below
  // kBlasBackwardChannels (else oneDNN's where it has direct kernels); where
  // it writes blocked activations oneDNN's kernels take it (blas cannot).
  void cpu_conv_auto_takes_blas_for_a_first_layer() {
    for (const int64_t c_in : {int64_t(1), int64_t(3), conv::kBlasForwardChannels - 1,
                               conv::kBlasForwardChannels}) {
      CpuBackend be(BackendOptions{.threads = 2});
      const auto g = ConvGeometry::make(4, c_in, 12, 12, 16, 3, 1, 1);
      const auto [x, w, b, dy] = random_operands(g, 9);
      Tensor y = like(dy, Layout::NCHW), dw = like(w, Layout::NCHW), none;
      Tensor db = Tensor::empty({g.C_out}, DType::F32);
      conv::forward(be, g, x, w, b, y);
      conv::backward(be, g, x, w, dy, none, dw, db, false);  // a first layer: no dx
      bool onednn = false;
#ifdef TRAINBENCH_HAVE_ONEDNN
      onednn = conv::onednn::has_direct_kernels();
#endif
      const nlohmann::json rec = be.describe()["kernel_paths"]["convolution"];
      const std::string fwd = detail::concat("forward N4 ", c_in, "x12x12 -> 16 k3 s1 p1 NCHW/KCRS bias");
      const std::string bwd = detail::concat("backward N4 ", c_in, "x12x12 -> 16 k3 s1 p1 NCHW/KCRS (dw db)");
      QVERIFY2(rec.contains(fwd) && rec.contains(bwd), rec.dump().c_str());
      const auto want = [&](bool blas) { return blas || !onednn ? "blas" : "onednn-blocked"; };
      QCOMPARE(rec[fwd]["path"].get<std::string>(), std::string(want(c_in < conv::kBlasForwardChannels)));
      QCOMPARE(rec[bwd]["path"].get<std::string>(), std::string(want(c_in < conv::kBlasBackwardChannels)));
      QCOMPARE(rec[fwd]["chosen_by"].get<std::string>(), std::string("rule"));
      QCOMPARE(rec[bwd]["chosen_by"].get<std::string>(), std::string("rule"));
      if (!onednn) continue;
      Tensor yb = like(dy, Layout::NCHW16C);
      conv::forward(be, g, x, w, b, yb);
      const nlohmann::json rb = be.describe()["kernel_paths"]["convolution"];
      const std::string key = detail::concat("forward N4 ", c_in, "x12x12 -> 16 k3 s1 p1 NCHW/KCRS -> nChw16c bias");
      QVERIFY2(rb.contains(key), rb.dump().c_str());
      QCOMPARE(rb[key]["path"].get<std::string>(), std::string("onednn-blocked"));
    }
  }

  void cpu_conv_path_choice_recorded() {
    CpuBackend be(BackendOptions{.threads = 2});
    // 8 input channels: oneDNN's by rule where it has direct kernels (fewer
    // take blas: cpu_conv_auto_takes_blas_for_a_first_layer).
    const auto g = ConvGeometry::make(4, conv::kBlasForwardChannels, 10, 10, 8, 3, 1, 1);
    const auto [x, w, b, dy] = random_operands(g, 5);
    Tensor y = like(dy, Layout::NCHW), dx = like(x, Layout::NCHW), dw = like(w, Layout::NCHW);
    Tensor db = Tensor::empty({g.C_out}, DType::F32);
    const std::string fwd = "forward N4 8x10x10 -> 8 k3 s1 p1 NCHW/KCRS bias";
    const std::string bwd = "backward N4 8x10x10 -> 8 k3 s1 p1 NCHW/KCRS (dx dw db)";
    auto record = [&] { return be.describe()["kernel_paths"]["convolution"]; };
    auto str = [](const nlohmann::json& j) { return QString::fromStdString(j.get<std::string>()); };

    conv::forward(be, g, x, w, b, y);  // auto
    conv::backward(be, g, x, w, dy, dx, dw, db, false);
    nlohmann::json rec = record();
    QCOMPARE(int(rec.size()), 2);
    for (const std::string& key : {fwd, bwd}) {
      QVERIFY2(rec.contains(key), rec.dump().c_str());
      QCOMPARE(str(rec[key]["chosen_by"]), QString("rule"));
#ifdef TRAINBENCH_HAVE_ONEDNN
      const QString want = conv::onednn::has_direct_kernels() ? "onednn-blocked" : "blas";
#else
      const QString want = "blas";
#endif
      QCOMPARE(str(rec[key]["path"]), want);
    }

    conv::set_cpu_conv_path(be, "timed");  // forgets the choices so far
    conv::forward(be, g, x, w, b, y);
    conv::backward(be, g, x, w, dy, dx, dw, db, false);
    conv::forward(be, g, x, w, b, y);  // cached: no second record
    rec = record();
    QCOMPARE(int(rec.size()), 2);
    for (const std::string& key : {fwd, bwd}) {
      const nlohmann::json& r = rec[key];
      if (!have_onednn()) {
        QCOMPARE(str(r["path"]), QString("blas"));
        QCOMPARE(str(r["chosen_by"]), QString("only candidate"));
        continue;
      }
      QCOMPARE(str(r["chosen_by"]), QString("timing"));
      const nlohmann::json& ms = r["min_ms"];
      QCOMPARE(int(ms.size()), 3);
      std::string fastest;
      double best = 1e300;
      for (const auto& [path, t] : ms.items()) {
        QVERIFY2(t.get<double>() > 0.0, r.dump().c_str());
        if (t.get<double>() < best) best = t.get<double>(), fastest = path;
      }
      QCOMPARE(r["path"].get<std::string>(), fastest);
      if (fastest != "blas") QVERIFY2(r.contains("onednn_implementation"), r.dump().c_str());
    }

    conv::set_cpu_conv_path(be, "blas");  // forced
    conv::forward(be, g, x, w, b, y);
    const Tensor xh = to_device(be, x, Layout::NHWC), wh = to_device(be, w, Layout::NHWC);
    Tensor yh = be.empty(g.output_shape(), DType::F32, Layout::NHWC);
    conv::forward(be, g, xh, wh, b, yh);
    rec = record();
    QCOMPARE(int(rec.size()), 2);
    QCOMPARE(str(rec[fwd]["path"]), QString("blas"));
    QCOMPARE(str(rec[fwd]["chosen_by"]), QString("setting"));
    const nlohmann::json& nhwc = rec["forward N4 8x10x10 -> 8 k3 s1 p1 NHWC/KRSC bias"];
    QCOMPARE(str(nhwc["path"]), QString("reference"));
    QCOMPARE(str(nhwc["chosen_by"]), QString("setting blas cannot take this shape: reference"));

    const QString bad = qerror_of([&] { conv::set_cpu_conv_path(be, "fastest"); });
    QVERIFY2(bad.contains("set_cpu_conv_path") && bad.contains("'fastest'"), qPrintable(bad));
    if (!have_onednn()) {
      const QString no = qerror_of([&] { conv::set_cpu_conv_path(be, "onednn"); });
      QVERIFY2(no.contains("no oneDNN"), qPrintable(no));
    }
    // The environment variable: read when a backend's convolutions are made.
    qputenv("TRAINBENCH_CPU_CONV", "fastest");
    CpuBackend env_be(BackendOptions{.threads = 2});
    const QString env_bad = qerror_of([&] { conv::forward(env_be, g, x, w, b, y); });
    qunsetenv("TRAINBENCH_CPU_CONV");
    QVERIFY2(env_bad.contains("TRAINBENCH_CPU_CONV") && env_bad.contains("'fastest'"),
             qPrintable(env_bad));
  }

  // oneDNN's scratch (the copies of the operands in its layouts, its
  // primitives' scratchpads, accumulate's parts) is one area that every shape
  // shares, a backend's convolutions running one at a time: after two shapes
  // it holds the larger one's need, not the sum; and a shape run on scratch
  // another shape wrote gives the bits it gives alone.
  void onednn_scratch_shared_across_shapes() {
#ifndef TRAINBENCH_HAVE_ONEDNN
    QSKIP("this build has no oneDNN");
#else
    if (!conv::onednn::has_direct_kernels())
      QSKIP("oneDNN's direct kernels do not run on this CPU: its plain layouts need no scratch");
    struct Out {
      std::vector<float> y, dx, dw, db;
    };
    // Forward, backward writing, backward adding (accumulate's parts).
    auto run = [](conv::onednn::Convolutions& c, const ConvGeometry& g, uint64_t seed) {
      const auto [x, w, b, dy] = random_operands(g, seed);
      Out o{std::vector<float>(size_t(dy.numel())), std::vector<float>(size_t(x.numel())),
            std::vector<float>(size_t(w.numel())), std::vector<float>(size_t(g.C_out))};
      const conv::onednn::Layouts l;
      const auto blocked = conv::onednn::Activations::Blocked;
      const auto direct = conv::onednn::Algorithm::Direct;
      c.forward(g, l, blocked, direct, 2, DType::F32, x.data(), w.data(), b.data_as<float>(),
                o.y.data());
      for (bool accumulate : {false, true})
        c.backward(g, l, blocked, direct, 2, DType::F32, x.data(), w.data(),
                   dy.data_as<float>(), o.dx.data(), o.dw.data(), o.db.data(), accumulate);
      return o;
    };
    // b's channels (20 -> 36) are padded to whole blocks in oneDNN's
    // layout: the padding lands on area a's values left, which must not leak.
    const auto ga = ConvGeometry::make(4, 16, 16, 16, 16, 3, 1, 1);
    const auto gb = ConvGeometry::make(4, 20, 8, 8, 36, 3, 2, 1);
    conv::onednn::Convolutions alone_a, alone_b, both;
    const Out a = run(alone_a, ga, 1), b = run(alone_b, gb, 2);
    const size_t need_a = alone_a.scratch_bytes(), need_b = alone_b.scratch_bytes();
    QVERIFY2(need_a > 0 && need_b > 0, "the blocked form reorders into scratch");
    run(both, ga, 1);
    const Out b_after_a = run(both, gb, 2), a_after_b = run(both, ga, 1);
    QCOMPARE(both.scratch_bytes(), std::max(need_a, need_b));
    for (auto [got, want] : {std::pair{&a_after_b, &a}, std::pair{&b_after_a, &b}}) {
      QVERIFY(got->y == want->y);
      QVERIFY(got->dx == want->dx);
      QVERIFY(got->dw == want->dw);
      QVERIFY(got->db == want->db);
    }
#endif
  }

  void conv_plan_key() {
    using namespace tb::cuda;
    ConvPlanKey a;
    a.N = 8, a.C = 3, a.H = 32, a.W = 30, a.K = 16, a.R = 3, a.S = 3, a.stride = 2, a.pad = 1;
    QCOMPARE(a.H_out(), int64_t(16));
    QCOMPARE(a.W_out(), int64_t(15));
    const ConvPlanKeyHash hash;
    QVERIFY(a == a);
    QCOMPARE(hash(a), hash(ConvPlanKey(a)));
    // Every field takes part in equality and (for these values) in the hash.
    std::vector<ConvPlanKey> variants;
    auto vary = [&](auto&& f) {
      ConvPlanKey b = a;
      f(b);
      variants.push_back(b);
    };
    vary([](ConvPlanKey& k) { k.op = ConvOp::Dgrad; });
    vary([](ConvPlanKey& k) { k.op = ConvOp::Wgrad; });
    vary([](ConvPlanKey& k) { k.N = 9; });
    vary([](ConvPlanKey& k) { k.C = 4; });
    vary([](ConvPlanKey& k) { k.H = 31; });
    vary([](ConvPlanKey& k) { k.W = 31; });
    vary([](ConvPlanKey& k) { k.K = 17; });
    vary([](ConvPlanKey& k) { k.R = 1; });
    vary([](ConvPlanKey& k) { k.S = 1; });
    vary([](ConvPlanKey& k) { k.stride = 1; });
    vary([](ConvPlanKey& k) { k.pad = 0; });
    vary([](ConvPlanKey& k) { k.dtype = DType::F16; });
    vary([](ConvPlanKey& k) { k.x_layout = Layout::NHWC; });
    vary([](ConvPlanKey& k) { k.w_layout = Layout::NHWC; });
    vary([](ConvPlanKey& k) { k.deterministic = true; });
    vary([](ConvPlanKey& k) { k.benchmark = true; });
    vary([](ConvPlanKey& k) { k.align_a = 4; });
    vary([](ConvPlanKey& k) { k.align_b = 8; });
    vary([](ConvPlanKey& k) { k.align_out = 4; });
    for (size_t i = 0; i < variants.size(); ++i) {
      QVERIFY2(!(variants[i] == a), variants[i].str().c_str());
      QVERIFY2(hash(variants[i]) != hash(a), variants[i].str().c_str());
      QVERIFY(variants[i].str() != a.str());
      for (size_t j = i + 1; j < variants.size(); ++j) QVERIFY(!(variants[i] == variants[j]));
    }
    QCOMPARE(QString::fromStdString(a.str()),
             QStringLiteral("fprop N=8 C=3 H=32 W=30 K=16 R=3 S=3 stride=2 pad=1 f32 x=NCHW "
                            "w=NCHW heuristic"));

    // The pointers' alignments enter the key (run() adds them): fresh tensors
    // keep the default 16, views into a flat block get their offset's.
    alignas(64) static float block[64];
    QCOMPARE(with_alignments(a, block, block + 4, block + 8), a);
    const ConvPlanKey v = with_alignments(a, block, block + 1, block + 2);
    QCOMPARE(v.align_a, 16);
    QCOMPARE(v.align_b, 4);
    QCOMPARE(v.align_out, 8);
    QVERIFY(!(v == a) && hash(v) != hash(a));
    QVERIFY2(v.str().ends_with(" align=16/4/8"), v.str().c_str());
    QCOMPARE(with_alignments(a, block + 6, block + 3, block + 16).align_a, 8);
    QCOMPARE(address_alignment(reinterpret_cast<void*>(uintptr_t(0x1080)), 256), uint32_t(128));
    QCOMPARE(address_alignment(reinterpret_cast<void*>(uintptr_t(0x1000)), 256), uint32_t(256));
    QCOMPARE(address_alignment(reinterpret_cast<void*>(uintptr_t(0x1002)), 16), uint32_t(2));
  }

  // The trainer's weights and weight gradients are views into one flat block
  // each (model.cpp), aligned only to their float offset; the rows above use
  // fresh tensors. The convolution on such views against the reference (on
  // CUDA the key carries the alignments and the graph's tensors declare them).
  void conv_on_parameter_views_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<int>("offset");  // floats into each block
    std::vector<Target> targets{{Impl::CpuFast, Layout::NCHW, DType::F32}};
    for (const Target& t : cuda_targets()) targets.push_back(t);
    for (const Target& t : targets)
      for (int offset : {1, 2, 32})
        QTest::addRow("%s: %d-byte aligned", t.name().c_str(), 4 * offset) << t << offset;
  }
  void conv_on_parameter_views() {
    FETCH_TARGET(t, be);
    QFETCH(int, offset);
    TB_GPU_TRY
    const auto g = ConvGeometry::make(3, 8, 10, 9, 16, 3, 1, 1);
    const auto [x, w, b, dy] = random_operands(g, 33);
    CpuBackend& ref = cpu_reference();
    Tensor y0 = like(dy, Layout::NCHW), dx0 = like(x, Layout::NCHW);
    Tensor dw0 = like(w, Layout::NCHW), db0 = Tensor::empty({g.C_out}, DType::F32);
    conv::forward(ref, g, x, w, b, y0);
    conv::backward(ref, g, x, w, dy, dx0, dw0, db0, false);

    // w then b in one block, dw then db in another, as Model::build lays them.
    const int64_t wn = shape_numel(g.weight_shape());
    const Tensor params = be.empty({offset + wn + g.C_out}, DType::F32);
    const Tensor grads = be.empty({offset + wn + g.C_out}, DType::F32);
    Tensor wv = Tensor::view_of(params, offset, g.weight_shape(), t.layout);
    Tensor bv = Tensor::view_of(params, offset + wn, {g.C_out});
    Tensor dwv = Tensor::view_of(grads, offset, g.weight_shape(), t.layout);
    Tensor dbv = Tensor::view_of(grads, offset + wn, {g.C_out});
    be.copy(to_device(be, w, t.layout), wv);
    be.copy(to_device(be, b), bv);
    const Tensor xd = to_device(be, x, t.layout), dyd = to_device(be, dy, t.layout);
    Tensor y1 = be.empty(g.output_shape(), DType::F32, t.layout);
    Tensor dx1 = be.empty(g.input_shape(), DType::F32, t.layout);
    conv::forward(be, g, xd, wv, bv, y1);
    conv::backward(be, g, xd, wv, dyd, dx1, dwv, dbv, false);
    EXPECT_OUTPUT(t, "", g, "y (weight view)", y0, to_host(be, y1));
    EXPECT_OUTPUT(t, "", g, "dx (weight view)", dx0, to_host(be, dx1));
    EXPECT_OUTPUT(t, "", g, "dw (gradient view)", dw0, to_host(be, dwv));
    EXPECT_OUTPUT(t, "", g, "db (gradient view)", db0, to_host(be, dbv));
    TB_GPU_CATCH
  }

  // A conv in front of training-mode batch norm (every conv of our models)
  // gets a dy whose channel sums are 0: its bias gradient is a sum of N·H·W
  // terms that cancel. The first GPU run saw the model's conv bias gradients
  // differ between CUDA and the CPU by ~100% of their size; this checks the
  // bias gradient on exactly that input, at the models' shapes, into views of a
  // flat gradient block, written and accumulated, against the exact (double)
  // sum of the same floats. Bound: a sum of m terms accumulated in precision
  // u_acc (float on the CPU: 2^-24; double on CUDA: 2^-53) is within
  // m·u_acc·Σ|dy| of the exact sum; rounding it (and the accumulated total) to
  // float adds 2^-24 of each. A wrong row, channel or stride misses by
  // O(max|dy|), far above that.
  void conv_bias_grad_of_zero_mean_dy_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<ConvCase>("c");
    QTest::addColumn<bool>("accumulate");
    std::vector<Target> targets{{Impl::CpuReference, Layout::NCHW, DType::F32},
                                {Impl::CpuReference, Layout::NHWC, DType::F32},
                                {Impl::CpuFast, Layout::NCHW, DType::F32}};
    for (const Target& t : cuda_targets()) targets.push_back(t);
    for (const Target& t : targets)
      for (const ConvCase& c : kZeroMeanDyCases)
        for (bool acc : {false, true})
          QTest::addRow("%s: %s%s", t.name().c_str(), c.name, acc ? " accumulate" : "")
              << t << c << acc;
  }
  void conv_bias_grad_of_zero_mean_dy() {
    FETCH_TARGET(t, be);
    QFETCH(ConvCase, c);
    QFETCH(bool, accumulate);
    TB_GPU_TRY
    const auto g = ConvGeometry::make(c.N, c.C_in, c.H, c.W, c.C_out, c.k, c.stride, c.pad);
    std::mt19937_64 rng(71);
    const Tensor x = random_tensor(g.input_shape(), DType::F32, rng);
    const Tensor w = random_tensor(g.weight_shape(), DType::F32, rng);
    const Tensor db0 = random_tensor({g.C_out}, DType::F32, rng);
    const ZeroMeanDy z = zero_mean_dy(g, rng);
    // db inside a gradient block, after a weight-sized run of floats (Model::build's order).
    const int64_t wn = shape_numel(g.weight_shape());
    const Tensor grads = be.empty({1 + wn + g.C_out}, DType::F32);
    Tensor dwv = Tensor::view_of(grads, 1, g.weight_shape(), t.layout);
    Tensor dbv = Tensor::view_of(grads, 1 + wn, {g.C_out});
    be.copy(to_device(be, db0), dbv);
    be.fill(dwv, 0.0);
    const Tensor xd = to_device(be, x, t.layout), wd = to_device(be, w, t.layout);
    const Tensor dyd = to_device(be, z.dy, t.layout);
    Tensor dx = be.empty(g.input_shape(), DType::F32, t.layout);
    conv::backward(be, g, xd, wd, dyd, dx, dwv, dbv, accumulate);
    const double u_acc = t.on_gpu() ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
    double worst = 0.0;
    const QString m =
        zero_mean_db_outside(t.name(), z, db0, accumulate, to_host(be, dbv), u_acc, &worst);
    QVERIFY2(m.isEmpty(), qPrintable(m));
    tb::test::report_tolerance("fp32", worst, 1.0,
                               std::string("conv db of zero-mean dy, error / bound, ") + c.name);
    TB_GPU_CATCH
  }

  // The bias kernels (engine/backend/cuda/bias.cu) on the CUDA emulator
  // (tests/cuda_emulator), here on any machine, as conv_cuda.cpp runs them:
  // y += b onto the CPU reference's y without bias (f16/bf16: its lp y, as
  // cuDNN writes one), db (+)= Σ dy, written and accumulated, both layouts,
  // both of the emulator's thread orders; against the CPU reference with the
  // GPU slots' bounds: f32 conv_matches_reference's (check_output), f16/bf16
  // activations conv_lp_activations_match_cpu's (lp_activations_bound; the
  // accumulated db the same bound on db_old + db, each side adding db_old
  // once); and y bit for bit the add's own rule (bias_added), which those
  // bounds, made for cuDNN's roundings, would not see. Shapes: C = 37 (a
  // 32-channel group of 5), 2001 rows (1024-row slices, the second partial
  // and no multiple of the 8 row sums) and HW = 667 (the NCHW walk ends
  // mid-stride); 3136 rows (4 slices); a 1x1 output of 300 channels (the rows
  // path in NCHW too: 5 rows for 8 row sums, 10 groups, the finish kernel
  // over 2 blocks); HW = 25 of 256 threads (the NCHW block mostly idle
  // lanes); an empty batch (db = 0).
  void conv_bias_emulated_cuda_matches_cpu_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<ConvCase>("c");
    const ConvCase cases[] = {{"3x2x23x29 -> 37, k3 p1", 3, 2, 23, 29, 37, 3, 1, 1},
                              {"fmnist block1", 4, 1, 28, 28, 32, 3, 1, 1},
                              {"1x1 output, 300 channels", 5, 3, 3, 3, 300, 3, 1, 0},
                              {"2x3x9x9 -> 7, k3 s2 p1", 2, 3, 9, 9, 7, 3, 2, 1},
                              {"empty batch", 0, 2, 5, 5, 3, 3, 1, 1}};
    for (DType dt : {DType::F32, DType::F16, DType::BF16})
      for (const Target& t : cuda_targets(dt))
        for (const ConvCase& c : cases) QTest::addRow("%s: %s", t.name().c_str(), c.name) << t << c;
  }
  void conv_bias_emulated_cuda_matches_cpu() {
    QFETCH(Target, target);
    QFETCH(ConvCase, c);
#if defined(TRAINBENCH_CUDA_EMULATED)
    TB_EMU_TRY
    const auto g = ConvGeometry::make(c.N, c.C_in, c.H, c.W, c.C_out, c.k, c.stride, c.pad);
    std::mt19937_64 rng(131 + uint64_t(c.C_out));
    const DType dt = target.dtype;
    const Layout l = target.layout;
    CpuBackend& ref = cpu_reference();
    const ConvOracle o = conv_oracle(g, true, DType::F32, rng);
    Tensor none, no_dx, no_dw;
    // The CPU's y without bias (f32, or the lp y of the rounded operands),
    // and the reference outputs the emulated kernels meet.
    const Tensor xr = dt == DType::F32 ? o.x : lp_of(ref, o.x, dt);
    const Tensor wr = dt == DType::F32 ? o.w : lp_of(ref, o.w, dt);
    const Tensor dyr = dt == DType::F32 ? o.dy : lp_of(ref, o.dy, dt);
    Tensor y_nb = Tensor::empty(g.output_shape(), dt);
    conv::forward(ref, g, xr, wr, none, y_nb);
    ConvOut want;
    Tensor want_acc = clone(o.db_old);
    if (dt == DType::F32) {
      want.y = o.y, want.db = o.db, want_acc = o.db_acc;
    } else {
      want = conv_lp(ref, g, o.x, o.w, o.b, o.dy, dt, Layout::NCHW, Layout::NCHW, dt);
      conv::backward(ref, g, xr, wr, dyr, no_dx, no_dw, want_acc, true);
    }
    const Target f32{Impl::Cuda, l, DType::F32};
    for (tb_emu::Schedule order : {tb_emu::Schedule::forward, tb_emu::Schedule::reverse}) {
      EmulatorSchedule use(order);
      const std::string ep = std::string(" (emulated, ") + schedule_name(order) + ")";
      Tensor y = in_layout(clone(y_nb), l);
      emulated_add_bias(g, o.b, y);
      QVERIFY2(bitwise_equal(bias_added(g, y_nb, o.b), to_nchw(y)),
               qPrintable(QString::fromStdString("y is not round(y + b) bit for bit" + ep)));
      const Tensor dyl = in_layout(dyr, l);
      Tensor db = Tensor::empty({g.C_out}, DType::F32), db_acc = clone(o.db_old);
      std::fill_n(db.data_as<float>(), g.C_out, std::nanf(""));  // written, not left
      emulated_bias_grad(g, dyl, db, false);
      emulated_bias_grad(g, dyl, db_acc, true);
      if (dt == DType::F32) {
        EXPECT_OUTPUT(f32, "", g, "y" + ep, want.y, y);
        EXPECT_OUTPUT(f32, "", g, "db" + ep, want.db, db);
        EXPECT_OUTPUT(f32, "", g, "accumulated db" + ep, want_acc, db_acc);
      } else {
        const BoundOf bound = lp_activations_bound(dt, g, o.b);
        QString m = first_outside(want, ConvOut{host_f32(ref, y), {}, {}, db}, dt, l, bound);
        QVERIFY2(m.isEmpty(), qPrintable(m + QString::fromStdString(ep)));
        m = first_outside(ConvOut{{}, {}, {}, want_acc}, ConvOut{{}, {}, {}, db_acc}, dt, l, bound);
        QVERIFY2(m.isEmpty(), qPrintable("accumulated " + m + QString::fromStdString(ep)));
      }
    }
    TB_EMU_CATCH
#else
    QSKIP(kNoEmulator);
#endif
  }

  // conv_bias_grad_of_zero_mean_dy on the emulated bias gradient (bias.cu on
  // the CUDA emulator): the same dy, shapes and flat-block view, written and
  // accumulated, both layouts and thread orders, the CUDA side's bound (sums
  // in double).
  void conv_bias_grad_emulated_of_zero_mean_dy_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<ConvCase>("c");
    QTest::addColumn<bool>("accumulate");
    for (const Target& t : cuda_targets())
      for (const ConvCase& c : kZeroMeanDyCases)
        for (bool acc : {false, true})
          QTest::addRow("%s: %s%s", t.name().c_str(), c.name, acc ? " accumulate" : "")
              << t << c << acc;
  }
  void conv_bias_grad_emulated_of_zero_mean_dy() {
    QFETCH(Target, target);
    QFETCH(ConvCase, c);
    QFETCH(bool, accumulate);
#if defined(TRAINBENCH_CUDA_EMULATED)
    TB_EMU_TRY
    const auto g = ConvGeometry::make(c.N, c.C_in, c.H, c.W, c.C_out, c.k, c.stride, c.pad);
    std::mt19937_64 rng(71);  // conv_bias_grad_of_zero_mean_dy's draws
    random_tensor(g.input_shape(), DType::F32, rng);
    random_tensor(g.weight_shape(), DType::F32, rng);
    const Tensor db0 = random_tensor({g.C_out}, DType::F32, rng);
    const ZeroMeanDy z = zero_mean_dy(g, rng);
    const Tensor dyl = in_layout(z.dy, target.layout);
    const int64_t wn = shape_numel(g.weight_shape());
    const Tensor grads = Tensor::empty({1 + wn + g.C_out}, DType::F32);
    for (tb_emu::Schedule order : {tb_emu::Schedule::forward, tb_emu::Schedule::reverse}) {
      EmulatorSchedule use(order);
      Tensor dbv = Tensor::view_of(grads, 1 + wn, {g.C_out});
      std::memcpy(dbv.data(), db0.data(), db0.nbytes());
      emulated_bias_grad(g, dyl, dbv, accumulate);
      double worst = 0.0;
      const QString m = zero_mean_db_outside(target.name() + " emulated " + schedule_name(order), z,
                                             db0, accumulate, dbv, std::ldexp(1.0, -53), &worst);
      QVERIFY2(m.isEmpty(), qPrintable(m));
    }
    TB_EMU_CATCH
#else
    QSKIP(kNoEmulator);
#endif
  }

  void conv_plan_cache_and_policies() {
    NEED_GPU();
    TB_GPU_TRY
#ifdef TRAINBENCH_HAVE_CUDA
    const auto g = ConvGeometry::make(2, 4, 10, 10, 6, 3, 1, 1);
    const Tensor x = random_tensor(g.input_shape(), 91), w = random_tensor(g.weight_shape(), 92);
    auto run = [&](Backend& be) { return forward_without_bias(be, g, x, w); };
    auto fresh = make_cuda_backend(0, BackendOptions{});
    auto& cb = static_cast<CudaBackend&>(*fresh);
    QCOMPARE(cb.conv_plan_count(), size_t(0));
    QVERIFY(!cb.describe().contains("kernel_paths"));  // nothing chosen yet
    const Tensor y1 = run(cb);
    QCOMPARE(cb.conv_plan_count(), size_t(1));
    const Tensor y2 = run(cb);
    QCOMPARE(cb.conv_plan_count(), size_t(1));  // same shape: the cached plan
    QVERIFY(bitwise_equal(y1, y2));
    // The run's environment names the engine and its workspace for each plan.
    auto plans_of = [](Backend& be) { return be.describe()["kernel_paths"]["convolution"]; };
    {
      const nlohmann::json plans = plans_of(cb);
      QCOMPARE(plans.size(), size_t(1));
      const nlohmann::json r = plans.begin().value();
#ifdef TRAINBENCH_EMULATED_BACKEND
      QCOMPARE(r.value("path", ""), std::string("cudnn-emulated"));  // never claims cuDNN
#else
      QCOMPARE(r.value("path", ""), std::string("cudnn"));
#endif
      QVERIFY2(!r.value("plan", "").empty() && r.value("plan", "") != "?",
               qPrintable(QString::fromStdString(r.dump())));
      QVERIFY(r.value("workspace_bytes", int64_t(-1)) >= 0);
      QCOMPARE(r.value("chosen_by", ""), std::string("heuristics' first choice"));
    }
    // Autotune and deterministic backends agree with the heuristic choice.
    auto bench = make_cuda_backend(0, BackendOptions{.cudnn_benchmark = true});
    auto det = make_cuda_backend(0, BackendOptions{.deterministic = true});
    // Other fp32 engines: another summation order (C·R·S = 36 terms), and
    // Winograd or FFT engines among the candidates, whose transforms round
    // more than a direct sum does (32x the direct bound is an allowance, not
    // yet measured on a GPU); a wrong plan is still off by the size of y.
    constexpr double kTransformAlgorithms = 32;
    const double tol = kTransformAlgorithms * tb::test::network_tolerance("fp32", 4, 4 * 3 * 3);
    EXPECT_CLOSE_SCALED(y1, run(*bench), tol, "conv autotuned");
    {
      const nlohmann::json plans = plans_of(*bench);
      QCOMPARE(plans.size(), size_t(1));
      const std::string by = plans.begin().value().value("chosen_by", "");
      QVERIFY2(by.rfind("autotune over ", 0) == 0 && std::stoi(by.substr(14)) >= 1, by.c_str());
    }
    const Tensor d1 = run(*det), d2 = run(*det);
    EXPECT_CLOSE_SCALED(y1, d1, tol, "conv deterministic");
    QVERIFY(bitwise_equal(d1, d2));
#endif
    TB_GPU_CATCH
  }

  // cudnn_benchmark where autotuning's workspace (the largest candidate's)
  // does not fit: the heuristics' first choice runs and the record says why;
  // the run does not fail with out-of-memory. The device is made "full" for
  // the workspace by failing the next cudaMalloc and its retry.
  void conv_autotune_without_memory_keeps_the_heuristics_plan() {
    NEED_GPU();
    TB_GPU_TRY
#ifdef TRAINBENCH_HAVE_CUDA
    // A shape whose candidates include large-workspace engines (FFT, implicit
    // precomputed GEMM): their workspace is its own segment, not a cache hit.
    const auto g = ConvGeometry::make(16, 64, 32, 32, 64, 3, 1, 1);
    const Tensor x = random_tensor(g.input_shape(), 93), w = random_tensor(g.weight_shape(), 94);
    Tensor none;
    auto bench = make_cuda_backend(0, BackendOptions{.cudnn_benchmark = true});
    auto plain = make_cuda_backend(0, BackendOptions{});
    const Tensor want = forward_without_bias(*plain, g, x, w);
    auto& a = tb::cuda::CachingAllocator::instance();
    Tensor y = bench->empty(g.output_shape(), DType::F32);
    const Tensor xd = to_device(*bench, x), wd = to_device(*bench, w);
    bench->synchronize();
    a.empty_cache();
    const auto before = a.stats();
    struct Uninject {
      tb::cuda::CachingAllocator& a;
      ~Uninject() { a.inject_malloc_failures(0); }
    } uninject{a};
    a.inject_malloc_failures(2);  // the workspace's cudaMalloc and the retry after emptying the cache
    conv::forward(*bench, g, xd, wd, none, y);
    a.inject_malloc_failures(0);
    const std::string by =
        bench->describe()["kernel_paths"]["convolution"].begin().value().value("chosen_by", "");
    if (a.stats().oom_retries == before.oom_retries)
      QSKIP(qPrintable(QString("autotuning this shape took no new segment (chosen_by: %1): "
                               "nothing was refused")
                           .arg(QString::fromStdString(by))));
    QVERIFY2(by.rfind("heuristics' first choice (autotuning's workspace of ", 0) == 0, by.c_str());
    const double tol = 32 * tb::test::network_tolerance("fp32", 4, 64 * 3 * 3);
    EXPECT_CLOSE_SCALED(want, to_host(*bench, y), tol, "conv with autotuning given up");
    conv::forward(*bench, g, xd, wd, none, y);  // no second try: the plan stays
    QCOMPARE(bench->describe()["kernel_paths"]["convolution"].begin().value().value("chosen_by", ""),
             by);
#endif
    TB_GPU_CATCH
  }
};

QTEST_GUILESS_MAIN(TestOpConv)
#include "test_op_conv.moc"
