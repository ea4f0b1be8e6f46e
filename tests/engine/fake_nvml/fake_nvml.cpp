// SPDX-License-Identifier: GPL-3.0-or-later
// Stands in for the driver's libnvidia-ml.so.1 in test_metrics: two devices in
// NVML's (PCI) order, 0000:01:00.0 and 0000:41:00.0, whose utilisation is 10 %
// and 20 %, so a test sees which one a lookup opened. FAKE_NVML_NO_POWER=1 makes
// the power query unsupported, as it is on some virtual machines.
// fake_nvml_hold(1) makes the utilisation query wait until fake_nvml_hold(0),
// like a slow driver; fake_nvml_utilization_calls() counts that query.
// fake_nvml_fail(1) makes the utilisation query unsupported (a MIG slice),
// fake_nvml_fail(2) every query fail (a card fallen off the bus), 0 neither.
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace {
int devices[2];
constexpr int kSuccess = 0, kInvalidArgument = 2, kNotSupported = 3, kNotFound = 6,
              kUnknown = 999;
int which(void* d) { return d == &devices[1] ? 1 : 0; }
std::mutex hold_mu;
std::condition_variable hold_cv;
bool held = false;
std::atomic<long> utilization_calls{0};
std::atomic<int> failing{0};
}  // namespace

extern "C" {
void fake_nvml_hold(int on) {
  {
    std::lock_guard lock(hold_mu);
    held = on != 0;
  }
  hold_cv.notify_all();
}
long fake_nvml_utilization_calls() { return utilization_calls.load(); }
void fake_nvml_fail(int mode) { failing = mode; }
struct FakeNvmlUtilization {
  unsigned int gpu, memory;
};
int nvmlInit_v2() { return kSuccess; }
int nvmlShutdown() { return kSuccess; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void** d) {
  if (i > 1) return kInvalidArgument;
  *d = &devices[i];
  return kSuccess;
}
int nvmlDeviceGetHandleByPciBusId_v2(const char* id, void** d) {
  if (std::strcmp(id, "0000:01:00.0") == 0) *d = &devices[0];
  else if (std::strcmp(id, "0000:41:00.0") == 0) *d = &devices[1];
  else return kNotFound;
  return kSuccess;
}
int nvmlDeviceGetUtilizationRates(void* d, FakeNvmlUtilization* u) {
  utilization_calls.fetch_add(1);
  {
    std::unique_lock lock(hold_mu);
    hold_cv.wait(lock, [] { return !held; });
  }
  if (failing > 0) return failing == 2 ? kUnknown : kNotSupported;
  u->gpu = 10u * unsigned(which(d) + 1);
  u->memory = 5;
  return kSuccess;
}
int nvmlDeviceGetPowerUsage(void*, unsigned int* mw) {
  if (const char* e = std::getenv("FAKE_NVML_NO_POWER"); e && *e == '1') return kNotSupported;
  if (failing == 2) return kUnknown;
  *mw = 250000;
  return kSuccess;
}
int nvmlDeviceGetClockInfo(void*, int, unsigned int* mhz) {
  if (failing == 2) return kUnknown;
  *mhz = 1980;
  return kSuccess;
}
int nvmlDeviceGetTemperature(void*, int, unsigned int* c) {
  if (failing == 2) return kUnknown;
  *c = 40;
  return kSuccess;
}
}
