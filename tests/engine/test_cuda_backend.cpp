// SPDX-License-Identifier: GPL-3.0-or-later
// The CUDA backend as a device: its description, the caching allocator (size
// classes, statistics, empty_cache, capture mode around cudaMalloc, the retry
// after an injected failure, tb::OutOfMemory naming the bytes), the no-device
// path of make_backend, and argument errors (host operands, mixed layouts).
// The ops themselves are checked against the CPU reference by the op-family
// suites (tests/engine/test_op_*.cpp), whose CUDA rows print "tb-tolerance"
// lines for scripts/gpu-check.sh's summary.
// Slots that need a device begin with QSKIP when there is none (or the build
// has no CUDA backend); the allocator size classes and the capture-mode
// bookkeeping (against a fake runtime) need no device and run everywhere.
//
// NOTE: written on a machine without a GPU. The GPU slots compiled there and
// skipped; their first real run is scripts/gpu-check.sh (docs/gpu-check.md).
#include <QtTest>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cuda/caching_allocator.h"
#include "engine/core/error.h"
#ifdef TRAINBENCH_HAVE_CUDA
#include <cuda_runtime.h>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/cuda_check.h"
#include "engine/metrics/layer_profiler.h"
#endif
#include "engine/ops/pointwise/pointwise.h"
#include "tests/engine/device_fixture.h"
#include "tests/engine/tensor_helpers.h"

using namespace tb;

namespace {

#ifdef TRAINBENCH_HAVE_CUDA
// A stand-in for the CUDA runtime calls of the caching allocator
// (AllocatorRuntime): device memory is made-up addresses, the thread's stream
// capture mode a thread_local, and every call is recorded.
namespace fake_runtime {
thread_local int capture_mode = 0;  // 0 = global, the runtime's default
thread_local int current_device = 0;  // cudaSetDevice is per thread
std::vector<int> modes_at_malloc;   // the calling thread's mode at each cudaMalloc
std::vector<int> devices_at_malloc;  // the calling thread's device at each cudaMalloc
std::map<uintptr_t, size_t> outstanding;  // cudaMalloc'd and not yet freed: start -> bytes
int exchanges = 0, frees = 0, fail_next = 0, bad_frees = 0;
uintptr_t next_address = 0x10000000;
void reset() {
  capture_mode = 0;
  modes_at_malloc.clear();
  devices_at_malloc.clear();
  outstanding.clear();
  current_device = 0;
  exchanges = frees = fail_next = bad_frees = 0;
}
size_t outstanding_bytes() {
  size_t sum = 0;
  for (const auto& [start, bytes] : outstanding) sum += bytes;
  return sum;
}
tb::cuda::AllocatorRuntime runtime() {
  tb::cuda::AllocatorRuntime rt;
  rt.malloc = [](void** p, size_t bytes) {
    modes_at_malloc.push_back(capture_mode);
    devices_at_malloc.push_back(current_device);
    if (fail_next > 0) {
      --fail_next;
      return tb::cuda::kCudaErrorMemoryAllocation;
    }
    *p = reinterpret_cast<void*>(next_address);
    outstanding[next_address] = bytes;
    next_address += bytes;  // segments back to back: adjacent, never merged
    return tb::cuda::kCudaSuccess;
  };
  rt.free = [](void* p) {
    // Only what cudaMalloc returned, once (cudaErrorInvalidValue otherwise).
    if (outstanding.erase(reinterpret_cast<uintptr_t>(p)) == 0) return ++bad_frees, 1;
    return ++frees, tb::cuda::kCudaSuccess;
  };
  rt.get_device = [](int* d) { return *d = current_device, tb::cuda::kCudaSuccess; };
  rt.set_device = [](int d) { return current_device = d, tb::cuda::kCudaSuccess; };
  rt.mem_get_info = [](size_t* f, size_t* t) {
    *f = size_t(1) << 30, *t = size_t(2) << 30;
    return tb::cuda::kCudaSuccess;
  };
  rt.clear_last_error = [] { return tb::cuda::kCudaSuccess; };
  rt.exchange_capture_mode = [](int* mode) {
    std::swap(*mode, capture_mode);
    ++exchanges;
    return tb::cuda::kCudaSuccess;
  };
  return rt;
}
}  // namespace fake_runtime
#endif

}  // namespace

class TestCudaBackend : public QObject {
  Q_OBJECT

 private slots:
  // ------------------------------------------------------------ no device needed

  void allocatorSizeClasses() {
    using namespace tb::cuda;
    QCOMPARE(round_size(0), size_t(512));
    QCOMPARE(round_size(1), size_t(512));
    QCOMPARE(round_size(512), size_t(512));
    QCOMPARE(round_size(513), size_t(1024));
    QCOMPARE(round_size(1000 * 1000), size_t(1000448));  // 1954 · 512
    QCOMPARE(round_size(kSmallLimit), kSmallLimit);
    QCOMPARE(round_size(kSmallLimit + 1), kSmallLimit + 512);
    QVERIFY(is_small(round_size(kSmallLimit)));
    QVERIFY(!is_small(round_size(kSmallLimit + 1)));
    // Small blocks come from 2 MiB segments, large ones from their own, in 2 MiB steps.
    QCOMPARE(segment_size(512), size_t(2) << 20);
    QCOMPARE(segment_size(kSmallLimit), size_t(2) << 20);
    QCOMPARE(segment_size(kSmallLimit + 512), size_t(2) << 20);
    QCOMPARE(segment_size((size_t(2) << 20) + 512), size_t(4) << 20);
    QCOMPARE(segment_size(size_t(7) << 20), size_t(8) << 20);
    // The rest of a taken block is a block of its own: small 512 B or more,
    // large more than 1 MiB.
    QVERIFY(splits_off_rest(2048, 1536));
    QVERIFY(!splits_off_rest(2048, 2048));
    QVERIFY(!splits_off_rest(size_t(8) << 20, (size_t(7) << 20)));
    QVERIFY(splits_off_rest(size_t(8) << 20, (size_t(7) << 20) - 512));
    for (size_t b : {size_t(3), size_t(4097), size_t(123457), size_t(3) << 21, size_t(99999999)}) {
      const size_t r = round_size(b);
      QVERIFY(r >= b);
      QVERIFY(r % kBlockRound == 0);
      QVERIFY(r - b < kBlockRound);
      QVERIFY(segment_size(r) >= r);
      QVERIFY(segment_size(r) % kLargeRound == 0);
    }
  }

  // Blocks are cut from free ones and merge back (fake runtime, no GPU): a
  // freed 8 MiB tensor holds two 3 MiB ones without a cudaMalloc, the bytes
  // allocated are theirs (not 8 MiB twice), and once both are freed the
  // segment is whole again and empty_cache gives it back. Small requests share
  // one 2 MiB segment; adjacent segments never merge; a graph's kept stream
  // keeps its free segments.
  void allocatorSplitsAndMerges() {
#ifdef TRAINBENCH_HAVE_CUDA
    using namespace tb::cuda;
    namespace fr = fake_runtime;
    fr::reset();
    CachingAllocator a(fr::runtime());
    int stream = 0;
    a.set_current_stream(&stream);
    const size_t MiB = size_t(1) << 20;
    char* big = static_cast<char*>(a.allocate(8 * MiB));
    QCOMPARE(a.stats().allocated_bytes, 8 * MiB);
    a.deallocate(big, 8 * MiB);
    void* b = a.allocate(3 * MiB);
    void* c = a.allocate(3 * MiB);
    QVERIFY(b == big);
    QVERIFY(c == big + 3 * MiB);
    QCOMPARE(a.stats().cuda_malloc_count, int64_t(1));
    QCOMPARE(a.stats().allocated_bytes, 6 * MiB);
    QCOMPARE(a.stats().reserved_bytes, 8 * MiB);
    QCOMPARE(a.stats().splits, int64_t(2));
    QCOMPARE(a.stats().cached_blocks, int64_t(1));  // the last 2 MiB
    // 1.5 MiB fits the 2 MiB rest; what is left (0.5 MiB) stays with it.
    void* d = a.allocate(3 * MiB / 2);
    QVERIFY(d == big + 6 * MiB);
    QCOMPARE(a.stats().allocated_bytes, 8 * MiB);
    QCOMPARE(a.stats().cached_blocks, int64_t(0));
    a.empty_cache();  // nothing wholly free
    QCOMPARE(fr::frees, 0);
    a.deallocate(b, 3 * MiB);
    a.deallocate(d, 3 * MiB / 2);
    QCOMPARE(a.stats().cached_blocks, int64_t(2));  // b's and d's, apart
    a.empty_cache();
    QCOMPARE(fr::frees, 0);
    a.deallocate(c, 3 * MiB);  // merges with both: the segment is whole
    QCOMPARE(a.stats().cached_blocks, int64_t(1));
    QVERIFY(a.allocate(8 * MiB) == big);  // whole again: one block of 8 MiB
    a.deallocate(big, 8 * MiB);

    // Small requests: one 2 MiB segment, blocks side by side.
    char* s1 = static_cast<char*>(a.allocate(1000));
    void* s2 = a.allocate(1);
    QVERIFY(s2 == s1 + 1024);
    QCOMPARE(a.stats().segments, int64_t(2));
    QCOMPARE(a.stats().reserved_bytes, 10 * MiB);
    QCOMPARE(a.stats().allocated_bytes, size_t(1536));
    a.deallocate(s1, 1000);
    a.deallocate(s2, 1);
    // Two segments side by side in the address space stay two.
    a.empty_cache();
    QCOMPARE(fr::frees, 2);
    QCOMPARE(a.stats().reserved_bytes, size_t(0));
    void* x = a.allocate(4 * MiB);
    void* y = a.allocate(4 * MiB);
    QVERIFY(static_cast<char*>(y) == static_cast<char*>(x) + 4 * MiB);
    a.deallocate(x, 4 * MiB);
    a.deallocate(y, 4 * MiB);
    QCOMPARE(a.stats().cached_blocks, int64_t(2));
    QVERIFY(a.allocate(8 * MiB) != x);  // no 8 MiB block across the two
    QCOMPARE(a.stats().segments, int64_t(3));

    // A kept (graph) stream's free segments survive empty_cache.
    int graph_stream = 0;
    a.set_current_stream(&graph_stream);
    void* g = a.allocate(4 * MiB);
    a.deallocate(g, 4 * MiB);
    a.keep_stream_pool(&graph_stream);
    const int frees_before = fr::frees;
    a.empty_cache();
    QCOMPARE(fr::frees, frees_before + 2);  // x's and y's segments, not g's
    QVERIFY(fr::outstanding.count(reinterpret_cast<uintptr_t>(g)) == 1);
    QCOMPARE(fr::bad_frees, 0);
#else
    QSKIP("this build has no CUDA backend (the allocator is compiled with it)");
#endif
  }

  // Random requests of every size on two streams, freed in random order, with
  // empty_cache now and then (fake runtime, no GPU): live blocks never overlap
  // and lie in segments the runtime handed out and has not taken back; the
  // statistics match what is alive (allocated at most 1 MiB above the rounded
  // requests a large block); when everything is freed every segment is whole
  // again and empty_cache gives all of them back, each exactly once.
  void allocatorRandomRequestsKeepItsInvariants() {
#ifdef TRAINBENCH_HAVE_CUDA
    using namespace tb::cuda;
    namespace fr = fake_runtime;
    fr::reset();
    CachingAllocator a(fr::runtime());
    int streams[2] = {0, 0};
    std::mt19937_64 rng(20261126);
    struct Live {
      uintptr_t start;
      size_t bytes;
      int stream;
    };
    std::vector<Live> live;
    auto check = [&] {
      const auto st = a.stats();
      std::map<uintptr_t, size_t> ranges;  // start -> rounded size
      size_t requested = 0, rounded = 0;
      int64_t large = 0;
      for (const Live& l : live) {
        const size_t r = round_size(l.bytes);
        QVERIFY2(ranges.emplace(l.start, r).second, "two live blocks at one address");
        requested += l.bytes;
        rounded += r;
        large += is_small(r) ? 0 : 1;
        auto seg = fr::outstanding.upper_bound(l.start);
        QVERIFY(seg != fr::outstanding.begin());
        --seg;
        QVERIFY2(l.start + r <= seg->first + seg->second, "a block beyond its segment");
      }
      uintptr_t end = 0;
      for (const auto& [start, r] : ranges) {
        QVERIFY2(start >= end, "live blocks overlap");
        end = start + r;
      }
      QCOMPARE(st.requested_bytes, requested);
      QCOMPARE(st.live_blocks, int64_t(live.size()));
      QVERIFY(st.allocated_bytes >= rounded);
      QVERIFY(st.allocated_bytes <= rounded + size_t(large) * kSmallLimit);
      QCOMPARE(st.reserved_bytes, fr::outstanding_bytes());
      QCOMPARE(st.segments, int64_t(fr::outstanding.size()));
      QVERIFY(st.peak_allocated_bytes >= st.allocated_bytes);
    };
    // Sizes over five decades, as a model's tensors are.
    std::uniform_real_distribution<double> log_size(0.0, 7.7);  // 1 B .. 50 MB
    for (int i = 0; i < 4000; ++i) {
      const int which = int(rng() % 2);
      a.set_current_stream(&streams[which]);
      if (live.empty() || rng() % 100 < 55) {
        const size_t bytes = size_t(std::pow(10.0, log_size(rng)));
        void* p = a.allocate(bytes);
        live.push_back({reinterpret_cast<uintptr_t>(p), bytes, which});
      } else {
        const size_t k = rng() % live.size();
        a.deallocate(reinterpret_cast<void*>(live[k].start), live[k].bytes);
        live[k] = live.back();
        live.pop_back();
      }
      if (i % 500 == 499) a.empty_cache();
      if (i % 50 == 0) check();
      if (QTest::currentTestFailed()) return;  // check() reports from a lambda
    }
    check();
    for (const Live& l : live) a.deallocate(reinterpret_cast<void*>(l.start), l.bytes);
    live.clear();
    check();
    QCOMPARE(a.stats().allocated_bytes, size_t(0));
    QVERIFY(a.stats().splits > 0);
    QVERIFY(a.stats().cache_hits > 0);
    a.empty_cache();
    QCOMPARE(a.stats().reserved_bytes, size_t(0));
    QCOMPARE(a.stats().segments, int64_t(0));
    QCOMPARE(a.stats().cached_blocks, int64_t(0));
    QVERIFY(fr::outstanding.empty());
    QCOMPARE(int64_t(fr::frees), a.stats().cuda_malloc_count);
    QCOMPARE(fr::bad_frees, 0);
#else
    QSKIP("this build has no CUDA backend (the allocator is compiled with it)");
#endif
  }

  // The allocator's bookkeeping against a fake runtime (no GPU): while a CUDA
  // graph is being captured, every cudaMalloc runs in relaxed capture mode and
  // the thread's mode is restored after it, also when it fails; an OOM inside
  // a capture releases no cached block (cudaFree would void the capture).
  void allocatorCaptureModeAroundCudaMalloc() {
#ifdef TRAINBENCH_HAVE_CUDA
    using namespace tb::cuda;
    namespace fr = fake_runtime;
    fr::reset();
    CachingAllocator a(fr::runtime());
    int stream_a = 0;
    a.set_current_stream(&stream_a);
    void* p = a.allocate(1000);  // eager: the thread's mode is left alone
    QCOMPARE(fr::modes_at_malloc, std::vector<int>{0});
    QCOMPARE(fr::exchanges, 0);
    a.set_capturing(true);
    QVERIFY(a.capturing());
    void* q = a.allocate(3 << 20);
    QCOMPARE(fr::modes_at_malloc.back(), kCaptureModeRelaxed);
    QCOMPARE(fr::capture_mode, 0);  // restored
    QCOMPARE(fr::exchanges, 2);
    fr::capture_mode = 1;  // a thread in thread-local mode gets it back as it was
    void* r = a.allocate(5 << 20);
    QCOMPARE(fr::modes_at_malloc.back(), kCaptureModeRelaxed);
    QCOMPARE(fr::capture_mode, 1);
    fr::capture_mode = 0;
    a.deallocate(p, 1000);
    QVERIFY(a.allocate(1000) == p);  // a cache hit calls nothing
    QCOMPARE(fr::exchanges, 4);
    QCOMPARE(fr::modes_at_malloc.size(), size_t(3));
    // Out of memory inside the capture: one attempt, nothing released, the
    // mode restored, and the message says why.
    a.deallocate(q, 3 << 20);  // a cached block an eager OOM would free
    fr::fail_next = 1;
    bool oom = false;
    try {
      (void)a.allocate(64 << 20);
    } catch (const OutOfMemory& e) {
      oom = true;
      QCOMPARE(e.requested_bytes, size_t(64) << 20);
      QVERIFY2(std::string(e.what()).find("capture") != std::string::npos, e.what());
    }
    QVERIFY(oom);
    QCOMPARE(fr::frees, 0);
    QCOMPARE(fr::capture_mode, 0);
    QCOMPARE(a.stats().oom_retries, int64_t(0));
    // Nor does an explicit empty_cache (the memory plan replacing its block):
    // it is deferred, and counted.
    a.empty_cache();
    QCOMPARE(fr::frees, 0);
    QCOMPARE(a.stats().releases_deferred, int64_t(1));
    // Eager again: the OOM retry gives the cached blocks back and succeeds.
    a.set_capturing(false);
    fr::fail_next = 1;
    const int exchanges = fr::exchanges;
    void* big = a.allocate(64 << 20);
    QVERIFY(big != nullptr);
    QCOMPARE(fr::frees, 1);
    QCOMPARE(a.stats().oom_retries, int64_t(1));
    QCOMPARE(fr::exchanges, exchanges);
    QCOMPARE(fr::modes_at_malloc.back(), 0);
    a.deallocate(r, 5 << 20);
    a.deallocate(big, 64 << 20);
    a.deallocate(p, 1000);
    // A second free of the same pointer changes nothing and is counted.
    const AllocatorStats once = a.stats();
    QCOMPARE(once.unknown_frees, int64_t(0));
    a.deallocate(p, 1000);
    QCOMPARE(a.stats().unknown_frees, int64_t(1));
    QCOMPARE(a.stats().allocated_bytes, once.allocated_bytes);
    QCOMPARE(a.stats().cached_blocks, once.cached_blocks);
#else
    QSKIP("this build has no CUDA backend (the allocator is compiled with it)");
#endif
  }

  // set_reserved_limit: a cudaMalloc that would take the reserved bytes past
  // the cap fails like a full device (the cache is emptied and the request
  // tried once more, then OutOfMemory names the request and the cap); under
  // the cap nothing changes, and 0 removes it.
  void allocatorReservedLimit() {
#ifdef TRAINBENCH_HAVE_CUDA
    using namespace tb::cuda;
    namespace fr = fake_runtime;
    fr::reset();
    CachingAllocator a(fr::runtime());
    int stream = 0;
    a.set_current_stream(&stream);
    a.set_reserved_limit(size_t(10) << 20);
    QCOMPARE(a.reserved_limit(), size_t(10) << 20);
    void* p = a.allocate(size_t(4) << 20);  // 4 MiB reserved
    void* q = a.allocate(size_t(3) << 20);  // 4 MiB more (rounded to 2 MiB steps)
    QCOMPARE(a.stats().reserved_bytes, size_t(8) << 20);
    a.deallocate(q, size_t(3) << 20);  // cached: still reserved
    // 6 MiB more would reserve 14 MiB: the cached block goes back, then it fits.
    void* r = a.allocate(size_t(6) << 20);
    QCOMPARE(a.stats().oom_retries, int64_t(1));
    QCOMPARE(fr::frees, 1);
    QCOMPARE(a.stats().reserved_bytes, size_t(10) << 20);
    // 2 MiB more cannot fit under 10 with 10 live: OutOfMemory, naming the cap.
    bool oom = false;
    try {
      (void)a.allocate(size_t(2) << 20);
    } catch (const OutOfMemory& e) {
      oom = true;
      QCOMPARE(e.requested_bytes, size_t(2) << 20);
      QVERIFY2(std::string(e.what()).find("limit is 10485760 bytes") != std::string::npos, e.what());
    }
    QVERIFY(oom);
    QCOMPARE(fr::modes_at_malloc.size(), size_t(3));  // the cap refused without calling cudaMalloc
    a.set_reserved_limit(0);
    void* big = a.allocate(size_t(64) << 20);
    QVERIFY(big != nullptr);
    a.deallocate(big, size_t(64) << 20);
    a.deallocate(r, size_t(6) << 20);
    a.deallocate(p, size_t(4) << 20);
#else
    QSKIP("this build has no CUDA backend (the allocator is compiled with it)");
#endif
  }

  // parallel: dp drives several devices from one process:
  // - a thread that makes device 1's stream current must not retag device
  //   0's allocations (a block freed on device 0 is found again on device 0's
  //   stream);
  // - a tensor of cuda:1 made on a thread whose current device is 0 (dp makes
  //   the replicas' buffers from the training thread) is allocated on device
  //   1, in device 1's pool, and the thread's device is left as it was.
  void allocatorPerDevice() {
#ifdef TRAINBENCH_HAVE_CUDA
    using namespace tb::cuda;
    namespace fr = fake_runtime;
    fr::reset();
    CachingAllocator a(fr::runtime());
    int stream_0 = 0, stream_1 = 0;
    a.set_current_stream(&stream_0);  // this thread on device 0
    void* p = a.allocate(4096);
    std::thread([&] {  // another thread drives device 1
      fr::current_device = 1;
      a.set_current_stream(&stream_1);
      QVERIFY(a.current_stream() == &stream_1);
    }).join();
    QVERIFY(a.current_stream() == &stream_0);
    a.deallocate(p, 4096);
    QVERIFY(a.allocate(4096) == p);  // device 0's pool on device 0's stream
    QCOMPARE(a.stats().cache_hits, int64_t(1));

    void* q = a.allocate_for(Device::cuda(1), 4096);
    QCOMPARE(fr::devices_at_malloc, (std::vector<int>{0, 1}));
    QCOMPARE(fr::current_device, 0);
    a.deallocate(q, 4096);
    QVERIFY(a.allocate_for(Device::cuda(1), 4096) == q);  // device 1's pool
    QCOMPARE(fr::devices_at_malloc.size(), size_t(2));
    QCOMPARE(fr::current_device, 0);
    a.deallocate(p, 4096);
    a.deallocate(q, 4096);
#else
    QSKIP("this build has no CUDA backend (the allocator is compiled with it)");
#endif
  }

  void noDeviceReasonIsClear() {
    std::string why;
    if (test::gpu_available(&why)) QSKIP("a CUDA device is present; this slot checks the no-device path");
    QVERIFY(!why.empty());
    std::string note;
    auto be = make_backend("auto", BackendOptions{}, &note);
    QCOMPARE(be->device(), Device::cpu());
    QVERIFY(!note.empty());
    QVERIFY_THROWS_EXCEPTION(tb::Error, make_backend("cuda:0", BackendOptions{}));
  }

  // ------------------------------------------------------------ device

  void describeAndName() {
    NEED_GPU();
    TB_GPU_TRY
    Backend* const gpu = &test::cuda_backend();
    const auto j = gpu->describe();
    for (const char* k : {"device_name", "compute_capability", "driver", "runtime", "cudnn",
                          "cublas", "multiprocessors"})
      QVERIFY2(j.contains(k), k);
    QVERIFY(QString::fromStdString(gpu->name()).startsWith("cuda:0 ("));
    QCOMPARE(gpu->device(), Device::cuda(0));
#ifdef TRAINBENCH_HAVE_CUDA
    QVERIFY(!cuda_device_names().empty());
    QCOMPARE(QString::fromStdString(cuda_device_names().front().first), QStringLiteral("cuda:0"));
#endif
    TB_GPU_CATCH
  }

  void allocatorStatistics() {
    NEED_GPU();
    TB_GPU_TRY
    Backend* const gpu = &test::cuda_backend();
#ifdef TRAINBENCH_HAVE_CUDA
    auto& a = tb::cuda::CachingAllocator::instance();
    gpu->synchronize();
    a.empty_cache();
    a.reset_peak();
    const auto s0 = a.stats();
    const size_t big = (size_t(5) << 20) + 3;  // a 6 MiB segment; the rest stays with it
    {
      Tensor t = gpu->empty({int64_t(big)}, DType::U8);
      const auto s1 = a.stats();
      QCOMPARE(s1.allocated_bytes - s0.allocated_bytes, size_t(6) << 20);
      QCOMPARE(s1.requested_bytes - s0.requested_bytes, big);
      QCOMPARE(s1.cuda_malloc_count, s0.cuda_malloc_count + 1);
      QVERIFY(s1.peak_allocated_bytes >= s1.allocated_bytes);
    }
    const auto s2 = a.stats();
    QCOMPARE(s2.allocated_bytes, s0.allocated_bytes);                    // freed to the cache ...
    QCOMPARE(s2.reserved_bytes, s0.reserved_bytes + (size_t(6) << 20));  // ... not to the driver
    {
      Tensor t = gpu->empty({int64_t(big) - 100}, DType::U8);  // same class: a cache hit
      const auto s3 = a.stats();
      QCOMPARE(s3.cuda_malloc_count, s2.cuda_malloc_count);
      QCOMPARE(s3.cache_hits, s2.cache_hits + 1);
    }
    a.reset_peak();
    QCOMPARE(a.stats().peak_allocated_bytes, a.stats().allocated_bytes);
    gpu->synchronize();
    a.empty_cache();
    const auto s4 = a.stats();
    QCOMPARE(s4.cached_blocks, s0.cached_blocks);  // left: free parts of segments in use
    QCOMPARE(s4.reserved_bytes, s0.reserved_bytes);  // the 6 MiB segment went back
    QVERIFY(s4.cuda_free_count > s2.cuda_free_count);
#endif
    TB_GPU_CATCH
  }

  void outOfMemory() {
    NEED_GPU();
    TB_GPU_TRY
    Backend* const gpu = &test::cuda_backend();
#ifdef TRAINBENCH_HAVE_CUDA
    auto& a = tb::cuda::CachingAllocator::instance();
    gpu->synchronize();
    a.empty_cache();
    // Far beyond any card: 2^50 bytes.
    const int64_t n = int64_t(1) << 48;
    try {
      Tensor t = gpu->empty({n}, DType::F32);
      QFAIL("a 1 PiB allocation succeeded");
    } catch (const tb::OutOfMemory& e) {
      QCOMPARE(e.requested_bytes, size_t(n) * 4);
      QVERIFY2(QString(e.what()).contains(QString::number(qulonglong(n) * 4)), e.what());
      QVERIFY2(QString(e.what()).contains("out of memory"), e.what());
    }
    // One injected failure: the allocator empties its cache and retries.
    const auto before = a.stats();
    a.inject_malloc_failures(1);
    { Tensor t = gpu->empty({int64_t(3) << 20}, DType::F32); }
    QCOMPARE(a.stats().oom_retries, before.oom_retries + 1);
    // Two: the retry fails too.
    a.inject_malloc_failures(2);
    QVERIFY_THROWS_EXCEPTION(tb::OutOfMemory, gpu->empty({int64_t(5) << 20}, DType::F32));
    a.inject_malloc_failures(0);
    // The device still works afterwards.
    Tensor ok = gpu->empty({10}, DType::F32);
    gpu->fill(ok, 1.0);
    QCOMPARE(test::to_host(*gpu, ok).data_as<float>()[9], 1.0f);
#endif
    TB_GPU_CATCH
  }

  // A not-ready poll of the per-layer profile's clock (cupti_sampling or
  // profiler, without graphs) must not leave cudaErrorNotReady in the thread's
  // error slot: the next launch check would report it as that launch's failure
  // and stop the run. The stream waits on the host, so the poll cannot be done.
  void scopeClockPollLeavesNoError() {
    NEED_GPU();
    NEED_REAL_GPU("a host function holds the stream while the host polls");
    TB_GPU_TRY
#ifdef TRAINBENCH_HAVE_CUDA
    auto* const gpu = dynamic_cast<CudaBackend*>(&test::cuda_backend());
    QVERIFY(gpu);
    const auto stream = static_cast<cudaStream_t>(gpu->stream_handle());
    auto clock = make_cuda_scope_clock(stream);
    QVERIFY(clock);
    Tensor t = gpu->empty({1024}, DType::F32);
    std::atomic<bool> release{false};
    clock->mark(0);
    TB_CUDA_CHECK(cudaLaunchHostFunc(
        stream,
        [](void* p) {
          while (!static_cast<std::atomic<bool>*>(p)->load()) std::this_thread::yield();
        },
        &release));
    clock->mark(1);
    const bool ready_while_held = clock->ready(2);
    std::string launch_error;
    try {
      gpu->fill(t, 1.0);  // a kernel launch and its launch check
    } catch (const tb::Error& e) {
      launch_error = e.what();
    }
    release = true;  // before any assertion: a failed one would leave the stream held
    QVERIFY(!ready_while_held);
    QVERIFY2(launch_error.empty(), launch_error.c_str());
    QCOMPARE(clock->intervals(2).size(), size_t(1));
    QVERIFY(clock->ready(2));
    QCOMPARE(test::to_host(*gpu, t).data_as<float>()[1023], 1.0f);
#endif
    TB_GPU_CATCH
  }

  void argumentErrors() {
    NEED_GPU();
    TB_GPU_TRY
    Backend* const gpu = &test::cuda_backend();
    const Tensor h = test::random_tensor({2, 3, 4, 5}, 99);
    Tensor d = test::to_device(*gpu, h);
    try {
      pointwise::relu_forward(*gpu, h, d);  // a host tensor given to the GPU
      QFAIL("no error for a host operand");
    } catch (const tb::Error& e) {
      QVERIFY2(QString(e.what()).contains("is not on cuda:0"), e.what());
    }
    Tensor nhwc = gpu->empty(h.shape(), DType::F32, Layout::NHWC);
    QVERIFY_THROWS_EXCEPTION(tb::Error, pointwise::add(*gpu, d, d, nhwc));  // layouts differ
    Tensor f64 = gpu->empty(h.shape(), DType::F64);
    QVERIFY_THROWS_EXCEPTION(tb::Error, gpu->copy(f64, nhwc));  // dtype + layout at once
    TB_GPU_CATCH
  }
};

QTEST_GUILESS_MAIN(TestCudaBackend)
#include "test_cuda_backend.moc"
