// SPDX-License-Identifier: GPL-3.0-or-later
// The CUDA backend's optimizer Kernels (contract: optimizer.h): this
// backend's own check (f32), the chunk descriptors, the per-tensor /
// multi-tensor launch plans of optimizer.cu, and sum_squares (sum_squares.cu).
// Also CudaBackend::set_optimizer_constants, which writes the constants a
// captured step reads (graphs.cpp, trick 24).
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
// Under AMP the kernels read found_inf from the scaler state on the device
// (OptConsts::found_inf) and return at once when it is set.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/backend/cuda/cuda_internal.h"
#include "engine/ops/optimizer/optimizer.cuh"
#include "engine/ops/optimizer/optimizer.h"

namespace tb {

namespace {

cuda::OptConsts make_consts(const OptimizerStep& s) {
  return cuda::launch_consts(int(s.kind), optimizer::step_constants(s));
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

class CudaKernels final : public optimizer::Kernels {
 public:
  explicit CudaKernels(CudaBackend& be) : be_(be) {}
  ~CudaKernels() override {
    if (host_result_) (void)cudaFreeHost(host_result_);  // best effort, no throw
  }

  void step(const OptimizerStep& step, const std::vector<ParamSlot>& slots,
            const optimizer::States& states, bool multi_tensor,
            const Tensor& scaler_state) override;
  double sum_squares(const Tensor& t) override;

 private:
  CudaBackend& be_;
  // Chunk descriptors, re-uploaded only when the parameter set changes. A
  // captured step (graphs.cpp) reads the device copies in place: one set per
  // backend, so an eager step over other parameters rewrites them.
  std::vector<cuda::OptChunk> chunks_host_;
  std::vector<int64_t> slot_begin_host_;
  std::vector<int32_t> decay_host_;
  Tensor chunks_dev_, slot_begin_dev_, decay_dev_;  // raw bytes as u8
  Tensor partials_, trust_;                         // f64
  // sum_squares: partials + result (f64 [kReducePartials + 1] on the device)
  // and the pinned double the host reads; made on first use.
  Tensor reduce_scratch_;
  double* host_result_ = nullptr;
};

}  // namespace

void CudaKernels::step(const OptimizerStep& step, const std::vector<ParamSlot>& slots,
                       const optimizer::States& states, bool multi_tensor,
                       const Tensor& scaler_state) {
  const char* op = "optimizer_step";
  cuda::check_f32(slots.front().param, op, "parameter");  // the contract: one dtype

  // Descriptors, in slot order.
  auto [chunks, slot_begin, decay] = cuda::chunks_of(slots, states.state1, states.state2);
  if (chunks.empty()) return;

  const CudaBackend::Impl& m = be_.impl();
  m.activate();
  if (!same(chunks, chunks_host_) || !same(slot_begin, slot_begin_host_) ||
      !same(decay, decay_host_)) {
    upload(chunks, chunks_dev_, be_, m.stream);
    upload(slot_begin, slot_begin_dev_, be_, m.stream);
    upload(decay, decay_dev_, be_, m.stream);
    chunks_host_ = std::move(chunks);
    slot_begin_host_ = std::move(slot_begin);
    decay_host_ = std::move(decay);
  }
  const int64_t C = int64_t(chunks_host_.size()), S = int64_t(slots.size());
  const auto* dchunks = static_cast<const cuda::OptChunk*>(chunks_dev_.data());
  const auto* dbegin = static_cast<const int64_t*>(slot_begin_dev_.data());
  const auto* ddecay = static_cast<const int32_t*>(decay_dev_.data());
  const auto& begin = slot_begin_host_;
  cuda::OptConsts k = make_consts(step);
  // AMP: the scaler state's found_inf ([2]), read by every kernel on the device.
  k.found_inf = scaler_state.defined() ? scaler_state.data_as<float>() + 2 : nullptr;
  if (m.capturing) {  // trick 24: the replay's constants come from set_optimizer_constants
    TB_CHECK(m.opt_consts_dev.defined(), op, ": capturing without the constants buffer");
    k.dev = m.opt_consts_dev.data();
  }

  const bool norms = step.kind == OptimizerKind::LARS || step.kind == OptimizerKind::LAMB;
  double* partials = nullptr;
  double* trust = nullptr;
  if (norms) {
    if (!partials_.defined() || partials_.numel() < 2 * C)
      partials_ = Tensor::empty({2 * C}, DType::F64, be_.device());
    if (!trust_.defined() || trust_.numel() < S)
      trust_ = Tensor::empty({S}, DType::F64, be_.device());
    partials = partials_.data_as<double>();
    trust = trust_.data_as<double>();
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

double CudaKernels::sum_squares(const Tensor& t) {
  const CudaBackend::Impl& m = be_.impl();
  m.activate();
  if (!host_result_)
    TB_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_result_), sizeof(double)));
  if (!reduce_scratch_.defined())
    reduce_scratch_ = Tensor::empty({cuda::kReducePartials + 1}, DType::F64, be_.device());
  double* partials = reduce_scratch_.data_as<double>();
  double* out = partials + cuda::kReducePartials;
  if (t.dtype() == DType::F32)
    cuda::launch_sum_squares(t.data_as<float>(), t.numel(), partials, out, m.stream);
  else
    cuda::launch_sum_squares(t.data_as<double>(), t.numel(), partials, out, m.stream);
  TB_CUDA_CHECK(
      cudaMemcpyAsync(host_result_, out, sizeof(double), cudaMemcpyDeviceToHost, m.stream));
  TB_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  return *host_result_;
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

namespace optimizer {
void register_cuda_kernels() {
  register_kernels<Kernels, CudaKernels, CudaBackend>(DeviceKind::CUDA);
}
}  // namespace optimizer

}  // namespace tb
