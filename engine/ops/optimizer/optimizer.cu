// SPDX-License-Identifier: GPL-3.0-or-later
// The optimizer family's CUDA kernels and launchers (optimizer.cuh): steps on
// the GPU with the semantics of optimizer_cpu.cpp (PyTorch's; contract in
// optimizer.h): SGD (momentum, Nesterov, L2), AdamW, RMSProp,
// LARS, LAMB. The per-element expressions are the CPU f32 path's, term for
// term, with the same float-rounded constants (nvcc may contract a·b+c into an
// FMA, so results agree with the CPU to rounding, not bit for bit).
//
// Work comes as chunks (OptChunk: ≤ kOptChunk elements of one tensor), one
// thread block per chunk. The per-tensor path launches the kernels once per
// parameter tensor over that tensor's chunks; the multi-tensor path launches
// them once over every chunk. Both paths run the SAME kernels on the SAME
// chunks, and norms are reduced per chunk with a fixed tree and combined per
// tensor in chunk order (launch_opt_trust), so the two paths give identical
// bits. Passes:
//   SGD, AdamW, RMSProp:  elementwise
//   LARS:  norms (Σp², Σ(gs·g)²) -> trust per tensor -> elementwise
//   LAMB:  moments + norms (Σp², Σu²) -> trust per tensor -> elementwise apply
//
// Moved from engine/backend/cuda/ without a change to the arithmetic; not run
// on a GPU since the move (test_op_optim's GPU slot passed on an H200 before).
#include "engine/ops/optimizer/optimizer.cuh"

#include "engine/backend/cuda/cuda_check.h"
#include "engine/backend/cuda/device_utils.cuh"

namespace tb::cuda {

namespace {

enum Kind { kSGD = 0, kAdamW = 1, kRMSProp = 2, kLARS = 3, kLAMB = 4 };  // = OptimizerKind

constexpr int kOptThreads = 512;

// The constants in float, rounded where the CPU f32 path rounds them.
struct F {
  int kind;
  bool nesterov;
  float lr, mu, wd, gs, b1, b2, c1, c2, adam_decay, step, isb, eps, a, ca, ibc1, ibc2;
  double lr_d;  // LAMB: the step lr·trust is formed in double, then rounded
  const float* found_inf;  // AMP skip flag on the device, or null
};

F to_float(const OptConsts& k) {
  F f;
  f.kind = k.kind;
  f.nesterov = k.nesterov;
  f.lr = float(k.lr), f.mu = float(k.mu), f.wd = float(k.wd), f.gs = float(k.gs);
  f.b1 = float(k.b1), f.b2 = float(k.b2), f.c1 = float(1.0 - k.b1), f.c2 = float(1.0 - k.b2);
  f.adam_decay = float(1.0 - k.lr * k.wd);
  f.step = float(k.step_size), f.isb = float(k.inv_sqrt_bc2), f.eps = float(k.eps);
  f.a = float(k.alpha), f.ca = float(1.0 - k.alpha);
  f.ibc1 = float(k.inv_bc1), f.ibc2 = float(k.inv_bc2);
  f.lr_d = k.lr;
  f.found_inf = k.found_inf;
  return f;
}

// Inside a captured graph (trick 24) the per-step constants come from the
// device copy `kd`, rewritten before each replay (launch_opt_set_consts); the
// found_inf pointer is not per-step and always comes from the launch.
__device__ __forceinline__ F consts(const F& kh, const F* kd) {
  if (!kd) return kh;
  F k = *kd;
  k.found_inf = kh.found_inf;
  return k;
}

__global__ void opt_set_consts_kernel(F k, F* dst) { *dst = k; }

__device__ __forceinline__ float lamb_u(float m, float v, float p, float ibc1, float ibc2,
                                        float eps, float wd) {
  return (m * ibc1) / (sqrtf(v * ibc2) + eps) + wd * p;
}

__global__ void __launch_bounds__(kOptThreads)
    opt_elementwise_kernel(F kh, const F* kd, const OptChunk* chunks, int64_t first,
                           const double* trust) {
  const F k = consts(kh, kd);
  if (k.found_inf && *k.found_inf != 0.0f) return;  // AMP: skipped step, touch nothing
  const OptChunk r = chunks[first + blockIdx.x];
  float* p = r.p;
  const float* g = r.g;
  const float wd = r.decay ? k.wd : 0.0f;
  switch (k.kind) {
    case kSGD: {
      float* b = r.s1;
      for (int64_t i = threadIdx.x; i < r.n; i += blockDim.x) {
        float gi = g[i] * k.gs + wd * p[i];
        if (b) {
          const float bi = k.mu * b[i] + gi;
          b[i] = bi;
          gi = k.nesterov ? gi + k.mu * bi : bi;
        }
        p[i] -= k.lr * gi;
      }
      break;
    }
    case kAdamW: {
      const float decay = r.decay ? k.adam_decay : 1.0f;
      float* m = r.s1;
      float* v = r.s2;
      for (int64_t i = threadIdx.x; i < r.n; i += blockDim.x) {
        const float gi = g[i] * k.gs;
        const float mi = k.b1 * m[i] + k.c1 * gi;
        const float vi = k.b2 * v[i] + k.c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - k.step * mi / (sqrtf(vi) * k.isb + k.eps);
      }
      break;
    }
    case kRMSProp: {
      float* v = r.s1;
      float* b = r.s2;
      for (int64_t i = threadIdx.x; i < r.n; i += blockDim.x) {
        const float gi = g[i] * k.gs + wd * p[i];
        const float vi = k.a * v[i] + k.ca * gi * gi;
        v[i] = vi;
        const float upd = gi / (sqrtf(vi) + k.eps);
        if (b) {
          const float bi = k.mu * b[i] + upd;
          b[i] = bi;
          p[i] -= k.lr * bi;
        } else {
          p[i] -= k.lr * upd;
        }
      }
      break;
    }
    case kLARS: {
      const float tr = float(trust[r.slot]);
      float* b = r.s1;
      for (int64_t i = threadIdx.x; i < r.n; i += blockDim.x) {
        const float gi = tr * (g[i] * k.gs + wd * p[i]);
        if (b) {
          const float bi = k.mu * b[i] + gi;
          b[i] = bi;
          p[i] -= k.lr * bi;
        } else {
          p[i] -= k.lr * gi;
        }
      }
      break;
    }
    case kLAMB: {
      const float step = float(k.lr_d * trust[r.slot]);
      for (int64_t i = threadIdx.x; i < r.n; i += blockDim.x)
        p[i] -= step * lamb_u(r.s1[i], r.s2[i], p[i], k.ibc1, k.ibc2, k.eps, wd);
      break;
    }
  }
}

// partials[2·chunk] = Σp², partials[2·chunk+1] = Σ(gs·g)² (LARS) or Σu² (LAMB,
// after updating the moments).
__global__ void __launch_bounds__(kOptThreads)
    opt_norms_kernel(F kh, const F* kd, const OptChunk* chunks, int64_t first, double* partials) {
  const F k = consts(kh, kd);
  // AMP: skipped step; LAMB's moments stay unchanged. The whole block leaves
  // before block_sum's barriers (the flag is the same for every thread).
  if (k.found_inf && *k.found_inf != 0.0f) return;
  __shared__ double smem[32];
  const int64_t ci = first + blockIdx.x;
  const OptChunk r = chunks[ci];
  double pp = 0.0, qq = 0.0;
  if (k.kind == kLARS) {
    for (int64_t i = threadIdx.x; i < r.n; i += blockDim.x) {
      const float gi = r.g[i] * k.gs;
      pp += double(r.p[i]) * double(r.p[i]);
      qq += double(gi) * double(gi);
    }
  } else {  // kLAMB
    const float wd = r.decay ? k.wd : 0.0f;
    for (int64_t i = threadIdx.x; i < r.n; i += blockDim.x) {
      const float gi = r.g[i] * k.gs;
      const float mi = k.b1 * r.s1[i] + k.c1 * gi;
      const float vi = k.b2 * r.s2[i] + k.c2 * gi * gi;
      r.s1[i] = mi;
      r.s2[i] = vi;
      const float u = lamb_u(mi, vi, r.p[i], k.ibc1, k.ibc2, k.eps, wd);
      pp += double(r.p[i]) * double(r.p[i]);
      qq += double(u) * double(u);
    }
  }
  pp = block_sum(pp, smem);
  qq = block_sum(qq, smem);
  if (threadIdx.x == 0) partials[2 * ci] = pp, partials[2 * ci + 1] = qq;
}

// One thread per tensor: combine its chunks' partials in chunk order.
__global__ void opt_trust_kernel(int kind, double eta, double wd, const double* partials,
                                 const int64_t* slot_begin, const int32_t* decay,
                                 int64_t first_slot, int64_t count, double* trust) {
  const int64_t i = first_slot + blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= first_slot + count) return;
  double pp = 0.0, qq = 0.0;
  for (int64_t c = slot_begin[i]; c < slot_begin[i + 1]; ++c)
    pp += partials[2 * c], qq += partials[2 * c + 1];
  const double pn = sqrt(pp), qn = sqrt(qq);
  double t = 1.0;
  if (kind == kLARS) {
    // Slots without decay (biases, BN affine) are excluded from layer adaptation.
    if (decay[i] && pn != 0.0 && qn != 0.0) t = eta * pn / (qn + wd * pn);
  } else {
    if (pn != 0.0 && qn != 0.0) t = pn / qn;
  }
  trust[i] = t;
}

}  // namespace

void launch_opt_elementwise(const OptConsts& k, const OptChunk* chunks, int64_t first,
                            int64_t count, const double* trust, cudaStream_t s) {
  if (count <= 0) return;
  TB_CHECK(count <= 0x7fffffff, "optimizer: too many chunks (", count, ")");
  opt_elementwise_kernel<<<unsigned(count), kOptThreads, 0, s>>>(
      to_float(k), static_cast<const F*>(k.dev), chunks, first, trust);
  TB_CUDA_LAUNCH_CHECK("opt_elementwise_kernel");
}

void launch_opt_norms(const OptConsts& k, const OptChunk* chunks, int64_t first, int64_t count,
                      double* partials, cudaStream_t s) {
  if (count <= 0) return;
  TB_CHECK(count <= 0x7fffffff, "optimizer: too many chunks (", count, ")");
  opt_norms_kernel<<<unsigned(count), kOptThreads, 0, s>>>(
      to_float(k), static_cast<const F*>(k.dev), chunks, first, partials);
  TB_CUDA_LAUNCH_CHECK("opt_norms_kernel");
}

void launch_opt_set_consts(const OptConsts& k, void* dev, cudaStream_t s) {
  static_assert(sizeof(F) <= kOptConstsBytes, "kOptConstsBytes too small for F");
  opt_set_consts_kernel<<<1, 1, 0, s>>>(to_float(k), static_cast<F*>(dev));
  TB_CUDA_LAUNCH_CHECK("opt_set_consts_kernel");
}

void launch_opt_trust(const OptConsts& k, const double* partials, const int64_t* slot_begin,
                      const int32_t* decay, int64_t first_slot, int64_t slot_count, double* trust,
                      cudaStream_t s) {
  if (slot_count <= 0) return;
  const unsigned blocks = unsigned((slot_count + 127) / 128);
  opt_trust_kernel<<<blocks, 128, 0, s>>>(k.kind, k.eta, k.wd, partials, slot_begin, decay,
                                          first_slot, slot_count, trust);
  TB_CUDA_LAUNCH_CHECK("opt_trust_kernel");
}

}  // namespace tb::cuda
