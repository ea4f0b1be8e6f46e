// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/backend/backend.h"

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
  {
    std::lock_guard lock(reports_mutex_);  // the reports read the kernels about to go
    kernel_path_reports_.clear();
  }
  std::lock_guard lock(kernels_mutex_);
  kernels_.clear();
}

Tensor Backend::scratch(const Shape& shape, DType dtype, Layout layout) {
  if (scratch_source_ && pass_scratch_) return scratch_source_->scratch(*this, shape, dtype, layout);
  return Tensor::empty(shape, dtype, device(), layout);
}

bool pass_scratch_setting(const char* value) {
  if (!value || !*value || std::string(value) == "pass") return true;
  if (std::string(value) == "allocator") return false;
  TB_FAIL("TRAINBENCH_CUDA_SCRATCH=", value, ": expected pass (ops' workspaces from the "
          "pass's memory plan, the default) or allocator (from the caching allocator)");
}

void Backend::report_kernel_paths(const std::string& family,
                                  std::function<nlohmann::json()> report) {
  std::lock_guard lock(reports_mutex_);
  kernel_path_reports_[family] = std::move(report);
}

nlohmann::json Backend::kernel_paths() const {
  nlohmann::json out = nlohmann::json::object();
  std::lock_guard lock(reports_mutex_);
  for (const auto& [family, report] : kernel_path_reports_) {
    nlohmann::json paths = report();
    if (!paths.empty()) out[family] = std::move(paths);
  }
  return out;
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
