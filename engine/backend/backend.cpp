// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/backend/backend.h"

#include <algorithm>

#include "engine/backend/cpu/cpu_backend.h"
// Plain C++ (no CUDA type): included in every build for its capability set.
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/core/error.h"

namespace tb {

OpKernels& Backend::kernels_of(std::type_index family, const char* family_name) {
  std::lock_guard lock(kernels_mutex_);
  auto& slot = kernels_[family];
  if (!slot) {
    const OpKernelsFactory make = find_op_kernels(family, device().kind);
    TB_CHECK(make, family_name, " ops are not supported by the ", name(), " backend");
    slot = make(*this);
  }
  return *slot;
}

void Backend::release_kernels() {
  std::lock_guard lock(kernels_mutex_);
  kernels_.clear();
}

ConvGeometry ConvGeometry::make(int64_t N, int64_t C_in, int64_t H, int64_t W, int64_t C_out,
                                int64_t kernel, int64_t stride, int64_t pad) {
  TB_CHECK(kernel > 0 && stride > 0 && pad >= 0, "invalid convolution: kernel ", kernel,
           ", stride ", stride, ", padding ", pad);
  ConvGeometry g;
  g.N = N, g.C_in = C_in, g.H = H, g.W = W, g.C_out = C_out;
  g.KH = g.KW = kernel, g.stride = stride, g.pad = pad;
  g.H_out = (H + 2 * pad - kernel) / stride + 1;
  g.W_out = (W + 2 * pad - kernel) / stride + 1;
  TB_CHECK(g.H_out > 0 && g.W_out > 0, "convolution with kernel ", kernel, " does not fit input ",
           H, "x", W, " (padding ", pad, ")");
  return g;
}

void check_linear_activation(Activation act, const char* op) {
  TB_CHECK(act == Activation::ReLU || act == Activation::GELU, op, ": activation ",
           activation_name(act), " is not supported (relu or gelu; none is linear_forward)");
}

void check_normalize_u8_args(const Tensor& src, const std::vector<float>& scale,
                             const std::vector<float>& shift, const Tensor& dst) {
  TB_CHECK(src.defined() && dst.defined(), "normalize_u8: undefined tensor");
  TB_CHECK(src.rank() == 4 && src.dtype() == DType::U8, "normalize_u8: src must be u8 (N, C, H, W), got ",
           src.describe());
  TB_CHECK(dst.dtype() == DType::F32 && dst.shape() == src.shape() && dst.layout() == src.layout(),
           "normalize_u8: dst ", dst.describe(), " must be f32 of src's shape and layout (",
           src.describe(), ")");
  TB_CHECK(static_cast<int64_t>(scale.size()) == src.c() && shift.size() == scale.size(),
           "normalize_u8: ", scale.size(), " scales and ", shift.size(), " shifts for ", src.c(),
           " channels");
}

void check_augment_normalize_u8_args(const Tensor& src, const Tensor& indices,
                                     const AugmentSpec& spec, const std::vector<float>& scale,
                                     const std::vector<float>& shift, const Tensor& dst) {
  const char* op = "augment_normalize_u8";
  TB_CHECK(src.defined() && indices.defined() && dst.defined(), op, ": undefined tensor");
  TB_CHECK(src.rank() == 4 && src.dtype() == DType::U8 && src.layout() == Layout::NCHW, op,
           ": src must be u8 (N, C, H, W) in NCHW, got ", src.describe());
  TB_CHECK(indices.dtype() == DType::I32 && indices.shape() == Shape{src.n()}, op,
           ": indices must be i32 (", src.n(), "), got ", indices.describe());
  TB_CHECK(spec.out_h >= src.h() && spec.out_w >= src.w(), op, ": output ", spec.out_h, "x",
           spec.out_w, " is smaller than the input ", src.h(), "x", src.w(),
           " (pad_to only grows)");
  TB_CHECK(!spec.random_crop || (spec.crop_padding >= 0 && spec.crop_padding <= spec.out_h &&
                                 spec.crop_padding <= spec.out_w),
           op, ": crop padding ", spec.crop_padding, " outside 0..",
           std::min(spec.out_h, spec.out_w));
  TB_CHECK(spec.epoch >= 0, op, ": epoch must be >= 0, got ", spec.epoch);
  const Shape out{src.n(), src.c(), spec.out_h, spec.out_w};
  TB_CHECK(dst.dtype() == DType::F32 && dst.shape() == out, op, ": dst ", dst.describe(),
           " must be f32 ", shape_str(out));
  TB_CHECK(static_cast<int64_t>(scale.size()) == src.c() && shift.size() == scale.size(), op, ": ",
           scale.size(), " scales and ", shift.size(), " shifts for ", src.c(), " channels");
}

const char* optimizer_name(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::SGD: return "sgd";
    case OptimizerKind::AdamW: return "adamw";
    case OptimizerKind::RMSProp: return "rmsprop";
    case OptimizerKind::LARS: return "lars";
    case OptimizerKind::LAMB: return "lamb";
  }
  return "?";
}

OptimizerKind optimizer_from_name(const std::string& s) {
  for (auto k : {OptimizerKind::SGD, OptimizerKind::AdamW, OptimizerKind::RMSProp,
                 OptimizerKind::LARS, OptimizerKind::LAMB})
    if (s == optimizer_name(k)) return k;
  TB_FAIL("unknown optimizer '", s, "' (expected sgd, adamw, rmsprop, lars or lamb)");
}

BackendCapabilities capabilities_of(DeviceKind kind) {
  return kind == DeviceKind::CUDA ? CudaBackend::kCapabilities : CpuBackend::kCapabilities;
}

std::unique_ptr<Backend> make_backend(const std::string& device, const BackendOptions& options,
                                      std::string* note) {
  if (device == "auto") {
#ifdef TRAINBENCH_HAVE_CUDA
    std::string why;
    if (cuda_device_count(&why) > 0) return make_cuda_backend(0, options);
    if (note) *note = "device auto: no usable GPU (" + why + "), running on the CPU";
#else
    if (note) *note = "device auto: this build has no CUDA backend, running on the CPU";
#endif
    return std::make_unique<CpuBackend>(options);
  }
  const Device d = parse_device(device);
  if (d.is_cpu()) return std::make_unique<CpuBackend>(options);
#ifdef TRAINBENCH_HAVE_CUDA
  std::string why;
  const int n = cuda_device_count(&why);
  TB_CHECK(d.index < n, "device ", device, " is not available: ",
           n == 0 ? why : std::to_string(n) + " GPU(s) found");
  return make_cuda_backend(d.index, options);
#else
  TB_FAIL("device ", device, " is not available: this build has no CUDA backend "
          "(configure with -DTRAINBENCH_CUDA=ON on a machine with the CUDA toolkit and cuDNN)");
#endif
}

std::vector<std::pair<std::string, std::string>> available_devices() {
  std::vector<std::pair<std::string, std::string>> out;
#ifdef TRAINBENCH_HAVE_CUDA
  for (auto& d : cuda_device_names()) out.push_back(d);
#endif
  out.emplace_back("cpu", CpuBackend::host_name());
  return out;
}

}  // namespace tb
