// SPDX-License-Identifier: GPL-3.0-or-later
// The batch-norm op family: batchnorm_forward_train (batch statistics, the
// running statistics' update), batchnorm_forward_eval, batchnorm_backward, and
// the BatchNorm2d layer, on every backend, layout and dtype.
//
// 1. Gradients against central finite differences, f64 on the reference
//    backend (gradcheck.h), train and eval, NCHW, NHWC and the CPU's blocked
//    nChw16c.
// 2. batchnorm_matches_reference, one body over targets x shapes: y,
//    save_mean, save_invstd, running mean and (unbiased) variance, dx, dgamma,
//    dbeta (written, and accumulated onto earlier values) and the eval output
//    with the updated running statistics, against the reference kernels in
//    NCHW; the blocked nChw16c targets on the shapes with whole 16-channel
//    blocks. Bit-identical on the exact CPU targets (f64, NHWC: the reference
//    visits the same elements in the same order); the fast NCHW f32 path
//    (one-pass Σx, Σx² statistics, threads) within absolute 1e-5 (y, dx, eval
//    y), 1e-6 (statistics) and 1e-4 (dgamma, dbeta: sums of thousands of
//    terms) on O(1) values; CUDA (statistics in double, apply in float) within
//    1e-5 relative + 1e-5 (y), 1e-6 relative (statistics), 1e-5 of the
//    largest magnitude (dx) and 1e-5 + 1e-5 (dgamma, dbeta).
//    batchnorm_cuda_large_matches_reference: the CUDA kernels where each
//    channel spans several blocks, every epilogue, accumulate on and off
//    (tolerances derived at the slot).
// 3. Eval backward against its closed form, gradient accumulation through the
//    layer, the running statistics by hand, mixed layouts refused, an empty
//    batch's backward (dgamma, dbeta: the empty sums) on every target.
// 4. The epilogue's limits: GELU refused, the CPU's epilogue on NHWC refused,
//    the ReLU-epilogue layer named and parametrised as the plain one,
//    sync_batchnorm refused with an epilogue. The epilogue's values (residual
//    add, ReLU) against the unfused ops are test_op_fused's bn_act_* slots.
// 5. The CUDA kernels' launch plan (batchnorm_plan.h), on the CPU: every
//    value visited once, the partials' slots, the workspace, the grid limits,
//    for C 1-2048 and M 1-524,288 in both layouts; the values a thread loads
//    ahead (the rule, TRAINBENCH_CUDA_BN_UNROLL), and on a GPU the same bits
//    with 4, 8 and 16 (batchnorm_cuda_unroll_keeps_bits).
// 6. f16/bf16 activations (f32 parameters and statistics): the CPU's
//    widen-compute-round path against the f64 reference on the widened
//    inputs, every epilogue, both layouts, both CPU paths; the mixed dtypes
//    the contract refuses; on a GPU, the CUDA kernels in f16/bf16 against the
//    CPU's path and CUDA's refusal of f64. Bounds derived in the slots and in
//    tests/engine/low_precision.h.
// GPU rows QSKIP with the reason where there is no device.
// The family's test, beside its code (docs/architecture.md, "Op families").
#include <QtTest>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/nn/batchnorm2d.h"
#include "engine/nn/model.h"
#include "engine/ops/batchnorm/batchnorm.h"
#include "engine/ops/batchnorm/batchnorm_plan.h"
#include "tests/engine/device_fixture.h"
#include "tests/engine/gradcheck.h"
#include "tests/engine/low_precision.h"
#include "tests/engine/tensor_helpers.h"
#include "tests/cuda_emulator/emulated_slot.h"
#if defined(TRAINBENCH_CUDA_EMULATED)
#include "tests/cuda_emulator/begin_emulated.h"
#include "engine/ops/batchnorm/batchnorm.cuh"
#include "tests/cuda_emulator/end_emulated.h"
#endif

using namespace tb;
using namespace tb::test;

namespace {

struct BnCase {
  const char* name = "";
  Shape shape;
  double lo = -1.0, hi = 1.0;     // x uniform in [lo, hi)
  bool channel_offsets = false;   // x·(1 + c) + c/2: channels differ in mean and variance
};

const BnCase kCases[] = {
    // Mean 3, std ~1.2: the fast path's one-pass variance; 32768 elements: threaded.
    {"16x8x16x16 mean 3", {16, 8, 16, 16}, 1.0, 5.0, false},
    {"3x6x5x4 channel offsets", {3, 6, 5, 4}, -1.0, 1.0, true},
    {"6x7x9x5", {6, 7, 9, 5}, -2.0, 3.0, false},
    // Whole 16-channel blocks, for the CPU's blocked layout (nChw16c) too:
    // two blocks on one thread, and three blocks split over threads.
    {"4x32x7x5 channel offsets", {4, 32, 7, 5}, -1.0, 1.0, true},
    {"8x48x12x10 mean 3", {8, 48, 12, 10}, 1.0, 5.0, false},
};

const std::vector<Target> kTargets = activation_targets();

// The reference's bits: f64, the reference backend, and NHWC on the CPU
// (which only the reference kernels take).
bool exact_target(const Target& t) {
  return !t.on_gpu() &&
         (t.dtype == DType::F64 || t.layout == Layout::NHWC || t.impl == Impl::CpuReference);
}

// The outputs of one forward_train + backward (written and accumulated) + eval.
struct BnOut {
  Tensor y, sm, si, rm, rv, dx, dg, db, dg_acc, db_acc, ye;  // host
};

BnOut run_bn(Backend& be, const Target& t, const Tensor& x, const Tensor& dy, const Tensor& gamma,
             const Tensor& beta, const Tensor& rm_init, const Tensor& rv_init, const Tensor& dg_old,
             const Tensor& db_old, Layout L) {
  const DType dt = t.dtype;
  const int64_t C = x.c();
  const Tensor xd = to_device(be, x, L), dyd = to_device(be, dy, L);
  const Tensor g = to_device(be, gamma), b = to_device(be, beta);
  Tensor rm = to_device(be, rm_init), rv = to_device(be, rv_init);
  Tensor y = be.empty(x.shape(), dt, L), sm = be.empty({C}, dt), si = be.empty({C}, dt);
  batchnorm::forward_train(be, xd, g, b, rm, rv, 0.1f, 1e-5f, y, sm, si);
  Tensor dx = be.empty(x.shape(), dt, L), dg = be.empty({C}, dt), db = be.empty({C}, dt);
  batchnorm::backward(be, xd, dyd, g, sm, si, dx, dg, db, false);
  Tensor dxa = be.empty(x.shape(), dt, L), dga = to_device(be, dg_old), dba = to_device(be, db_old);
  batchnorm::backward(be, xd, dyd, g, sm, si, dxa, dga, dba, true);
  Tensor ye = be.empty(x.shape(), dt, L);
  batchnorm::forward_eval(be, xd, g, b, rm, rv, 1e-5f, ye);
  return {to_host(be, y),  to_host(be, sm), to_host(be, si),  to_host(be, rm),
          to_host(be, rv), to_host(be, dx), to_host(be, dg),  to_host(be, db),
          to_host(be, dga), to_host(be, dba), to_host(be, ye)};
}

// One output of a target against the reference's; `kind`: "y", "stat", "dx", "dparam".
Comparison check_output(const Target& t, const std::string& kind, const std::string& out,
                        const Tensor& ref, const Tensor& got) {
  const std::string what = "bn " + out + " " + t.name();
  if (exact_target(t)) {
    const double d = max_abs_diff(ref, got);
    return {d == 0.0, what + ": differs from the reference by " + std::to_string(d)};
  }
  if (!t.on_gpu()) {
    const double tol = kind == "stat" ? 1e-6 : kind == "dparam" ? 1e-4 : 1e-5;
    const double d = max_abs_diff(ref, got);
    return {d < tol, what + ": max |diff| " + std::to_string(d) + " >= " + std::to_string(tol)};
  }
  if (kind == "y") return compare(ref, got, 1e-5, 1e-5, what, false, "fp32");
  if (kind == "dx") return compare(ref, got, 1e-5, 0.0, what, true, "fp32");
  if (kind == "dparam") return compare(ref, got, 1e-5, 1e-5, what, false, "fp32");
  // statistics: save_mean and running_mean with 1e-7 absolute, the others none
  const bool mean = out.find("mean") != std::string::npos;
  return compare(ref, got, 1e-6, mean ? 1e-7 : 0.0, what, false, "fp32");
}


// ------------------------------------------------------------ CUDA against the CPU

// The inputs of a CUDA-against-CPU comparison, host, NCHW: the activations x,
// dy and the residual in the dtype under test (f16/bf16: f32 values rounded),
// the per-channel vectors f32. Drawn in this order from `seed`.
struct BnInputs {
  Tensor x, dy, res, gamma, beta, rm_init, rv_init, dg_old, db_old;
};
BnInputs random_bn_inputs(const BnCase& c, uint64_t seed, DType dt) {
  std::mt19937_64 rng(seed);
  const int64_t C = c.shape[1], HW = c.shape[2] * c.shape[3];
  BnInputs in;
  in.x = random_tensor(c.shape, DType::F32, rng, Layout::NCHW, c.lo, c.hi);
  if (c.channel_offsets)
    for (int64_t i = 0; i < in.x.numel(); ++i) {
      const int64_t ch = (i / HW) % C;
      in.x.data_as<float>()[i] = in.x.data_as<float>()[i] * float(1 + ch) + 0.5f * float(ch);
    }
  in.dy = random_tensor(c.shape, DType::F32, rng);
  in.res = random_tensor(c.shape, DType::F32, rng);
  in.gamma = random_tensor({C}, DType::F32, rng, Layout::NCHW, 0.5, 1.5);
  in.beta = random_tensor({C}, DType::F32, rng);
  in.rm_init = random_tensor({C}, DType::F32, rng);
  in.rv_init = random_tensor({C}, DType::F32, rng, Layout::NCHW, 0.5, 2.0);
  in.dg_old = random_tensor({C}, DType::F32, rng);
  in.db_old = random_tensor({C}, DType::F32, rng);
  if (dt != DType::F32)
    for (Tensor* t : {&in.x, &in.dy, &in.res}) *t = lp_of(cpu_reference(), *t, dt);
  return in;
}

// One side's outputs, host, in the side's layout.
struct BnSide {
  Tensor y, sm, si, rm, rv, ye, dx, dres, dg, db, dg_acc, db_acc;
};

// One side's forward (train, then eval with the updated statistics) and
// backward, written and accumulated, on b in layout L with the epilogue
// (act, residual); dresidual where the forward had a residual (as the layer
// asks). The backward starts from `saved`'s y, save_mean and save_invstd when
// given, so both sides share the ReLU mask and statistics and only the
// backward's own arithmetic is compared.
BnSide run_bn_side(Backend& b, Layout L, const BnInputs& in, Activation act, bool residual,
                   const BnSide* saved) {
  const DType dt = in.x.dtype();
  const Shape& sh = in.x.shape();
  const int64_t C = sh[1];
  const Tensor xd = to_device(b, in.x, L), g = to_device(b, in.gamma), bb = to_device(b, in.beta);
  const Tensor rd = residual ? to_device(b, in.res, L) : Tensor{};
  Tensor rm = to_device(b, in.rm_init), rv = to_device(b, in.rv_init);
  Tensor y = b.empty(sh, dt, L), sm = b.empty({C}, DType::F32), si = b.empty({C}, DType::F32);
  batchnorm::forward_train(b, xd, g, bb, rm, rv, 0.1f, 1e-5f, y, sm, si, Epilogue{act, rd});
  Tensor ye = b.empty(sh, dt, L);
  batchnorm::forward_eval(b, xd, g, bb, rm, rv, 1e-5f, ye, Epilogue{act, rd});
  BnSide o{to_host(b, y), to_host(b, sm), to_host(b, si), to_host(b, rm), to_host(b, rv),
           to_host(b, ye)};
  const BnSide& from = saved ? *saved : o;
  const Tensor yin = act == Activation::ReLU ? to_device(b, from.y, L) : Tensor{};
  const Tensor smin = to_device(b, from.sm), siin = to_device(b, from.si);
  const Tensor dyd = to_device(b, in.dy, L);
  Tensor dx = b.empty(sh, dt, L), dres = residual ? b.empty(sh, dt, L) : Tensor{};
  Tensor dg = b.empty({C}, DType::F32), db = b.empty({C}, DType::F32);
  batchnorm::backward(b, xd, dyd, g, smin, siin, dx, dg, db, false, EpilogueGrad{act, yin, dres});
  Tensor dga = to_device(b, in.dg_old), dba = to_device(b, in.db_old), dxa = b.empty(sh, dt, L);
  batchnorm::backward(b, xd, dyd, g, smin, siin, dxa, dga, dba, true, EpilogueGrad{act, yin});
  o.dx = to_host(b, dx), o.dres = to_host(b, dres), o.dg = to_host(b, dg);
  o.db = to_host(b, db), o.dg_acc = to_host(b, dga), o.db_acc = to_host(b, dba);
  return o;
}

// A CUDA side's outputs `o` (t's layout and dtype) against the CPU
// reference's `r` (NCHW, same inputs, the backward from r's saved values):
// "" or what differs beyond its bound.
// f32: check_output's CUDA bounds; dresidual (dy or 0) exact.
// f16/bf16: before rounding, the two sides' f32 values differ by what the
// f32 kernels are allowed against the reference: e = 1e-5 + 1e-5·max|y| (y),
// e = 1e-5·max|dx| (dx); each side then rounds once to the dtype:
// |cuda − cpu| <= 2u/(1 − u)·|cpu| + (1 + 2u)·e (+ two f16 subnormal steps,
// low_precision.h). Statistics, dgamma, dbeta: f32 outputs of f32 arithmetic
// on the same values, the f32 kernels' bounds.
std::string cuda_side_differs(const Target& t, const BnSide& r, const BnSide& o, bool residual,
                              const std::string& ep) {
  const Target f32{Impl::Cuda, t.layout, DType::F32};
  std::string bad;
  const auto take = [&](const Comparison& c) {
    if (bad.empty() && !c.ok) bad = c.msg;
  };
  const auto f32_output = [&](const char* kind, const std::string& what, const Tensor& want,
                              const Tensor& got) { take(check_output(f32, kind, what + ep, want, got)); };
  if (t.dtype == DType::F32) {
    f32_output("y", "train y", r.y, o.y);
    f32_output("y", "eval y", r.ye, o.ye);
    f32_output("dx", "dx", r.dx, o.dx);
  } else {
    const auto rounded = [&](const std::string& what, const Tensor& want, const Tensor& got,
                             double e) {
      take(compare_rounded(want, got, t.dtype, 2, e, what + ep + " " + t.name(),
                           precision_of(t.dtype)));
    };
    rounded("train y", r.y, o.y, 1e-5 + 1e-5 * max_magnitude(r.y));
    rounded("eval y", r.ye, o.ye, 1e-5 + 1e-5 * max_magnitude(r.ye));
    rounded("dx", r.dx, o.dx, 1e-5 * max_magnitude(r.dx));
  }
  f32_output("stat", "save_mean", r.sm, o.sm);
  f32_output("stat", "save_invstd", r.si, o.si);
  f32_output("stat", "running_mean", r.rm, o.rm);
  f32_output("stat", "running_var (unbiased)", r.rv, o.rv);
  f32_output("dparam", "dgamma", r.dg, o.dg);
  f32_output("dparam", "dbeta", r.db, o.db);
  f32_output("dparam", "accumulated dgamma", r.dg_acc, o.dg_acc);
  f32_output("dparam", "accumulated dbeta", r.db_acc, o.db_acc);
  if (residual && bad.empty()) {
    const double d = max_abs_diff(r.dres, to_nchw(o.dres));
    if (d != 0.0) bad = "dresidual" + ep + " " + t.name() + " differs by " + std::to_string(d);
  }
  return bad;
}

// run(u) for each of batchnorm::kUnrolls values loaded ahead: "" when every
// output has the bits it had with the first, else the first that differs.
// `fused`: ReLU and a residual, so dresidual is an output too.
std::string unroll_changes_bits(bool fused, const std::function<BnSide(int)>& run) {
  std::vector<Tensor> first;
  for (int u : batchnorm::kUnrolls) {
    const BnSide o = run(u);
    std::vector<Tensor> outs{o.y, o.sm, o.si, o.rm, o.rv, o.ye, o.dx, o.dg, o.db, o.dg_acc, o.db_acc};
    if (fused) outs.push_back(o.dres);
    if (first.empty()) {
      first = outs;
      continue;
    }
    for (size_t k = 0; k < outs.size(); ++k)
      if (!bitwise_equal(first[k], outs[k]))
        return std::string(fused ? "relu + residual" : "plain") + ", unroll " + std::to_string(u) +
               ": output " + std::to_string(k) + " differs from unroll " +
               std::to_string(batchnorm::kUnrolls[0]) + " by " +
               std::to_string(max_abs_diff(first[k], outs[k]));
  }
  return "";
}

// The ReLU backward's outputs (dx, dgamma, dbeta) with the mask read from y
// and taken from x, and the forward's y (host, NCHW).
struct MaskSides {
  std::vector<Tensor> from_y, from_x;
  Tensor y;
};

#if defined(TRAINBENCH_CUDA_EMULATED)
template <typename T>
T* as_elements(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data()) : nullptr;
}

// A host tensor whose every element is NaN (all bits set, in f32, f16 and
// bf16 alike), so an element a kernel fails to write shows.
Tensor nan_filled(Backend& h, const Shape& sh, DType dt, Layout L = Layout::NCHW) {
  Tensor t = h.empty(sh, dt, L);
  std::memset(t.data(), 0xff, t.nbytes());
  return t;
}

// run_bn_side with the CUDA kernels on the emulator: the launchers on host
// tensors in layout L with `plan` (the grid a GPU of plan's SM count gets),
// as batchnorm_cuda.cpp calls them; the backward from `saved`'s y,
// save_mean and save_invstd. Outputs start as NaN (nan_filled).
template <typename T>
BnSide run_bn_emulated_as(const batchnorm::ReducePlan& plan, Layout L, const BnInputs& in,
                          Activation act, bool residual, const BnSide& saved) {
  namespace emu = tb::cuda_emu;
  Backend& h = cpu_reference();
  const DType dt = in.x.dtype();
  const Shape& sh = in.x.shape();
  const int64_t C = sh[1];
  const bool relu = act == Activation::ReLU;
  const Tensor x = to_device(h, in.x, L), dy = to_device(h, in.dy, L);
  const Tensor r = residual ? to_device(h, in.res, L) : Tensor{};
  const float* g = in.gamma.data_as<float>();
  const float* b = in.beta.data_as<float>();
  BnSide o;
  o.rm = to_device(h, in.rm_init), o.rv = to_device(h, in.rv_init);
  o.y = nan_filled(h, sh, dt, L), o.sm = nan_filled(h, {C}, DType::F32);
  o.si = nan_filled(h, {C}, DType::F32);
  std::vector<double> work(plan.workspace_bytes / sizeof(double) + 1);
  emu::launch_bn_forward_train<T>(as_elements<T>(x), g, b, as_elements<T>(r), relu,
                                  o.rm.data_as<float>(), o.rv.data_as<float>(), 0.1f, 1e-5f,
                                  as_elements<T>(o.y), o.sm.data_as<float>(),
                                  o.si.data_as<float>(), plan, work.data(), nullptr);
  o.ye = nan_filled(h, sh, dt, L);
  emu::launch_bn_forward_eval<T>(as_elements<T>(x), g, b, as_elements<T>(r), relu,
                                 o.rm.data_as<float>(), o.rv.data_as<float>(), 1e-5f,
                                 as_elements<T>(o.ye), plan, nullptr);
  const Tensor yin = relu ? to_device(h, saved.y, L) : Tensor{};
  const Tensor smin = to_device(h, saved.sm), siin = to_device(h, saved.si);
  o.dx = nan_filled(h, sh, dt, L);
  o.dres = residual ? nan_filled(h, sh, dt, L) : Tensor{};
  o.dg = nan_filled(h, {C}, DType::F32), o.db = nan_filled(h, {C}, DType::F32);
  emu::launch_bn_backward<T>(as_elements<T>(x), as_elements<T>(yin), as_elements<T>(dy), g,
                             nullptr, smin.data_as<float>(), siin.data_as<float>(), relu,
                             as_elements<T>(o.dx), as_elements<T>(o.dres), o.dg.data_as<float>(),
                             o.db.data_as<float>(), false, plan, work.data(), nullptr);
  o.dg_acc = to_device(h, in.dg_old), o.db_acc = to_device(h, in.db_old);
  const Tensor dxa = h.empty(sh, dt, L);
  emu::launch_bn_backward<T>(as_elements<T>(x), as_elements<T>(yin), as_elements<T>(dy), g,
                             nullptr, smin.data_as<float>(), siin.data_as<float>(), relu,
                             as_elements<T>(dxa), nullptr, o.dg_acc.data_as<float>(),
                             o.db_acc.data_as<float>(), true, plan, work.data(), nullptr);
  return o;
}

// The ReLU epilogue's backward with its mask read from y and taken from x
// (mask_beta), on the emulated kernels, after the emulated forward (train,
// ReLU, no residual) made y and the statistics: dx, dgamma, dbeta of each
// (written), host, in that order, and the forward's y (host, NCHW).
template <typename T>
MaskSides bn_masks_emulated_as(const batchnorm::ReducePlan& plan, Layout L, const BnInputs& in) {
  namespace emu = tb::cuda_emu;
  CpuBackend& h = cpu_reference();
  const DType dt = in.x.dtype();
  const Shape& sh = in.x.shape();
  const int64_t C = sh[1];
  const Tensor x = to_device(h, in.x, L), dy = to_device(h, in.dy, L);
  const float* g = in.gamma.data_as<float>();
  const float* b = in.beta.data_as<float>();
  const Tensor rm = to_device(h, in.rm_init), rv = to_device(h, in.rv_init);
  const Tensor y = nan_filled(h, sh, dt, L), sm = nan_filled(h, {C}, DType::F32);
  const Tensor si = nan_filled(h, {C}, DType::F32);
  std::vector<double> work(plan.workspace_bytes / sizeof(double) + 1);
  emu::launch_bn_forward_train<T>(as_elements<T>(x), g, b, nullptr, true, rm.data_as<float>(),
                                  rv.data_as<float>(), 0.1f, 1e-5f, as_elements<T>(y),
                                  sm.data_as<float>(), si.data_as<float>(), plan, work.data(),
                                  nullptr);
  std::vector<Tensor> sides[2];
  for (int from_x = 0; from_x < 2; ++from_x) {
    const Tensor dx = nan_filled(h, sh, dt, L), dg = nan_filled(h, {C}, DType::F32);
    const Tensor db = nan_filled(h, {C}, DType::F32);
    emu::launch_bn_backward<T>(as_elements<T>(x), from_x ? nullptr : as_elements<T>(y),
                               as_elements<T>(dy), g, from_x ? b : nullptr, sm.data_as<float>(),
                               si.data_as<float>(), true, as_elements<T>(dx), nullptr,
                               dg.data_as<float>(), db.data_as<float>(), false, plan,
                               work.data(), nullptr);
    sides[from_x] = {dx, dg, db};
  }
  return {sides[0], sides[1], to_host_nchw(h, y)};
}

BnSide run_bn_emulated(const batchnorm::ReducePlan& plan, Layout L, const BnInputs& in,
                       Activation act, bool residual, const BnSide& saved) {
  switch (in.x.dtype()) {
    case DType::F32: return run_bn_emulated_as<float>(plan, L, in, act, residual, saved);
    case DType::F16: return run_bn_emulated_as<__half>(plan, L, in, act, residual, saved);
    case DType::BF16: return run_bn_emulated_as<__nv_bfloat16>(plan, L, in, act, residual, saved);
    default: break;
  }
  TB_FAIL("no emulated batch-norm kernel for ", dtype_name(in.x.dtype()));
}
#endif

// ------------------------------------------------------------ the CUDA launch plan

// Element (m, c) of an (N, C, HW) tensor, m = n·HW + i, in memory; written
// here from the layouts' definitions, not from batchnorm_plan.h.
int64_t offset_of(const batchnorm::ReducePlan& p, int64_t m, int64_t c) {
  if (p.nhwc) return m * p.C + c;
  const int64_t n = m / p.HW, i = m % p.HW;
  return (n * p.C + c) * p.HW + i;
}

// "" when the plan is sound for its shape, else what is wrong: the block and
// grid shape within CUDA's limits, the workspace large enough, and (`visit`)
// every value of the tensor visited exactly once by the threads' walks, each
// where its (m, c) lies and in its thread's channel and slice, every
// partial slot written by exactly one thread and read once by the finish
// kernel's loops (batchnorm.cu's write_partial and finish_sum).
std::string check_plan(const batchnorm::ReducePlan& p, bool visit) {
  using namespace batchnorm;
  const auto fail = [&](const std::string& what) {
    return what + " (M " + std::to_string(p.M) + ", C " + std::to_string(p.C) + ", HW " +
           std::to_string(p.HW) + (p.nhwc ? ", NHWC" : ", NCHW") + ", slices " +
           std::to_string(p.slices) + ", tiles " + std::to_string(p.tiles) + ", rows " +
           std::to_string(p.rows_per_slice) + ", lanes " + std::to_string(p.lanes_c) + "x" +
           std::to_string(p.lanes_m) + ")";
  };
  if (p.lanes_c * p.lanes_m != kBlockThreads || p.lanes_c < 1 || p.lanes_c > 32 ||
      (p.lanes_c & (p.lanes_c - 1)) != 0 || (!p.nhwc && p.lanes_c != 1))
    return fail("block shape");
  if (p.slices < 1 || p.slices > 2147483647 || p.tiles < 1 || p.tiles > kMaxGridY)
    return fail("grid outside CUDA's limits");
  if (p.tiles * p.lanes_c < p.C || (p.tiles - 1) * p.lanes_c >= p.C)
    return fail("channel tiles do not fit C");
  if (p.rows_per_slice % p.lanes_m != 0 || p.slices * p.rows_per_slice < p.M ||
      (p.slices - 1) * p.rows_per_slice >= p.M)
    return fail("slices do not fit M");
  if (p.finish_blocks * kFinishLanes < p.C || (p.finish_blocks - 1) * kFinishLanes >= p.C)
    return fail("finish blocks do not fit C");
  const size_t pairs = size_t(p.totals_at() + p.C);
  if (p.workspace_bytes < pairs * 2 * sizeof(double) || p.totals_at() < p.slices * p.C)
    return fail("workspace smaller than the partials and totals");
  if (!visit) return "";

  std::vector<uint8_t> seen(size_t(p.M * p.C), 0);
  std::vector<uint8_t> written(size_t(p.slices * p.C), 0), read(size_t(p.slices * p.C), 0);
  for (int64_t s = 0; s < p.slices; ++s)
    for (int64_t t = 0; t < p.tiles; ++t)
      for (int ty = 0; ty < p.lanes_m; ++ty)
        for (int tx = 0; tx < p.lanes_c; ++tx) {
          ChannelWalk w = walk(p, s, t, tx, ty);
          if (w.c != t * p.lanes_c + tx) return fail("thread in another tile's channel");
          if (ty == 0 && w.c < p.C) {
            const int64_t slot = p.partial_at(s, w.c);
            if (slot < 0 || slot >= p.totals_at()) return fail("partial slot outside");
            ++written[size_t(slot)];
          }
          for (int64_t k = w.count(); k > 0; --k, w.next()) {
            if (w.c >= p.C) return fail("idle lane visits a value");
            if (w.m < s * p.rows_per_slice || w.m >= std::min(p.M, (s + 1) * p.rows_per_slice))
              return fail("value m " + std::to_string(w.m) + " outside its slice");
            if (w.offset != offset_of(p, w.m, w.c))
              return fail("m " + std::to_string(w.m) + " c " + std::to_string(w.c) +
                          " at offset " + std::to_string(w.offset) + ", not " +
                          std::to_string(offset_of(p, w.m, w.c)));
            if (seen[size_t(w.offset)]++ != 0)
              return fail("offset " + std::to_string(w.offset) + " visited twice");
          }
        }
  for (size_t k = 0; k < seen.size(); ++k)
    if (seen[k] != 1) return fail("offset " + std::to_string(k) + " never visited");
  for (int64_t b = 0; b < p.finish_blocks; ++b)
    for (int ty = 0; ty < kFinishLanes; ++ty)
      for (int tx = 0; tx < kFinishLanes; ++tx) {
        const int64_t c = b * kFinishLanes + tx;
        if (c < p.C)
          for (int64_t k = ty; k < p.slices; k += kFinishLanes) ++read[size_t(p.partial_at(k, c))];
      }
  for (size_t k = 0; k < written.size(); ++k)
    if (written[k] != 1 || read[k] != 1)
      return fail("partial slot " + std::to_string(k) + " written " + std::to_string(written[k]) +
                  " times, read " + std::to_string(read[k]) + " times");
  return "";
}

}  // namespace

Q_DECLARE_METATYPE(BnCase)

class TestOpBatchnorm : public QObject {
  Q_OBJECT

 private slots:
  // ------------------------------------------------------------ finite differences (f64)

  void gradcheck_batchnorm_data() {
    QTest::addColumn<bool>("training");
    QTest::addColumn<Shape>("shape");
    QTest::addColumn<uint64_t>("seed");
    QTest::addColumn<double>("tol");
    QTest::addColumn<Layout>("layout");
    struct R {
      const char* name;
      bool training;
      Shape shape;
      uint64_t seed;
      double tol;
    };
    const R rows[] = {{"train 4x3x3x2", true, {4, 3, 3, 2}, 7, 1e-5},
                      {"eval 3x2x2x3", false, {3, 2, 2, 3}, 8, 1e-5},
                      {"train 2x3x6x5", true, {2, 3, 6, 5}, 77, 1e-6},
                      {"eval 2x3x6x5", false, {2, 3, 6, 5}, 77, 1e-6}};
    for (Layout l : {Layout::NCHW, Layout::NHWC})
      for (const R& r : rows)
        QTest::addRow("%s %s", r.name, layout_name(l)) << r.training << r.shape << r.seed << r.tol << l;
    // The blocked layout's indexing (one block, and two).
    QTest::addRow("train 2x16x3x2 nChw16c") << true << Shape{2, 16, 3, 2} << uint64_t(9) << 1e-5
                                            << Layout::NCHW16C;
    QTest::addRow("eval 2x32x2x2 nChw16c") << false << Shape{2, 32, 2, 2} << uint64_t(10) << 1e-5
                                           << Layout::NCHW16C;
  }
  void gradcheck_batchnorm() {
    QFETCH(bool, training);
    QFETCH(Shape, shape);
    QFETCH(uint64_t, seed);
    QFETCH(double, tol);
    QFETCH(Layout, layout);
    auto r = test::gradcheck_layer(std::make_unique<BatchNorm2d>("bn"), shape, seed, training,
                                   1e-6, layout);
    QVERIFY2(r.max_rel_error_dx < tol, qPrintable(QString("dx rel error %1 at %2")
                                                      .arg(r.max_rel_error_dx)
                                                      .arg(QString::fromStdString(r.worst))));
    QVERIFY2(r.max_rel_error_params < tol, qPrintable(QString("param rel error %1 at %2")
                                                          .arg(r.max_rel_error_params)
                                                          .arg(QString::fromStdString(r.worst))));
  }

  // ------------------------------------------------------------ every target vs the reference

  void batchnorm_matches_reference_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<BnCase>("c");
    for (const Target& t : kTargets)
      for (const BnCase& c : kCases)
        if (holds(t, c.shape[1])) QTest::addRow("%s: %s", t.name().c_str(), c.name) << t << c;
  }
  void batchnorm_matches_reference() {
    FETCH_TARGET(t, be);
    QFETCH(BnCase, c);
    TB_GPU_TRY
    const DType dt = t.dtype;
    const int64_t C = c.shape[1];
    std::mt19937_64 rng(31 + uint64_t(C));
    Tensor x = random_tensor(c.shape, dt, rng, Layout::NCHW, c.lo, c.hi);
    if (c.channel_offsets) {
      const int64_t plane = c.shape[2] * c.shape[3];
      for (int64_t i = 0; i < x.numel(); ++i) {
        const int64_t ch = (i / plane) % C;
        if (dt == DType::F64)
          x.data_as<double>()[i] = x.data_as<double>()[i] * double(1 + ch) + 0.5 * double(ch);
        else
          x.data_as<float>()[i] = x.data_as<float>()[i] * float(1 + ch) + 0.5f * float(ch);
      }
    }
    const Tensor dy = random_tensor(c.shape, dt, rng);
    const Tensor gamma = random_tensor({C}, dt, rng, Layout::NCHW, 0.5, 1.5);
    const Tensor beta = random_tensor({C}, dt, rng);
    const Tensor rm_init = random_tensor({C}, dt, rng);
    const Tensor rv_init = random_tensor({C}, dt, rng, Layout::NCHW, 0.5, 2.0);
    const Tensor dg_old = random_tensor({C}, dt, rng), db_old = random_tensor({C}, dt, rng);

    const BnOut r = run_bn(cpu_reference(), t, x, dy, gamma, beta, rm_init, rv_init, dg_old,
                           db_old, Layout::NCHW);
    const BnOut o = run_bn(be, t, x, dy, gamma, beta, rm_init, rv_init, dg_old, db_old, t.layout);
    EXPECT_OUTPUT(t, "y", "train y", r.y, o.y);
    EXPECT_OUTPUT(t, "stat", "save_mean", r.sm, o.sm);
    EXPECT_OUTPUT(t, "stat", "save_invstd", r.si, o.si);
    EXPECT_OUTPUT(t, "stat", "running_mean", r.rm, o.rm);
    EXPECT_OUTPUT(t, "stat", "running_var (unbiased)", r.rv, o.rv);
    EXPECT_OUTPUT(t, "dx", "dx", r.dx, o.dx);
    EXPECT_OUTPUT(t, "dparam", "dgamma", r.dg, o.dg);
    EXPECT_OUTPUT(t, "dparam", "dbeta", r.db, o.db);
    EXPECT_OUTPUT(t, "dparam", "accumulated dgamma", r.dg_acc, o.dg_acc);
    EXPECT_OUTPUT(t, "dparam", "accumulated dbeta", r.db_acc, o.db_acc);
    EXPECT_OUTPUT(t, "y", "eval y", r.ye, o.ye);
    TB_GPU_CATCH
  }

  // An empty batch (M = 0, which backward allows; sync_batchnorm's rank with
  // no samples gets here): dγ and dβ are the empty sums, written as 0 and
  // left as they were when accumulating, on every target.
  void batchnorm_backward_of_an_empty_batch_data() {
    QTest::addColumn<Target>("target");
    for (const Target& t : kTargets) QTest::addRow("%s", t.name().c_str()) << t;
  }
  void batchnorm_backward_of_an_empty_batch() {
    FETCH_TARGET(t, be);
    TB_GPU_TRY
    const DType dt = t.dtype;
    const int64_t C = holds(t, 3) ? 3 : kLayoutBlock;
    std::mt19937_64 rng(5);
    const Shape sh{0, C, 4, 4};
    const Tensor x = to_device(be, random_tensor(sh, dt, rng), t.layout);
    const Tensor dy = to_device(be, random_tensor(sh, dt, rng), t.layout);
    const Tensor gamma = to_device(be, random_tensor({C}, dt, rng));
    const Tensor stat = to_device(be, random_tensor({C}, dt, rng, Layout::NCHW, 0.5, 1.5));
    const Tensor old = random_tensor({C}, dt, rng, Layout::NCHW, 1.0, 2.0);
    Tensor dx = be.empty(sh, dt, t.layout);
    for (bool accumulate : {false, true}) {
      Tensor dg = to_device(be, old), db = to_device(be, old);
      batchnorm::backward(be, x, dy, gamma, stat, stat, dx, dg, db, accumulate);
      const Tensor hg = to_host(be, dg), hb = to_host(be, db);
      for (int64_t c = 0; c < C; ++c) {
        const double want = accumulate ? value_at(old, c) : 0.0;
        QCOMPARE(value_at(hg, c), want);
        QCOMPARE(value_at(hb, c), want);
      }
    }
    TB_GPU_CATCH
  }


  // ------------------------------------------------------------ the CUDA launch plan (CPU)

  // batchnorm::plan_reduce, which every CUDA kernel of the family runs on:
  // for C from 1 to 2048 and M from 1 to 524,288 (ResNet-18's b512 layers
  // among them), both layouts and the SM counts of an H100 SXM / H200 (132),
  // H100 PCIe (114), A100 (108) and one SM, check_plan's checks; every value
  // visited once by brute force wherever that is under 8M values, and at
  // 132 SMs always. 1G-value shapes: the grid and workspace checks only.
  void reduce_plan_visits_every_value_once_data() {
    QTest::addColumn<int64_t>("N");
    QTest::addColumn<int64_t>("C");
    QTest::addColumn<int64_t>("HW");
    QTest::addColumn<bool>("nhwc");
    const int64_t shapes[][3] = {
        {1, 1, 1},       {2, 3, 5},       {7, 1, 1},        {13, 33, 7},      {33, 31, 17},
        {64, 20, 81},    {24, 40, 81},    {16, 100, 100},   {32, 16, 1024},   {3, 2048, 49},
        {2, 2048, 256},  {512, 2048, 1},  {1024, 1, 512},   {512, 3, 1024},   {4096, 8, 128},
        {1, 64, 524288},
        // ResNet-18 on 32x32 at b512: the four stages' batch-norm shapes.
        {512, 64, 1024}, {512, 128, 256}, {512, 256, 64},   {512, 512, 16},
        // 1G values: plan only.
        {512, 2048, 1024}};
    for (bool nhwc : {false, true})
      for (const auto& sh : shapes)
        QTest::addRow("%lldx%lldx%lld %s", (long long)sh[0], (long long)sh[1], (long long)sh[2],
                      nhwc ? "NHWC" : "NCHW")
            << sh[0] << sh[1] << sh[2] << nhwc;
  }
  void reduce_plan_visits_every_value_once() {
    QFETCH(int64_t, N);
    QFETCH(int64_t, C);
    QFETCH(int64_t, HW);
    QFETCH(bool, nhwc);
    const int64_t values = N * C * HW;
    for (int sm : {132, 114, 108, 1}) {
      const batchnorm::ReducePlan p = batchnorm::plan_reduce(N, C, HW, nhwc, sm);
      const bool visit = values <= (int64_t(1) << 23) || (sm == 132 && values <= (int64_t(1) << 26));
      const std::string err = check_plan(p, visit);
      QVERIFY2(err.empty(), qPrintable(QString("%1 SMs: %2").arg(sm).arg(err.c_str())));
      // About kBlocksPerSm blocks an SM where M allows it, never more than twice that.
      QVERIFY2(p.slices * p.tiles <= std::max<int64_t>(2 * batchnorm::kBlocksPerSm * sm, p.tiles),
               qPrintable(QString("%1 SMs: %2 blocks").arg(sm).arg(p.slices * p.tiles)));
    }
  }

  // What the plan refuses, and the empty plan of an empty tensor.
  void reduce_plan_limits() {
    // NCHW puts one channel per grid row: 65536 channels exceed CUDA's y limit.
    const QString e = qerror_of([] { batchnorm::plan_reduce(2, 70000, 4, false, 132); });
    QVERIFY2(e.contains("70000 channels") && e.contains("65535"), qPrintable(e));
    QVERIFY(check_plan(batchnorm::plan_reduce(2, 70000, 4, true, 132), false).empty());
    QVERIFY(batchnorm::plan_reduce(0, 8, 4, true, 132).empty());
    QVERIFY(batchnorm::plan_reduce(2, 8, 0, false, 132).empty());
    QCOMPARE(batchnorm::plan_reduce(0, 8, 4, true, 132).workspace_bytes, size_t(0));
    QVERIFY(!qerror_of([] { batchnorm::plan_reduce(2, -1, 4, true, 132); }).isEmpty());
    QVERIFY(!qerror_of([] { batchnorm::plan_reduce(2, 8, 4, true, 0); }).isEmpty());
  }


  // How many values a kernel's thread loads ahead: the fewest of 4, 8, 16
  // that keep kBytesInFlight (16 B) of loads in flight, or the forced one;
  // TRAINBENCH_CUDA_BN_UNROLL sets that and names itself when it is wrong.
  void reduce_plan_unroll_rule() {
    using batchnorm::unroll_for;
    QCOMPARE(unroll_for(1, 4, 0), 4);   // f32 statistics
    QCOMPARE(unroll_for(1, 2, 0), 8);   // bf16 statistics, apply without residual
    QCOMPARE(unroll_for(2, 2, 0), 4);   // bf16 apply with residual
    QCOMPARE(unroll_for(3, 2, 0), 4);   // bf16 backward with the ReLU mask
    QCOMPARE(unroll_for(1, 1, 0), 16);  // one byte a value: as far as the kernels go
    QCOMPARE(unroll_for(3, 4, 8), 8);   // forced
    QVERIFY(qerror_of([] { unroll_for(1, 2, 5); }).contains("unroll 5"));
    qunsetenv("TRAINBENCH_CUDA_BN_UNROLL");
    QCOMPARE(batchnorm::unroll_from_environment(), 0);
    qputenv("TRAINBENCH_CUDA_BN_UNROLL", "16");
    QCOMPARE(batchnorm::unroll_from_environment(), 16);
    qputenv("TRAINBENCH_CUDA_BN_UNROLL", "6");
    const QString bad = qerror_of([] { batchnorm::unroll_from_environment(); });
    qunsetenv("TRAINBENCH_CUDA_BN_UNROLL");
    QVERIFY2(bad.contains("TRAINBENCH_CUDA_BN_UNROLL=6") && bad.contains("4, 8 or 16"),
             qPrintable(bad));
  }

  // ------------------------------------------------------------ CUDA at several blocks a channel

  // The CUDA kernels where the launch plan gives each channel several blocks
  // (asserted with the device's SM count), against the reference in NCHW:
  // every epilogue (none, ReLU, residual, both), the backward written and
  // accumulated, the eval output. The backward of both sides gets the same
  // inputs (the reference's y, save_mean, save_invstd), so the ReLU mask is
  // the same and only the backward's own arithmetic is compared.
  // Tolerances (u = 2^-24 ≈ 6e-8, the float rounding):
  //   y, eval y: the CUDA apply is float (μ, invstd, γ, β in float, then + r):
  //     |err| ≲ u·(|γ|·invstd·(|μ| + 3|x−μ|) + |β| + 2|y| + |r|) < 2e-6 for
  //     these inputs (|γ| < 1.5, |x−μ|·invstd < 2, |μ|·invstd < 3, |y| < 5);
  //     allowed 1e-5 + 1e-5·|ref|;
  //   statistics: both sides in double, rounded to float once: ≤ 1 ulp
  //     (1.2e-7 relative); allowed 1e-6 relative (+1e-7 for the means);
  //   dx, dgamma, dbeta: the same float inputs and the same double formulas,
  //     the sums only in another order (≈1e-16·M relative), then one
  //     rounding: ≤ 1 ulp; allowed 1e-5 of the largest |dx|, 1e-5·|ref| + 1e-5;
  //   dresidual: dy or dy·[y>0], no arithmetic: exact.
  void batchnorm_cuda_large_matches_reference_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<BnCase>("c");
    // 32x16x32x32: M = 32768, mean 3 (the statistics' shift); 64x20x9x9:
    // HW = 81 (NCHW walks wrap mid-plane), 20 of 32 NHWC channel lanes busy.
    const BnCase cases[] = {{"32x16x32x32 mean 3", {32, 16, 32, 32}, 1.0, 5.0, false},
                            {"64x20x9x9 channel offsets", {64, 20, 9, 9}, -1.0, 1.0, true}};
    for (Layout l : {Layout::NCHW, Layout::NHWC})
      for (const BnCase& c : cases) {
        const Target t{Impl::Cuda, l, DType::F32};
        QTest::addRow("%s: %s", t.name().c_str(), c.name) << t << c;
      }
  }
  void batchnorm_cuda_large_matches_reference() {
    FETCH_TARGET(t, be);
    QFETCH(BnCase, c);
    TB_GPU_TRY
    const int64_t N = c.shape[0], C = c.shape[1], HW = c.shape[2] * c.shape[3];
    const int sm = be.describe().at("multiprocessors").get<int>();
    const batchnorm::ReducePlan plan =
        batchnorm::plan_reduce(N, C, HW, t.layout == Layout::NHWC, sm);
    QVERIFY2(plan.slices > 1, qPrintable(QString("one block per channel: %1 slices at %2 SMs")
                                             .arg(plan.slices)
                                             .arg(sm)));
    const BnInputs in = random_bn_inputs(c, 57 + uint64_t(C), DType::F32);
    CpuBackend& ref = cpu_reference();
    for (Activation act : {Activation::None, Activation::ReLU})
      for (bool residual : {false, true}) {
        const std::string ep = std::string(" [") + activation_name(act) +
                               (residual ? " + residual]" : "]");
        const BnSide r = run_bn_side(ref, Layout::NCHW, in, act, residual, nullptr);
        const BnSide o = run_bn_side(be, t.layout, in, act, residual, &r);
        const std::string bad = cuda_side_differs(t, r, o, residual, ep);
        QVERIFY2(bad.empty(), bad.c_str());
      }
    TB_GPU_CATCH
  }

  // The CUDA kernels with 4, 8 and 16 values loaded ahead a thread
  // (TRAINBENCH_CUDA_BN_UNROLL): a thread uses its values in the same order
  // whatever it loads ahead, so every output has the same bits as with 4;
  // f32 and bf16, both layouts, the fused epilogue and the plain op.
  void batchnorm_cuda_unroll_keeps_bits_data() {
    QTest::addColumn<Target>("target");
    for (DType dt : {DType::F32, DType::BF16})
      for (Layout l : {Layout::NCHW, Layout::NHWC}) {
        const Target t{Impl::Cuda, l, dt};
        QTest::addRow("%s", t.name().c_str()) << t;
      }
  }
  void batchnorm_cuda_unroll_keeps_bits() {
    FETCH_TARGET(t, be);
    TB_GPU_TRY
    // HW = 81: the NCHW walks wrap mid-plane; 20 of 32 NHWC channel lanes busy.
    const BnCase c{"64x20x9x9 channel offsets", {64, 20, 9, 9}, -1.0, 1.0, true};
    const BnInputs in = random_bn_inputs(c, 91, t.dtype);
    struct Unset {
      ~Unset() { qunsetenv("TRAINBENCH_CUDA_BN_UNROLL"); }
    } unset;
    for (bool fused : {false, true}) {
      const Activation act = fused ? Activation::ReLU : Activation::None;
      const std::string bad = unroll_changes_bits(fused, [&](int u) {
        qputenv("TRAINBENCH_CUDA_BN_UNROLL", QByteArray::number(u));
        return run_bn_side(be, t.layout, in, act, fused, nullptr);
      });
      QVERIFY2(bad.empty(), bad.c_str());
    }
    TB_GPU_CATCH
  }

  // ------------------------------------------------------------ f16 / bf16 activations

  // The CPU's f16/bf16 path against the f64 reference on the widened inputs:
  // x, dy and the residual rounded to the dtype (lp_of), then read exactly
  // into f64 (as_f64) for the reference, which normalises with the same f32
  // parameters in f64 and applies the epilogue after (relu(bn(x) + r)). The
  // backward of both sides starts from the lp side's saved mean, invstd and
  // y (ReLU's mask), so only the backward's own arithmetic is compared.
  // Every epilogue on NCHW (the CPU takes none on NHWC), both layouts, both
  // CPU paths (fast f32, reference), the backward written and accumulated, the
  // eval output with the updated running statistics.
  // Bounds: each f16/bf16 output is the f32 path's value rounded once, and
  // the f32 path lies within e = 1e-5 of the f64 reference on these O(1)
  // inputs (batchnorm_matches_reference's bound for y and dx), so
  // |lp − ref| <= u·|ref| + (1 + u)·e, plus f16's subnormal step
  // (low_precision.h); the statistics, dgamma and dbeta are f32 outputs of the
  // f32 path on the same widened values: its bounds, 1e-6 and 1e-4;
  // dresidual is dy or 0, no arithmetic: exact.
  void batchnorm_lp_matches_widened_reference_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<bool>("relu");
    QTest::addColumn<bool>("residual");
    for (DType dt : {DType::F16, DType::BF16})
      for (const Target& t : {Target{Impl::CpuFast, Layout::NCHW, dt},
                              Target{Impl::CpuReference, Layout::NCHW, dt},
                              Target{Impl::CpuFast, Layout::NHWC, dt}})
        for (bool relu : {false, true})
          for (bool residual : {false, true}) {
            if (t.layout == Layout::NHWC && (relu || residual)) continue;
            QTest::addRow("%s [%s%s]", t.name().c_str(), relu ? "relu" : "none",
                          residual ? " + residual" : "")
                << t << relu << residual;
          }
  }
  void batchnorm_lp_matches_widened_reference() {
    FETCH_TARGET(t, be);
    QFETCH(bool, relu);
    QFETCH(bool, residual);
    const DType dt = t.dtype;
    const Layout L = t.layout;
    const Activation act = relu ? Activation::ReLU : Activation::None;
    const Shape sh{8, 6, 7, 5};
    const int64_t C = sh[1];
    std::mt19937_64 rng(91);
    CpuBackend& ref = cpu_reference();
    // Mean 3: the fast path's one-pass variance, as batchnorm_matches_reference.
    const Tensor x = in_layout(lp_of(ref, random_tensor(sh, DType::F32, rng, Layout::NCHW, 1.0, 5.0), dt), L);
    const Tensor dy = in_layout(lp_of(ref, random_tensor(sh, DType::F32, rng), dt), L);
    const Tensor r = residual ? in_layout(lp_of(ref, random_tensor(sh, DType::F32, rng), dt), L)
                              : Tensor{};
    const Tensor gamma = random_tensor({C}, DType::F32, rng, Layout::NCHW, 0.5, 1.5);
    const Tensor beta = random_tensor({C}, DType::F32, rng);
    const Tensor rm_init = random_tensor({C}, DType::F32, rng);
    const Tensor rv_init = random_tensor({C}, DType::F32, rng, Layout::NCHW, 0.5, 2.0);
    const Tensor dg_old = random_tensor({C}, DType::F32, rng);
    const Tensor db_old = random_tensor({C}, DType::F32, rng);

    // The f16/bf16 side.
    const auto lp = [&] { return Tensor::empty(sh, dt, Device::cpu(), L); };
    const auto f32 = [&] { return Tensor::empty({C}, DType::F32); };
    Tensor y = lp(), ye = lp(), sm = f32(), si = f32(), rm = clone(rm_init), rv = clone(rv_init);
    batchnorm::forward_train(be, x, gamma, beta, rm, rv, 0.1f, 1e-5f, y, sm, si, Epilogue{act, r});
    batchnorm::forward_eval(be, x, gamma, beta, rm, rv, 1e-5f, ye, Epilogue{act, r});
    Tensor dx = lp(), dxa = lp(), dres = residual ? lp() : Tensor{}, dg = f32(), db = f32();
    Tensor dga = clone(dg_old), dba = clone(db_old);
    const Tensor mask = relu ? y : Tensor{};
    batchnorm::backward(be, x, dy, gamma, sm, si, dx, dg, db, false, EpilogueGrad{act, mask, dres});
    batchnorm::backward(be, x, dy, gamma, sm, si, dxa, dga, dba, true, EpilogueGrad{act, mask});

    // The f64 reference on the same values, NCHW.
    const auto wide = [](const Tensor& h) { return to_nchw(as_f64(h)); };
    const auto wide_empty = [&](const Shape& s) { return Tensor::empty(s, DType::F64); };
    const Tensor xr = wide(x), dyr = wide(dy), rr = wide(r), g64 = wide(gamma), b64 = wide(beta);
    Tensor yr = wide_empty(sh), yer = wide_empty(sh), smr = wide_empty({C}), sir = wide_empty({C});
    Tensor rmr = wide(rm_init), rvr = wide(rv_init);
    batchnorm::forward_train(ref, xr, g64, b64, rmr, rvr, 0.1f, 1e-5f, yr, smr, sir, Epilogue{act, rr});
    batchnorm::forward_eval(ref, xr, g64, b64, rmr, rvr, 1e-5f, yer, Epilogue{act, rr});
    const Tensor sm64 = wide(sm), si64 = wide(si), mask64 = wide(mask);
    Tensor dxr = wide_empty(sh), dxar = wide_empty(sh), dresr = residual ? wide_empty(sh) : Tensor{};
    Tensor dgr = wide_empty({C}), dbr = wide_empty({C}), dgar = wide(dg_old), dbar = wide(db_old);
    batchnorm::backward(ref, xr, dyr, g64, sm64, si64, dxr, dgr, dbr, false,
                        EpilogueGrad{act, mask64, dresr});
    batchnorm::backward(ref, xr, dyr, g64, sm64, si64, dxar, dgar, dbar, true,
                        EpilogueGrad{act, mask64});

    const double e = 1e-5;
    const auto rounded = [&](const char* what, const Tensor& want, const Tensor& got) {
      QCOMPARE(got.dtype(), dt);
      const Comparison c = compare_rounded(want, got, dt, 1, e, std::string(what) + " " + t.name());
      QVERIFY2(c.ok, c.msg.c_str());
    };
    const auto f32_within = [&](const char* what, const Tensor& want, const Tensor& got,
                                double tol) {
      QCOMPARE(got.dtype(), DType::F32);
      const double d = max_abs_diff(want, as_f64(got));
      QVERIFY2(d < tol, qPrintable(QString("%1 %2: max |diff| %3 >= %4")
                                       .arg(what).arg(t.name().c_str()).arg(d).arg(tol)));
    };
    rounded("train y", yr, y);
    rounded("eval y", yer, ye);
    f32_within("save_mean", smr, sm, 1e-6);
    f32_within("save_invstd", sir, si, 1e-6);
    f32_within("running_mean", rmr, rm, 1e-6);
    f32_within("running_var", rvr, rv, 1e-6);
    rounded("dx", dxr, dx);
    rounded("dx (accumulating call)", dxar, dxa);
    if (residual) QCOMPARE(max_abs_diff(dresr, to_nchw(as_f64(dres))), 0.0);
    f32_within("dgamma", dgr, dg, 1e-4);
    f32_within("dbeta", dbr, db, 1e-4);
    f32_within("accumulated dgamma", dgar, dga, 1e-4);
    f32_within("accumulated dbeta", dbar, dba, 1e-4);
  }

  // The contract's dtypes: f16/bf16 activations all of x's dtype, f32
  // per-channel vectors; anything else is refused naming the op, the operand
  // and both dtypes. The CPU takes all four dtypes (Kernels::supports).
  void batchnorm_lp_refuses_mixed_dtypes() {
    CpuBackend& be = cpu_fast();
    const Shape sh{2, 3, 2, 2};
    const auto act = [&](DType t) { return Tensor::zeros(sh, t); };
    const Tensor c32 = Tensor::zeros({3}, DType::F32), c16 = Tensor::zeros({3}, DType::BF16);
    Tensor none;
    const Tensor xb = act(DType::BF16);
    Tensor yb = act(DType::BF16), yh = act(DType::F16), y32 = act(DType::F32);
    const auto expect = [](const QString& m, std::initializer_list<const char*> words) {
      for (const char* w : words) QVERIFY2(m.contains(w), qPrintable(m + " (missing: " + w + ")"));
    };
    expect(qerror_of([&] { batchnorm::forward_eval(be, xb, c32, c32, c32, c32, 1e-5f, yh); }),
           {"batchnorm_forward_eval", "y", "f16", "bf16"});
    expect(qerror_of([&] { batchnorm::forward_eval(be, xb, c16, c32, c32, c32, 1e-5f, yb); }),
           {"batchnorm_forward_eval", "gamma", "bf16", "f32"});
    expect(qerror_of([&] {
             Tensor sm = Tensor::zeros({3}, DType::F32), si = Tensor::zeros({3}, DType::BF16);
             Tensor rm = Tensor::zeros({3}, DType::F32), rv = Tensor::zeros({3}, DType::F32);
             batchnorm::forward_train(be, xb, c32, c32, rm, rv, 0.1f, 1e-5f, yb, sm, si);
           }),
           {"batchnorm_forward_train", "save_invstd", "bf16", "f32"});
    expect(qerror_of([&] {
             batchnorm::forward_eval(be, act(DType::F16), c32, c32, c32, c32, 1e-5f, yh,
                                     Epilogue{Activation::None, xb});
           }),
           {"batchnorm_forward_eval", "residual", "bf16", "f16"});
    // f32 x with f32 vectors and a bf16 output: the output is x's dtype.
    expect(qerror_of([&] { batchnorm::forward_eval(be, act(DType::F32), c32, c32, c32, c32, 1e-5f, yb); }),
           {"batchnorm_forward_eval", "y", "bf16", "f32"});
    Tensor dxb = act(DType::BF16), dx32 = act(DType::F32), dg16 = Tensor::zeros({3}, DType::BF16);
    expect(qerror_of([&] {
             batchnorm::backward(be, xb, y32, c32, c32, c32, dxb, none, none, false);
           }),
           {"batchnorm_backward", "dy", "f32", "bf16"});
    expect(qerror_of([&] {
             batchnorm::backward(be, xb, yb, c32, c32, c32, dx32, none, none, false);
           }),
           {"batchnorm_backward", "dx", "f32", "bf16"});
    expect(qerror_of([&] {
             batchnorm::backward(be, xb, yb, c32, c32, c32, dxb, dg16, none, false);
           }),
           {"batchnorm_backward", "dgamma", "bf16", "f32"});
    expect(qerror_of([&] {
             batchnorm::backward(be, xb, yb, c32, c32, c32, dxb, none, none, false,
                                 EpilogueGrad{Activation::ReLU, yh});
           }),
           {"batchnorm_backward", "ReLU", "f16", "bf16"});
    expect(qerror_of([&] {
             Tensor yu = act(DType::U8);
             batchnorm::forward_eval(be, act(DType::U8), c32, c32, c32, c32, 1e-5f, yu);
           }),
           {"batchnorm_forward_eval", "u8", "f32, f64, f16 or bf16"});
    for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
      QVERIFY(cpu_fast().kernels<batchnorm::Kernels>().supports(t));
      QVERIFY(cpu_reference().kernels<batchnorm::Kernels>().supports(t));
    }
  }

  // A backend refuses a dtype it lacks, naming the op, the dtype and itself:
  // the CUDA backend has no f64 batch norm (the CPU has all four).
  void batchnorm_dtype_refused_by_backend() {
    NEED_GPU();
    TB_GPU_TRY
    Backend& be = cuda_backend();
    const Shape sh{2, 3, 2, 2};
    const Tensor x = be.empty(sh, DType::F64), c = be.empty({3}, DType::F64);
    Tensor y = be.empty(sh, DType::F64);
    const QString m = qerror_of([&] { batchnorm::forward_eval(be, x, c, c, c, c, 1e-5f, y); });
    QVERIFY2(m.contains("batchnorm_forward_eval") && m.contains("f64") &&
                 m.contains(QString::fromStdString(be.name())),
             qPrintable(m));
    QVERIFY(!be.kernels<batchnorm::Kernels>().supports(DType::F64));
    for (DType t : {DType::F32, DType::F16, DType::BF16})
      QVERIFY(be.kernels<batchnorm::Kernels>().supports(t));
    TB_GPU_CATCH
  }

  // The CUDA kernels in f16/bf16, where each channel spans several blocks,
  // against the CPU's f16/bf16 path (the f32 reference on the widened
  // inputs, NCHW) from the same rounded inputs: every epilogue, both layouts,
  // the backward written and accumulated (both sides from the CPU's y, mean
  // and invstd), the eval output.
  // Bounds: before rounding, the two sides' f32 values differ by what
  // batchnorm_cuda_large_matches_reference allows the f32 kernels against the
  // reference: e = 1e-5 + 1e-5·max|y| (y), e = 1e-5·max|dx| (dx); each side
  // then rounds once to the dtype: |cuda − cpu| <= 2u/(1 − u)·|cpu| +
  // (1 + 2u)·e (+ two f16 subnormal steps, low_precision.h). Statistics,
  // dgamma, dbeta: f32 outputs of f32 arithmetic on the same values, the f32
  // kernels' bounds (check_output); dresidual: dy or 0, exact.
  void batchnorm_lp_cuda_matches_cpu_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<BnCase>("c");
    const BnCase cases[] = {{"32x16x32x32 mean 3", {32, 16, 32, 32}, 1.0, 5.0, false},
                            {"64x20x9x9", {64, 20, 9, 9}, -2.0, 3.0, false}};
    for (DType dt : {DType::F16, DType::BF16})
      for (const Target& t : cuda_targets(dt))
        for (const BnCase& c : cases) QTest::addRow("%s: %s", t.name().c_str(), c.name) << t << c;
  }
  void batchnorm_lp_cuda_matches_cpu() {
    FETCH_TARGET(t, be);
    QFETCH(BnCase, c);
    TB_GPU_TRY
    const DType dt = t.dtype;
    const Shape& sh = c.shape;
    const int64_t C = sh[1];
    const int sm_count = be.describe().at("multiprocessors").get<int>();
    QVERIFY(batchnorm::plan_reduce(sh[0], C, sh[2] * sh[3], t.layout == Layout::NHWC, sm_count)
                .slices > 1);
    const BnInputs in = random_bn_inputs(c, 83 + uint64_t(C) + uint64_t(dt == DType::BF16), dt);
    CpuBackend& ref = cpu_reference();
    for (Activation act : {Activation::None, Activation::ReLU})
      for (bool residual : {false, true}) {
        const std::string ep = std::string(" [") + activation_name(act) +
                               (residual ? " + residual]" : "]");
        const BnSide r = run_bn_side(ref, Layout::NCHW, in, act, residual, nullptr);
        const BnSide o = run_bn_side(be, t.layout, in, act, residual, &r);
        const std::string bad = cuda_side_differs(t, r, o, residual, ep);
        QVERIFY2(bad.empty(), bad.c_str());
      }
    TB_GPU_CATCH
  }

  // The same kernels on the CUDA emulator (tests/cuda_emulator), here on any
  // machine: every dtype, both layouts, every epilogue, written and
  // accumulated, against the CPU reference with the GPU slots' bounds
  // (cuda_side_differs), under both of the emulator's thread orders, with the
  // grids two GPUs would get: 132 SMs (H100 SXM) and 16. The shapes put a
  // channel over several slices (the partials and their fold), HW = 81 wraps
  // the NCHW walk mid-plane, C = 20 leaves NHWC lanes idle, and 64x4x32x32
  // gives over 32 slices a channel (the finish kernel's loop over slices).
  // What the emulator does not reproduce: FMA contraction and the GPU's
  // rsqrtf (both within the bounds), timing.
  void batchnorm_emulated_cuda_matches_cpu_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<BnCase>("c");
    QTest::addColumn<int>("sms");
    const BnCase cases[] = {{"64x20x9x9 channel offsets", {64, 20, 9, 9}, -1.0, 1.0, true},
                            {"64x4x32x32 mean 3", {64, 4, 32, 32}, 1.0, 5.0, false}};
    for (DType dt : {DType::F32, DType::F16, DType::BF16})
      for (const Target& t : cuda_targets(dt))
        for (const BnCase& c : cases)
          for (int sms : {132, 16})
            QTest::addRow("%s: %s, %d SMs", t.name().c_str(), c.name, sms) << t << c << sms;
  }
  void batchnorm_emulated_cuda_matches_cpu() {
    QFETCH(Target, target);
    QFETCH(BnCase, c);
    QFETCH(int, sms);
#if defined(TRAINBENCH_CUDA_EMULATED)
    TB_EMU_TRY
    const Shape& sh = c.shape;
    const batchnorm::ReducePlan plan =
        batchnorm::plan_reduce(sh[0], sh[1], sh[2] * sh[3], target.layout == Layout::NHWC, sms);
    QVERIFY2(plan.slices > 1, "one slice a channel: the partials' fold goes untested");
    const BnInputs in = random_bn_inputs(c, 101 + uint64_t(sh[1]) + uint64_t(target.dtype), target.dtype);
    for (tb_emu::Schedule order : {tb_emu::Schedule::forward, tb_emu::Schedule::reverse}) {
      EmulatorSchedule use(order);
      for (Activation act : {Activation::None, Activation::ReLU})
        for (bool residual : {false, true}) {
          const std::string ep = std::string(" [") + activation_name(act) +
                                 (residual ? " + residual, " : ", ") + schedule_name(order) + "]";
          const BnSide r = run_bn_side(cpu_reference(), Layout::NCHW, in, act, residual, nullptr);
          const BnSide o = run_bn_emulated(plan, target.layout, in, act, residual, r);
          const std::string bad = cuda_side_differs(target, r, o, residual, ep);
          QVERIFY2(bad.empty(), bad.c_str());
        }
    }
    TB_EMU_CATCH
#else
    QSKIP(kNoEmulator);
#endif
  }

  // batchnorm_cuda_unroll_keeps_bits on the emulator: 4, 8 and 16 values
  // loaded ahead give the same bits, every dtype and layout, fused and plain.
  void batchnorm_emulated_unroll_keeps_bits_data() {
    QTest::addColumn<Target>("target");
    for (DType dt : {DType::F32, DType::F16, DType::BF16})
      for (const Target& t : cuda_targets(dt)) QTest::addRow("%s", t.name().c_str()) << t;
  }
  void batchnorm_emulated_unroll_keeps_bits() {
    QFETCH(Target, target);
#if defined(TRAINBENCH_CUDA_EMULATED)
    TB_EMU_TRY
    const BnCase c{"64x20x9x9 channel offsets", {64, 20, 9, 9}, -1.0, 1.0, true};
    const BnInputs in = random_bn_inputs(c, 91, target.dtype);
    batchnorm::ReducePlan plan = batchnorm::plan_reduce(64, 20, 81, target.layout == Layout::NHWC, 132);
    for (bool fused : {false, true}) {
      const Activation act = fused ? Activation::ReLU : Activation::None;
      const BnSide r = run_bn_side(cpu_reference(), Layout::NCHW, in, act, fused, nullptr);
      const std::string bad = unroll_changes_bits(fused, [&](int u) {
        plan.unroll_forced = u;
        return run_bn_emulated(plan, target.layout, in, act, fused, r);
      });
      QVERIFY2(bad.empty(), bad.c_str());
    }
    TB_EMU_CATCH
#else
    QSKIP(kNoEmulator);
#endif
  }

  // ReLU's mask taken from x (EpilogueGrad::mask_beta: the forward's y
  // recomputed from x, γ, β and the saved statistics, without reading y)
  // against the mask read from y: dx, dgamma and dbeta bit for bit, after a
  // train forward with ReLU and no residual; every dtype, both layouts. The
  // "tiny gamma" rows make y = round(γ·x̂ + β) underflow to 0 in f16 where
  // the unrounded value is positive (γ = 1e-7, β = 0: about a quarter of the
  // positive values), so a mask that skipped the rounding to the activation's
  // dtype would differ there; the rows check that such values exist.
  void batchnorm_relu_mask_from_x_keeps_bits_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<bool>("tiny_gamma");
    QTest::addColumn<bool>("emulated");
    for (bool emulated : {false, true})
      for (DType dt : {DType::F32, DType::F16, DType::BF16})
        for (const Target& t : cuda_targets(dt))
          for (bool tiny : {false, true})
            QTest::addRow("%s%s%s", emulated ? "emulated " : "", t.name().c_str(),
                          tiny ? ": tiny gamma" : "")
                << t << tiny << emulated;
  }
  void batchnorm_relu_mask_from_x_keeps_bits() {
    QFETCH(Target, target);
    QFETCH(bool, tiny_gamma);
    QFETCH(bool, emulated);
    const BnCase c{"64x20x9x9 channel offsets", {64, 20, 9, 9}, -1.0, 1.0, true};
    BnInputs in = random_bn_inputs(c, 93, target.dtype);
    if (tiny_gamma) {
      for (int64_t i = 0; i < in.gamma.numel(); ++i) in.gamma.data_as<float>()[i] = 1e-7f;
      for (int64_t i = 0; i < in.beta.numel(); ++i) in.beta.data_as<float>()[i] = 0.0f;
    }
    MaskSides m;
    if (emulated) {
#if defined(TRAINBENCH_CUDA_EMULATED)
      TB_EMU_TRY
      const batchnorm::ReducePlan plan =
          batchnorm::plan_reduce(64, 20, 81, target.layout == Layout::NHWC, 132);
      switch (target.dtype) {
        case DType::F32: m = bn_masks_emulated_as<float>(plan, target.layout, in); break;
        case DType::F16: m = bn_masks_emulated_as<__half>(plan, target.layout, in); break;
        default: m = bn_masks_emulated_as<__nv_bfloat16>(plan, target.layout, in); break;
      }
      TB_EMU_CATCH
#else
      QSKIP(kNoEmulator);
#endif
    } else {
      FETCH_TARGET(t, be);
      TB_GPU_TRY
      const DType dt = t.dtype;
      const Shape& sh = in.x.shape();
      const int64_t C = sh[1];
      const Tensor xd = to_device(be, in.x, t.layout), dyd = to_device(be, in.dy, t.layout);
      const Tensor g = to_device(be, in.gamma), bb = to_device(be, in.beta);
      Tensor rm = to_device(be, in.rm_init), rv = to_device(be, in.rv_init);
      Tensor yd = be.empty(sh, dt, t.layout), sm = be.empty({C}, DType::F32);
      Tensor si = be.empty({C}, DType::F32);
      batchnorm::forward_train(be, xd, g, bb, rm, rv, 0.1f, 1e-5f, yd, sm, si,
                               Epilogue{Activation::ReLU, {}});
      for (bool mask_from_x : {false, true}) {
        Tensor dx = be.empty(sh, dt, t.layout), dg = be.empty({C}, DType::F32);
        Tensor db = be.empty({C}, DType::F32);
        batchnorm::backward(be, xd, dyd, g, sm, si, dx, dg, db, false,
                            EpilogueGrad{Activation::ReLU, yd, {}, {}, {},
                                         mask_from_x ? bb : Tensor{}});
        (mask_from_x ? m.from_x : m.from_y) = {to_host(be, dx), to_host(be, dg), to_host(be, db)};
      }
      m.y = to_host_nchw(be, yd);
      TB_GPU_CATCH
    }
    const char* names[] = {"dx", "dgamma", "dbeta"};
    for (size_t k = 0; k < 3; ++k)
      QVERIFY2(bitwise_equal(m.from_y[k], m.from_x[k]),
               qPrintable(QString("%1 with the mask from x differs from the mask from y by %2")
                              .arg(names[k])
                              .arg(max_abs_diff(m.from_y[k], m.from_x[k]))));
    // The rounding the tiny rows are about: every f16 y whose x̂ lies in
    // (0.01, 0.2), γ·x̂ in (1e-9, 2e-8) below half f16's smallest step
    // (2^-24), is 0, where the unrounded value is positive; x̂ from the host's
    // double statistics of the same (f16) x.
    if (tiny_gamma && target.dtype == DType::F16) {
      const int64_t N = 64, C = 20, HW = 81;
      int64_t inside = 0, zero = 0;
      for (int64_t ch = 0; ch < C; ++ch) {
        double s = 0, ss = 0;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t i = 0; i < HW; ++i) s += value_at(in.x, (n * C + ch) * HW + i);
        const double mean = s / double(N * HW);
        for (int64_t n = 0; n < N; ++n)
          for (int64_t i = 0; i < HW; ++i) {
            const double d = value_at(in.x, (n * C + ch) * HW + i) - mean;
            ss += d * d;
          }
        const double invstd = 1.0 / std::sqrt(ss / double(N * HW) + 1e-5);
        for (int64_t n = 0; n < N; ++n)
          for (int64_t i = 0; i < HW; ++i) {
            const int64_t at = (n * C + ch) * HW + i;
            const double xh = (value_at(in.x, at) - mean) * invstd;
            if (xh > 0.01 && xh < 0.2) {
              ++inside;
              zero += value_at(m.y, at) == 0.0;
            }
          }
      }
      QVERIFY2(inside > 100 && zero == inside,
               qPrintable(QString("%1 of %2 f16 outputs with x̂ in (0.01, 0.2) are 0: the "
                                  "rows do not reach the underflow they are about")
                              .arg(zero)
                              .arg(inside)));
    }
  }

  // ------------------------------------------------------------ closed forms, by hand

  // Eval mode with non-trivial running statistics against the closed form
  //   dx = γ·dy/sqrt(σ²+eps), dγ = Σ dy·(x−μ)/sqrt(σ²+eps), dβ = Σ dy.
  void batchnorm_eval_backward_closed_form() {
    for (bool reference : {true, false}) {
      CpuBackend& be = reference ? cpu_reference() : cpu_fast();
      Model model("m", {2, 1, 3}, 0);
      model.emplace<BatchNorm2d>("bn", 0.1f, 1e-5f);
      model.build(be, 1, DType::F32);
      // params: bn.weight, bn.bias; buffers: running_mean, running_var
      float* gamma = model.params()[0].value.data_as<float>();
      float* beta = model.params()[1].value.data_as<float>();
      float* rm = model.buffers()[0].value.data_as<float>();
      float* rv = model.buffers()[1].value.data_as<float>();
      gamma[0] = 2.0f, gamma[1] = 3.0f, beta[0] = 0.5f, beta[1] = -1.0f;
      rm[0] = 0.5f, rm[1] = -1.0f, rv[0] = 4.0f, rv[1] = 0.25f;
      Context ctx{be};
      ctx.training = false;
      Tensor x = random_tensor({2, 2, 1, 3}, 3);
      Tensor y = model.forward(ctx, x);
      Tensor dy = random_tensor({2, 2, 1, 3}, 4);
      Tensor dx = model.layers()[0]->backward(ctx, dy, true);
      const Tensor& dgamma = model.params()[0].grad;
      const Tensor& dbeta = model.params()[1].grad;
      for (int64_t c = 0; c < 2; ++c) {
        const double s = 1.0 / std::sqrt(double(rv[c]) + 1e-5);
        double sg = 0.0, sb = 0.0;
        for (int64_t n = 0; n < 2; ++n)
          for (int64_t i = 0; i < 3; ++i) {
            const int64_t k = (n * 2 + c) * 3 + i;
            const double xv = x.data_as<float>()[k], g = dy.data_as<float>()[k];
            QVERIFY(std::abs(y.data_as<float>()[k] - (gamma[c] * (xv - rm[c]) * s + beta[c])) <
                    1e-5);
            QVERIFY(std::abs(dx.data_as<float>()[k] - gamma[c] * g * s) < 1e-5);
            sg += g * (xv - rm[c]) * s;
            sb += g;
          }
        QVERIFY(std::abs(dgamma.data_as<float>()[c] - sg) < 1e-5);
        QVERIFY(std::abs(dbeta.data_as<float>()[c] - sb) < 1e-5);
      }
      // Eval forward leaves the running statistics alone.
      QCOMPARE(rm[0], 0.5f);
      QCOMPARE(rv[1], 0.25f);
    }
  }

  // ctx.accumulate_grads: a second backward with the same dy adds the same
  // parameter gradients again (gradient accumulation through the layer).
  void batchnorm_accumulates_parameter_gradients() {
    for (bool training : {true, false}) {
      CpuBackend& be = cpu_fast();
      Model model("m", {3, 2, 2}, 0);
      model.emplace<BatchNorm2d>("bn");
      model.build(be, 2, DType::F32);
      Context ctx{be};
      ctx.training = training;
      Tensor x = random_tensor({4, 3, 2, 2}, 5);
      Tensor dy = random_tensor({4, 3, 2, 2}, 6);
      model.forward(ctx, x);
      ctx.accumulate_grads = false;
      model.layers()[0]->backward(ctx, dy, false);
      std::vector<float> once(model.grad_block().data_as<float>(),
                              model.grad_block().data_as<float>() + 6);
      ctx.accumulate_grads = true;
      model.layers()[0]->backward(ctx, dy, false);
      for (int i = 0; i < 6; ++i) {
        QVERIFY(once[size_t(i)] != 0.0f);
        QVERIFY(std::abs(model.grad_block().data_as<float>()[i] - 2.0f * once[size_t(i)]) <
                1e-5f * (1.0f + std::abs(once[size_t(i)])));
      }
    }
  }

  // One channel holds {1, 2, 3, 6}: mean 3, biased var 14/4 = 3.5, unbiased 14/3.
  // The other holds {−1, −1, 1, 1}: mean 0, biased var 1, unbiased 4/3.
  // momentum 0.1 from (mean 0, var 1):
  //   running_mean = 0.9·0 + 0.1·3 = 0.3          and 0
  //   running_var  = 0.9·1 + 0.1·14/3 = 1.3666667 and 0.9 + 0.1·4/3 = 1.0333333
  // y(x=1, γ=1, β=0) = (1−3)/sqrt(3.5+1e-5) = −1.0690434
  void batchnorm_running_statistics() {
    for (bool reference : {true, false}) {
      CpuBackend& be = reference ? cpu_reference() : cpu_fast();
      // x (N=2, C=2, H=1, W=2) NCHW: n0c0 {1,2}, n0c1 {−1,−1}, n1c0 {3,6}, n1c1 {1,1}
      Tensor x = from_values({2, 2, 1, 2}, {1, 2, -1, -1, 3, 6, 1, 1});
      Tensor gamma = from_values({2}, {1, 1}), beta = from_values({2}, {0, 0});
      Tensor rm = from_values({2}, {0, 0}), rv = from_values({2}, {1, 1});
      Tensor y = Tensor::empty(x.shape(), DType::F32);
      Tensor sm = Tensor::empty({2}, DType::F32), si = Tensor::empty({2}, DType::F32);
      batchnorm::forward_train(be, x, gamma, beta, rm, rv, 0.1f, 1e-5f, y, sm, si);
      QVERIFY(std::abs(rm.data_as<float>()[0] - 0.3) < 1e-6);
      QVERIFY(std::abs(rm.data_as<float>()[1] - 0.0) < 1e-6);
      QVERIFY(std::abs(rv.data_as<float>()[0] - 1.3666667) < 1e-6);
      QVERIFY(std::abs(rv.data_as<float>()[1] - 1.0333333) < 1e-6);
      QVERIFY(std::abs(sm.data_as<float>()[0] - 3.0) < 1e-6);
      QVERIFY(std::abs(si.data_as<float>()[0] - 1.0 / std::sqrt(3.5 + 1e-5)) < 1e-6);
      QVERIFY(std::abs(si.data_as<float>()[1] - 1.0 / std::sqrt(1.0 + 1e-5)) < 1e-6);
      QVERIFY(std::abs(y.data_as<float>()[0] - (-1.0690434)) < 1e-5);
      QVERIFY(std::abs(y.data_as<float>()[2] - (-0.999995)) < 1e-5);  // −1/sqrt(1+1e-5)
    }
  }

  // A non-finite value reaches its channel's statistics on every backend:
  // save_invstd and running_var turn NaN, as the reference's (a clamp of the
  // variance at 0 that let NaN through as 0 gave the GPU a finite 1/sqrt(eps)
  // and a running_var decaying towards 0: the anomaly hidden). The other
  // channel stays finite.
  void batchnorm_non_finite_reaches_statistics_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<double>("bad");
    std::vector<Target> targets = {{Impl::CpuReference, Layout::NCHW, DType::F32},
                                   {Impl::CpuFast, Layout::NCHW, DType::F32},
                                   {Impl::CpuFast, Layout::NHWC, DType::F32}};
    for (const Target& t : cuda_targets()) targets.push_back(t);
    for (const Target& t : targets)
      for (double bad : {double(NAN), double(INFINITY)})
        QTest::addRow("%s x=%g", t.name().c_str(), bad) << t << bad;
  }
  void batchnorm_non_finite_reaches_statistics() {
    FETCH_TARGET(t, be);
    QFETCH(double, bad);
    TB_GPU_TRY
    // N=2, C=2, H=1, W=2 NCHW: channel 0 {bad, 2, 3, 6}, channel 1 {−1, −1, 1, 1}
    Tensor x = from_values({2, 2, 1, 2}, {float(bad), 2, -1, -1, 3, 6, 1, 1});
    const Tensor xd = to_device(be, x, t.layout);
    const Tensor g = to_device(be, from_values({2}, {1, 1})), b = to_device(be, from_values({2}, {0, 0}));
    Tensor rm = to_device(be, from_values({2}, {0, 0})), rv = to_device(be, from_values({2}, {1, 1}));
    Tensor y = be.empty(x.shape(), DType::F32, t.layout);
    Tensor sm = be.empty({2}, DType::F32), si = be.empty({2}, DType::F32);
    batchnorm::forward_train(be, xd, g, b, rm, rv, 0.1f, 1e-5f, y, sm, si);
    const Tensor si_h = to_host(be, si), rv_h = to_host(be, rv);
    QVERIFY2(std::isnan(si_h.data_as<float>()[0]),
             qPrintable(QString("save_invstd[0] = %1").arg(si_h.data_as<float>()[0])));
    QVERIFY2(std::isnan(rv_h.data_as<float>()[0]),
             qPrintable(QString("running_var[0] = %1").arg(rv_h.data_as<float>()[0])));
    QVERIFY(std::abs(si_h.data_as<float>()[1] - 1.0 / std::sqrt(1.0 + 1e-5)) < 1e-6);
    QVERIFY(std::abs(rv_h.data_as<float>()[1] - 1.0333333) < 1e-6);
    TB_GPU_CATCH
  }

  // NHWC is supported (batchnorm_matches_reference); x and y in different
  // layouts are not: that would be a hidden transpose.
  void batchnorm_rejects_mixed_layouts() {
    CpuBackend& be = cpu_fast();
    Tensor x = Tensor::zeros({1, 2, 2, 2}, DType::F32, Device::cpu(), Layout::NHWC);
    Tensor y = Tensor::zeros({1, 2, 2, 2}, DType::F32, Device::cpu(), Layout::NCHW);
    Tensor c = Tensor::zeros({2}, DType::F32);
    try {
      batchnorm::forward_eval(be, x, c, c, c, c, 1e-5f, y);
      QFAIL("NHWC input with an NCHW output was accepted");
    } catch (const Error& e) {
      QVERIFY(QString(e.what()).contains("NHWC"));
    }
  }

  // ------------------------------------------------------------ epilogue limits

  // What the contract refuses is named, on both CPU paths: a GELU epilogue
  // (forward and backward), and on the CPU an epilogue on NHWC.
  void batchnorm_rejects_unsupported_epilogues() {
    for (bool reference : {true, false}) {
      CpuBackend& be = reference ? cpu_reference() : cpu_fast();
      Tensor x = random_tensor({2, 3, 2, 2}, 71), dy = random_tensor({2, 3, 2, 2}, 72);
      Tensor c = from_values({3}, {1, 1, 1});
      Tensor y = Tensor::empty(x.shape(), DType::F32), dx = Tensor::empty(x.shape(), DType::F32);
      QString e = qerror_of([&] {
        batchnorm::forward_eval(be, x, c, c, c, c, 1e-5f, y, Epilogue{Activation::GELU});
      });
      QVERIFY2(e.contains("gelu") && e.contains("batchnorm_forward_eval"), qPrintable(e));
      Tensor none;
      e = qerror_of([&] {
        batchnorm::backward(be, x, dy, c, c, c, dx, none, none, false,
                              EpilogueGrad{Activation::GELU, y});
      });
      QVERIFY2(e.contains("gelu") && e.contains("batchnorm_backward"), qPrintable(e));
      // mask_beta: only with a ReLU to mask, and one value a channel.
      e = qerror_of([&] {
        batchnorm::backward(be, x, dy, c, c, c, dx, none, none, false,
                            EpilogueGrad{Activation::None, {}, {}, {}, {}, c});
      });
      QVERIFY2(e.contains("mask_beta") && e.contains("no ReLU"), qPrintable(e));
      e = qerror_of([&] {
        batchnorm::backward(be, x, dy, c, c, c, dx, none, none, false,
                            EpilogueGrad{Activation::ReLU, y, {}, {}, {}, from_values({2}, {0, 0})});
      });
      QVERIFY2(e.contains("mask_beta") && e.contains("batchnorm_backward"), qPrintable(e));
      Tensor xn = Tensor::zeros({1, 3, 2, 2}, DType::F32, Device::cpu(), Layout::NHWC);
      Tensor yn = Tensor::zeros({1, 3, 2, 2}, DType::F32, Device::cpu(), Layout::NHWC);
      e = qerror_of([&] {
        batchnorm::forward_eval(be, xn, c, c, c, c, 1e-5f, yn, Epilogue{Activation::ReLU});
      });
      QVERIFY2(e.contains("NHWC") && e.contains("epilogue"), qPrintable(e));
      batchnorm::forward_eval(be, xn, c, c, c, c, 1e-5f, yn);  // NHWC without one works
    }
    QVERIFY_THROWS_EXCEPTION(Error, BatchNorm2d("bn", Activation::GELU));
  }

  // The fused layer (ReLU epilogue) is BatchNorm2d under another kind: the
  // same parameter and buffer names, order and initial values as the plain
  // layer, so fused and unfused models from one seed start equal.
  void batchnorm_epilogue_layer_registers_the_plain_parameters() {
    CpuBackend& be = cpu_fast();
    Model plain("m", {3, 2, 2}, 0), fused("m", {3, 2, 2}, 0);
    plain.emplace<BatchNorm2d>("bn");
    fused.emplace<BatchNorm2d>("bn", Activation::ReLU);
    plain.build(be, 9, DType::F32);
    fused.build(be, 9, DType::F32);
    QCOMPARE(plain.layers()[0]->kind(), std::string("batchnorm2d"));
    QCOMPARE(fused.layers()[0]->kind(), std::string("batchnorm_relu"));
    QCOMPARE(fused.params().size(), plain.params().size());
    QCOMPARE(fused.buffers().size(), plain.buffers().size());
    for (size_t i = 0; i < plain.params().size(); ++i) {
      QCOMPARE(fused.params()[i].name, plain.params()[i].name);
      QVERIFY(bitwise_equal(fused.params()[i].value, plain.params()[i].value));
    }
    for (size_t i = 0; i < plain.buffers().size(); ++i) {
      QCOMPARE(fused.buffers()[i].name, plain.buffers()[i].name);
      QVERIFY(bitwise_equal(fused.buffers()[i].value, plain.buffers()[i].value));
    }
  }

  // sync_batchnorm synchronises the plain layer only: with an epilogue the
  // layer refuses rather than normalise with its own batch alone.
  void batchnorm_epilogue_refuses_sync_batchnorm() {
    CpuBackend& be = cpu_fast();
    Model model("m", {3, 2, 2}, 0);
    model.emplace<BatchNorm2d>("bn", Activation::ReLU);
    model.build(be, 2, DType::F32);
    Context ctx{be};
    ctx.sync_batchnorm = [](double*, int64_t) {};
    const Tensor x = random_tensor({4, 3, 2, 2}, 5);
    const QString e = qerror_of([&] { model.forward(ctx, x); });
    QVERIFY2(e.contains("sync_batchnorm") && e.contains("relu"), qPrintable(e));
  }
};

QTEST_GUILESS_MAIN(TestOpBatchnorm)
#include "test_op_batchnorm.moc"
