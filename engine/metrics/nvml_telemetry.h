// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// GPU telemetry through NVML, loaded at run time from the driver
// (libnvidia-ml.so.1): no build-time dependency, and on a machine without the
// driver it is simply absent, with the reason. The NVML calls used are the
// documented C API (nvmlInit_v2, nvmlDeviceGetHandleByPciBusId_v2,
// nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetUtilizationRates, nvmlDeviceGetPowerUsage, nvmlDeviceGetClockInfo,
// nvmlDeviceGetTemperature, nvmlShutdown), declared here by hand.
// Not run on a GPU yet: only the "not available" path has been exercised.
#include <cmath>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace tb {

struct GpuTelemetry {
  double gpu_utilization_pct = 0;     // share of time a kernel was running
  double memory_utilization_pct = 0;  // share of time device memory was read or written
  // NaN where the device does not report it (power on some virtual machines).
  double power_w = NAN;
  double sm_clock_mhz = NAN;
  double temperature_c = NAN;
  // Adds gpu_util_pct, gpu_mem_util_pct, and those of gpu_power_w,
  // gpu_sm_clock_mhz, gpu_temp_c the device reported.
  void write_metrics(nlohmann::json& metrics) const;
};

class NvmlTelemetry {
 public:
  // Loads NVML and opens the device at `pci_bus_id` (as cudaDeviceGetPCIBusId
  // gives it: NVML counts every GPU in PCI order and ignores
  // CUDA_VISIBLE_DEVICES, so CUDA's index can name another GPU), or NVML's
  // device `index` when no bus id is given. On any failure available() is
  // false and reason() says why ("not available: ...").
  explicit NvmlTelemetry(unsigned index = 0, const std::string& pci_bus_id = {});
  ~NvmlTelemetry();
  NvmlTelemetry(const NvmlTelemetry&) = delete;
  NvmlTelemetry& operator=(const NvmlTelemetry&) = delete;

  bool available() const { return device_ != nullptr; }
  const std::string& reason() const { return reason_; }
  // A reading now; std::nullopt when NVML is not available or the
  // utilisation query fails (the other figures are NaN when they fail).
  std::optional<GpuTelemetry> read() const;

  // For tests: load from another library path.
  NvmlTelemetry(const std::string& library, unsigned index, const std::string& pci_bus_id = {});

 private:
  void open(const std::string& library, unsigned index, const std::string& pci_bus_id);
  struct Api;
  void* lib_ = nullptr;
  void* device_ = nullptr;
  Api* api_ = nullptr;
  std::string reason_;
};

}  // namespace tb
