// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// How many threads the CPU backend's kernels run on when the run does not
// say (the `cpu_threads` setting, 0): the CPUs this process may run on, not
// the machine's. A container limited to 2 CPUs of 64, `taskset -c 0`, or an
// mpirun rank bound to one core that starts one thread per machine CPU runs
// many threads per CPU, and every short parallel region then waits a time
// slice for its last thread (bench/NOTES.md, issue 28: an order of magnitude).
//
// The count is the smallest of
//   - the process's affinity mask (taskset, numactl, a container's cpuset,
//     mpirun's binding); with OMP_PROC_BIND set, the CPUs of OpenMP's places
//     (libgomp binds this thread to one place before main, so its own mask
//     would say one CPU, and a run would use one thread of many);
//   - its CPU quota, rounded up (docker --cpus, systemd's CPUQuota): cgroup
//     v2's cpu.max of its group and the groups above, or on a cgroup v1 host
//     (older Docker hosts) the cpu controller's cpu.cfs_quota_us over
//     cpu.cfs_period_us, the same way;
//   - OMP_NUM_THREADS when set (its first level), as every OpenMP program,
//     PyTorch's CPU side among them, reads it;
//   - with several processes of one run on this machine (ddp on the CPU),
//     its share of the machine's CPUs, unless the launcher bound each to CPUs
//     of its own (mpirun binds 2 processes to a core each, more to a socket:
//     4 ranks on 8 cores would otherwise run 32 threads).
// The run's environment records the count and what decided it.
#include <algorithm>
#include <cstdint>
#include <string>

namespace tb {

// f(u0, u1) over [0, units) in contiguous slices, one per thread: at most
// `threads` of them, and one when the work is too small to be worth threads
// (`worth_threads` false). A unit's slice does not depend on timing, so
// per-unit sums (a channel's statistics) do not either.
template <typename F>
void for_each_slice(int64_t units, [[maybe_unused]] int threads,
                    [[maybe_unused]] bool worth_threads, F&& f) {
#ifdef _OPENMP
  const int parts = worth_threads ? int(std::min<int64_t>(threads, units)) : 1;
#pragma omp parallel for schedule(static, 1) num_threads(parts) if (parts > 1)
  for (int p = 0; p < parts; ++p) f(units * p / parts, units * (p + 1) / parts);
#else
  f(int64_t(0), units);
#endif
}

struct CpuThreadCount {
  int threads = 1;
  // What decided it: "affinity mask", "cgroup cpu.max", "cgroup v1
  // cpu.cfs_quota_us", "OMP_NUM_THREADS" or "cpu_threads setting", with the
  // figures each source gave.
  std::string source;
};

// The count for this process now. Throws tb::Error naming OMP_NUM_THREADS
// and its value when it is set but not a positive whole number.
// `local_ranks`: the processes of this run on this machine (1: just this one).
CpuThreadCount default_cpu_threads(int local_ranks = 1);

// The pieces, for tests and for default_cpu_threads:
// Threads a cgroup v2 cpu.max line allows ("max 100000": no limit, 0;
// "150000 100000": 1.5 CPUs, 2). 0 for a line it cannot read.
int threads_allowed_by_cpu_max(const std::string& cpu_max);
// Threads a cgroup v1 quota allows: cpu.cfs_quota_us over cpu.cfs_period_us,
// rounded up ("-1": no limit, 0). 0 for values it cannot read.
int threads_allowed_by_cfs_quota(const std::string& quota_us, const std::string& period_us);
// The cgroup v1 cpu controller of this process: where it is mounted and the
// process's group below that mount, from /proc/self/mountinfo's text and
// /proc/self/cgroup's ("4:cpu,cpuacct:/docker/abc"). A mount that shows a
// group (its root field, as a container's does) takes that prefix off the
// path. Empty `mount` when the controller is not mounted or not listed.
struct CgroupV1Cpu {
  std::string mount, group;
};
CgroupV1Cpu cgroup_v1_cpu(const std::string& mountinfo, const std::string& proc_self_cgroup);
// threads_allowed_by_cgroup's walk over cgroup v1 quota files under the cpu
// controller's mount `root`.
int threads_allowed_by_cgroup_v1(const std::string& root, const std::string& group);
// OMP_NUM_THREADS's first level ("4" or "4,2": 4); 0 when unset or empty.
// Throws tb::Error naming the variable and the value otherwise.
int threads_from_omp_num_threads(const char* value);
// The smallest quota on the path of a cgroup v2 group ("/user.slice/x")
// under the cgroup file system's root (`root`, "/sys/fs/cgroup"), itself
// and every group above it; 0 when none sets one.
int threads_allowed_by_cgroup(const std::string& root, const std::string& group);
// One of `local_ranks` processes that may each use `threads` of the
// machine's `machine_cpus`: `threads` when the processes' CPUs can be
// disjoint (threads * local_ranks <= machine_cpus), else its share,
// machine_cpus / local_ranks (at least 1, at most threads).
int threads_for_local_rank(int threads, int local_ranks, int machine_cpus);

}  // namespace tb
