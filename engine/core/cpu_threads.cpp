// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/core/cpu_threads.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "engine/core/error.h"

namespace tb {

int threads_allowed_by_cpu_max(const std::string& cpu_max) {
  std::istringstream in(cpu_max);
  std::string quota;
  long long period = 0;
  if (!(in >> quota >> period) || period <= 0 || quota == "max") return 0;
  char* end = nullptr;
  const long long q = std::strtoll(quota.c_str(), &end, 10);
  if (end == quota.c_str() || *end != '\0' || q <= 0) return 0;
  return static_cast<int>((q + period - 1) / period);
}

int threads_from_omp_num_threads(const char* value) {
  if (!value || !*value) return 0;
  const std::string v(value);
  const std::string first = v.substr(0, v.find(','));  // "4,2": nested levels
  char* end = nullptr;
  const long n = std::strtol(first.c_str(), &end, 10);
  TB_CHECK(end != first.c_str() && *end == '\0' && n > 0 && n <= 1 << 16,
           "OMP_NUM_THREADS='", v, "' is not a positive whole number of threads (unset it, "
           "or set the run's cpu_threads)");
  return static_cast<int>(n);
}

int threads_allowed_by_cgroup(const std::string& root, const std::string& group) {
  int allowed = 0;
  std::string g = group;
  while (true) {
    std::ifstream in(root + (g == "/" ? "" : g) + "/cpu.max");
    std::string line;
    if (in && std::getline(in, line)) {
      const int n = threads_allowed_by_cpu_max(line);
      if (n > 0) allowed = allowed > 0 ? std::min(allowed, n) : n;
    }
    if (g.empty() || g == "/") break;
    const auto slash = g.rfind('/');
    g = slash == 0 || slash == std::string::npos ? "/" : g.substr(0, slash);
  }
  return allowed;
}

int threads_for_local_rank(int threads, int local_ranks, int machine_cpus) {
  if (local_ranks <= 1 || static_cast<long>(threads) * local_ranks <= machine_cpus) return threads;
  return std::clamp(machine_cpus / local_ranks, 1, threads);
}

namespace {

// The cgroup v2 group of this process ("0::/path" in /proc/self/cgroup), or
// "" under cgroup v1 or when it cannot be read.
std::string own_cgroup() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  return {};
}

}  // namespace

CpuThreadCount default_cpu_threads(int local_ranks) {
  CpuThreadCount c;
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof mask, &mask) == 0) {
    c.threads = std::max(1, CPU_COUNT(&mask));
    c.source = "affinity mask (" + std::to_string(c.threads) + " CPUs)";
  } else {  // no mask to read: the machine's CPUs
    c.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    c.source = "the machine's CPUs (" + std::to_string(c.threads) + ")";
  }
  // Each later source may only lower the count; the source says what did.
  auto cap = [&c](int n, const std::string& what) {
    if (n <= 0 || n >= c.threads) return;
    c.source = what + " (" + std::to_string(n) + " of " + std::to_string(c.threads) + " CPUs)";
    c.threads = n;
  };
  const std::string group = own_cgroup();
  cap(group.empty() ? 0 : threads_allowed_by_cgroup("/sys/fs/cgroup", group), "cgroup cpu.max");
  cap(threads_from_omp_num_threads(std::getenv("OMP_NUM_THREADS")), "OMP_NUM_THREADS");
  const int machine = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (const int share = threads_for_local_rank(c.threads, local_ranks, machine);
      share < c.threads) {
    c.source += ", shared by " + std::to_string(local_ranks) + " processes on " +
                std::to_string(machine) + " CPUs";
    c.threads = share;
  }
  return c;
}

}  // namespace tb
