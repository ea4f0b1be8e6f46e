// SPDX-License-Identifier: GPL-3.0-or-later
// The optimizer op family (optimizer::step: SGD, AdamW, RMSProp, LARS, LAMB,
// per-tensor and multi-tensor) and what drives it in optim/: first steps
// against values worked out by hand (f64 reference 1e-7..1e-9, f32 fast 1e-6),
// per-tensor vs multi-tensor bit equality, no-decay slots; every target's step
// against the CPU reference (optimizer_step_matches_reference: per-tensor and
// multi-tensor bit-identical on the target, parameters and state within 1e-5
// relative + 1e-6 of the reference); the CUDA kernels (optimizer.cu,
// sum_squares.cu) on the CUDA emulator with the GPU slots' bounds, both
// thread orders: every optimizer at the chunk edges and over 130 tensors, a
// graph replay's device constants and AMP's skipped step bit for bit, the sum
// of squares; LR schedules and scaling, global-norm clipping, and gradient
// accumulation against one big batch.
// GPU rows QSKIP with the reason where there is no device.
#include <QtTest>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/ops/amp/amp.h"
#include "engine/ops/linear/linear.h"
#include "engine/ops/loss/loss.h"
#include "engine/ops/optimizer/optimizer.h"
#include "engine/optim/clip.h"
#include "engine/optim/optimizer.h"
#include "engine/optim/schedule.h"
#include "tests/engine/device_fixture.h"
#include "tests/engine/tensor_helpers.h"
#include "tests/cuda_emulator/emulated_slot.h"
#if defined(TRAINBENCH_CUDA_EMULATED)
#include "tests/cuda_emulator/begin_emulated.h"
#include "engine/ops/optimizer/optimizer.cuh"
#include "tests/cuda_emulator/end_emulated.h"
#endif

using namespace tb;
using namespace tb::test;

namespace {

// Parameters and gradients in one contiguous block each, like Model::build:
// tensor i has sizes[i] elements; decay[i] is its weight_decay flag.
struct Params {
  Tensor values, grads;
  std::vector<ParamInfo> infos;

  Params(const std::vector<int64_t>& sizes, const std::vector<bool>& decay, DType dt) {
    int64_t total = 0;
    for (int64_t s : sizes) total += s;
    values = Tensor::zeros({total}, dt);
    grads = Tensor::zeros({total}, dt);
    int64_t off = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      infos.push_back({"p" + std::to_string(i), Tensor::view_of(values, off, {sizes[i]}),
                       Tensor::view_of(grads, off, {sizes[i]}), decay[i]});
      off += sizes[i];
    }
  }
  double v(int64_t i) const {
    return values.dtype() == DType::F64 ? values.data_as<double>()[i] : values.data_as<float>()[i];
  }
  void set(Tensor& t, std::initializer_list<double> xs) {
    int64_t i = 0;
    for (double x : xs) {
      if (t.dtype() == DType::F64)
        t.data_as<double>()[i++] = x;
      else
        t.data_as<float>()[i++] = float(x);
    }
  }
};

// p = [1, −2] (decayed) and b = [0.5] (no decay); gradients [0.5, 1] and [0.2],
// held constant over the steps.
Params tiny(DType dt) {
  Params P({2, 1}, {true, false}, dt);
  P.set(P.values, {1.0, -2.0, 0.5});
  P.set(P.grads, {0.5, 1.0, 0.2});
  return P;
}

// p = [3, 4] (‖p‖ = 5, decayed) and b = [0.5] (no decay); gradients [0.6, 0.8]
// (‖g‖ = 1) and [0.2]: round numbers for the trust ratios of LARS and LAMB.
Params tiny345(DType dt) {
  Params P({2, 1}, {true, false}, dt);
  P.set(P.values, {3.0, 4.0, 0.5});
  P.set(P.grads, {0.6, 0.8, 0.2});
  return P;
}

// Runs `steps` steps and checks the parameters after each against expected[step].
void expect_steps(Optimizer& opt, const Params& P, float lr,
                  const std::vector<std::vector<double>>& expected, double tol) {
  for (size_t s = 0; s < expected.size(); ++s) {
    opt.step(lr);
    for (size_t i = 0; i < expected[s].size(); ++i) {
      const double got = P.v(int64_t(i));
      QVERIFY2(std::abs(got - expected[s][i]) < tol,
               qPrintable(QString("step %1 element %2: got %3, expected %4")
                              .arg(s + 1)
                              .arg(i)
                              .arg(got, 0, 'g', 12)
                              .arg(expected[s][i], 0, 'g', 12)));
    }
  }
  QCOMPARE(opt.steps(), int64_t(expected.size()));
}

void fill_random(Tensor& t, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype() == DType::F64)
      t.data_as<double>()[i] = d(rng);
    else
      t.data_as<float>()[i] = float(d(rng));
  }
}

// ---------------------------------------------------------------- a step vs the reference

// Sizes around the 65536-element chunk; the last slot takes no decay.
const std::vector<int64_t> kChunkEdgeSizes{1, 300, 65536, 70001, 131073, 17};

// The optimizers and settings every target's step is checked with.
struct StepCase {
  const char* name;
  OptimizerKind kind;
  float momentum;
  bool nesterov;
  float wd;
};
const StepCase kStepCases[] = {
    {"sgd", OptimizerKind::SGD, 0.0f, false, 0.0f},
    {"sgd momentum wd", OptimizerKind::SGD, 0.9f, false, 5e-4f},
    {"sgd nesterov", OptimizerKind::SGD, 0.9f, true, 1e-4f},
    {"adamw", OptimizerKind::AdamW, 0.0f, false, 0.05f},
    {"rmsprop", OptimizerKind::RMSProp, 0.0f, false, 1e-4f},
    {"rmsprop momentum", OptimizerKind::RMSProp, 0.8f, false, 0.0f},
    {"lars", OptimizerKind::LARS, 0.9f, false, 5e-4f},
    {"lamb", OptimizerKind::LAMB, 0.0f, false, 0.01f}};

// One side's parameters, gradients and states, tensor by tensor.
struct StepSet {
  std::vector<Tensor> p, g, s1, s2;
};

// The starting values of every side (host, f32): p and g in [-1, 1).
// Second moments are positive: state2 (AdamW, LAMB), or state1 for RMSProp
// (its mean square; a negative one makes the step NaN).
StepSet random_step_set(OptimizerKind kind, const std::vector<int64_t>& sizes) {
  StepSet s;
  const bool rms = kind == OptimizerKind::RMSProp;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const Shape sh{sizes[i]};
    s.p.push_back(random_tensor(sh, 100 + i, -1, 1));
    s.g.push_back(random_tensor(sh, 200 + i, -1, 1));
    s.s1.push_back(rms ? random_tensor(sh, 300 + i, 0.01, 0.1)
                       : random_tensor(sh, 300 + i, -0.1, 0.1));
    s.s2.push_back(rms ? random_tensor(sh, 400 + i, -0.1, 0.1)
                       : random_tensor(sh, 400 + i, 0.01, 0.1));
  }
  return s;
}

StepSet copied(Backend& be, const StepSet& s, bool to_backend) {
  StepSet o;
  const auto each = [&](const std::vector<Tensor>& from, std::vector<Tensor>& to) {
    for (const Tensor& t : from) to.push_back(to_backend ? to_device(be, t) : to_host(be, t));
  };
  each(s.p, o.p), each(s.g, o.g), each(s.s1, o.s1), each(s.s2, o.s2);
  return o;
}

// The slots of a set; the last takes no decay.
std::vector<ParamSlot> slot_list(StepSet& s) {
  std::vector<ParamSlot> v;
  for (size_t i = 0; i < s.p.size(); ++i)
    v.push_back({s.p[i], s.g[i], s.s1[i], s.s2[i], i + 1 != s.p.size()});
  return v;
}

// LAMB's direction u = m̂/(sqrt(v̂) + eps) + wd·p is a sum of terms that may
// nearly cancel (a gradient against the moment, the decay against both), so
// each side's rounding of u is a few units of its terms' size, not of u's:
// on an H200 (2026-11-28) a step of 1.35e-5 on a p of 3.5e-4 differed by
// 8.4e-10, over step_differs's 2.6e-10 without this. Per element, the steps'
// sum of lr·trust·(32u·U + t·|u|): U = |m|·ibc1/(sqrt(v̂) + eps) + wd·|p|,
// |m| the moment's recurrence on absolute values; 32u for at most 16
// roundings a step in m, v, u and p on each of the two sides; t = 32u·(‖U‖ /
// ‖u‖ + 1), the trust ratio's relative error from norms of values each off
// by that much. In double from the starting values (`start`, before any
// step; the gradients stay the same every step, as
// optimizer_step_matches_reference gives them). Other kinds: none.
std::vector<std::vector<double>> lamb_slack(OptimizerStep st, const StepSet& start,
                                            int64_t steps) {
  std::vector<std::vector<double>> out(start.p.size());
  if (st.kind != OptimizerKind::LAMB) return out;
  const double units = 32 * std::ldexp(1.0, -24);
  for (size_t s = 0; s < start.p.size(); ++s) {
    const bool decay = s + 1 != start.p.size();  // slot_list's
    const size_t n = size_t(start.p[s].numel());
    std::vector<double> p(n), m(n), ma(n), v(n), u(n), ua(n), slack(n, 0.0);
    for (size_t i = 0; i < n; ++i) {
      p[i] = value_at(start.p[s], int64_t(i));
      m[i] = value_at(start.s1[s], int64_t(i));
      ma[i] = std::abs(m[i]);
      v[i] = value_at(start.s2[s], int64_t(i));
    }
    for (int64_t t = 1; t <= steps; ++t) {
      st.step = t;
      const StepConstants k = optimizer::step_constants(st);
      const double wd = decay ? k.wd : 0.0;
      double pp = 0, uu = 0, UU = 0;
      for (size_t i = 0; i < n; ++i) {
        const double g = value_at(start.g[s], int64_t(i)) * k.gs;
        m[i] = k.b1 * m[i] + (1 - k.b1) * g;
        ma[i] = k.b1 * ma[i] + (1 - k.b1) * std::abs(g);
        v[i] = k.b2 * v[i] + (1 - k.b2) * g * g;
        const double den = std::sqrt(v[i] * k.inv_bc2) + k.eps;
        u[i] = m[i] * k.inv_bc1 / den + wd * p[i];
        ua[i] = ma[i] * k.inv_bc1 / den + wd * std::abs(p[i]);
        pp += p[i] * p[i], uu += u[i] * u[i], UU += ua[i] * ua[i];
      }
      const double trust = (pp == 0 || uu == 0) ? 1.0 : std::sqrt(pp / uu);
      const double share = uu == 0 ? units : units * (std::sqrt(UU / uu) + 1);
      for (size_t i = 0; i < n; ++i) {
        slack[i] += k.lr * trust * (units * ua[i] + share * std::abs(u[i]));
        p[i] -= k.lr * trust * u[i];
      }
    }
    out[s] = std::move(slack);
  }
  return out;
}

// The step itself, p − p0, against the reference's: "" or the first element
// off. A LARS step moves p by about 1e-5 of its size, inside the parameters'
// own bound, so a wrong trust ratio shows only here. Bound: the arithmetic's
// 1e-5 of the step, plus each side's rounding of p to f32 once a step (half
// an ulp of |p| each, 2^-24·|p|·2 a step), plus `slack` (lamb_slack's, per
// element; none when empty).
std::string step_differs(const Tensor& p0, const Tensor& want, const Tensor& got, int64_t steps,
                         const std::vector<double>& slack = {}) {
  for (int64_t k = 0; k < p0.numel(); ++k) {
    const double s = value_at(p0, k), w = value_at(want, k) - s, g = value_at(got, k) - s;
    const double mag = std::max(std::abs(s), std::abs(value_at(want, k)));
    const double tol = 1e-5 * std::abs(w) + double(steps) * std::ldexp(mag, -23) +
                       (slack.empty() ? 0.0 : slack[size_t(k)]);
    if (!(std::abs(g - w) <= tol)) {
      char msg[160];
      std::snprintf(msg, sizeof msg,
                    "the step p - p0 at element %lld: reference %.9g, got %.9g (|diff| %.3g > %.3g)",
                    (long long)k, w, g, std::abs(g - w), tol);
      return msg;
    }
  }
  return "";
}

// A CUDA side after the same steps as the CPU reference's `ref` (host copies:
// `per` from per-tensor launches, `multi` from multi-tensor ones): "" or the
// first thing that differs. The two paths agree bit for bit; parameters and
// states are within 1e-5 relative + 1e-6 of the reference; every parameter
// moved from its start (random_step_set), and by the reference's step
// (step_differs, with `slack` per slot where given). `report`: the precision
// of the tb-tolerance lines, or null for none.
std::string cuda_steps_differ(const StepSet& ref, const StepSet& per, const StepSet& multi,
                              int64_t steps, const std::string& who,
                              const char* report = "fp32",
                              const std::vector<std::vector<double>>& slack = {}) {
  for (size_t i = 0; i < ref.p.size(); ++i) {
    const std::string slot = " (" + who + ", slot " + std::to_string(i) + ")";
    if (!bitwise_equal(per.p[i], multi.p[i])) return "per-tensor vs multi-tensor" + slot;
    if (!bitwise_equal(per.s1[i], multi.s1[i])) return "state1 per vs multi" + slot;
    if (!bitwise_equal(per.s2[i], multi.s2[i])) return "state2 per vs multi" + slot;
    const auto close = [&](const char* name, const Tensor& want, const Tensor& got) {
      return compare(want, got, 1e-5, 1e-6, std::string(name) + " vs the reference " + who, false,
                     report);
    };
    for (const Comparison& c : {close("parameters", ref.p[i], per.p[i]),
                                close("state1", ref.s1[i], per.s1[i]),
                                close("state2", ref.s2[i], per.s2[i])})
      if (!c.ok) return c.msg;
    const Tensor p0 = random_tensor({ref.p[i].numel()}, 100 + i, -1, 1);
    if (bitwise_equal(p0, per.p[i])) return "parameter unchanged" + slot;
    const std::string moved =
        step_differs(p0, ref.p[i], per.p[i], steps, slack.empty() ? std::vector<double>{} : slack[i]);
    if (!moved.empty()) return moved + slot;
  }
  return "";
}

#if defined(TRAINBENCH_CUDA_EMULATED)
namespace emu = tb::cuda_emu;

// More tensors than opt_trust_kernel's 128-thread block (a second block, its
// threads past the last tensor idle): 130 of 1..613 elements, one of 70001
// (two chunks) among them.
std::vector<int64_t> many_sizes() {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < 130; ++i) v.push_back(i == 70 ? 70001 : (i * 97) % 613 + 1);
  return v;
}

// optimizer_cuda.cpp's make_consts: the constants as every backend forms them.
emu::OptConsts emulated_consts(const OptimizerStep& s) {
  return emu::launch_consts(int(s.kind), optimizer::step_constants(s));
}

// What a step on the CUDA backend may add: AMP's found_inf flag, and a
// captured graph's replay (trick 24), whose launches carry the constants of
// the step they were captured at (`captured`) while the kernels read `st`'s
// from the device buffer launch_opt_set_consts wrote.
struct EmulatedStepExtras {
  const float* found_inf = nullptr;
  const OptimizerStep* captured = nullptr;
};

// CudaKernels::step (optimizer_cuda.cpp) with the emulated launchers on host
// tensors: the same chunk descriptors, the same launches per tensor or over
// every chunk. Partials and trust start as NaN, so a value a kernel fails to
// write shows.
void step_emulated(const OptimizerStep& st, const std::vector<ParamSlot>& params, bool multi_tensor,
                   const EmulatedStepExtras& extras = {}) {
  const optimizer::States states = optimizer::needed_states(st);
  auto [chunks, begin, decay] = emu::chunks_of(params, states.state1, states.state2);
  const int64_t C = int64_t(chunks.size()), S = int64_t(params.size());
  emu::OptConsts k = emulated_consts(extras.captured ? *extras.captured : st);
  k.found_inf = extras.found_inf;
  std::vector<double> dev(emu::kOptConstsBytes / sizeof(double));
  if (extras.captured) {
    emu::launch_opt_set_consts(emulated_consts(st), dev.data(), nullptr);
    k.dev = dev.data();
  }
  const bool norms = st.kind == OptimizerKind::LARS || st.kind == OptimizerKind::LAMB;
  std::vector<double> partials(size_t(2 * C), std::nan("")), trust(size_t(S), std::nan(""));
  double* pa = norms ? partials.data() : nullptr;
  double* tr = norms ? trust.data() : nullptr;
  if (multi_tensor) {
    if (norms) {
      emu::launch_opt_norms(k, chunks.data(), 0, C, pa, nullptr);
      emu::launch_opt_trust(k, pa, begin.data(), decay.data(), 0, S, tr, nullptr);
    }
    emu::launch_opt_elementwise(k, chunks.data(), 0, C, tr, nullptr);
  } else {
    for (int64_t s = 0; s < S; ++s) {
      const int64_t first = begin[size_t(s)], count = begin[size_t(s) + 1] - first;
      if (count == 0) continue;
      if (norms) {
        emu::launch_opt_norms(k, chunks.data(), first, count, pa, nullptr);
        emu::launch_opt_trust(k, pa, begin.data(), decay.data(), s, 1, tr, nullptr);
      }
      emu::launch_opt_elementwise(k, chunks.data(), first, count, tr, nullptr);
    }
  }
}

// Every tensor of a set, for bit comparisons.
std::vector<Tensor> all_of(const StepSet& s) {
  std::vector<Tensor> v;
  for (const auto* part : {&s.p, &s.g, &s.s1, &s.s2}) v.insert(v.end(), part->begin(), part->end());
  return v;
}

bool same_bits(const StepSet& a, const StepSet& b) {
  const std::vector<Tensor> x = all_of(a), y = all_of(b);
  for (size_t i = 0; i < x.size(); ++i)
    if (!bitwise_equal(x[i], y[i])) return false;
  return true;
}
#endif

}  // namespace

class TestOpOptim : public QObject {
  Q_OBJECT

 private slots:
  // ---------------------------------------------------------------- optimizers by hand
  // All in f64 on the reference path (tolerance 1e-9), then once in f32 on the
  // fast path (tolerance 1e-6).

  // lr 0.1, μ 0.9, wd 0.01.
  // step 1: g = [0.5 + 0.01·1, 1 − 0.01·2] = [0.51, 0.98]; buf = g;
  //         p = [1 − 0.051, −2 − 0.098] = [0.949, −2.098]
  // step 2: g = [0.5 + 0.00949, 1 − 0.02098] = [0.50949, 0.97902]
  //         buf = 0.9·[0.51, 0.98] + g = [0.96849, 1.86102]
  //         p = [0.949 − 0.096849, −2.098 − 0.186102] = [0.852151, −2.284102]
  // no-decay b: buf 0.2 → b = 0.48; buf 0.18 + 0.2 = 0.38 → b = 0.442
  void sgdMomentum() {
    for (DType dt : {DType::F64, DType::F32}) {
      CpuBackend be(BackendOptions{.reference = dt == DType::F64});
      Params P = tiny(dt);
      OptimizerConfig c;
      c.kind = OptimizerKind::SGD, c.momentum = 0.9f, c.weight_decay = 0.01f;
      Optimizer opt(c, P.infos, be);
      QCOMPARE(opt.state_blocks().size(), size_t(1));
      expect_steps(opt, P, 0.1f, {{0.949, -2.098, 0.48}, {0.852151, -2.284102, 0.442}},
                   dt == DType::F64 ? 1e-7 : 1e-6);  // f64 run: lr/μ/wd are f32 constants
    }
  }

  // Nesterov, same setting: g ← g + μ·buf
  // step 1: buf = [0.51, 0.98]; g = [0.51 + 0.459, 0.98 + 0.882] = [0.969, 1.862]
  //         p = [0.9031, −2.1862]
  // step 2: g = [0.509031, 0.978138]; buf = [0.968031, 1.860138]
  //         g = [0.509031 + 0.8712279, 0.978138 + 1.6741242] = [1.3802589, 2.6522622]
  //         p = [0.9031 − 0.13802589, −2.1862 − 0.26522622] = [0.76507411, −2.45142622]
  void sgdNesterov() {
    CpuBackend be(BackendOptions{.reference = true});
    Params P = tiny(DType::F64);
    OptimizerConfig c;
    c.kind = OptimizerKind::SGD, c.momentum = 0.9f, c.nesterov = true, c.weight_decay = 0.01f;
    Optimizer opt(c, P.infos, be);
    expect_steps(opt, P, 0.1f, {{0.9031, -2.1862}, {0.76507411, -2.45142622}}, 1e-7);
  }

  // lr 0.01, β (0.9, 0.999), wd 0.1 (decoupled). With a constant gradient the
  // bias-corrected moments are m̂ = g, v̂ = g², so the step is lr·g/|g| = 0.01
  // (up to eps = 1e-8, i.e. 2e-10 here).
  // step 1: p = [1, −2]·(1 − 0.001) − 0.01 = [0.989, −2.008]
  // step 2: p = [0.989, −2.008]·0.999 − 0.01 = [0.978011, −2.015992]
  // no-decay b: 0.49, 0.48
  void adamw() {
    for (DType dt : {DType::F64, DType::F32}) {
      CpuBackend be(BackendOptions{.reference = dt == DType::F64});
      Params P = tiny(dt);
      OptimizerConfig c;
      c.kind = OptimizerKind::AdamW, c.weight_decay = 0.1f;
      Optimizer opt(c, P.infos, be);
      QCOMPARE(opt.state_blocks().size(), size_t(2));
      expect_steps(opt, P, 0.01f, {{0.989, -2.008, 0.49}, {0.978011, -2.015992, 0.48}},
                   dt == DType::F64 ? 1e-7 : 2e-6);
    }
  }

  // lr 0.01, α 0.99, no momentum.
  // step 1: v = 0.01·g² = [0.0025, 0.01]; g/sqrt(v) = [10, 10]; p = [0.9, −2.1]
  // step 2: v = 0.99·v + 0.01·g² = [0.004975, 0.0199]; sqrt = [0.0705337, 0.1410674]
  //         g/sqrt(v) = 7.0888121 for both; p = [0.8291119, −2.1708881]
  // with μ 0.9: buf = 10, then 9 + 7.0888121 = 16.0888121; p = [0.7391119, −2.2608881]
  // (eps = 1e-8 shifts these by ~2e-8)
  void rmsprop() {
    CpuBackend be(BackendOptions{.reference = true});
    {
      Params P = tiny(DType::F64);
      OptimizerConfig c;
      c.kind = OptimizerKind::RMSProp;
      Optimizer opt(c, P.infos, be);
      QCOMPARE(opt.state_blocks().size(), size_t(1));
      expect_steps(opt, P, 0.01f, {{0.9, -2.1}, {0.8291119, -2.1708881}}, 1e-6);
    }
    {
      Params P = tiny(DType::F64);
      OptimizerConfig c;
      c.kind = OptimizerKind::RMSProp, c.momentum = 0.9f;
      Optimizer opt(c, P.infos, be);
      QCOMPARE(opt.state_blocks().size(), size_t(2));
      expect_steps(opt, P, 0.01f, {{0.9, -2.1}, {0.7391119, -2.2608881}}, 1e-6);
    }
  }

  // lr 0.1, η 0.001, wd 0.01, μ 0.9 on p = [3, 4], g = [0.6, 0.8]:
  // step 1: trust = 0.001·5/(1 + 0.01·5) = 0.005/1.05; g + wd·p = [0.63, 0.84] = 1.05·[0.6, 0.8]
  //         so buf = 0.005·[0.6, 0.8] = [0.003, 0.004]; p = [2.9997, 3.9996]
  // step 2: p = 0.9999·[3, 4], ‖p‖ = 4.9995; g + wd·p = 1.049995·[0.6, 0.8], trust =
  //         0.0049995/1.049995, so trust·(g + wd·p) = [0.0029997, 0.0039996]
  //         buf = [0.0027 + 0.0029997, 0.0036 + 0.0039996] = [0.0056997, 0.0075996]
  //         p = [2.99913003, 3.99884004]
  // no-decay b: no adaptation, no decay: 0.48, 0.442 (as SGD)
  void lars() {
    CpuBackend be(BackendOptions{.reference = true});
    Params P = tiny345(DType::F64);
    OptimizerConfig c;
    c.kind = OptimizerKind::LARS, c.momentum = 0.9f, c.weight_decay = 0.01f;
    Optimizer opt(c, P.infos, be);
    expect_steps(opt, P, 0.1f, {{2.9997, 3.9996, 0.48}, {2.99913003, 3.99884004, 0.442}}, 1e-8);
  }

  // lr 0.01, β (0.9, 0.999), wd 0.01 on p = [3, 4], g = [0.6, 0.8]. Constant g:
  // m̂/sqrt(v̂) = 1, so u = 1 + wd·p.
  // step 1: u = [1.03, 1.04], ‖u‖ = sqrt(2.1425) = 1.4637281, trust = 5/1.4637281 = 3.4159349
  //         p = [3 − 0.034159349·1.03, 4 − 0.034159349·1.04] = [2.9648159, 3.9644743]
  // step 2: u = [1.0296482, 1.0396447], ‖u‖ = 1.4632281, ‖p‖ = 4.9512, trust = 3.3832549
  //         p = [2.9648159 − 0.033832549·1.0296482, …] = [2.9299802, 3.9293004]
  // no-decay b: u = 1, trust = 0.5/1: b = 0.5 − 0.005 = 0.495, then 0.495 − 0.00495 = 0.49005
  void lamb() {
    CpuBackend be(BackendOptions{.reference = true});
    Params P = tiny345(DType::F64);
    OptimizerConfig c;
    c.kind = OptimizerKind::LAMB, c.weight_decay = 0.01f;
    Optimizer opt(c, P.infos, be);
    expect_steps(opt, P, 0.01f, {{2.9648159, 3.9644743, 0.495}, {2.9299802, 3.9293004, 0.49005}},
                 1e-6);
  }

  // grad_scale multiplies the gradient first: plain SGD with g·0.25.
  // p = 1 − 0.1·(0.5·0.25) = 0.9875; −2 − 0.1·(1·0.25) = −2.025
  void gradScale() {
    CpuBackend be(BackendOptions{.reference = true});
    Params P = tiny(DType::F64);
    OptimizerConfig c;
    Optimizer opt(c, P.infos, be);
    QCOMPARE(opt.state_blocks().size(), size_t(0));
    opt.step(0.1f, 0.25f);
    QVERIFY(std::abs(P.v(0) - 0.9875) < 1e-9);
    QVERIFY(std::abs(P.v(1) + 2.025) < 1e-9);
  }

  // reset() zeroes the state and the step count: the next step repeats the first
  // (AdamW's first step is lr·sign(g) = 0.01 after the 0.1% decay, as above).
  void resetRestartsFromStepOne() {
    CpuBackend be(BackendOptions{.reference = true});
    Params P = tiny(DType::F64);
    OptimizerConfig c;
    c.kind = OptimizerKind::AdamW, c.weight_decay = 0.1f;
    Optimizer opt(c, P.infos, be);
    opt.step(0.01f);
    opt.step(0.01f);
    opt.reset();
    QCOMPARE(opt.steps(), int64_t(0));
    P.set(P.values, {1.0, -2.0, 0.5});
    opt.step(0.01f);
    QVERIFY(std::abs(P.v(0) - 0.989) < 1e-7);
    QVERIFY(std::abs(P.v(1) + 2.008) < 1e-7);
    QCOMPARE(opt.steps(), int64_t(1));
  }

  // With zero gradients only the decay moves p, and only in decayed slots:
  // SGD/RMSProp-style L2 and AdamW's decoupled decay alike.
  void noDecaySlotsAreNotDecayed() {
    for (OptimizerKind k : {OptimizerKind::SGD, OptimizerKind::AdamW, OptimizerKind::LARS,
                            OptimizerKind::LAMB, OptimizerKind::RMSProp}) {
      CpuBackend be;
      Params P({3, 2}, {true, false}, DType::F32);
      P.set(P.values, {1, 2, 3, 4, 5});
      OptimizerConfig c;
      c.kind = k, c.weight_decay = 0.5f;
      Optimizer opt(c, P.infos, be);
      opt.step(0.1f);
      QVERIFY2(P.v(0) < 1.0 && P.v(2) < 3.0, optimizer_name(k));
      QVERIFY2(P.v(3) == 4.0 && P.v(4) == 5.0, optimizer_name(k));
    }
  }

  // ---------------------------------------------------------------- multi-tensor
  // Several tensors (one larger than a 65536-element chunk), one no-decay slot,
  // grad_scale 0.5, three steps with fresh gradients: per-tensor and fused passes
  // must agree bit for bit in parameters and state.
  void multiTensorIsBitIdentical() {
    struct Case {
      OptimizerKind kind;
      float momentum;
      bool nesterov;
    };
    const std::vector<Case> cases = {
        {OptimizerKind::SGD, 0.0f, false},     {OptimizerKind::SGD, 0.9f, false},
        {OptimizerKind::SGD, 0.9f, true},      {OptimizerKind::AdamW, 0.0f, false},
        {OptimizerKind::RMSProp, 0.0f, false}, {OptimizerKind::RMSProp, 0.9f, false},
        {OptimizerKind::LARS, 0.9f, false},    {OptimizerKind::LAMB, 0.0f, false}};
    const std::vector<int64_t> sizes = {7, 150000, 1, 33, 64};
    const std::vector<bool> decay = {true, true, false, true, false};
    for (DType dt : {DType::F32, DType::F64}) {
      for (const Case& cs : cases) {
        CpuBackend be;
        Params A(sizes, decay, dt), B(sizes, decay, dt);
        std::mt19937_64 rng(5);
        fill_random(A.values, rng);
        std::memcpy(B.values.data(), A.values.data(), A.values.nbytes());
        const std::vector<char> initial(static_cast<char*>(A.values.data()),
                                        static_cast<char*>(A.values.data()) + A.values.nbytes());
        OptimizerConfig c;
        c.kind = cs.kind, c.momentum = cs.momentum, c.nesterov = cs.nesterov;
        c.weight_decay = 0.01f;
        c.multi_tensor = false;
        Optimizer per_tensor(c, A.infos, be);
        c.multi_tensor = true;
        Optimizer fused(c, B.infos, be);
        for (int s = 0; s < 3; ++s) {
          fill_random(A.grads, rng);
          std::memcpy(B.grads.data(), A.grads.data(), A.grads.nbytes());
          per_tensor.step(0.05f, 0.5f);
          fused.step(0.05f, 0.5f);
        }
        const QString what = QString("%1 momentum %2 %3")
                                 .arg(optimizer_name(cs.kind))
                                 .arg(cs.momentum)
                                 .arg(dtype_name(dt));
        QVERIFY2(bitwise_equal(A.values, B.values), qPrintable(what));
        for (size_t i = 0; i < per_tensor.state_blocks().size(); ++i)
          QVERIFY2(bitwise_equal(per_tensor.state_blocks()[i], fused.state_blocks()[i]),
                   qPrintable(what + " state"));
        // ...and every tensor did move.
        for (const ParamInfo& p : A.infos) {
          const size_t off =
              static_cast<char*>(p.value.data()) - static_cast<char*>(A.values.data());
          QVERIFY2(std::memcmp(initial.data() + off, p.value.data(), p.value.nbytes()) != 0,
                   qPrintable(what + " " + QString::fromStdString(p.name) + " unchanged"));
        }
      }
    }
  }

  // ---------------------------------------------------------------- every target vs the reference
  // Sizes around the 65536-element chunk, three steps, grad_scale 0.5.
  void optimizer_step_matches_reference_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<int>("kind");
    QTest::addColumn<float>("momentum");
    QTest::addColumn<bool>("nesterov");
    QTest::addColumn<float>("wd");
    const Target targets[] = {{Impl::CpuFast, Layout::NCHW, DType::F32},
                                        {Impl::Cuda, Layout::NCHW, DType::F32}};
    for (const Target& t : targets) {
      auto add = [&](const char* name) -> QTestData& {
        return QTest::addRow("%s: %s", t.name().c_str(), name) << t;
      };
      for (const StepCase& c : kStepCases)
        add(c.name) << int(c.kind) << c.momentum << c.nesterov << c.wd;
    }
  }
  void optimizer_step_matches_reference() {
    FETCH_TARGET(target, be);
    TB_GPU_TRY
    QFETCH(int, kind);
    QFETCH(float, momentum);
    QFETCH(bool, nesterov);
    QFETCH(float, wd);
    OptimizerStep st;
    st.kind = OptimizerKind(kind);
    st.lr = 0.01f, st.momentum = momentum, st.nesterov = nesterov, st.weight_decay = wd;
    st.grad_scale = 0.5f;
    CpuBackend& cpu = cpu_reference();
    StepSet c = random_step_set(st.kind, kChunkEdgeSizes);
    StepSet per = copied(be, c, true), multi = copied(be, c, true);
    const auto slack = lamb_slack(st, c, 3);
    for (int64_t t = 1; t <= 3; ++t) {
      st.step = t;
      optimizer::step(cpu, st, slot_list(c), false);
      optimizer::step(be, st, slot_list(per), false);
      optimizer::step(be, st, slot_list(multi), true);
    }
    const std::string bad =
        cuda_steps_differ(c, copied(be, per, false), copied(be, multi, false), 3, target.name(),
                          "fp32", slack);
    QVERIFY2(bad.empty(), bad.c_str());
    TB_GPU_CATCH
  }

  // The same kernels on the CUDA emulator (tests/cuda_emulator), here on any
  // machine: optimizer_cuda.cpp's launches (step_emulated) against the CPU
  // reference with the GPU slot's bounds (cuda_steps_differ), under both of
  // the emulator's thread orders, which must also agree bit for bit (the norm
  // tree depends on the block size only). The chunk-edge sizes give idle
  // threads (1, 17, 300 elements), a partial last pass (70001), tensors over
  // several chunks (131073: the last of one element); 130 tensors take the
  // trust kernel past one block (one step: the emulator runs 512 threads
  // for every small tensor; no tb-tolerance line for each). Also SGD with
  // decay but no momentum and LARS without momentum (no state). What the
  // emulator does not reproduce: FMA contraction (within the bounds), timing.
  void optimizer_emulated_cuda_matches_cpu_data() {
    QTest::addColumn<int>("kind");
    QTest::addColumn<float>("momentum");
    QTest::addColumn<bool>("nesterov");
    QTest::addColumn<float>("wd");
    QTest::addColumn<bool>("many");
    std::vector<StepCase> cases(std::begin(kStepCases), std::end(kStepCases));
    cases.push_back({"sgd wd", OptimizerKind::SGD, 0.0f, false, 5e-4f});
    cases.push_back({"lars no momentum", OptimizerKind::LARS, 0.0f, false, 5e-4f});
    for (const StepCase& c : cases) {
      QTest::addRow("%s: chunk edges", c.name)
          << int(c.kind) << c.momentum << c.nesterov << c.wd << false;
      if ((c.kind == OptimizerKind::LARS && c.momentum != 0.0f) || c.kind == OptimizerKind::LAMB)
        QTest::addRow("%s: 130 tensors", c.name)
            << int(c.kind) << c.momentum << c.nesterov << c.wd << true;
    }
  }
  void optimizer_emulated_cuda_matches_cpu() {
    QFETCH(int, kind);
    QFETCH(float, momentum);
    QFETCH(bool, nesterov);
    QFETCH(float, wd);
    QFETCH(bool, many);
#if defined(TRAINBENCH_CUDA_EMULATED)
    TB_EMU_TRY
    OptimizerStep st;
    st.kind = OptimizerKind(kind);
    st.lr = 0.01f, st.momentum = momentum, st.nesterov = nesterov, st.weight_decay = wd;
    st.grad_scale = 0.5f;
    const std::vector<int64_t> sizes = many ? many_sizes() : kChunkEdgeSizes;
    const int64_t steps = many ? 1 : 3;
    CpuBackend& cpu = cpu_reference();
    StepSet c = random_step_set(st.kind, sizes);
    const StepSet start = copied(cpu, c, true);
    const auto slack = lamb_slack(st, start, steps);
    for (int64_t t = 1; t <= steps; ++t) {
      st.step = t;
      optimizer::step(cpu, st, slot_list(c), false);
    }
    StepSet first;
    for (tb_emu::Schedule order : {tb_emu::Schedule::forward, tb_emu::Schedule::reverse}) {
      EmulatorSchedule use(order);
      StepSet per = copied(cpu, start, true), multi = copied(cpu, start, true);
      for (int64_t t = 1; t <= steps; ++t) {
        st.step = t;
        step_emulated(st, slot_list(per), false);
        step_emulated(st, slot_list(multi), true);
      }
      const std::string who = std::string("emulated cuda, ") + schedule_name(order);
      const std::string bad =
          cuda_steps_differ(c, per, multi, steps, who, many ? nullptr : "fp32", slack);
      QVERIFY2(bad.empty(), bad.c_str());
      if (first.p.empty())
        first = multi;
      else
        QVERIFY2(same_bits(first, multi), "the reverse thread order changed bits");
    }
    TB_EMU_CATCH
#else
    QSKIP(kNoEmulator);
#endif
  }

  // A captured step's replay (trick 24) and AMP's skipped step, on the
  // emulator: launches carrying another step's constants read the current
  // step's from the buffer launch_opt_set_consts wrote, and give the plain
  // step's bits; with found_inf set every kernel leaves parameters and state
  // (LAMB's moments included) untouched; with it clear the step is the
  // plain one. Per-tensor and multi-tensor launches.
  void optimizer_emulated_replay_and_skip_data() {
    QTest::addColumn<int>("kind");
    QTest::addColumn<float>("momentum");
    QTest::addColumn<bool>("nesterov");
    QTest::addColumn<float>("wd");
    for (const StepCase& c : kStepCases)
      QTest::newRow(c.name) << int(c.kind) << c.momentum << c.nesterov << c.wd;
  }
  void optimizer_emulated_replay_and_skip() {
    QFETCH(int, kind);
    QFETCH(float, momentum);
    QFETCH(bool, nesterov);
    QFETCH(float, wd);
#if defined(TRAINBENCH_CUDA_EMULATED)
    TB_EMU_TRY
    OptimizerStep st;
    st.kind = OptimizerKind(kind);
    st.lr = 0.01f, st.momentum = momentum, st.nesterov = nesterov, st.weight_decay = wd;
    st.grad_scale = 0.5f, st.step = 3;
    // Captured at the first step with another learning rate and no clipping:
    // what changes between replays (the kind, eta and weight decay are fixed
    // for a run: opt_trust_kernel takes the launch's).
    OptimizerStep captured = st;
    captured.lr = 0.1f, captured.grad_scale = 1.0f, captured.step = 1;
    CpuBackend& cpu = cpu_reference();
    const StepSet start = random_step_set(st.kind, {5, 65537, 600});
    for (bool multi_tensor : {false, true}) {
      const char* path = multi_tensor ? "multi-tensor" : "per-tensor";
      StepSet plain = copied(cpu, start, true);
      step_emulated(st, slot_list(plain), multi_tensor);
      QVERIFY2(!same_bits(plain, start), path);
      StepSet replay = copied(cpu, start, true);
      step_emulated(st, slot_list(replay), multi_tensor, {nullptr, &captured});
      QVERIFY2(same_bits(replay, plain), qPrintable(QString("replay, %1").arg(path)));
      const float set = 1.0f, clear = 0.0f;
      const OptimizerStep* const plain_or_replay[] = {nullptr, &captured};
      for (const OptimizerStep* from : plain_or_replay) {
        StepSet skipped = copied(cpu, start, true);
        step_emulated(st, slot_list(skipped), multi_tensor, {&set, from});
        QVERIFY2(same_bits(skipped, start), qPrintable(QString("skipped step, %1").arg(path)));
        StepSet taken = copied(cpu, start, true);
        step_emulated(st, slot_list(taken), multi_tensor, {&clear, from});
        QVERIFY2(same_bits(taken, plain), qPrintable(QString("found_inf clear, %1").arg(path)));
      }
    }
    TB_EMU_CATCH
#else
    QSKIP(kNoEmulator);
#endif
  }

  // optimizer::sum_squares' CUDA kernels (sum_squares.cu) on the emulator,
  // with the bound of their GPU slot (test_op_tensor's
  // sum_squares_matches_reference: 1e-12 relative, another order of a sum in
  // double) and the same bits under both thread orders (fixed grid, fixed
  // tree). f32 and f64; 300007 elements wrap the grid-stride loop of the
  // full 1024-block grid (262144 threads); 1 and 1000 leave most threads of
  // both kernels without a value (1 and 4 partials for 1024 threads).
  void sum_squares_emulated_matches_reference_data() {
    QTest::addColumn<DType>("dtype");
    QTest::addColumn<qint64>("n");
    for (qint64 n : {qint64(1), qint64(1000), qint64(300007)})
      QTest::addRow("f32, %lld", n) << DType::F32 << n;
    for (qint64 n : {qint64(1000), qint64(70001)}) QTest::addRow("f64, %lld", n) << DType::F64 << n;
  }
  void sum_squares_emulated_matches_reference() {
    QFETCH(DType, dtype);
    QFETCH(qint64, n);
#if defined(TRAINBENCH_CUDA_EMULATED)
    TB_EMU_TRY
    const Tensor h = random_tensor({n}, uint64_t(41 + n), -1.0, 1.0, dtype);
    const double ref = optimizer::sum_squares(cpu_reference(), h);
    std::vector<double> got;
    for (tb_emu::Schedule order : {tb_emu::Schedule::forward, tb_emu::Schedule::reverse}) {
      EmulatorSchedule use(order);
      // CudaKernels::sum_squares' scratch: the partials, then the result.
      std::vector<double> scratch(emu::kReducePartials + 1, std::nan(""));
      double* out = scratch.data() + emu::kReducePartials;
      if (dtype == DType::F32)
        emu::launch_sum_squares(h.data_as<float>(), n, scratch.data(), out, nullptr);
      else
        emu::launch_sum_squares(h.data_as<double>(), n, scratch.data(), out, nullptr);
      QVERIFY2(std::abs(*out - ref) <= 1e-12 * ref,
               qPrintable(QString("%1: %2 against the reference's %3")
                              .arg(schedule_name(order))
                              .arg(*out, 0, 'g', 17)
                              .arg(ref, 0, 'g', 17)));
      got.push_back(*out);
    }
    QCOMPARE(got[0], got[1]);  // bit for bit: == on two finite doubles
    TB_EMU_CATCH
#else
    QSKIP(kNoEmulator);
#endif
  }

  void optimizerRejectsBadConfig() {
    CpuBackend be;
    Params P = tiny(DType::F32);
    OptimizerConfig c;
    c.nesterov = true;  // without momentum
    QVERIFY_THROWS_EXCEPTION(Error, Optimizer(c, P.infos, be));
    c = {};
    c.kind = OptimizerKind::AdamW, c.beta2 = 1.0f;
    QVERIFY_THROWS_EXCEPTION(Error, Optimizer(c, P.infos, be));
  }

  // optimizer::step's contract checks (optimizer.cpp, one copy for every
  // backend): each refusal names the op and what is wrong, and nothing moves.
  void stepRefusesBadArguments() {
    CpuBackend be;
    Params P = tiny(DType::F32);
    const Tensor p0 = clone(P.values);
    Tensor m = Tensor::zeros({2}, DType::F32), v = Tensor::zeros({2}, DType::F32);
    ParamSlot ok{P.infos[0].value, P.infos[0].grad, m, v, true};
    OptimizerStep adamw;
    adamw.kind = OptimizerKind::AdamW;
    auto refused = [&](std::vector<ParamSlot> given, const OptimizerStep& st, const char* words,
                       const Tensor& scaler_state = {}) {
      const QString e =
          qerror_of([&] { optimizer::step(be, st, given, true, scaler_state); });
      QVERIFY2(e.startsWith("optimizer_step: ") && e.contains(words), qPrintable(e));
    };
    OptimizerStep zeroth = adamw;
    zeroth.step = 0;
    refused({ok}, zeroth, "step count must start at 1");
    ParamSlot no_v = ok;
    no_v.state2 = Tensor{};
    refused({ok, no_v}, adamw, "adamw needs state2 for slot 1");
    ParamSlot short_grad = ok;
    short_grad.grad = Tensor::zeros({1}, DType::F32);
    refused({short_grad}, adamw, "does not match parameter");
    Tensor p64 = Tensor::zeros({2}, DType::F64), g64 = Tensor::zeros({2}, DType::F64);
    Tensor m64 = Tensor::zeros({2}, DType::F64), v64 = Tensor::zeros({2}, DType::F64);
    refused({ok, ParamSlot{p64, g64, m64, v64, true}}, adamw, "parameters must share one dtype");
    refused({ok}, adamw, "scaler state must be f32[4]", Tensor::zeros({3}, DType::F32));
    // A step skipped by AMP (found_inf set) still checks its slots.
    Tensor found_inf = Tensor::zeros({amp::kScalerStateSize}, DType::F32);
    found_inf.data_as<float>()[2] = 1.0f;
    refused({ok, no_v}, adamw, "adamw needs state2 for slot 1", found_inf);
    QVERIFY(bitwise_equal(P.values, p0));
    // SGD without momentum needs no state at all.
    OptimizerStep sgd;
    optimizer::step(be, sgd, {ParamSlot{P.infos[0].value, P.infos[0].grad, {}, {}, true}}, false);
    QVERIFY(!bitwise_equal(P.values, p0));
  }

  // ---------------------------------------------------------------- schedules

  // base 0.1, warm-up 4: 0.025, 0.05, 0.075, 0.1, then 0.1 for ever.
  void constantWithWarmup() {
    ScheduleConfig c;
    c.base_lr = 0.1, c.warmup_steps = 4;
    LrSchedule s(c);
    QCOMPARE(s.lr_for_step(0), 0.025);
    QCOMPARE(s.lr_for_step(1), 0.05);
    QVERIFY(std::abs(s.lr_for_step(2) - 0.075) < 1e-15);
    QCOMPARE(s.lr_for_step(3), 0.1);
    QCOMPARE(s.lr_for_step(4), 0.1);
    QCOMPARE(s.lr_for_step(1000), 0.1);
  }

  // base 1, step_size 3, gamma 0.5: 1, 1, 1, 0.5, 0.5, 0.5, 0.25;
  // with a 2-step warm-up the boundaries move by 2.
  void stepSchedule() {
    ScheduleConfig c;
    c.kind = ScheduleKind::Step, c.base_lr = 1.0, c.step_size = 3, c.gamma = 0.5;
    LrSchedule s(c);
    QCOMPARE(s.lr_for_step(0), 1.0);
    QCOMPARE(s.lr_for_step(2), 1.0);
    QCOMPARE(s.lr_for_step(3), 0.5);
    QCOMPARE(s.lr_for_step(5), 0.5);
    QCOMPARE(s.lr_for_step(6), 0.25);
    c.warmup_steps = 2;
    LrSchedule w(c);
    QCOMPARE(w.lr_for_step(0), 0.5);
    QCOMPARE(w.lr_for_step(1), 1.0);
    QCOMPARE(w.lr_for_step(4), 1.0);
    QCOMPARE(w.lr_for_step(5), 0.5);
    QCOMPARE(w.lr_for_step(8), 0.25);
  }

  // base 1 → min 0.1 over 10 steps: 1 at 0, 0.1 + 0.9·½ = 0.55 at 5, 0.1 at 10 and after.
  // Warm-up 2 of 12: 0.5, 1, then the same curve shifted by 2.
  void cosineSchedule() {
    ScheduleConfig c;
    c.kind = ScheduleKind::Cosine, c.base_lr = 1.0, c.min_lr = 0.1, c.total_steps = 10;
    LrSchedule s(c);
    QCOMPARE(s.lr_for_step(0), 1.0);
    QVERIFY(std::abs(s.lr_for_step(5) - 0.55) < 1e-12);
    // step 9: 0.1 + 0.9·(1 + cos 162°)/2 = 0.1 + 0.9·0.0244717 = 0.1220245
    QVERIFY(std::abs(s.lr_for_step(9) - 0.1220245) < 1e-7);
    QVERIFY(std::abs(s.lr_for_step(10) - 0.1) < 1e-12);
    QVERIFY(std::abs(s.lr_for_step(50) - 0.1) < 1e-12);
    c.warmup_steps = 2, c.total_steps = 12;
    LrSchedule w(c);
    QCOMPARE(w.lr_for_step(0), 0.5);
    QCOMPARE(w.lr_for_step(1), 1.0);
    QCOMPARE(w.lr_for_step(2), 1.0);
    QVERIFY(std::abs(w.lr_for_step(7) - 0.55) < 1e-12);
    QVERIFY(std::abs(w.lr_for_step(12) - 0.1) < 1e-12);
    c.warmup_steps = 12;
    QVERIFY_THROWS_EXCEPTION(Error, LrSchedule{c});
  }

  // PyTorch OneCycleLR(max_lr=1, total_steps=100): starts at 1/25 = 0.04, peaks at
  // step 0.3·100 − 1 = 29, ends at step 99 at 0.04/1e4 = 4e-6; halfway down the
  // second phase (step 29 + 35 = 64) it is (1 + 4e-6)/2 = 0.500002.
  void oneCycleSchedule() {
    ScheduleConfig c;
    c.kind = ScheduleKind::OneCycle, c.base_lr = 1.0, c.total_steps = 100;
    LrSchedule s(c);
    QVERIFY(std::abs(s.lr_for_step(0) - 0.04) < 1e-12);
    QVERIFY(std::abs(s.lr_for_step(29) - 1.0) < 1e-12);
    QVERIFY(s.lr_for_step(28) < 1.0 && s.lr_for_step(30) < 1.0);
    QVERIFY(std::abs(s.lr_for_step(64) - 0.500002) < 1e-12);
    QVERIFY(std::abs(s.lr_for_step(99) - 4e-6) < 1e-15);
    QVERIFY(std::abs(s.lr_for_step(150) - 4e-6) < 1e-15);
  }

  void scheduleNames() {
    QVERIFY(schedule_from_name("cosine") == ScheduleKind::Cosine);
    QVERIFY(schedule_from_name("onecycle") == ScheduleKind::OneCycle);
    QVERIFY_THROWS_EXCEPTION(Error, schedule_from_name("linear"));
    QVERIFY(lr_scaling_from_name("sqrt") == LrScaling::Sqrt);
    QVERIFY_THROWS_EXCEPTION(Error, lr_scaling_from_name("cubic"));
  }

  // base 0.1 tuned for 256, used at 512: linear 0.2, sqrt 0.1·√2 = 0.14142136.
  void lrScaling() {
    QCOMPARE(scaled_lr(0.1, 512, 256, LrScaling::None), 0.1);
    QVERIFY(std::abs(scaled_lr(0.1, 512, 256, LrScaling::Linear) - 0.2) < 1e-15);
    QVERIFY(std::abs(scaled_lr(0.1, 512, 256, LrScaling::Sqrt) - 0.14142136) < 1e-8);
    QVERIFY(std::abs(scaled_lr(0.1, 64, 256, LrScaling::Linear) - 0.025) < 1e-15);
    QVERIFY_THROWS_EXCEPTION(Error, scaled_lr(0.1, 0, 256, LrScaling::Linear));
  }

  // ---------------------------------------------------------------- clipping
  // Gradients [3, 4] and [0, 12]: global norm sqrt(9 + 16 + 144) = 13.
  void clipping() {
    CpuBackend be;
    Params P({2, 2}, {true, true}, DType::F32);
    P.set(P.grads, {3, 4, 0, 12});
    ClipResult r = clip_grad_norm(be, P.grads, 6.5);
    QVERIFY(std::abs(r.norm - 13.0) < 1e-9);
    QVERIFY(std::abs(r.factor - 6.5 / (13.0 + 1e-6)) < 1e-7);
    ClipResult t = clip_grad_norm(be, P.infos, 6.5);  // tensor by tensor: the same
    QCOMPARE(t.norm, r.norm);
    QCOMPARE(t.factor, r.factor);
    QCOMPARE(clip_grad_norm(be, P.grads, 20.0).factor, 1.0f);  // below the limit
    QCOMPARE(clip_grad_norm(be, P.grads, 0.0).factor, 1.0f);   // clipping off
    // Stored gradients scaled by 2 (a loss scale): grad_scale 0.5 gives the true norm.
    ClipResult s = clip_grad_norm(be, P.grads, 5.0, 0.5);
    QVERIFY(std::abs(s.norm - 6.5) < 1e-9);
    QVERIFY(std::abs(s.factor - 5.0 / (6.5 + 1e-6)) < 1e-7);
    P.set(P.grads, {3, INFINITY, 0, 12});
    ClipResult inf = clip_grad_norm(be, P.grads, 1.0);
    QVERIFY(!std::isfinite(inf.norm));
    QCOMPARE(inf.factor, 1.0f);
  }

  // ---------------------------------------------------------------- accumulation
  // A linear classifier (w (4,3), b (4)) on 8 samples: one batch of 8 against two
  // micro-batches of 4 whose gradients accumulate, with the 1/2 folded into the
  // optimizer's grad_scale. Gradients and the SGD step must agree (f64, 1e-14).
  void gradientAccumulationEqualsBigBatch() {
    CpuBackend be(BackendOptions{.reference = true});
    const int64_t N = 8, K = 3, M = 4;
    std::mt19937_64 rng(17);
    Tensor x = Tensor::empty({N, K}, DType::F64);
    fill_random(x, rng);
    Tensor labels = Tensor::empty({N}, DType::I32);
    for (int64_t n = 0; n < N; ++n) labels.data_as<int32_t>()[n] = int32_t((n * 5) % M);

    // Two identical parameter sets: [w (M·K) | b (M)].
    Params big({M * K, M}, {true, false}, DType::F64), acc({M * K, M}, {true, false}, DType::F64);
    fill_random(big.values, rng);
    std::memcpy(acc.values.data(), big.values.data(), big.values.nbytes());
    auto run = [&](Params& P, int64_t micro, float grad_scale, int64_t rows) {
      Tensor w = P.infos[0].value.reshaped({M, K}), b = P.infos[1].value;
      Tensor dw = P.infos[0].grad.reshaped({M, K}), db = P.infos[1].grad;
      Tensor xs = x.rows(micro * rows, (micro + 1) * rows);
      Tensor ls = labels.rows(micro * rows, (micro + 1) * rows);
      Tensor y = Tensor::empty({rows, M}, DType::F64), dy = Tensor::empty({rows, M}, DType::F64);
      Tensor stats = Tensor::zeros({2}, DType::F64), none;
      linear::forward(be, xs, w, b, y);
      loss::softmax_cross_entropy(be, y, ls, 0.1f, grad_scale, dy, stats);
      linear::backward(be, xs, w, dy, none, dw, db, /*accumulate=*/micro > 0);
      return stats.data_as<double>()[0];
    };
    try {
      const double loss_big = run(big, 0, 1.0f, N);
      const double loss_acc = run(acc, 0, 1.0f, N / 2) + run(acc, 1, 1.0f, N / 2);
      QVERIFY(std::abs(loss_big - loss_acc) < 1e-12);
    } catch (const Error& e) {
      QSKIP(qPrintable(QString("linear ops not available: ") + e.what()));
    }
    // Micro-batch gradients are means over 4: their sum is twice the mean over 8.
    for (int64_t i = 0; i < big.grads.numel(); ++i)
      QVERIFY(std::abs(2.0 * big.grads.data_as<double>()[i] - acc.grads.data_as<double>()[i]) <
              1e-14);
    OptimizerConfig c;
    c.momentum = 0.9f, c.weight_decay = 0.01f;
    Optimizer ob(c, big.infos, be), oa(c, acc.infos, be);
    ob.step(0.5f, 1.0f);
    oa.step(0.5f, 0.5f);
    for (int64_t i = 0; i < big.values.numel(); ++i) QVERIFY(std::abs(big.v(i) - acc.v(i)) < 1e-14);
  }
};

QTEST_GUILESS_MAIN(TestOpOptim)
#include "test_op_optim.moc"
