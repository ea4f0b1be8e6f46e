// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/metrics/process_memory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <string>

namespace tb {

namespace {
int64_t status_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string prefix = std::string(field) + ":";
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) return std::stoll(line.substr(prefix.size()));
  return 0;
}
// The peak before the last measurement run outside the peak (0: none since
// the last restart).
std::atomic<int64_t> peak_before_measurement{0};

bool clear_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";  // 5: reset the peak resident set size (Linux 4.0)
  out.flush();
  return out.good();
}
}  // namespace

int64_t process_rss_bytes() { return status_kib("VmRSS") * 1024; }
int64_t process_peak_rss_bytes() {
  return std::max(status_kib("VmHWM") * 1024, peak_before_measurement.load());
}

bool reset_process_peak_rss() {
  peak_before_measurement = 0;
  return clear_peak_rss();
}

void run_outside_peak_rss(const std::function<void()>& measurement) {
  const int64_t before = process_peak_rss_bytes();
  measurement();
  if (clear_peak_rss())
    peak_before_measurement = std::max(peak_before_measurement.load(), before);
}

double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

}  // namespace tb
