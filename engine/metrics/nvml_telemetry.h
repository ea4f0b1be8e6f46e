// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// GPU telemetry through NVML, loaded at run time from the driver
// (libnvidia-ml.so.1): no build-time dependency, and on a machine without the
// driver it is simply absent, with the reason. The NVML calls used are the
// documented C API (nvmlInit_v2, nvmlDeviceGetHandleByPciBusId_v2,
// nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetUtilizationRates, nvmlDeviceGetPowerUsage, nvmlDeviceGetClockInfo,
// nvmlDeviceGetTemperature, nvmlShutdown), declared here by hand.
// NvmlTelemetry read a real driver on one H200 (2026-11-26); NvmlSampler, the
// thread the trainer reads it on now, has run only against the stand-in
// library (tests/engine/fake_nvml), not on a GPU.
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

namespace tb {

struct GpuTelemetry {
  // NaN where the device does not report it (power on some virtual machines,
  // utilisation on a MIG slice).
  double gpu_utilization_pct = NAN;     // share of time a kernel was running
  double memory_utilization_pct = NAN;  // share of time device memory was read or written
  double power_w = NAN;
  double sm_clock_mhz = NAN;
  double temperature_c = NAN;
  // Adds those of gpu_util_pct, gpu_mem_util_pct, gpu_power_w,
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

// NVML read on a thread of its own, every `period`: one reading is four
// driver queries, which can take a millisecond or so in all, and the training
// thread never waits for them. latest() hands out the newest reading without
// calling NVML (a lock and a copy). NVML's utilisation is itself an average
// over 1/6 s to 1 s, so a reading a few hundred milliseconds old is as fresh
// as the driver's figure.
class NvmlSampler {
 public:
  static constexpr std::chrono::milliseconds kDefaultPeriod{200};
  // Takes an NvmlTelemetry (not null); the first reading starts at once.
  explicit NvmlSampler(std::unique_ptr<NvmlTelemetry> nvml,
                       std::chrono::milliseconds period = kDefaultPeriod);
  ~NvmlSampler();  // stops the thread (at most one reading's wait)
  NvmlSampler(const NvmlSampler&) = delete;
  NvmlSampler& operator=(const NvmlSampler&) = delete;

  // The newest reading; std::nullopt until the first one is in, and when the
  // newest failed (no stale figure published as current).
  std::optional<GpuTelemetry> latest() const;
  // What the readings cost their own thread (the run summary's figure:
  // what a reading on the training thread would have added to its step).
  struct ReadCost {
    int64_t readings = 0;
    double mean_ms = 0, max_ms = 0;
  };
  ReadCost read_cost() const;
  std::chrono::milliseconds period() const { return period_; }

 private:
  void run(std::stop_token stop);

  std::unique_ptr<NvmlTelemetry> nvml_;
  const std::chrono::milliseconds period_;
  mutable std::mutex mu_;
  std::condition_variable_any wake_;
  std::optional<GpuTelemetry> latest_;
  int64_t readings_ = 0;
  double total_ms_ = 0, max_ms_ = 0;
  std::jthread thread_;  // last: starts once everything it uses exists
};

}  // namespace tb
