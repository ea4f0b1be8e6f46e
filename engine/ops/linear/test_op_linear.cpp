// SPDX-License-Identifier: GPL-3.0-or-later
// The linear op family (linear.h): linear::forward/backward (y = act(x·wᵀ + b))
// on every backend and dtype (f16/bf16 inputs: the mixed-precision path), the
// activation epilogue (fuse_pointwise), and the Linear layer.
//
// 1. Gradients against central finite differences, f64 on the reference
//    backend (gradcheck.h), with and without bias.
// 2. linear_matches_reference, one body over targets x shapes: y, dx, dw, db
//    and accumulate=true against the reference kernels. Exact in f64 (the
//    reference templates on every CPU backend); 1e-4 of the largest reference
//    magnitude for the fast f32 path (OpenBLAS) and cuBLAS (FP32 compute, other
//    summation order), db on CUDA 1e-5 relative + 1e-6. On the CPU also the
//    accumulate contract: accumulate=true adds what accumulate=false writes
//    (1e-6 scaled in f32, 1e-14 in f64).
// 3. f16/bf16 inputs (amp): the CPU reference within 2.5u·Σ|a||b| of the f32
//    op on the unrounded inputs (u the unit roundoff), db bit-equal; CUDA
//    against the CPU within 1e-5 of the output's magnitude (only the summation
//    order differs: the same rounded inputs). Low-precision activations (y,
//    dy, dx f16/bf16): the CPU is the f32-activation form rounded once, bit
//    for bit; CUDA against it within each side's roundings.
// 4. Hand-computed values, empty batches, shape errors, the layer's parameters.
// 5. The activation epilogue (ReLU, exact GELU) against its unfused definition,
//    fresh random inputs (never zeros), every output compared relative to the
//    reference tensor's largest magnitude ("scaled"):
//    - linear_act_gradcheck: the fused layer against finite differences (f64,
//      the reference backend, whose epilogue is the plain ops composed);
//    - linear_act_matches_reference: fused vs the fused reference (float sums
//      over K = 300 in another order): 1e-4; fused vs unfused on the target:
//      1e-5 on the CPU (the GEMM adds the bias before vs after the K sum),
//      1e-4 on CUDA (cuBLASLt's ReLU epilogue, GEMM + GELU kernel);
//    - linear_act_on_parameter_views: the same, with weights, biases and
//      gradients as views into flat blocks at 4- and 128-byte alignment (as
//      the trainer's parameters are): 1e-4;
//    - the epilogues and arguments the contract refuses. Whole models with
//      and without fusion are in test_models.
// 6. linear.cu's epilogue kernels (bias_act_kernel, act_backward_bgrad_kernel)
//    on the CUDA emulator, the CPU reference's GEMMs standing in for cuBLAS:
//    against the fused reference with the CUDA slot's bound (1e-4 scaled),
//    pre and dz included, with and without bias, db written and accumulated,
//    N and M off the kernels' blocks, both thread orders; an empty batch's db.
// GPU rows QSKIP with the reason where there is no device.
#include <QtTest>

#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <tuple>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/nn/linear.h"
#include "engine/nn/model.h"
#include "engine/ops/amp/amp.h"
#include "engine/ops/linear/linear.h"
#include "engine/ops/optimizer/optimizer.h"
#include "engine/ops/pointwise/pointwise.h"
#include "tests/engine/device_fixture.h"
#include "tests/engine/gradcheck.h"
#include "tests/engine/tensor_helpers.h"
#include "tests/cuda_emulator/emulated_slot.h"
#if defined(TRAINBENCH_CUDA_EMULATED)
#include "tests/cuda_emulator/begin_emulated.h"
#include "engine/ops/linear/linear.cuh"
#include "tests/cuda_emulator/end_emulated.h"
#endif

using namespace tb;
using namespace tb::test;

namespace {

constexpr double kGradTol = 1e-6;   // f64 finite differences
constexpr double kFastTol = 1e-4;   // fast f32 vs reference f32
constexpr double kAccumTol = 1e-6;  // accumulate=true vs old + written, f32

struct LinearCase {
  const char* name = "";
  int64_t N = 0, K = 0, M = 0;
  bool bias = true;
};

const LinearCase kCases[] = {
    {"fmnist fc, batch 1", 1, 3136, 10, true}, {"fmnist fc, batch 64", 64, 3136, 10, true},
    {"7x13 -> 5, no bias", 7, 13, 5, false},    {"3x1 -> 1", 3, 1, 1, true},
    {"33x70 -> 19", 33, 70, 19, true},          {"33x70 -> 19, no bias", 33, 70, 19, false},
};

const Target kTargets[] = {
    {Impl::CpuReference, Layout::NCHW, DType::F32},
    {Impl::CpuFast, Layout::NCHW, DType::F32},
    {Impl::CpuFast, Layout::NCHW, DType::F64},
    {Impl::Cuda, Layout::NCHW, DType::F32},
};

bool exact_target(const Target& t) {
  return !t.on_gpu() && (t.dtype == DType::F64 || t.impl == Impl::CpuReference);
}

Comparison check_output(const Target& t, const std::string& out, const Tensor& ref,
                        const Tensor& got) {
  const std::string what = "linear " + out + " " + t.name();
  if (exact_target(t)) {
    const double d = max_abs_diff(ref, got);
    return {d == 0.0, what + ": differs from the reference by " + std::to_string(d)};
  }
  if (!t.on_gpu()) {
    const double e = scaled_diff(ref, got);
    return {e < kFastTol, what + ": scaled difference " + std::to_string(e)};
  }
  if (out.find("db") != std::string::npos) return compare(ref, got, 1e-5, 1e-6, what, false, "fp32");
  return compare(ref, got, 1e-4, 0.0, what, true, "fp32");
}

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

float f32_at(const Tensor& h, int64_t i) { return h.data_as<float>()[i]; }

// Linear under AMP on backend b: x (N,K), w (M,K) rounded to dt; returns
// {y, dx, dw, db} on the host (f32).
struct LinearOut {
  Tensor y, dx, dw, db;
};
// `act`: the activations' dtype (y, dy, dx), f32 or dt (dy rounded to it on b).
LinearOut linear_lp(Backend& b, const Tensor& x, const Tensor& w, const Tensor& bias,
                    const Tensor& dy, DType dt, DType act = DType::F32) {
  const int64_t N = x.dim(0), K = x.dim(1), M = w.dim(0);
  Tensor xd = to_device(b, x), wd = to_device(b, w), bd = to_device(b, bias), dyd = to_device(b, dy);
  Tensor xl = b.empty({N, K}, dt), wl = b.empty({M, K}, dt);
  amp::cast(b, xd, xl);
  amp::cast(b, wd, wl);
  if (act != DType::F32) dyd = amp::cast_to(b, dyd, act);
  Tensor y = b.empty({N, M}, act), dx = b.empty({N, K}, act);
  Tensor dw = b.empty({M, K}, DType::F32), db = b.empty({M}, DType::F32);
  linear::forward(b, xl, wl, bd, y);
  linear::backward(b, xl, wl, dyd, dx, dw, db, false);
  const auto host_f32 = [&b](const Tensor& t) {
    return to_host(b, t.dtype() == DType::F32 ? t : amp::cast_to(b, t, DType::F32));
  };
  return {host_f32(y), host_f32(dx), to_host(b, dw), to_host(b, db)};
}

// f32 host tensor -> rounded to lp and widened back (exactly representable).
Tensor rounded_to(const Tensor& f, DType lp) {
  CpuBackend& ref = cpu_reference();
  return amp::cast_to(ref, amp::cast_to(ref, f, lp), DType::F32);
}

// The first element of the CUDA outputs d farther from the CPU's c than
// bound(what, c's output, i) + 1e-5·max|c's output|, described; empty when
// every element is within.
using BoundOf = std::function<double(const std::string& what, const Tensor& cpu, int64_t i)>;
QString first_outside(const LinearOut& c, const LinearOut& d, DType dt, const BoundOf& bound) {
  for (auto [rt, gt, what] : {std::tuple{c.y, d.y, "y"}, std::tuple{c.dx, d.dx, "dx"},
                              std::tuple{c.dw, d.dw, "dw"}, std::tuple{c.db, d.db, "db"}}) {
    double mx = 0.0;
    for (int64_t i = 0; i < rt.numel(); ++i) mx = std::max(mx, double(std::abs(f32_at(rt, i))));
    for (int64_t i = 0; i < rt.numel(); ++i) {
      const double b = bound(what, rt, i) + 1e-5 * mx;
      if (std::abs(double(f32_at(rt, i)) - f32_at(gt, i)) > b)
        return QString("%1 %2[%3]: cpu %4 cuda %5 bound %6").arg(dtype_name(dt)).arg(what).arg(i)
            .arg(f32_at(rt, i)).arg(f32_at(gt, i)).arg(b);
    }
  }
  return {};
}
LinearOut linear_f32(Backend& b, const Tensor& x, const Tensor& w, const Tensor& bias,
                     const Tensor& dy) {
  const int64_t N = x.dim(0), K = x.dim(1), M = w.dim(0);
  LinearOut o{Tensor::empty({N, M}, DType::F32), Tensor::empty({N, K}, DType::F32),
              Tensor::empty({M, K}, DType::F32), Tensor::empty({M}, DType::F32)};
  linear::forward(b, x, w, bias, o.y);
  linear::backward(b, x, w, dy, o.dx, o.dw, o.db, false);
  return o;
}
// Σ_k |a[i,k]|·|b[j,k]| for row-major a (I,K), b (J,K): the scale of one GEMM output.
double abs_dot(const Tensor& a, int64_t i, const Tensor& b, int64_t j, int64_t K) {
  double s = 0.0;
  for (int64_t k = 0; k < K; ++k)
    s += std::abs(double(f32_at(a, i * K + k))) * std::abs(double(f32_at(b, j * K + k)));
  return s;
}

// Uniform in [-1, 1) (never 0), 1-D of n elements: the AMP suites' draws.
Tensor random_vector(int64_t n, uint64_t seed) { return random_tensor({n}, seed); }

// ---------------------------------------------------------------- activation epilogue
using Act = Activation;

struct LinCase {
  Tensor x, w, b, dy;
  LinCase(int64_t N, int64_t K, int64_t M, uint64_t seed) {
    x = random_tensor({N, K}, seed, -2.0, 2.0);
    w = random_tensor({M, K}, seed + 1, -0.2, 0.2);
    b = random_tensor({M}, seed + 2, -0.5, 0.5);
    dy = random_tensor({N, M}, seed + 3);
  }
};

// Linear + act on `be`, fused (the epilogue) or as the unfused ops in the
// order the unfused layers run them; outputs stay on be's device.
LinearOut run_linear(Backend& be, const LinCase& k, Act act, bool fused) {
  auto dev = [&](const Tensor& h) {
    Tensor d = be.empty(h.shape(), h.dtype());
    be.copy(h, d);
    return d;
  };
  Tensor x = dev(k.x), w = dev(k.w), b = dev(k.b), dy = dev(k.dy);
  const int64_t N = k.x.dim(0), K = k.x.dim(1), M = k.w.dim(0);
  LinearOut o;
  o.y = be.empty({N, M}, DType::F32);
  Tensor pre = be.empty({N, M}, DType::F32), dpre = be.empty({N, M}, DType::F32);
  o.dx = be.empty({N, K}, DType::F32), o.dw = be.empty({M, K}, DType::F32);
  o.db = be.empty({M}, DType::F32);
  if (fused) {
    Tensor p = act == Act::GELU ? pre : Tensor{};
    linear::forward(be, x, w, b, o.y, Epilogue{act, {}, p});
    linear::backward(be, x, w, dy, o.dx, o.dw, o.db, false, EpilogueGrad{act, o.y, {}, p, dpre});
    return o;
  }
  linear::forward(be, x, w, b, pre);
  if (act == Act::ReLU) {
    pointwise::relu_forward(be, pre, o.y);
    pointwise::relu_backward(be, o.y, dy, dpre);
  } else {
    pointwise::gelu_forward(be, pre, o.y);
    pointwise::gelu_backward(be, pre, dy, dpre);
  }
  linear::backward(be, x, w, dpre, o.dx, o.dw, o.db, false);
  return o;
}

// run_linear's fused path with the operands placed as the trainer places
// them: w and b (and dw, db) consecutive views into one parameter block and
// one gradient block (model.cpp), x and y views too, all starting `offset`
// floats in, so aligned only to that offset (4 bytes for offset 1).
LinearOut run_linear_views(Backend& be, const LinCase& k, Act act, int64_t offset) {
  const int64_t N = k.x.dim(0), K = k.x.dim(1), M = k.w.dim(0);
  auto block = [&](int64_t n) { return be.empty({offset + n}, DType::F32); };
  auto at = [&](const Tensor& base, int64_t begin, const Shape& s) {
    return Tensor::view_of(base, offset + begin, s);
  };
  const Tensor params = block(M * K + M), grads = block(M * K + M);
  const Tensor xb = block(N * K), yb = block(N * M);
  Tensor w = at(params, 0, {M, K}), b = at(params, M * K, {M}), x = at(xb, 0, {N, K});
  for (auto [dst, src] : {std::pair{&w, &k.w}, std::pair{&b, &k.b}, std::pair{&x, &k.x}})
    be.copy(*src, *dst);
  Tensor dy = be.empty({N, M}, DType::F32);
  be.copy(k.dy, dy);
  LinearOut o;
  o.y = at(yb, 0, {N, M});
  o.dw = at(grads, 0, {M, K}), o.db = at(grads, M * K, {M});
  o.dx = be.empty({N, K}, DType::F32);
  Tensor pre = be.empty({N, M}, DType::F32), dpre = be.empty({N, M}, DType::F32);
  Tensor p = act == Act::GELU ? pre : Tensor{};
  linear::forward(be, x, w, b, o.y, Epilogue{act, {}, p});
  linear::backward(be, x, w, dy, o.dx, o.dw, o.db, false, EpilogueGrad{act, o.y, {}, p, dpre});
  return o;
}

std::string compare_lin(Backend& be_a, const LinearOut& a, Backend& be_b, const LinearOut& b,
                        double tol) {
  const std::pair<const char*, std::pair<Tensor, Tensor>> pairs[] = {
      {"y", {a.y, b.y}}, {"dx", {a.dx, b.dx}}, {"dw", {a.dw, b.dw}}, {"db", {a.db, b.db}}};
  for (auto& [what, p] : pairs) {
    const double e = scaled_diff(to_host_nchw(be_a, p.first), to_host_nchw(be_b, p.second));
    if (!(e <= tol))
      return std::string(what) + ": scaled difference " + std::to_string(e) + " > " +
             std::to_string(tol);
  }
  return "";
}

// The fused layer's outputs with the epilogue's own: pre (GELU) and dz.
struct ActOut {
  LinearOut o;
  Tensor pre, dz;
};

// The fused layer on the CPU reference, with k's bias or none; with `old`,
// dw and db added onto old's (accumulate=true).
ActOut fused_reference(const LinCase& k, Act act, bool bias, const LinearOut* old) {
  CpuBackend& ref = cpu_reference();
  const int64_t N = k.x.dim(0), K = k.x.dim(1), M = k.w.dim(0);
  const Tensor b = bias ? k.b : Tensor{};
  ActOut r;
  r.o.y = Tensor::empty({N, M}, DType::F32), r.dz = Tensor::empty({N, M}, DType::F32);
  r.pre = act == Act::GELU ? Tensor::empty({N, M}, DType::F32) : Tensor{};
  r.o.dx = Tensor::empty({N, K}, DType::F32);
  r.o.dw = old ? clone(old->dw) : Tensor::empty({M, K}, DType::F32);
  r.o.db = !bias ? Tensor{} : old ? clone(old->db) : Tensor::empty({M}, DType::F32);
  linear::forward(ref, k.x, k.w, b, r.o.y, Epilogue{act, {}, r.pre});
  linear::backward(ref, k.x, k.w, k.dy, r.o.dx, r.o.dw, r.o.db, old != nullptr,
                   EpilogueGrad{act, r.o.y, {}, r.pre, r.dz});
  return r;
}

// scaled_diff of every output fused_reference gives (compare_lin's measure),
// pre and dz too: "" or the first over tol.
std::string act_out_differs(const ActOut& r, const ActOut& g, double tol, const std::string& ep) {
  const std::pair<const char*, std::pair<Tensor, Tensor>> pairs[] = {
      {"y", {r.o.y, g.o.y}},   {"pre", {r.pre, g.pre}},    {"dz", {r.dz, g.dz}},
      {"dx", {r.o.dx, g.o.dx}}, {"dw", {r.o.dw, g.o.dw}}, {"db", {r.o.db, g.o.db}}};
  for (auto& [what, p] : pairs) {
    if (!p.first.defined()) continue;
    const double e = scaled_diff(p.first, p.second);
    if (!(e <= tol))
      return std::string(what) + ep + ": scaled difference " + std::to_string(e) + " > " +
             std::to_string(tol);
  }
  return "";
}

#if defined(TRAINBENCH_CUDA_EMULATED)
// fused_reference as linear_cuda.cpp runs it (forward_act's GEMM + bias_act
// path, backward's act_backward_bgrad then the GEMMs from dz), its launchers
// on the emulator, the reference's bias-free GEMMs for cuBLAS's. Every
// output starts as NaN: an element a kernel leaves unwritten fails.
ActOut fused_emulated(const LinCase& k, Act act, bool bias, const LinearOut* old) {
  namespace emu = tb::cuda_emu;
  CpuBackend& ref = cpu_reference();
  const int64_t N = k.x.dim(0), K = k.x.dim(1), M = k.w.dim(0);
  const auto nans = [&](const Shape& s) {
    Tensor t = Tensor::empty(s, DType::F32);
    ref.fill(t, std::nan(""));
    return t;
  };
  const int act_id = act == Act::ReLU ? 0 : 1;
  ActOut e;
  e.o.y = nans({N, M}), e.dz = nans({N, M});
  e.pre = act == Act::GELU ? nans({N, M}) : Tensor{};
  Tensor& t = act == Act::GELU ? e.pre : e.o.y;  // ReLU: bias and ReLU in place
  linear::forward(ref, k.x, k.w, Tensor{}, t);
  emu::launch_bias_act(t.data_as<float>(), bias ? k.b.data_as<float>() : nullptr, act_id,
                       e.o.y.data_as<float>(), N, M, nullptr);
  e.o.dx = nans({N, K});
  e.o.dw = old ? clone(old->dw) : nans({M, K});
  e.o.db = !bias ? Tensor{} : old ? clone(old->db) : nans({M});
  emu::launch_act_backward_bgrad(e.o.y.data_as<float>(),
                                 e.pre.defined() ? e.pre.data_as<float>() : nullptr,
                                 k.dy.data_as<float>(), act_id, e.dz.data_as<float>(),
                                 bias ? e.o.db.data_as<float>() : nullptr, old != nullptr, N, M,
                                 nullptr);
  Tensor none;
  linear::backward(ref, k.x, k.w, e.dz, e.o.dx, e.o.dw, none, old != nullptr);
  return e;
}
#endif

}  // namespace

Q_DECLARE_METATYPE(LinearCase)
Q_DECLARE_METATYPE(tb::Activation)

class TestOpLinear : public QObject {
  Q_OBJECT

 private slots:
  // ------------------------------------------------------------ finite differences

  void gradcheck_linear_data() {
    QTest::addColumn<bool>("bias");
    QTest::newRow("bias") << true;
    QTest::newRow("no bias") << false;
  }
  void gradcheck_linear() {
    QFETCH(bool, bias);
    auto r = test::gradcheck_layer(std::make_unique<Linear>("fc", 5, bias), {3, 7}, 12);
    CHECK_BELOW(r.max_rel_error_dx, kGradTol);
    CHECK_BELOW(r.max_rel_error_params, kGradTol);
  }

  // ------------------------------------------------------------ every target vs the reference

  void linear_matches_reference_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<LinearCase>("c");
    for (const Target& t : kTargets)
      for (const LinearCase& c : kCases) QTest::addRow("%s: %s", t.name().c_str(), c.name) << t << c;
  }
  void linear_matches_reference() {
    FETCH_TARGET(t, be);
    QFETCH(LinearCase, c);
    TB_GPU_TRY
    const DType dt = t.dtype;
    std::mt19937_64 rng(23 + uint64_t(c.N * 100 + c.M));
    const Tensor x = random_tensor({c.N, c.K}, dt, rng), w = random_tensor({c.M, c.K}, dt, rng);
    const Tensor b = c.bias ? random_tensor({c.M}, dt, rng) : Tensor{};
    const Tensor dy = random_tensor({c.N, c.M}, dt, rng);
    const Tensor dw_old = random_tensor({c.M, c.K}, dt, rng), db_old = random_tensor({c.M}, dt, rng);

    CpuBackend& ref = cpu_reference();
    Tensor y0 = Tensor::empty({c.N, c.M}, dt), dx0 = Tensor::empty({c.N, c.K}, dt);
    Tensor dw0 = Tensor::empty({c.M, c.K}, dt), db0 = Tensor::empty({c.M}, dt);
    linear::forward(ref, x, w, b, y0);
    linear::backward(ref, x, w, dy, dx0, dw0, db0, false);
    Tensor dw0_acc = clone(dw_old), db0_acc = clone(db_old), none;
    linear::backward(ref, x, w, dy, none, dw0_acc, db0_acc, true);

    const Tensor xd = to_device(be, x), wd = to_device(be, w), bd = to_device(be, b);
    const Tensor dyd = to_device(be, dy);
    Tensor y1 = be.empty({c.N, c.M}, dt), dx1 = be.empty({c.N, c.K}, dt);
    Tensor dw1 = be.empty({c.M, c.K}, dt), db1 = be.empty({c.M}, dt);
    linear::forward(be, xd, wd, bd, y1);
    linear::backward(be, xd, wd, dyd, dx1, dw1, db1, false);
    const Tensor dw = to_host(be, dw1), db = to_host(be, db1);
    EXPECT_OUTPUT(t, "y", y0, to_host(be, y1));
    EXPECT_OUTPUT(t, "dx", dx0, to_host(be, dx1));
    EXPECT_OUTPUT(t, "dw", dw0, dw);
    EXPECT_OUTPUT(t, "db", db0, db);
    Tensor dx_acc = be.empty({c.N, c.K}, dt), dw_acc = to_device(be, dw_old);
    Tensor db_acc = to_device(be, db_old);
    linear::backward(be, xd, wd, dyd, dx_acc, dw_acc, db_acc, true);
    EXPECT_OUTPUT(t, "accumulated dw", dw0_acc, to_host(be, dw_acc));
    EXPECT_OUTPUT(t, "accumulated db", db0_acc, to_host(be, db_acc));
    EXPECT_OUTPUT(t, "dx with accumulate", dx0, to_host(be, dx_acc));
    if (t.on_gpu()) return;

    // The CPU's own contract: accumulate=true adds what accumulate=false writes.
    const double acc_tol = dt == DType::F64 ? 1e-14 : kAccumTol;
    Tensor acc_w = random_tensor({c.M, c.K}, dt, rng), acc_b = random_tensor({c.M}, dt, rng);
    const Tensor old_w = clone(acc_w), old_b = clone(acc_b);
    linear::backward(be, xd, wd, dyd, none, acc_w, acc_b, true);
    CHECK_BELOW(scaled_diff(sum_of(old_w, dw), acc_w), acc_tol);
    CHECK_BELOW(scaled_diff(sum_of(old_b, db), acc_b), acc_tol);
    TB_GPU_CATCH
  }

  // ------------------------------------------------------------ f16 / bf16

  void linear_lp_within_rounding_of_f32() {
    CpuBackend& cpu = cpu_reference();
    const int64_t N = 16, K = 64, M = 8;
    const Tensor x = random_vector(N * K, 41).reshaped({N, K}), w = random_vector(M * K, 42).reshaped({M, K});
    const Tensor bias = random_vector(M, 43), dy = random_vector(N * M, 44).reshaped({N, M});
    const LinearOut ref = linear_f32(cpu, x, w, bias, dy);
    for (DType dt : {DType::F16, DType::BF16}) {
      // Each input rounded by at most u (half an ulp, relative): a product by
      // (1+u)²; the fp32 sums add far less. Bound: 2.5·u·Σ|a||b| per output.
      const double u = dt == DType::F16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
      const LinearOut lp = linear_lp(cpu, x, w, bias, dy, dt);
      bool any_diff = false;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t m = 0; m < M; ++m) {
          const double e = std::abs(double(f32_at(lp.y, n * M + m)) - f32_at(ref.y, n * M + m));
          any_diff |= e > 0;
          QVERIFY2(e <= 2.5 * u * abs_dot(x, n, w, m, K) + 1e-6, dtype_name(dt));
        }
      QVERIFY2(any_diff, "the inputs were not rounded");
      for (int64_t n = 0; n < N; ++n)  // dx[n,k] = Σ_m dy[n,m] w[m,k]
        for (int64_t k = 0; k < K; ++k) {
          double sc = 0.0;
          for (int64_t m = 0; m < M; ++m)
            sc += std::abs(double(f32_at(dy, n * M + m))) * std::abs(double(f32_at(w, m * K + k)));
          const double e = std::abs(double(f32_at(lp.dx, n * K + k)) - f32_at(ref.dx, n * K + k));
          QVERIFY2(e <= 2.5 * u * sc + 1e-6, dtype_name(dt));
        }
      for (int64_t m = 0; m < M; ++m)  // dw[m,k] = Σ_n dy[n,m] x[n,k]
        for (int64_t k = 0; k < K; ++k) {
          double sc = 0.0;
          for (int64_t n = 0; n < N; ++n)
            sc += std::abs(double(f32_at(dy, n * M + m))) * std::abs(double(f32_at(x, n * K + k)));
          const double e = std::abs(double(f32_at(lp.dw, m * K + k)) - f32_at(ref.dw, m * K + k));
          QVERIFY2(e <= 2.5 * u * sc + 1e-6, dtype_name(dt));
        }
      // db sums the unrounded f32 dy: the same as the fp32 layer's.
      QVERIFY(bitwise_equal(lp.db, ref.db));
    }
    // Mixed dtypes are refused, naming both (f32 x and w are the plain op).
    Tensor xh = Tensor::empty({N, K}, DType::F16), y = Tensor::empty({N, M}, DType::F32);
    amp::cast(cpu, x, xh);
    const QString m = qerror_of([&] { linear::forward(cpu, xh, w, bias, y); });
    QVERIFY2(m.contains("f16[16, 64]") && m.contains("f32[8, 64]"), qPrintable(m));
  }

  // Low-precision activations (y, dy, dx in x's dtype) on the CPU: the
  // f32-activation form's results rounded once, bit for bit (dy given in lp,
  // which the f32 form rounds to itself: the same sums in the same order);
  // dw and db equal. And the forms' operands that do not fit are refused.
  void linear_lp_activations_round_once() {
    CpuBackend& cpu = cpu_reference();
    const int64_t N = 16, K = 64, M = 8;
    const Tensor x = random_vector(N * K, 61).reshaped({N, K}), w = random_vector(M * K, 62).reshaped({M, K});
    const Tensor bias = random_vector(M, 63);
    for (DType dt : {DType::F16, DType::BF16}) {
      const Tensor dy = rounded_to(random_vector(N * M, 64).reshaped({N, M}), dt);
      const LinearOut f = linear_lp(cpu, x, w, bias, dy, dt);
      const LinearOut l = linear_lp(cpu, x, w, bias, dy, dt, dt);
      QVERIFY2(bitwise_equal(l.y, rounded_to(f.y, dt)), dtype_name(dt));
      QVERIFY2(bitwise_equal(l.dx, rounded_to(f.dx, dt)), dtype_name(dt));
      QVERIFY2(!bitwise_equal(l.y, f.y), "y was not rounded");
      QVERIFY2(bitwise_equal(l.dw, f.dw), dtype_name(dt));
      QVERIFY2(bitwise_equal(l.db, f.db), dtype_name(dt));
    }
    Tensor xh = amp::cast_to(cpu, x, DType::F16), wh = amp::cast_to(cpu, w, DType::F16);
    Tensor yb = Tensor::empty({N, M}, DType::BF16);
    QString m = qerror_of([&] { linear::forward(cpu, xh, wh, bias, yb); });
    QVERIFY2(m.contains("output y bf16") && m.contains("must be f32"), qPrintable(m));
    const Tensor dyh = amp::cast_to(cpu, random_vector(N * M, 65).reshaped({N, M}), DType::F16);
    Tensor dx32 = Tensor::empty({N, K}, DType::F32), none;
    m = qerror_of([&] { linear::backward(cpu, xh, wh, dyh, dx32, none, none, false); });
    QVERIFY2(m.contains("dx f32") && m.contains("must be f16"), qPrintable(m));
  }

  // Low-precision activations, CUDA against the CPU on the same rounded
  // inputs. The CPU rounds y = xwᵀ + b and dx once (u each); cuBLAS writes
  // dx in lp from its f32 accumulator (u), and y as a bias-free GEMM rounded
  // to lp and bias.cu's add rounding again (u·|y − b| + u·|y|: cuBLASLt's
  // bias epilogue takes no f32 bias with an lp D); dw and db are f32 sums
  // of the same lp dy. With the summation order's 1e-5 of the magnitude:
  //   y ≤ u·|y − b| + 2u·|y|      dx ≤ 2u·|dx|      dw, db ≤ 0
  void linear_lp_activations_match_cpu_data() { linear_lp_matches_cpu_data(); }
  void linear_lp_activations_match_cpu() {
    FETCH_TARGET(t, be);
    TB_GPU_TRY
    const int64_t N = 64, K = 96, M = 40;
    const Tensor x = random_vector(N * K, 71).reshaped({N, K}), w = random_vector(M * K, 72).reshaped({M, K});
    const Tensor bias = random_vector(M, 73), dy = random_vector(N * M, 74).reshaped({N, M});
    const DType dt = t.dtype;
    const double u = dt == DType::F16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    const LinearOut c = linear_lp(cpu_reference(), x, w, bias, dy, dt, dt);
    const LinearOut d = linear_lp(be, x, w, bias, dy, dt, dt);
    const QString m = first_outside(c, d, dt, [&](const std::string& what, const Tensor& r,
                                                  int64_t i) {
      const double v = std::abs(double(f32_at(r, i)));
      if (what == "y") return u * (std::abs(double(f32_at(r, i)) - f32_at(bias, i % M)) + 2 * v);
      return what == "dx" ? u * 2 * v : 0.0;
    });
    QVERIFY2(m.isEmpty(), qPrintable(m));
    TB_GPU_CATCH
  }

  // Same rounded inputs on both: only the summation order differs (Tensor
  // Core fp32 accumulation vs the CPU's), so 1e-5 of the output's magnitude.
  void linear_lp_matches_cpu_data() {
    QTest::addColumn<Target>("target");
    for (DType dt : {DType::F16, DType::BF16})
      QTest::newRow(Target{Impl::Cuda, Layout::NCHW, dt}.name().c_str())
          << Target{Impl::Cuda, Layout::NCHW, dt};
  }
  void linear_lp_matches_cpu() {
    FETCH_TARGET(t, be);
    TB_GPU_TRY
    const int64_t N = 64, K = 96, M = 40;
    const Tensor x = random_vector(N * K, 51).reshaped({N, K}), w = random_vector(M * K, 52).reshaped({M, K});
    const Tensor bias = random_vector(M, 53), dy = random_vector(N * M, 54).reshaped({N, M});
    const DType dt = t.dtype;
    const LinearOut c = linear_lp(cpu_reference(), x, w, bias, dy, dt);
    const LinearOut d = linear_lp(be, x, w, bias, dy, dt);
    const QString m = first_outside(c, d, dt, [](const std::string&, const Tensor&, int64_t) { return 0.0; });
    QVERIFY2(m.isEmpty(), qPrintable(m));
    TB_GPU_CATCH
  }

  // ------------------------------------------------------------ hand-computed values

  void linear_known_values() {
    for (bool reference : {false, true}) {
      CpuBackend& be = reference ? cpu_reference() : cpu_fast();
      Tensor x = from_values({1, 2}, {1, 2}), w = from_values({2, 2}, {1, 0, 1, 1});
      Tensor b = from_values({2}, {0.5, -1}), y = Tensor::empty({1, 2}, DType::F32);
      linear::forward(be, x, w, b, y);
      QCOMPARE(y.data_as<float>()[0], 1.5f);  // 1*1 + 2*0 + 0.5
      QCOMPARE(y.data_as<float>()[1], 2.0f);  // 1*1 + 2*1 - 1
    }
  }

  void linear_empty_batch() {
    // N = 0: outputs are empty, written gradients are zero.
    for (bool reference : {false, true}) {
      CpuBackend& be = reference ? cpu_reference() : cpu_fast();
      Tensor lx = Tensor::empty({0, 4}, DType::F32), lw = Tensor::zeros({2, 4}, DType::F32);
      Tensor ldy = Tensor::empty({0, 2}, DType::F32), ldx = Tensor::empty({0, 4}, DType::F32);
      Tensor ldw = Tensor::empty({2, 4}, DType::F32), ldb = Tensor::empty({2}, DType::F32);
      be.fill(ldw, 7.0);
      be.fill(ldb, 7.0);
      linear::backward(be, lx, lw, ldy, ldx, ldw, ldb, false);
      QCOMPARE(optimizer::sum_squares(be, ldw), 0.0);
      QCOMPARE(optimizer::sum_squares(be, ldb), 0.0);
    }
  }

  // ------------------------------------------------------------ the layer, errors

  void linear_layer_shapes() {
    ParamRegistry reg;
    Linear fc("fc", 10);
    QCOMPARE(fc.setup({1, 3136}, reg), (Shape{1, 10}));
    QCOMPARE(reg.params()[0].spec.shape, (Shape{10, 3136}));
    QCOMPARE(reg.params()[1].spec.shape, (Shape{10}));
  }

  void linear_shape_errors() {
    CpuBackend& be = cpu_fast();
    Tensor x = Tensor::zeros({2, 3, 8, 8}, DType::F32);
    Tensor lx = Tensor::zeros({4, 7}, DType::F32), lw = Tensor::zeros({3, 6}, DType::F32);
    Tensor ly = Tensor::zeros({4, 3}, DType::F32);
    QString m = qerror_of([&] { linear::forward(be, lx, lw, Tensor{}, ly); });
    QVERIFY2(m.contains("[4, 7]") && m.contains("[3, 6]"), qPrintable(m));
    Tensor lw_ok = Tensor::zeros({3, 7}, DType::F32), ly_bad = Tensor::zeros({4, 2}, DType::F32);
    m = qerror_of([&] { linear::forward(be, lx, lw_ok, Tensor{}, ly_bad); });
    QVERIFY2(m.contains("[4, 2]") && m.contains("[4, 3]"), qPrintable(m));
    m = qerror_of([&] { linear::forward(be, x, lw_ok, Tensor{}, ly); });
    QVERIFY2(m.contains("[2, 3, 8, 8]"), qPrintable(m));
    // The layer names itself and the offending shape.
    ParamRegistry reg;
    m = qerror_of([&] { Linear("head", 10).setup({1, 64, 7, 7}, reg); });
    QVERIFY2(m.contains("head") && m.contains("[1, 64, 7, 7]"), qPrintable(m));
  }
  // The fused layer keeps the plain layer's parameters (names, shapes, order,
  // init), so a model built fused or not from the same seed has the same
  // weights; only its kind says it is fused.
  void linear_epilogue_layer_registers_the_plain_parameters() {
    ParamRegistry plain_reg;
    Linear plain("fc", 10);
    plain.setup({4, 30}, plain_reg);
    for (Act act : {Act::ReLU, Act::GELU}) {
      ParamRegistry reg;
      Linear fused("fc", 10, act);
      QCOMPARE(fused.setup({4, 30}, reg), (Shape{4, 10}));
      QCOMPARE(reg.params().size(), plain_reg.params().size());
      for (size_t i = 0; i < reg.params().size(); ++i) {
        QCOMPARE(reg.params()[i].spec.name, plain_reg.params()[i].spec.name);
        QCOMPARE(reg.params()[i].spec.shape, plain_reg.params()[i].spec.shape);
        QVERIFY(reg.params()[i].spec.init == plain_reg.params()[i].spec.init);
        QCOMPARE(reg.params()[i].spec.fan_in, plain_reg.params()[i].spec.fan_in);
        QCOMPARE(reg.params()[i].spec.weight_decay, plain_reg.params()[i].spec.weight_decay);
      }
      QCOMPARE(fused.kind(), std::string(act == Act::ReLU ? "linear_relu" : "linear_gelu"));
    }
    QCOMPARE(plain.kind(), std::string("linear"));
  }

  // ------------------------------------------------------------ activation epilogue

  void linear_act_gradcheck() {
    for (Act act : {Act::ReLU, Act::GELU}) {
      auto r = test::gradcheck_layer(std::make_unique<Linear>("fc", 5, act), {4, 6}, 31);
      QVERIFY2(r.max_rel_error_dx < 1e-5, qPrintable(QString::fromStdString(r.worst)));
      QVERIFY2(r.max_rel_error_params < 1e-5, qPrintable(QString::fromStdString(r.worst)));
    }
  }

  void linear_act_matches_reference_data() {
    QTest::addColumn<Target>("target");
    for (const Target& t : {Target{Impl::CpuFast, Layout::NCHW, DType::F32},
                            Target{Impl::Cuda, Layout::NCHW, DType::F32}})
      QTest::newRow(t.name().c_str()) << t;
  }
  void linear_act_matches_reference() {
    FETCH_TARGET(t, be);
    TB_GPU_TRY
    CpuBackend& ref = cpu_reference();
    const LinCase k(33, 300, 70, t.on_gpu() ? 79 : 51);
    for (Act act : {Act::ReLU, Act::GELU}) {
      const LinearOut u = run_linear(be, k, act, false), f = run_linear(be, k, act, true);
      std::string err = compare_lin(be, u, be, f, t.on_gpu() ? 1e-4 : 1e-5);
      QVERIFY2(err.empty(), qPrintable(QString::fromStdString(err)));
      err = compare_lin(ref, run_linear(ref, k, act, true), be, f, 1e-4);
      QVERIFY2(err.empty(), qPrintable(QString::fromStdString(err)));
    }
    TB_GPU_CATCH
  }

  // The suites above hand every op fresh, 256-byte aligned tensors; the
  // trainer's weights and biases are views into one flat block, aligned only
  // to their float offset (fmnist-cnn's fc1 weight: 128 bytes). cuBLASLt's
  // heuristics assume 256 unless told (linear_cuda.cpp sets the alignments).
  void linear_act_on_parameter_views_data() {
    QTest::addColumn<Target>("target");
    QTest::addColumn<int>("offset");  // floats into each block
    for (const Target& t : {Target{Impl::CpuFast, Layout::NCHW, DType::F32},
                            Target{Impl::Cuda, Layout::NCHW, DType::F32}})
      for (int offset : {1, 32})
        QTest::addRow("%s: %d-byte aligned", t.name().c_str(), 4 * offset) << t << offset;
  }
  void linear_act_on_parameter_views() {
    FETCH_TARGET(t, be);
    QFETCH(int, offset);
    TB_GPU_TRY
    CpuBackend& ref = cpu_reference();
    const LinCase k(33, 300, 70, 87);
    for (Act act : {Act::ReLU, Act::GELU}) {
      const std::string err =
          compare_lin(ref, run_linear(ref, k, act, true), be, run_linear_views(be, k, act, offset),
                      1e-4);
      QVERIFY2(err.empty(), qPrintable(QString::fromStdString(err)));
    }
    TB_GPU_CATCH
  }

  // linear.cu's epilogue kernels on the CUDA emulator (tests/cuda_emulator),
  // here on any machine: fused_emulated against the fused reference with
  // linear_act_matches_reference's CUDA bound (1e-4 scaled), pre and dz
  // included, db and dw written and accumulated, under both of the
  // emulator's thread orders. Shapes: 33x300 -> 70 (the CUDA slot's: a
  // partial last block of 256 elements, a last 32-column block with 6
  // columns, rows 33 = 4·8 + 1 over the 8 row threads); 3 rows -> 5 (row
  // threads idle, one partial column block); 130 -> 257 (9 column blocks,
  // the last with one column, 131 element blocks); and without bias.
  void linear_emulated_epilogue_matches_cpu_data() {
    QTest::addColumn<int>("N");
    QTest::addColumn<int>("K");
    QTest::addColumn<int>("M");
    QTest::addColumn<bool>("bias");
    QTest::addColumn<Act>("act");
    const std::tuple<int, int, int, bool> shapes[] = {
        {33, 300, 70, true}, {3, 20, 5, true}, {130, 17, 257, true}, {33, 300, 70, false}};
    for (auto [N, K, M, bias] : shapes)
      for (Act act : {Act::ReLU, Act::GELU})
        QTest::addRow("%dx%d -> %d%s, %s", N, K, M, bias ? "" : " no bias", activation_name(act))
            << N << K << M << bias << act;
  }
  void linear_emulated_epilogue_matches_cpu() {
    QFETCH(int, N);
    QFETCH(int, K);
    QFETCH(int, M);
    QFETCH(bool, bias);
    QFETCH(Act, act);
#if defined(TRAINBENCH_CUDA_EMULATED)
    TB_EMU_TRY
    const LinCase k(N, K, M, 97 + uint64_t(M));
    const LinearOut old{{}, {}, random_tensor({M, K}, 5), random_tensor({M}, 6, -4.0, 4.0)};
    for (bool accumulate : {false, true}) {
      const LinearOut* acc = accumulate ? &old : nullptr;
      const ActOut r = fused_reference(k, act, bias, acc);
      for (tb_emu::Schedule order : {tb_emu::Schedule::forward, tb_emu::Schedule::reverse}) {
        EmulatorSchedule use(order);
        const std::string ep = std::string(" [") + (accumulate ? "accumulated, " : "") +
                               schedule_name(order) + "]";
        const std::string bad = act_out_differs(r, fused_emulated(k, act, bias, acc), 1e-4, ep);
        QVERIFY2(bad.empty(), bad.c_str());
      }
    }
    TB_EMU_CATCH
#else
    QSKIP(kNoEmulator);
#endif
  }

  // An empty batch (N = 0): act_backward_bgrad's launcher writes db = 0, or
  // leaves it as it is when accumulating (the empty sum), and launches no
  // kernel over the rows.
  void linear_emulated_empty_batch_bgrad() {
#if defined(TRAINBENCH_CUDA_EMULATED)
    TB_EMU_TRY
    for (bool accumulate : {false, true}) {
      Tensor db = Tensor::empty({37}, DType::F32);
      cpu_reference().fill(db, 7.0);
      tb::cuda_emu::launch_act_backward_bgrad(nullptr, nullptr, nullptr, 0, nullptr,
                                              db.data_as<float>(), accumulate, 0, 37, nullptr);
      for (int64_t i = 0; i < 37; ++i)
        QVERIFY2(db.data_as<float>()[i] == (accumulate ? 7.0f : 0.0f),
                 qPrintable(QString("db[%1] = %2, accumulate %3")
                                .arg(i)
                                .arg(db.data_as<float>()[i])
                                .arg(accumulate)));
    }
    TB_EMU_CATCH
#else
    QSKIP(kNoEmulator);
#endif
  }

  // Linear honours an activation only: a residual, a low-precision input with
  // an epilogue, and buffers the activation does not use are refused, each
  // error naming what it refuses.
  void linear_rejects_unsupported_epilogues() {
    CpuBackend& be = cpu_fast();
    const LinCase lk(4, 6, 5, 63);
    Tensor ly = Tensor::empty({4, 5}, DType::F32), lpre = Tensor::empty({4, 5}, DType::F32);
    Tensor dz = Tensor::empty({4, 5}, DType::F32), none;
    QString e = qerror_of([&] {
      linear::forward(be, lk.x, lk.w, lk.b, ly, Epilogue{Act::ReLU, lpre});
    });
    QVERIFY2(e.contains("residual") && e.contains("linear_forward"), qPrintable(e));
    e = qerror_of([&] { linear::forward(be, lk.x, lk.w, lk.b, ly, Epilogue{Act::None, {}, lpre}); });
    QVERIFY2(e.contains("pre") && e.contains("without an activation"), qPrintable(e));
    e = qerror_of([&] {
      linear::backward(be, lk.x, lk.w, lk.dy, none, none, none, false,
                       EpilogueGrad{Act::ReLU, ly, dz});
    });
    QVERIFY2(e.contains("dresidual") && e.contains("linear_backward"), qPrintable(e));
    e = qerror_of([&] {
      linear::backward(be, lk.x, lk.w, lk.dy, none, none, none, false, EpilogueGrad{Act::GELU, ly});
    });
    QVERIFY2(e.contains("dz") && e.contains("gelu"), qPrintable(e));
    // f16/bf16 inputs take the plain mixed-precision op only.
    Tensor xh = Tensor::empty({4, 6}, DType::BF16), wh = Tensor::empty({5, 6}, DType::BF16);
    amp::cast(be, lk.x, xh);
    amp::cast(be, lk.w, wh);
    e = qerror_of([&] { linear::forward(be, xh, wh, lk.b, ly, Epilogue{Act::ReLU}); });
    QVERIFY2(e.contains("relu") && e.contains("bf16"), qPrintable(e));
    linear::forward(be, xh, wh, lk.b, ly);  // the plain op on the same inputs works
  }

  void linear_act_rejects_bad_arguments() {
    CpuBackend& be = cpu_fast();
    const LinCase lk(4, 6, 5, 63);
    Tensor ly = Tensor::empty({4, 5}, DType::F32), lpre = Tensor::empty({4, 5}, DType::F32);
    Tensor bad_b = Tensor::empty({6}, DType::F32), none;
    QVERIFY_THROWS_EXCEPTION(Error,
                             linear::forward(be, lk.x, lk.w, bad_b, ly, Epilogue{Act::ReLU}));
    QVERIFY_THROWS_EXCEPTION(Error,
                             linear::forward(be, lk.x, lk.w, lk.b, ly, Epilogue{Act::GELU}));
    QVERIFY_THROWS_EXCEPTION(
        Error, linear::forward(be, lk.x, lk.w, lk.b, ly, Epilogue{Act::GELU, {}, ly}));
    linear::forward(be, lk.x, lk.w, lk.b, ly, Epilogue{Act::GELU, {}, lpre});  // valid: works
    QVERIFY_THROWS_EXCEPTION(Error, linear::backward(be, lk.x, lk.w, lk.dy, none, none, none, false,
                                                     EpilogueGrad{Act::ReLU, ly, {}, {}, lk.dy}));
  }
};

QTEST_GUILESS_MAIN(TestOpLinear)
#include "test_op_linear.moc"
