// SPDX-License-Identifier: GPL-3.0-or-later
// Not run on a GPU: written against NVML's documented API; on this machine only
// the path without a driver has been tested.
#include "engine/metrics/nvml_telemetry.h"

#include <dlfcn.h>

#include <algorithm>

#include <type_traits>

namespace tb {

namespace {
// NVML's C types, as documented: nvmlReturn_t is an int enum (0 = success),
// nvmlDevice_t an opaque pointer, nvmlUtilization_t two unsigned ints.
using NvmlReturn = int;
using NvmlDevice = void*;
struct NvmlUtilization {
  unsigned int gpu, memory;
};
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;           // NVML_CLOCK_SM
constexpr int kNvmlTemperatureGpu = 0;    // NVML_TEMPERATURE_GPU
}  // namespace

struct NvmlTelemetry::Api {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*handle_by_index)(unsigned int, NvmlDevice*) = nullptr;
  NvmlReturn (*handle_by_pci_bus_id)(const char*, NvmlDevice*) = nullptr;  // optional
  NvmlReturn (*utilization)(NvmlDevice, NvmlUtilization*) = nullptr;
  NvmlReturn (*power_usage)(NvmlDevice, unsigned int*) = nullptr;  // milliwatts
  NvmlReturn (*clock_info)(NvmlDevice, int, unsigned int*) = nullptr;  // MHz
  NvmlReturn (*temperature)(NvmlDevice, int, unsigned int*) = nullptr;  // degrees C
};

void GpuTelemetry::write_metrics(nlohmann::json& metrics) const {
  if (!std::isnan(gpu_utilization_pct)) metrics["gpu_util_pct"] = gpu_utilization_pct;
  if (!std::isnan(memory_utilization_pct)) metrics["gpu_mem_util_pct"] = memory_utilization_pct;
  if (!std::isnan(power_w)) metrics["gpu_power_w"] = power_w;
  if (!std::isnan(sm_clock_mhz)) metrics["gpu_sm_clock_mhz"] = sm_clock_mhz;
  if (!std::isnan(temperature_c)) metrics["gpu_temp_c"] = temperature_c;
}

NvmlTelemetry::NvmlTelemetry(unsigned index, const std::string& pci_bus_id) {
  open("libnvidia-ml.so.1", index, pci_bus_id);
}

NvmlTelemetry::NvmlTelemetry(const std::string& library, unsigned index,
                             const std::string& pci_bus_id) {
  open(library, index, pci_bus_id);
}

void NvmlTelemetry::open(const std::string& library, unsigned index,
                         const std::string& pci_bus_id) {
  lib_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib_) {
    const char* e = dlerror();
    reason_ = "not available: cannot load " + library + " (" + (e ? e : "no reason given") +
              "); is the NVIDIA driver installed?";
    return;
  }
  api_ = new Api;
  auto load = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib_, name));
    if (!fn && reason_.empty()) reason_ = std::string("not available: ") + library + " has no " + name;
  };
  load(api_->init, "nvmlInit_v2");
  load(api_->shutdown, "nvmlShutdown");
  load(api_->handle_by_index, "nvmlDeviceGetHandleByIndex_v2");
  load(api_->utilization, "nvmlDeviceGetUtilizationRates");
  load(api_->power_usage, "nvmlDeviceGetPowerUsage");
  load(api_->clock_info, "nvmlDeviceGetClockInfo");
  load(api_->temperature, "nvmlDeviceGetTemperature");
  if (!reason_.empty()) return;
  api_->handle_by_pci_bus_id = reinterpret_cast<decltype(api_->handle_by_pci_bus_id)>(
      dlsym(lib_, "nvmlDeviceGetHandleByPciBusId_v2"));
  if (NvmlReturn r = api_->init(); r != kNvmlSuccess) {
    reason_ = "not available: nvmlInit_v2 failed (NVML error " + std::to_string(r) + ")";
    api_->shutdown = nullptr;  // nothing to shut down
    return;
  }
  NvmlDevice d = nullptr;
  if (!pci_bus_id.empty() && api_->handle_by_pci_bus_id) {
    if (NvmlReturn r = api_->handle_by_pci_bus_id(pci_bus_id.c_str(), &d); r != kNvmlSuccess || !d) {
      reason_ = "not available: no NVML device at PCI bus id " + pci_bus_id + " (NVML error " +
                std::to_string(r) + ")";
      return;
    }
  } else if (NvmlReturn r = api_->handle_by_index(index, &d); r != kNvmlSuccess || !d) {
    reason_ = "not available: no NVML device " + std::to_string(index) + " (NVML error " +
              std::to_string(r) + ")";
    return;
  }
  device_ = d;
}

NvmlTelemetry::~NvmlTelemetry() {
  if (api_ && api_->shutdown) api_->shutdown();
  delete api_;
  if (lib_) dlclose(lib_);
}

NvmlSampler::NvmlSampler(std::unique_ptr<NvmlTelemetry> nvml, std::chrono::milliseconds period)
    : nvml_(std::move(nvml)),
      period_(std::max(period, std::chrono::milliseconds(1))),
      thread_([this](std::stop_token stop) { run(stop); }) {}

NvmlSampler::~NvmlSampler() {
  thread_.request_stop();  // wakes the wait below; a reading in progress finishes first
  thread_.join();
}

std::optional<GpuTelemetry> NvmlSampler::latest() const {
  std::lock_guard lock(mu_);
  return latest_;
}

NvmlSampler::ReadCost NvmlSampler::read_cost() const {
  std::lock_guard lock(mu_);
  return {readings_, readings_ ? total_ms_ / double(readings_) : 0.0, max_ms_};
}

void NvmlSampler::run(std::stop_token stop) {
  using Clock = std::chrono::steady_clock;
  std::unique_lock lock(mu_);
  while (!stop.stop_requested()) {
    lock.unlock();  // NVML is thread-safe; latest() never waits for a query
    const Clock::time_point t0 = Clock::now();
    std::optional<GpuTelemetry> reading = nvml_->read();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    lock.lock();
    latest_ = reading;  // a failed reading publishes nothing, not the last good one
    ++readings_;
    total_ms_ += ms;
    max_ms_ = std::max(max_ms_, ms);
    wake_.wait_for(lock, stop, period_, [] { return false; });
  }
}

std::optional<GpuTelemetry> NvmlTelemetry::read() const {
  if (!available()) return std::nullopt;
  GpuTelemetry t;
  NvmlUtilization u{};
  unsigned int mw = 0, mhz = 0, celsius = 0;
  // One unsupported query (power on some virtual machines, utilisation on a
  // MIG slice) leaves only its figure out; none answered: no reading.
  bool any = false;
  if (api_->utilization(device_, &u) == kNvmlSuccess) {
    t.gpu_utilization_pct = u.gpu;
    t.memory_utilization_pct = u.memory;
    any = true;
  }
  if (api_->power_usage(device_, &mw) == kNvmlSuccess) t.power_w = mw / 1000.0, any = true;
  if (api_->clock_info(device_, kNvmlClockSm, &mhz) == kNvmlSuccess) t.sm_clock_mhz = mhz, any = true;
  if (api_->temperature(device_, kNvmlTemperatureGpu, &celsius) == kNvmlSuccess)
    t.temperature_c = celsius, any = true;
  if (!any) return std::nullopt;
  return t;
}

}  // namespace tb
