// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// GPU telemetry through NVML, loaded at run time from the driver
// (libnvidia-ml.so.1): no build-time dependency, and on a machine without the
// driver it is simply absent, with the reason. The NVML calls used are the
// documented C API (nvmlInit_v2, nvmlDeviceGetHandleByIndex_v2,
// nvmlDeviceGetUtilizationRates, nvmlDeviceGetPowerUsage, nvmlDeviceGetClockInfo,
// nvmlDeviceGetTemperature, nvmlShutdown), declared here by hand.
// Not run on a GPU yet: only the "not available" path has been exercised.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace tb {

struct GpuTelemetry {
  double gpu_utilization_pct = 0;     // share of time a kernel was running
  double memory_utilization_pct = 0;  // share of time device memory was read or written
  double power_w = 0;
  double sm_clock_mhz = 0;
  double temperature_c = 0;
  // Adds gpu_util_pct, gpu_mem_util_pct, gpu_power_w, gpu_sm_clock_mhz, gpu_temp_c.
  void write_metrics(nlohmann::json& metrics) const;
};

class NvmlTelemetry {
 public:
  // Loads NVML and opens device `index`; on any failure available() is false
  // and reason() says why ("not available: ...").
  explicit NvmlTelemetry(unsigned index = 0);
  ~NvmlTelemetry();
  NvmlTelemetry(const NvmlTelemetry&) = delete;
  NvmlTelemetry& operator=(const NvmlTelemetry&) = delete;

  bool available() const { return device_ != nullptr; }
  const std::string& reason() const { return reason_; }
  // A reading now; std::nullopt when NVML is not available or a query fails.
  std::optional<GpuTelemetry> read() const;

  // For tests: load from another library path.
  NvmlTelemetry(const std::string& library, unsigned index);

 private:
  void open(const std::string& library, unsigned index);
  struct Api;
  void* lib_ = nullptr;
  void* device_ = nullptr;
  Api* api_ = nullptr;
  std::string reason_;
};

}  // namespace tb
