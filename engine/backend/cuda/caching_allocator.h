// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A caching device allocator, in the spirit of PyTorch's: cudaMalloc and
// cudaFree synchronise the device and cost tens of microseconds, so freed
// blocks are kept and handed out again.
//
// - Size classes: requests up to kSmallLimit (1 MiB) round up to a multiple of
//   512 B (small pool); larger ones to a multiple of 2 MiB (large pool). Each
//   pool keeps its free blocks per stream, ordered by size; a request takes the
//   smallest free block of its pool that fits (large: at most twice the rounded
//   size, so one huge block does not serve a small request). No splitting yet.
// - Stream-aware: a block remembers the stream current when it was allocated
//   and is reused only for that stream. Work on one stream runs in order, so a
//   block freed on the host while its last kernel is still queued can be handed
//   to the next kernel of the same stream without waiting. A tensor used on a
//   second stream would need an event (record_stream); nothing does that yet.
// - On cudaMalloc failure: free every cached block (empty_cache) and retry once,
//   then throw tb::OutOfMemory naming the bytes asked for and the statistics.
// - CUDA graph capture (graphs.cpp): the capture runs in thread-local mode, in
//   which cudaMalloc on the capturing thread is "potentially unsafe" and would
//   invalidate it. Between set_capturing(true) and (false), every cudaMalloc
//   runs with the calling thread's capture mode swapped to relaxed
//   (cudaThreadExchangeStreamCaptureMode, restored right after, also when it
//   fails), as PyTorch's allocator does: a graph may use fresh memory as long
//   as nothing frees it before the replays (the kept pool below). An OOM
//   during a capture releases nothing (cudaFree is not allowed there) and
//   throws at once. Other threads (the loaders' cudaHostAlloc) are untouched
//   by a thread-local capture.
//
// This header is plain C++ (streams are void*), so tests and the app can read
// the statistics without the CUDA headers. The runtime calls go through
// AllocatorRuntime, so the bookkeeping is tested without a GPU.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "engine/core/tensor.h"

namespace tb::cuda {

struct AllocatorStats {
  size_t allocated_bytes = 0;       // in live blocks (rounded sizes)
  size_t requested_bytes = 0;       // in live blocks, as asked
  size_t reserved_bytes = 0;        // held from cudaMalloc (live + cached)
  size_t peak_allocated_bytes = 0;  // since start or reset_peak()
  size_t peak_reserved_bytes = 0;
  int64_t cuda_malloc_count = 0;  // cudaMalloc calls that succeeded
  int64_t cuda_free_count = 0;
  int64_t cache_hits = 0;   // allocations served from the cache
  int64_t oom_retries = 0;  // cudaMalloc failures followed by empty_cache + retry
  int64_t live_blocks = 0;
  int64_t cached_blocks = 0;
};

// The CUDA runtime calls the allocator makes; return values are cudaError_t
// codes as int (0 = cudaSuccess, 2 = cudaErrorMemoryAllocation). Tests pass a
// fake; the backend uses cuda_allocator_runtime().
struct AllocatorRuntime {
  int (*malloc)(void** ptr, size_t bytes) = nullptr;
  int (*free)(void* ptr) = nullptr;
  int (*get_device)(int* device) = nullptr;
  int (*set_device)(int device) = nullptr;
  int (*mem_get_info)(size_t* free_bytes, size_t* total_bytes) = nullptr;
  int (*clear_last_error)() = nullptr;  // cudaGetLastError
  // cudaThreadExchangeStreamCaptureMode: sets the calling thread's mode to
  // *mode and stores the previous one in *mode.
  int (*exchange_capture_mode)(int* mode) = nullptr;
};
AllocatorRuntime cuda_allocator_runtime();
constexpr int kCudaSuccess = 0;
constexpr int kCudaErrorMemoryAllocation = 2;
constexpr int kCaptureModeRelaxed = 2;  // cudaStreamCaptureModeRelaxed

// While alive (when `active`), the calling thread's stream capture mode is
// relaxed; then it is put back to what it was, also when the call in between
// throws (push-pop, as the runtime's documentation asks). `exchange` is
// AllocatorRuntime::exchange_capture_mode.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode(int (*exchange)(int* mode), bool active);
  ~RelaxedCaptureMode();
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  int (*exchange_)(int* mode);
  bool active_ = false;
  int previous_ = 0;
};

constexpr size_t kSmallLimit = size_t(1) << 20;  // 1 MiB
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = size_t(2) << 20;  // 2 MiB

// The size class of a request: 0 B asks for one small block (a valid pointer).
inline size_t round_size(size_t bytes) {
  if (bytes <= kSmallLimit)
    return (bytes == 0 ? 1 : (bytes + kSmallRound - 1) / kSmallRound) * kSmallRound;
  return (bytes + kLargeRound - 1) / kLargeRound * kLargeRound;
}
inline bool is_small(size_t rounded) { return rounded <= kSmallLimit; }

// The largest power of two, at most `cap` (a power of two), that divides p's
// address: the byte alignment a library may be promised for p. Blocks from
// this allocator are 256-byte aligned, but views into one flat block (the
// model's parameters and gradients, model.cpp) only to their element offset.
inline uint32_t address_alignment(const void* p, uint32_t cap) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = cap;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(AllocatorRuntime runtime = cuda_allocator_runtime());
  ~CachingAllocator() override;  // leaks cached blocks on purpose if the driver is gone

  void* allocate(size_t bytes) override;  // on the current stream of this device
  // On `device` (and its current stream); the thread's current device is
  // switched for the cudaMalloc and put back.
  void* allocate_for(const Device& device, size_t bytes) override;
  void deallocate(void* ptr, size_t bytes) override;
  void release_free() override { empty_cache(); }

  // The stream (cudaStream_t as void*) new allocations on the calling
  // thread's current device are tagged with. One per device, so that threads
  // driving different devices at once (parallel: dp, one thread per device)
  // each tag their blocks with their own device's stream.
  void set_current_stream(void* stream);
  void* current_stream() const;  // of the calling thread's current device

  void empty_cache();  // cudaFree every cached (free) block
  void reset_peak();   // peaks := current values
  AllocatorStats stats() const;

  // cuda_graphs (trick 24): the free blocks of `stream`'s pools stay reserved
  // through empty_cache (and the OOM retry), because captured graphs still
  // address them: they are the graphs' private pool. nullptr: none kept.
  void keep_stream_pool(void* stream);
  // A capture is under way (graphs.cpp, begin_capture .. end_capture): see the
  // capture notes at the top.
  void set_capturing(bool on);
  bool capturing() const;

  // Test hook: the next `count` cudaMalloc calls fail as if the device were full.
  void inject_malloc_failures(int count);
  // A cap on reserved_bytes (0: none), as PyTorch's per-process memory
  // fraction: a cudaMalloc that would pass it fails like a full device (cache
  // emptied, one retry, then OutOfMemory naming the cap). Lets the
  // out-of-memory path be tested on a card of any size.
  void set_reserved_limit(size_t bytes);
  size_t reserved_limit() const;

  // The process-wide instance, registered for DeviceKind::CUDA by the backend.
  static CachingAllocator& instance();

 private:
  struct Block {
    void* ptr = nullptr;
    size_t size = 0;       // rounded
    size_t requested = 0;  // while live
    void* stream = nullptr;
    int device = 0;
  };
  using FreeList = std::multimap<size_t, Block>;  // by size
  struct PoolKey {
    int device;
    void* stream;
    bool small;
    bool operator==(const PoolKey&) const = default;
  };
  struct PoolKeyHash {
    size_t operator()(const PoolKey& k) const {
      return std::hash<void*>()(k.stream) ^ (size_t(k.device) << 1) ^ size_t(k.small);
    }
  };

  void* malloc_or_throw(size_t rounded, size_t requested, int device);  // lock held
  void release_cached();                                                // lock held
  void* stream_of(int device) const;                                    // lock held

  AllocatorRuntime rt_;
  mutable std::mutex mutex_;
  std::unordered_map<int, void*> streams_;  // the current stream of each device
  bool capturing_ = false;
  std::unordered_map<PoolKey, FreeList, PoolKeyHash> free_;
  std::unordered_map<void*, Block> live_;
  AllocatorStats stats_;
  int fail_next_ = 0;
  size_t reserved_limit_ = 0;
  void* kept_stream_ = nullptr;
};

}  // namespace tb::cuda
