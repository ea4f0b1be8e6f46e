// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/core/cpu_threads.h"

#include <sched.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "engine/core/error.h"

namespace tb {

int threads_allowed_by_cfs_quota(const std::string& quota_us, const std::string& period_us) {
  // A whole number, then nothing but white space (a file's newline); else 0.
  auto whole = [](const std::string& text) {
    char* end = nullptr;
    const long long n = std::strtoll(text.c_str(), &end, 10);
    if (end == text.c_str()) return 0LL;
    for (; *end; ++end)
      if (!std::isspace(static_cast<unsigned char>(*end))) return 0LL;
    return n;
  };
  const long long q = whole(quota_us), p = whole(period_us);
  if (q <= 0 || p <= 0) return 0;  // -1: no quota
  return static_cast<int>((q + p - 1) / p);
}

int threads_allowed_by_cpu_max(const std::string& cpu_max) {
  std::istringstream in(cpu_max);
  std::string quota, period;
  if (!(in >> quota >> period)) return 0;
  return threads_allowed_by_cfs_quota(quota, period);  // "max": not a number, no quota
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

namespace {

// The smallest quota `quota_of(directory)` gives on the way from `group` up
// to the hierarchy's root (0: none).
template <typename QuotaOf>
int smallest_quota_up_from(const std::string& root, const std::string& group, QuotaOf quota_of) {
  int allowed = 0;
  std::string g = group;
  while (true) {
    const int n = quota_of(root + (g == "/" ? "" : g));
    if (n > 0) allowed = allowed > 0 ? std::min(allowed, n) : n;
    if (g.empty() || g == "/") break;
    const auto slash = g.rfind('/');
    g = slash == 0 || slash == std::string::npos ? "/" : g.substr(0, slash);
  }
  return allowed;
}

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return line;
}

std::string whole_file(const char* path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The cgroup v2 group in /proc/self/cgroup's text ("0::/path"), or "" under
// cgroup v1 or when it cannot be read.
std::string cgroup_v2_group(const std::string& proc_self_cgroup) {
  std::istringstream in(proc_self_cgroup);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  return {};
}

}  // namespace

int threads_allowed_by_cgroup(const std::string& root, const std::string& group) {
  return smallest_quota_up_from(root, group, [](const std::string& dir) {
    return threads_allowed_by_cpu_max(first_line(dir + "/cpu.max"));
  });
}

int threads_allowed_by_cgroup_v1(const std::string& root, const std::string& group) {
  return smallest_quota_up_from(root, group, [](const std::string& dir) {
    return threads_allowed_by_cfs_quota(first_line(dir + "/cpu.cfs_quota_us"),
                                        first_line(dir + "/cpu.cfs_period_us"));
  });
}

CgroupV1Cpu cgroup_v1_cpu(const std::string& mountinfo, const std::string& proc_self_cgroup) {
  auto has_cpu = [](const std::string& list) {  // "cpu,cpuacct" or "rw,cpu,cpuacct"
    std::istringstream items(list);
    for (std::string item; std::getline(items, item, ',');)
      if (item == "cpu") return true;
    return false;
  };
  CgroupV1Cpu c;
  std::string mount_root;
  std::istringstream mounts(mountinfo);
  for (std::string line; std::getline(mounts, line);) {
    // "36 35 0:30 <root> <mount point> <options> [optional...] - cgroup <source> <super options>"
    const auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream before(line.substr(0, dash)), after(line.substr(dash + 3));
    std::string id, parent, dev, root, point, fstype, source, super;
    if (!(before >> id >> parent >> dev >> root >> point) || !(after >> fstype >> source >> super))
      continue;
    if (fstype == "cgroup" && has_cpu(super)) {
      c.mount = point;
      mount_root = root;
      break;
    }
  }
  if (c.mount.empty()) return c;
  std::istringstream groups(proc_self_cgroup);
  for (std::string line; std::getline(groups, line);) {
    const auto a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos || !has_cpu(line.substr(a + 1, b - a - 1))) continue;
    const std::string path = line.substr(b + 1);
    // The mount shows the group at mount_root (a container's view): below it.
    const bool below = mount_root != "/" && path.rfind(mount_root, 0) == 0 &&
                       (path.size() == mount_root.size() || path[mount_root.size()] == '/');
    c.group = !below ? path : path.size() == mount_root.size() ? std::string(1, '/')
                                                               : path.substr(mount_root.size());
    return c;
  }
  c.mount.clear();  // mounted, but this process is in no group of it
  return c;
}

int threads_for_local_rank(int threads, int local_ranks, int machine_cpus) {
  if (local_ranks <= 1 || static_cast<long>(threads) * local_ranks <= machine_cpus) return threads;
  return std::clamp(machine_cpus / local_ranks, 1, threads);
}

namespace {

// With OMP_PROC_BIND set, libgomp binds the initial thread to its first place
// when it loads, before main: this thread's mask is then one place's, and the
// CPUs the process was given are those of all OpenMP's places (made from the
// mask it started with). 0 when OpenMP does not bind.
int cpus_of_openmp_places() {
#ifdef _OPENMP
  if (omp_get_proc_bind() == omp_proc_bind_false) return 0;
  std::set<int> cpus;
  for (int p = 0; p < omp_get_num_places(); ++p) {
    std::vector<int> ids(static_cast<size_t>(std::max(0, omp_get_place_num_procs(p))));
    if (!ids.empty()) omp_get_place_proc_ids(p, ids.data());
    cpus.insert(ids.begin(), ids.end());
  }
  return static_cast<int>(cpus.size());
#else
  return 0;
#endif
}

}  // namespace

CpuThreadCount default_cpu_threads(int local_ranks) {
  CpuThreadCount c;
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof mask, &mask) == 0) {
    c.threads = std::max(1, CPU_COUNT(&mask));
    c.source = "affinity mask (" + std::to_string(c.threads) + " CPUs)";
    if (const int placed = cpus_of_openmp_places(); placed > c.threads) {
      c.source = "OpenMP places (" + std::to_string(placed) + " CPUs; OMP_PROC_BIND bound this thread to " +
                 std::to_string(c.threads) + ")";
      c.threads = placed;
    }
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
  // Both hierarchies: a hybrid host has the cpu controller on v1 beside v2.
  const std::string groups = whole_file("/proc/self/cgroup");
  if (const std::string group = cgroup_v2_group(groups); !group.empty())
    cap(threads_allowed_by_cgroup("/sys/fs/cgroup", group), "cgroup cpu.max");
  if (const CgroupV1Cpu v1 = cgroup_v1_cpu(whole_file("/proc/self/mountinfo"), groups);
      !v1.mount.empty())
    cap(threads_allowed_by_cgroup_v1(v1.mount, v1.group), "cgroup v1 cpu.cfs_quota_us");
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
