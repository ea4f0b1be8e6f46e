// SPDX-License-Identifier: GPL-3.0-or-later
// How many threads the CPU backend takes when the run does not say
// (engine/core/cpu_threads.h): the CPUs this process may use, its cgroup's
// quota and OMP_NUM_THREADS, not the machine's CPU count.
#include <sched.h>

#include <QTemporaryDir>
#include <QtTest>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/cpu_threads.h"
#include "engine/core/error.h"

using namespace tb;

namespace {

// Runs f on a new thread whose affinity mask is the first `cpus` CPUs of
// this one's (the mask is a thread's, so the test's own stays as it was).
template <typename F>
void on_cpus(int cpus, F f) {
  std::thread t([&] {
    cpu_set_t mine, fewer;
    sched_getaffinity(0, sizeof mine, &mine);
    CPU_ZERO(&fewer);
    for (int cpu = 0, taken = 0; cpu < CPU_SETSIZE && taken < cpus; ++cpu)
      if (CPU_ISSET(cpu, &mine)) CPU_SET(cpu, &fewer), ++taken;
    if (sched_setaffinity(0, sizeof fewer, &fewer) != 0) return;
    f();
  });
  t.join();
}

int cpus_available() {
  cpu_set_t mine;
  sched_getaffinity(0, sizeof mine, &mine);
  return CPU_COUNT(&mine);
}

// Sets OMP_NUM_THREADS for the scope, then puts back what was there.
struct OmpNumThreads {
  explicit OmpNumThreads(const char* value) {
    if (const char* v = std::getenv("OMP_NUM_THREADS")) saved = v, had = true;
    if (value) setenv("OMP_NUM_THREADS", value, 1);
    else unsetenv("OMP_NUM_THREADS");
  }
  ~OmpNumThreads() {
    if (had) setenv("OMP_NUM_THREADS", saved.c_str(), 1);
    else unsetenv("OMP_NUM_THREADS");
  }
  std::string saved;
  bool had = false;
};

void write(const QString& path, const char* text) {
  std::ofstream(path.toStdString()) << text;
}

}  // namespace

class TestCpuThreads : public QObject {
  Q_OBJECT
 private slots:
  void cpuMaxLinesGiveWholeCpus() {
    QCOMPARE(threads_allowed_by_cpu_max("max 100000\n"), 0);      // no quota
    QCOMPARE(threads_allowed_by_cpu_max("200000 100000\n"), 2);
    QCOMPARE(threads_allowed_by_cpu_max("150000 100000"), 2);      // 1.5 CPUs: 2 threads
    QCOMPARE(threads_allowed_by_cpu_max("50000 100000"), 1);
    QCOMPARE(threads_allowed_by_cpu_max(""), 0);
    QCOMPARE(threads_allowed_by_cpu_max("lots 100000"), 0);
    QCOMPARE(threads_allowed_by_cpu_max("100000 0"), 0);
  }

  void ompNumThreadsIsReadOrRefusedByName() {
    QCOMPARE(threads_from_omp_num_threads(nullptr), 0);
    QCOMPARE(threads_from_omp_num_threads(""), 0);
    QCOMPARE(threads_from_omp_num_threads("3"), 3);
    QCOMPARE(threads_from_omp_num_threads("4,2"), 4);  // nested levels: the first
    for (const char* bad : {"abc", "0", "-1", "2x", ",2"}) {
      try {
        threads_from_omp_num_threads(bad);
        QFAIL(qPrintable(QString("OMP_NUM_THREADS=%1 was accepted").arg(bad)));
      } catch (const Error& e) {
        const std::string m = e.what();
        QVERIFY2(m.find(std::string("OMP_NUM_THREADS='") + bad + "'") == 0, m.c_str());
      }
    }
  }

  // ddp on the CPU: processes that may each use all of the machine share it;
  // processes bound to CPUs of their own keep theirs.
  void localRanksShareTheMachine() {
    QCOMPARE(threads_for_local_rank(8, 1, 8), 8);
    QCOMPARE(threads_for_local_rank(8, 4, 8), 2);   // mpirun -np 4 binds to the socket
    QCOMPARE(threads_for_local_rank(1, 2, 2), 1);   // -np 2 binds each to a core
    QCOMPARE(threads_for_local_rank(4, 2, 8), 4);   // disjoint halves
    QCOMPARE(threads_for_local_rank(2, 3, 2), 1);   // more ranks than CPUs: one each
    QCOMPARE(threads_for_local_rank(6, 4, 16), 4);  // the share, at most the mask
    QCOMPARE(threads_for_local_rank(2, 4, 16), 2);
  }

  // The group's own quota and every quota above it: the smallest holds.
  void cgroupQuotasAboveTheGroupCount() {
    QTemporaryDir root;
    QVERIFY(root.isValid());
    QVERIFY(QDir(root.path()).mkpath("a/b/c"));
    write(root.filePath("cpu.max"), "max 100000\n");
    write(root.filePath("a/cpu.max"), "300000 100000\n");
    write(root.filePath("a/b/cpu.max"), "max 100000\n");  // c has no file at all
    const std::string r = root.path().toStdString();
    QCOMPARE(threads_allowed_by_cgroup(r, "/a/b/c"), 3);
    write(root.filePath("a/b/c/cpu.max"), "100000 100000\n");
    QCOMPARE(threads_allowed_by_cgroup(r, "/a/b/c"), 1);
    QCOMPARE(threads_allowed_by_cgroup(r, "/a"), 3);
    QCOMPARE(threads_allowed_by_cgroup(r, "/"), 0);
    QCOMPARE(threads_allowed_by_cgroup(r, "/elsewhere"), 0);
  }

  // cgroup v1 (older Docker hosts): cpu.cfs_quota_us over cpu.cfs_period_us.
  void cfsQuotasGiveWholeCpus() {
    QCOMPARE(threads_allowed_by_cfs_quota("-1", "100000"), 0);  // no quota
    QCOMPARE(threads_allowed_by_cfs_quota("200000\n", "100000\n"), 2);
    QCOMPARE(threads_allowed_by_cfs_quota("150000", "100000"), 2);
    QCOMPARE(threads_allowed_by_cfs_quota("50000", "100000"), 1);
    QCOMPARE(threads_allowed_by_cfs_quota("", "100000"), 0);
    QCOMPARE(threads_allowed_by_cfs_quota("200000", ""), 0);
    QCOMPARE(threads_allowed_by_cfs_quota("200000", "0"), 0);
  }

  void cgroupV1QuotasAboveTheGroupCount() {
    QTemporaryDir root;
    QVERIFY(root.isValid());
    QVERIFY(QDir(root.path()).mkpath("docker/abc"));
    write(root.filePath("cpu.cfs_quota_us"), "-1\n");
    write(root.filePath("cpu.cfs_period_us"), "100000\n");
    write(root.filePath("docker/cpu.cfs_quota_us"), "-1\n");
    write(root.filePath("docker/cpu.cfs_period_us"), "100000\n");
    const std::string r = root.path().toStdString();
    QCOMPARE(threads_allowed_by_cgroup_v1(r, "/docker/abc"), 0);  // abc has no files
    write(root.filePath("docker/abc/cpu.cfs_quota_us"), "250000\n");  // docker --cpus 2.5
    write(root.filePath("docker/abc/cpu.cfs_period_us"), "100000\n");
    QCOMPARE(threads_allowed_by_cgroup_v1(r, "/docker/abc"), 3);
    write(root.filePath("docker/cpu.cfs_quota_us"), "100000\n");
    QCOMPARE(threads_allowed_by_cgroup_v1(r, "/docker/abc"), 1);
    QCOMPARE(threads_allowed_by_cgroup_v1(r, "/"), 0);
  }

  // Where the cpu controller is mounted and this process's group below it,
  // on a host (the mount shows the hierarchy's root) and in a container (it
  // shows the container's group, which /proc/self/cgroup names in full).
  void cgroupV1CpuControllerIsFound() {
    const std::string host_mounts =
        "25 24 0:22 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755\n"
        "30 25 0:26 / /sys/fs/cgroup/memory rw,nosuid shared:12 - cgroup cgroup rw,memory\n"
        "31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:13 - cgroup cgroup "
        "rw,cpu,cpuacct\n";
    const std::string groups = "12:memory:/user.slice\n4:cpu,cpuacct:/user.slice/job\n0::/\n";
    CgroupV1Cpu c = cgroup_v1_cpu(host_mounts, groups);
    QCOMPARE(c.mount, std::string("/sys/fs/cgroup/cpu,cpuacct"));
    QCOMPARE(c.group, std::string("/user.slice/job"));

    const std::string container_mounts =
        "700 690 0:27 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro,nosuid - cgroup cgroup "
        "rw,cpuacct,cpu\n";
    c = cgroup_v1_cpu(container_mounts, "4:cpuacct,cpu:/docker/abc\n");
    QCOMPARE(c.mount, std::string("/sys/fs/cgroup/cpu,cpuacct"));
    QCOMPARE(c.group, std::string("/"));
    c = cgroup_v1_cpu(container_mounts, "4:cpuacct,cpu:/docker/abc/inner\n");
    QCOMPARE(c.group, std::string("/inner"));
    c = cgroup_v1_cpu(container_mounts, "4:cpuacct,cpu:/docker/abcdef\n");  // not below it
    QCOMPARE(c.group, std::string("/docker/abcdef"));

    // cgroup v2 only (this machine's kind), or "cpuset" (not "cpu"): none.
    QVERIFY(cgroup_v1_cpu("40 1 0:35 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "0::/\n")
                .mount.empty());
    QVERIFY(cgroup_v1_cpu("31 25 0:27 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n",
                          "3:cpuset:/\n")
                .mount.empty());
    // Mounted, but the process is listed in no group of it.
    QVERIFY(cgroup_v1_cpu(host_mounts, "12:memory:/user.slice\n").mount.empty());
  }

  // taskset -c 0 (or a container's cpuset) leaves one CPU: one thread, not
  // the machine's count.
  void affinityMaskDecides() {
    const OmpNumThreads unset(nullptr);
    CpuThreadCount c;
    int backend_threads = 0;
    std::string recorded;
    on_cpus(1, [&] {
      c = default_cpu_threads();
      CpuBackend be;
      backend_threads = be.threads();
      recorded = be.describe()["threads_source"].get<std::string>();
    });
    QCOMPARE(c.threads, 1);
    QCOMPARE(backend_threads, 1);
    QVERIFY2(recorded.rfind("affinity mask (1 CPUs)", 0) == 0 || recorded.rfind("cgroup", 0) == 0,
             recorded.c_str());
  }

  void ompNumThreadsCapsTheMask() {
    if (cpus_available() < 2) QSKIP("this process may use one CPU: nothing left to cap");
    {
      const OmpNumThreads one("1");
      const CpuThreadCount c = default_cpu_threads();
      QCOMPARE(c.threads, 1);
      QVERIFY2(c.source.rfind("OMP_NUM_THREADS (1 of ", 0) == 0, c.source.c_str());
    }
    {  // above the mask it does not raise the count
      const OmpNumThreads many("4096");
      int threads = 0;
      on_cpus(2, [&] { threads = default_cpu_threads().threads; });
      QCOMPARE(threads, 2);
    }
    const OmpNumThreads bad("lots");
    QVERIFY_THROWS_EXCEPTION(Error, CpuBackend{});
  }

  void theSettingWins() {
    const OmpNumThreads one("1");
    CpuBackend be(BackendOptions{.threads = 3});
    QCOMPARE(be.threads(), 3);
    QCOMPARE(be.describe()["threads_source"].get<std::string>(), std::string("cpu_threads setting"));
  }
};

QTEST_GUILESS_MAIN(TestCpuThreads)
#include "test_cpu_threads.moc"
