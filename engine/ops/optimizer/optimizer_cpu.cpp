// SPDX-License-Identifier: GPL-3.0-or-later
// The CPU backend's optimizer Kernels (contract: optimizer.h): SGD, AdamW,
// RMSProp, LARS, LAMB (PyTorch semantics), and sum_squares.
//
// Every slot is a parameter p with gradient g and state s1/s2 (same shape and
// dtype). g is multiplied by grad_scale before anything else. Slots with
// weight_decay=false (biases, BN affine) get no decay.
//
//   SGD     g += wd·p;  b = μ·b + g;  g = nesterov ? g + μ·b : b;  p −= lr·g
//           (b starts at zero, so the first step gives b = g exactly, as PyTorch)
//   AdamW   p −= lr·wd·p;  m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²
//           p −= lr/(1−β1^t) · m / (sqrt(v)/sqrt(1−β2^t) + eps)
//   RMSProp g += wd·p;  v = α·v + (1−α)·g²;  a = sqrt(v) + eps
//           momentum: b = μ·b + g/a, p −= lr·b;  else p −= lr·g/a
//   LARS    trust = η·‖p‖/(‖g‖ + wd·‖p‖) (1 when a norm is zero, and for no-decay
//           slots, which are excluded from layer adaptation as is common practice)
//           b = μ·b + trust·(g + wd·p);  p −= lr·b
//   LAMB    m, v as AdamW;  u = m̂/(sqrt(v̂) + eps) + wd·p
//           trust = ‖p‖/‖u‖ (1 when a norm is zero);  p −= lr·trust·u
//
// multi_tensor=false walks the slots one by one (one "launch" per tensor);
// true runs one flat pass over a list of (slot, offset, length) chunks covering
// every slot. Both call the same element kernels on the same elements in the
// same order (norms accumulate element by element into the same per-slot double),
// so their results are bit-identical. The kernels are templated on T: f64 (and
// options.reference) is the plain reference, f32 the fast path; the loops have
// loop-invariant branches only, which the compiler unswitches and vectorises
// (the f32 elementwise kernels at the width of the processor's widest ISA).
// With OpenMP the fused pass spreads the chunks of elementwise passes across
// threads; norm passes stay serial so their sums keep one order.
// Under AMP the host reads found_inf from the scaler state (on the host here)
// and skips the whole step.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/cpu_features.h"
#include "engine/core/error.h"
#include "engine/ops/optimizer/optimizer.h"

namespace tb {

namespace {

// Per-step constants, precomputed once in double (optimizer::step_constants).
using Consts = StepConstants;

// Raw pointers of one slot (or of a chunk of it).
template <typename T>
struct Ptrs {
  T* p;
  const T* g;
  T* s1;  // null when unused
  T* s2;
  int64_t n;
  bool decay;
  Ptrs offset(int64_t off, int64_t len) const {
    return {p + off, g + off, s1 ? s1 + off : nullptr, s2 ? s2 + off : nullptr, len, decay};
  }
};

// ---------------------------------------------------------------- element kernels

template <typename T>
void sgd_kernel(const Ptrs<T>& r, const Consts& k) {
  const T lr = T(k.lr), mu = T(k.mu), gs = T(k.gs), wd = r.decay ? T(k.wd) : T(0);
  T* p = r.p;
  const T* g = r.g;
  T* b = r.s1;
  for (int64_t i = 0; i < r.n; ++i) {
    T gi = g[i] * gs + wd * p[i];
    if (b) {
      const T bi = mu * b[i] + gi;
      b[i] = bi;
      gi = k.nesterov ? gi + mu * bi : bi;
    }
    p[i] -= lr * gi;
  }
}

template <typename T>
void adamw_kernel(const Ptrs<T>& r, const Consts& k) {
  const T gs = T(k.gs), b1 = T(k.b1), b2 = T(k.b2), c1 = T(1.0 - k.b1), c2 = T(1.0 - k.b2);
  const T decay = r.decay ? T(1.0 - k.lr * k.wd) : T(1);
  const T step = T(k.step_size), isb = T(k.inv_sqrt_bc2), eps = T(k.eps);
  T* p = r.p;
  const T* g = r.g;
  T* m = r.s1;
  T* v = r.s2;
  for (int64_t i = 0; i < r.n; ++i) {
    const T gi = g[i] * gs;
    const T mi = b1 * m[i] + c1 * gi;
    const T vi = b2 * v[i] + c2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step * mi / (std::sqrt(vi) * isb + eps);
  }
}

template <typename T>
void rmsprop_kernel(const Ptrs<T>& r, const Consts& k) {
  const T lr = T(k.lr), mu = T(k.mu), gs = T(k.gs), wd = r.decay ? T(k.wd) : T(0);
  const T a = T(k.alpha), ca = T(1.0 - k.alpha), eps = T(k.eps);
  T* p = r.p;
  const T* g = r.g;
  T* v = r.s1;
  T* b = r.s2;
  for (int64_t i = 0; i < r.n; ++i) {
    const T gi = g[i] * gs + wd * p[i];
    const T vi = a * v[i] + ca * gi * gi;
    v[i] = vi;
    const T upd = gi / (std::sqrt(vi) + eps);
    if (b) {
      const T bi = mu * b[i] + upd;
      b[i] = bi;
      p[i] -= lr * bi;
    } else {
      p[i] -= lr * upd;
    }
  }
}

// LARS phase 1: Σp², Σ(gs·g)² added element by element into pp, gg.
template <typename T>
void lars_norms(const Ptrs<T>& r, const Consts& k, double& pp, double& gg) {
  const T gs = T(k.gs);
  for (int64_t i = 0; i < r.n; ++i) {
    const T gi = r.g[i] * gs;
    pp += double(r.p[i]) * double(r.p[i]);
    gg += double(gi) * double(gi);
  }
}

double lars_trust(const Consts& k, bool decay, double pp, double gg) {
  const double pn = std::sqrt(pp), gn = std::sqrt(gg);
  if (!decay || pn == 0.0 || gn == 0.0) return 1.0;
  return k.eta * pn / (gn + k.wd * pn);
}

template <typename T>
void lars_kernel(const Ptrs<T>& r, const Consts& k, double trust) {
  const T lr = T(k.lr), mu = T(k.mu), gs = T(k.gs), wd = r.decay ? T(k.wd) : T(0);
  const T tr = T(trust);
  T* p = r.p;
  const T* g = r.g;
  T* b = r.s1;
  for (int64_t i = 0; i < r.n; ++i) {
    const T gi = tr * (g[i] * gs + wd * p[i]);
    if (b) {
      const T bi = mu * b[i] + gi;
      b[i] = bi;
      p[i] -= lr * bi;
    } else {
      p[i] -= lr * gi;
    }
  }
}

// LAMB update direction u from the (already updated) moments.
template <typename T>
inline T lamb_u(T m, T v, T p, T ibc1, T ibc2, T eps, T wd) {
  return (m * ibc1) / (std::sqrt(v * ibc2) + eps) + wd * p;
}

// LAMB phase 1: update the moments, add Σp² and Σu² into pp, uu.
template <typename T>
void lamb_moments(const Ptrs<T>& r, const Consts& k, double& pp, double& uu) {
  const T gs = T(k.gs), b1 = T(k.b1), b2 = T(k.b2), c1 = T(1.0 - k.b1), c2 = T(1.0 - k.b2);
  const T ibc1 = T(k.inv_bc1), ibc2 = T(k.inv_bc2), eps = T(k.eps);
  const T wd = r.decay ? T(k.wd) : T(0);
  for (int64_t i = 0; i < r.n; ++i) {
    const T gi = r.g[i] * gs;
    const T mi = b1 * r.s1[i] + c1 * gi;
    const T vi = b2 * r.s2[i] + c2 * gi * gi;
    r.s1[i] = mi;
    r.s2[i] = vi;
    const T u = lamb_u(mi, vi, r.p[i], ibc1, ibc2, eps, wd);
    pp += double(r.p[i]) * double(r.p[i]);
    uu += double(u) * double(u);
  }
}

double lamb_trust(double pp, double uu) {
  const double pn = std::sqrt(pp), un = std::sqrt(uu);
  return (pn == 0.0 || un == 0.0) ? 1.0 : pn / un;
}

// LAMB phase 2: recompute u (same expression, same value) and apply it.
template <typename T>
void lamb_apply(const Ptrs<T>& r, const Consts& k, double trust) {
  const T ibc1 = T(k.inv_bc1), ibc2 = T(k.inv_bc2), eps = T(k.eps);
  const T wd = r.decay ? T(k.wd) : T(0);
  const T step = T(k.lr * trust);
  for (int64_t i = 0; i < r.n; ++i)
    r.p[i] -= step * lamb_u(r.s1[i], r.s2[i], r.p[i], ibc1, ibc2, eps, wd);
}

// The elementwise kernels for f32 compiled for the processor's widest ISA
// (engine/core/cpu_features.h: the same bits in every copy); f64, the
// reference, runs the plain template. The norm passes stay plain: each adds
// into one double in element order, which no vector width may change.
#define TB_OPTIMIZER_ISA(kernel, params, args)                          \
  TB_CPU_KERNEL(void, kernel##_isa, params(float), args, kernel<float>) \
  void kernel##_isa params(double) { kernel<double> args; }
#define TB_PARAMS(T) (const Ptrs<T>& r, const Consts& k)
#define TB_PARAMS_TRUST(T) (const Ptrs<T>& r, const Consts& k, double trust)
TB_OPTIMIZER_ISA(sgd_kernel, TB_PARAMS, (r, k))
TB_OPTIMIZER_ISA(adamw_kernel, TB_PARAMS, (r, k))
TB_OPTIMIZER_ISA(rmsprop_kernel, TB_PARAMS, (r, k))
TB_OPTIMIZER_ISA(lars_kernel, TB_PARAMS_TRUST, (r, k, trust))
TB_OPTIMIZER_ISA(lamb_apply, TB_PARAMS_TRUST, (r, k, trust))
#undef TB_PARAMS_TRUST
#undef TB_PARAMS
#undef TB_OPTIMIZER_ISA

// ---------------------------------------------------------------- drivers

constexpr int64_t kChunk = 1 << 16;  // elements per chunk of the fused pass

struct Chunk {
  size_t slot;
  int64_t offset, len;
};

template <typename T>
void run_step(const OptimizerStep& step, const std::vector<Ptrs<T>>& slots, bool multi_tensor,
              [[maybe_unused]] int threads) {
  const Consts k = optimizer::step_constants(step);
  const size_t S = slots.size();

  // Per-tensor: one pass per slot. Fused: one flat pass over every chunk.
  std::vector<Chunk> chunks;
  if (multi_tensor) {
    for (size_t s = 0; s < S; ++s)
      for (int64_t off = 0; off < slots[s].n; off += kChunk)
        chunks.push_back({s, off, std::min(kChunk, slots[s].n - off)});
  }
  // Calls f(slot index, pointers) over every slot or every chunk, in order
  // (the norm passes accumulate into one double per slot).
  auto for_each = [&](auto&& f) {
    if (multi_tensor) {
      for (const Chunk& c : chunks) f(c.slot, slots[c.slot].offset(c.offset, c.len));
    } else {
      for (size_t s = 0; s < S; ++s) f(s, slots[s]);
    }
  };
  // The same for elementwise passes, whose chunks may run on any thread in any
  // order (with OpenMP) without changing a bit.
  auto for_each_elementwise = [&](auto&& f) {
    if (multi_tensor) {
      const int64_t nc = int64_t(chunks.size());
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(threads) if (nc > 1)
#endif
      for (int64_t i = 0; i < nc; ++i) {
        const Chunk& c = chunks[size_t(i)];
        f(c.slot, slots[c.slot].offset(c.offset, c.len));
      }
    } else {
      for (size_t s = 0; s < S; ++s) f(s, slots[s]);
    }
  };

  switch (step.kind) {
    case OptimizerKind::SGD:
      for_each_elementwise([&](size_t, const Ptrs<T>& r) { sgd_kernel_isa(r, k); });
      break;
    case OptimizerKind::AdamW:
      for_each_elementwise([&](size_t, const Ptrs<T>& r) { adamw_kernel_isa(r, k); });
      break;
    case OptimizerKind::RMSProp:
      for_each_elementwise([&](size_t, const Ptrs<T>& r) { rmsprop_kernel_isa(r, k); });
      break;
    case OptimizerKind::LARS: {
      std::vector<double> pp(S, 0.0), gg(S, 0.0), trust(S, 1.0);
      for_each([&](size_t s, const Ptrs<T>& r) { lars_norms(r, k, pp[s], gg[s]); });
      for (size_t s = 0; s < S; ++s) trust[s] = lars_trust(k, slots[s].decay, pp[s], gg[s]);
      for_each_elementwise([&](size_t s, const Ptrs<T>& r) { lars_kernel_isa(r, k, trust[s]); });
      break;
    }
    case OptimizerKind::LAMB: {
      std::vector<double> pp(S, 0.0), uu(S, 0.0), trust(S, 1.0);
      for_each([&](size_t s, const Ptrs<T>& r) { lamb_moments(r, k, pp[s], uu[s]); });
      for (size_t s = 0; s < S; ++s) trust[s] = lamb_trust(pp[s], uu[s]);
      for_each_elementwise([&](size_t s, const Ptrs<T>& r) { lamb_apply_isa(r, k, trust[s]); });
      break;
    }
  }
}

// Raw pointers of every slot (the contract's checks passed): a state the
// kind does not use is null.
template <typename T>
std::vector<Ptrs<T>> gather(const std::vector<ParamSlot>& slots, const optimizer::States& states) {
  std::vector<Ptrs<T>> out;
  out.reserve(slots.size());
  for (const ParamSlot& s : slots)
    out.push_back({s.param.data_as<T>(), s.grad.data_as<T>(),
                   states.state1 ? s.state1.data_as<T>() : nullptr,
                   states.state2 ? s.state2.data_as<T>() : nullptr, s.param.numel(),
                   s.weight_decay});
  return out;
}

template <typename T>
double sum_squares_typed(const Tensor& t) {
  const T* p = t.data_as<T>();
  double s = 0.0;
  for (int64_t i = 0; i < t.numel(); ++i) s += double(p[i]) * double(p[i]);
  return s;
}

class CpuKernels final : public optimizer::Kernels {
 public:
  explicit CpuKernels(CpuBackend& be) : be_(be) {}

  void step(const OptimizerStep& step, const std::vector<ParamSlot>& slots,
            const optimizer::States& states, bool multi_tensor,
            const Tensor& scaler_state) override;
  double sum_squares(const Tensor& t) override;

 private:
  CpuBackend& be_;
};

}  // namespace

void CpuKernels::step(const OptimizerStep& step, const std::vector<ParamSlot>& slots,
                      const optimizer::States& states, bool multi_tensor,
                      const Tensor& scaler_state) {
  if (scaler_state.defined() && scaler_state.data_as<float>()[2] != 0.0f)
    return;  // AMP, found_inf: skipped, nothing touched
  const DType dt = slots.front().param.dtype();
  if (dt == DType::F64) {
    run_step<double>(step, gather<double>(slots, states), multi_tensor, be_.threads());
  } else {
    TB_CHECK(dt == DType::F32, "optimizer_step: parameters must be f32 or f64, got ",
             slots.front().param.describe());
    run_step<float>(step, gather<float>(slots, states), multi_tensor, be_.threads());
  }
}

double CpuKernels::sum_squares(const Tensor& t) {
  return t.dtype() == DType::F64 ? sum_squares_typed<double>(t) : sum_squares_typed<float>(t);
}

namespace optimizer {
void register_cpu_kernels() { register_kernels<Kernels, CpuKernels, CpuBackend>(DeviceKind::CPU); }
}  // namespace optimizer

}  // namespace tb
