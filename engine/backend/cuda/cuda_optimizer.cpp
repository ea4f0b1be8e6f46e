// SPDX-License-Identifier: GPL-3.0-or-later
// Host side of the GPU optimizer step (kernels in optimizer.cu): checks, the
// chunk descriptors, and the per-tensor / multi-tensor launch plans.
//
// Descriptors: every parameter tensor is cut into chunks of kOptChunk
// elements; their OptChunk records (pointers already offset), each tensor's
// first chunk index and its decay flag live in device arrays. They are
// uploaded again only when the parameter set changes (pointers, sizes, flags),
// so a steady training loop does no host-to-device copy here.
//   multi_tensor = true:  1 launch per pass over all chunks (SGD/AdamW/RMSProp: 1
//                         launch; LARS/LAMB: norms, trust, apply = 3 launches)
//   multi_tensor = false: the same passes launched once per parameter tensor
// Both use the same kernels on the same chunks: identical results, bit for bit.
#include <cmath>
#include <cstring>

#include "engine/backend/cuda/cuda_internal.h"

namespace tb {

namespace {

void needed_states(const OptimizerStep& s, bool& need1, bool& need2) {
  switch (s.kind) {
    case OptimizerKind::SGD:
    case OptimizerKind::LARS:
      need1 = s.momentum != 0.0f, need2 = false;
      break;
    case OptimizerKind::AdamW:
    case OptimizerKind::LAMB:
      need1 = true, need2 = true;
      break;
    case OptimizerKind::RMSProp:
      need1 = true, need2 = s.momentum != 0.0f;
      break;
  }
}

cuda::OptConsts make_consts(const OptimizerStep& s) {
  cuda::OptConsts k{};
  k.kind = int(s.kind);
  k.lr = s.lr, k.mu = s.momentum, k.wd = s.weight_decay, k.gs = s.grad_scale;
  k.b1 = s.beta1, k.b2 = s.beta2, k.eps = s.eps, k.alpha = s.alpha, k.eta = s.trust_coefficient;
  k.nesterov = s.nesterov;
  const double t = double(s.step);
  const double bc1 = 1.0 - std::pow(double(s.beta1), t);
  const double bc2 = 1.0 - std::pow(double(s.beta2), t);
  k.step_size = s.lr / bc1;
  k.inv_sqrt_bc2 = 1.0 / std::sqrt(bc2);
  k.inv_bc1 = 1.0 / bc1;
  k.inv_bc2 = 1.0 / bc2;
  return k;
}

template <typename T>
bool same(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// Device copy of a host vector into `dev` (grown when too small).
template <typename T>
void upload(const std::vector<T>& host, Tensor& dev, const CudaBackend& be, cudaStream_t s) {
  const size_t bytes = std::max<size_t>(host.size() * sizeof(T), 1);
  if (!dev.defined() || dev.nbytes() < bytes)
    dev = Tensor::empty({int64_t(bytes)}, DType::U8, be.device());
  if (!host.empty())
    TB_CUDA_CHECK(cudaMemcpyAsync(dev.data(), host.data(), host.size() * sizeof(T),
                                  cudaMemcpyHostToDevice, s));
}

}  // namespace

void CudaBackend::optimizer_step(const OptimizerStep& step, const std::vector<ParamSlot>& slots,
                                 bool multi_tensor) {
  const char* op = "optimizer_step";
  if (slots.empty()) return;
  TB_CHECK(step.step >= 1, op, ": step count must start at 1, got ", step.step);
  bool need1 = false, need2 = false;
  needed_states(step, need1, need2);

  // Descriptors, in slot order.
  std::vector<cuda::OptChunk> chunks;
  std::vector<int64_t> slot_begin;
  std::vector<int32_t> decay;
  slot_begin.reserve(slots.size() + 1);
  for (size_t i = 0; i < slots.size(); ++i) {
    const ParamSlot& s = slots[i];
    TB_CHECK(s.param.defined() && s.grad.defined(), op, ": slot ", i,
             " has no parameter or gradient");
    cuda::check_on(*this, s.param, op, "parameter");
    cuda::check_on(*this, s.grad, op, "gradient");
    cuda::check_f32(s.param, op, "parameter");
    TB_CHECK(s.grad.numel() == s.param.numel() && s.grad.dtype() == s.param.dtype(), op,
             ": gradient ", s.grad.describe(), " does not match parameter ", s.param.describe());
    auto state = [&](const Tensor& t, bool needed, const char* which) -> float* {
      if (!needed) return nullptr;
      TB_CHECK(t.defined(), op, ": ", optimizer_name(step.kind), " needs ", which, " for slot ", i,
               " (", s.param.describe(), ")");
      cuda::check_on(*this, t, op, which);
      TB_CHECK(t.numel() == s.param.numel() && t.dtype() == s.param.dtype(), op, ": ", which, " ",
               t.describe(), " does not match parameter ", s.param.describe());
      return t.data_as<float>();
    };
    float* s1 = state(s.state1, need1, "state1");
    float* s2 = state(s.state2, need2, "state2");
    float* p = s.param.data_as<float>();
    const float* g = s.grad.data_as<float>();
    slot_begin.push_back(int64_t(chunks.size()));
    decay.push_back(s.weight_decay ? 1 : 0);
    for (int64_t off = 0; off < s.param.numel(); off += cuda::kOptChunk)
      chunks.push_back({p + off, g + off, s1 ? s1 + off : nullptr, s2 ? s2 + off : nullptr,
                        std::min(cuda::kOptChunk, s.param.numel() - off), int32_t(i),
                        s.weight_decay ? 1 : 0});
  }
  slot_begin.push_back(int64_t(chunks.size()));
  if (chunks.empty()) return;

  Impl& m = *impl_;
  m.activate();
  if (!same(chunks, m.opt_chunks_host) || !same(slot_begin, m.opt_slot_begin_host) ||
      !same(decay, m.opt_decay_host)) {
    upload(chunks, m.opt_chunks_dev, *this, m.stream);
    upload(slot_begin, m.opt_slot_begin_dev, *this, m.stream);
    upload(decay, m.opt_decay_dev, *this, m.stream);
    m.opt_chunks_host = std::move(chunks);
    m.opt_slot_begin_host = std::move(slot_begin);
    m.opt_decay_host = std::move(decay);
  }
  const int64_t C = int64_t(m.opt_chunks_host.size()), S = int64_t(slots.size());
  const auto* dchunks = static_cast<const cuda::OptChunk*>(m.opt_chunks_dev.data());
  const auto* dbegin = static_cast<const int64_t*>(m.opt_slot_begin_dev.data());
  const auto* ddecay = static_cast<const int32_t*>(m.opt_decay_dev.data());
  const auto& begin = m.opt_slot_begin_host;
  cuda::OptConsts k = make_consts(step);
  k.found_inf = m.opt_found_inf;  // null except under optimizer_step_amp
  if (m.capturing) {  // trick 24: the replay's constants come from set_optimizer_constants
    TB_CHECK(m.opt_consts_dev.defined(), op, ": capturing without the constants buffer");
    k.dev = m.opt_consts_dev.data();
  }

  const bool norms = step.kind == OptimizerKind::LARS || step.kind == OptimizerKind::LAMB;
  double* partials = nullptr;
  double* trust = nullptr;
  if (norms) {
    if (!m.opt_partials.defined() || m.opt_partials.numel() < 2 * C)
      m.opt_partials = Tensor::empty({2 * C}, DType::F64, device());
    if (!m.opt_trust.defined() || m.opt_trust.numel() < S)
      m.opt_trust = Tensor::empty({S}, DType::F64, device());
    partials = m.opt_partials.data_as<double>();
    trust = m.opt_trust.data_as<double>();
  }

  if (multi_tensor) {
    if (norms) {
      cuda::launch_opt_norms(k, dchunks, 0, C, partials, m.stream);
      cuda::launch_opt_trust(k, partials, dbegin, ddecay, 0, S, trust, m.stream);
    }
    cuda::launch_opt_elementwise(k, dchunks, 0, C, trust, m.stream);
  } else {
    for (int64_t s = 0; s < S; ++s) {
      const int64_t first = begin[size_t(s)], count = begin[size_t(s) + 1] - first;
      if (count == 0) continue;
      if (norms) {
        cuda::launch_opt_norms(k, dchunks, first, count, partials, m.stream);
        cuda::launch_opt_trust(k, partials, dbegin, ddecay, s, 1, trust, m.stream);
      }
      cuda::launch_opt_elementwise(k, dchunks, first, count, trust, m.stream);
    }
  }
}

void CudaBackend::set_optimizer_constants(const OptimizerStep& step) {
  TB_CHECK(step.step >= 1, "set_optimizer_constants: step count must start at 1, got ", step.step);
  Impl& m = *impl_;
  TB_CHECK(!m.capturing,
           "set_optimizer_constants: called while capturing (it must run before "
           "each launch, outside the graph)");
  m.activate();
  if (!m.opt_consts_dev.defined())
    m.opt_consts_dev = Tensor::empty({int64_t(cuda::kOptConstsBytes)}, DType::U8, device());
  // A kernel with the constants by value: no host buffer has to outlive the copy.
  cuda::launch_opt_set_consts(make_consts(step), m.opt_consts_dev.data(), m.stream);
}

}  // namespace tb
