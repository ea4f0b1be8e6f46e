// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A caching device allocator, in the spirit of PyTorch's: cudaMalloc and
// cudaFree synchronise the device and cost tens of microseconds, so freed
// memory is kept and handed out again.
//
// - Segments and blocks: each cudaMalloc is a segment; a segment is cut into
//   blocks in address order. A request is rounded up to a multiple of 512 B
//   and takes the smallest free block of its pool that fits (best fit); what
//   is left of that block becomes a free block of its own when it is worth
//   one (small pool: 512 B or more; large pool: more than 1 MiB, so large
//   blocks do not crumble into pieces no large request fits). A freed block
//   merges with free neighbours of its segment. So a large block freed by one
//   tensor serves several smaller ones, and the bytes allocated stay at what
//   is alive (the memory plan's first pass, before TransientBuffers makes its
//   one block, allocates and frees every activation as it goes).
// - Pools: requests up to kSmallLimit (1 MiB) come from 2 MiB segments of the
//   small pool; larger ones from segments of their own, rounded up to 2 MiB,
//   in the large pool. The pools are per device and stream.
// - Stream-aware: a segment remembers the stream current when it was made and
//   its blocks are handed out only for that stream. Work on one stream runs in order, so a
//   block freed on the host while its last kernel is still queued can be handed
//   to the next kernel of the same stream without waiting. A tensor used on a
//   second stream would need an event (record_stream); nothing does that yet.
// - On cudaMalloc failure: free every wholly free segment (empty_cache) and
//   retry once, then throw tb::OutOfMemory naming the bytes asked for and the
//   statistics. A segment part of which is in use stays (as in PyTorch).
// - CUDA graph capture (graphs.cpp): the capture runs in thread-local mode, in
//   which cudaMalloc on the capturing thread is "potentially unsafe" and would
//   invalidate it. Between set_capturing(true) and (false), every cudaMalloc
//   runs with the calling thread's capture mode swapped to relaxed
//   (cudaThreadExchangeStreamCaptureMode, restored right after, also when it
//   fails), as PyTorch's allocator does: a graph may use fresh memory as long
//   as nothing frees it before the replays (the kept pool below). An OOM
//   during a capture releases nothing (cudaFree is not allowed there) and
//   throws at once; empty_cache then releases nothing either (counted in
//   releases_deferred). Other threads (the loaders' cudaHostAlloc) are untouched
//   by a thread-local capture.
//
// This header is plain C++ (streams are void*), so tests and the app can read
// the statistics without the CUDA headers. The runtime calls go through
// AllocatorRuntime, so the bookkeeping is tested without a GPU.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "engine/core/tensor.h"

namespace tb::cuda {

struct AllocatorStats {
  size_t allocated_bytes = 0;       // in live blocks (their sizes: 512 B multiples)
  size_t requested_bytes = 0;       // in live blocks, as asked
  size_t reserved_bytes = 0;        // in segments held from cudaMalloc (live + cached)
  size_t peak_allocated_bytes = 0;  // since start or reset_peak()
  size_t peak_reserved_bytes = 0;
  int64_t cuda_malloc_count = 0;  // cudaMalloc calls that succeeded
  int64_t cuda_free_count = 0;
  int64_t cache_hits = 0;   // allocations served from the cache
  int64_t oom_retries = 0;  // cudaMalloc failures followed by empty_cache + retry
  int64_t live_blocks = 0;
  int64_t cached_blocks = 0;  // free blocks, whole segments or parts of one
  int64_t segments = 0;       // cudaMalloc'd ranges held
  int64_t splits = 0;         // blocks cut from a larger free block
  // deallocate of a pointer that is not a live block of this allocator (a
  // double free, or someone else's memory): ignored, never freed blindly, and
  // counted here so a test or the statistics show it (0 in a correct run).
  int64_t unknown_frees = 0;
  // empty_cache calls during a capture, which release nothing (cudaFree
  // would void the capture); the next eager one does.
  int64_t releases_deferred = 0;
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

constexpr size_t kSmallLimit = size_t(1) << 20;    // 1 MiB: largest small request
constexpr size_t kBlockRound = 512;                // every block a multiple of this
constexpr size_t kSmallSegment = size_t(2) << 20;  // the small pool's cudaMalloc size
constexpr size_t kLargeRound = size_t(2) << 20;    // large segments: multiples of this

// A request's block size: 0 B asks for one block (a valid pointer).
inline size_t round_size(size_t bytes) {
  return (bytes == 0 ? 1 : (bytes + kBlockRound - 1) / kBlockRound) * kBlockRound;
}
inline bool is_small(size_t rounded) { return rounded <= kSmallLimit; }
// The cudaMalloc a block of `rounded` bytes comes from when no free block fits.
inline size_t segment_size(size_t rounded) {
  return is_small(rounded) ? kSmallSegment
                           : (rounded + kLargeRound - 1) / kLargeRound * kLargeRound;
}
// Whether a free block of `block` bytes taken for `rounded` leaves a block of
// its own (the rest stays with the taken block otherwise).
inline bool splits_off_rest(size_t block, size_t rounded) {
  const size_t rest = block - rounded;
  return is_small(rounded) ? rest >= kBlockRound : rest > kSmallLimit;
}

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
  // Gives no memory back to the driver (it may be gone at exit): the segments
  // stay reserved, only the bookkeeping is freed.
  ~CachingAllocator() override;

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

  // cudaFree every wholly free segment; nothing while a capture is under way.
  void empty_cache();
  void reset_peak();   // peaks := current values
  AllocatorStats stats() const;

  // cuda_graphs (trick 24): the free segments of `stream`'s pools stay reserved
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
  // A piece of a segment. The blocks of one segment are a list in address
  // order (prev/next); a segment wholly free is one block with neither.
  struct Block {
    void* ptr = nullptr;
    size_t size = 0;       // a multiple of kBlockRound
    size_t requested = 0;  // while allocated
    void* stream = nullptr;
    int device = 0;
    bool small = false;  // the pool its segment belongs to
    bool allocated = false;
    Block* prev = nullptr;
    Block* next = nullptr;
    bool whole_segment() const { return !prev && !next; }
  };
  struct BySizeThenAddress {
    bool operator()(const Block* a, const Block* b) const {
      if (a->size != b->size) return a->size < b->size;
      return std::less<void*>()(a->ptr, b->ptr);
    }
  };
  using FreeList = std::set<Block*, BySizeThenAddress>;
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
  static PoolKey key_of(const Block& b) { return PoolKey{b.device, b.stream, b.small}; }

  void* malloc_or_throw(size_t bytes, size_t requested, int device);  // lock held
  Block* take_free(FreeList& pool, size_t rounded);                  // lock held
  void split(Block* b, size_t rounded, FreeList& pool);              // lock held
  void absorb(Block* b, Block* neighbour, FreeList& pool);           // lock held
  void release_cached();                                             // lock held
  void* stream_of(int device) const;                                 // lock held

  AllocatorRuntime rt_;
  mutable std::mutex mutex_;
  std::unordered_map<int, void*> streams_;  // the current stream of each device
  bool capturing_ = false;
  std::unordered_map<PoolKey, FreeList, PoolKeyHash> free_;
  std::unordered_map<void*, Block*> live_;  // owns the allocated blocks; free_ the free ones
  AllocatorStats stats_;
  int fail_next_ = 0;
  size_t reserved_limit_ = 0;
  void* kept_stream_ = nullptr;
};

}  // namespace tb::cuda
