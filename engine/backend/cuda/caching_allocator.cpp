// SPDX-License-Identifier: GPL-3.0-or-later
// The caching device allocator (see caching_allocator.h for the policy).
#include "engine/backend/cuda/caching_allocator.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "engine/backend/cuda/cuda_check.h"

namespace tb::cuda {

static_assert(kCudaSuccess == int(cudaSuccess));
static_assert(kCudaErrorMemoryAllocation == int(cudaErrorMemoryAllocation));
static_assert(kCaptureModeRelaxed == int(cudaStreamCaptureModeRelaxed));

namespace {
std::string mib(size_t bytes) {
  return detail::concat(bytes, " bytes (", double(bytes) / double(1 << 20), " MiB)");
}

}  // namespace

RelaxedCaptureMode::RelaxedCaptureMode(int (*exchange)(int* mode), bool active)
    : exchange_(exchange) {
  if (!active) return;
  int mode = kCaptureModeRelaxed;
  const int e = exchange_(&mode);
  if (e != kCudaSuccess)
    throw_cuda_error(cudaError_t(e), "cudaThreadExchangeStreamCaptureMode", __FILE__, __LINE__);
  previous_ = mode;
  active_ = true;
}

RelaxedCaptureMode::~RelaxedCaptureMode() {
  if (active_) (void)exchange_(&previous_);
}

AllocatorRuntime cuda_allocator_runtime() {
  AllocatorRuntime rt;
  rt.malloc = [](void** p, size_t bytes) { return int(cudaMalloc(p, bytes)); };
  rt.free = [](void* p) { return int(cudaFree(p)); };
  rt.get_device = [](int* d) { return int(cudaGetDevice(d)); };
  rt.set_device = [](int d) { return int(cudaSetDevice(d)); };
  rt.mem_get_info = [](size_t* f, size_t* t) { return int(cudaMemGetInfo(f, t)); };
  rt.clear_last_error = [] { return int(cudaGetLastError()); };
  rt.exchange_capture_mode = [](int* mode) {
    cudaStreamCaptureMode m = cudaStreamCaptureMode(*mode);
    const cudaError_t e = cudaThreadExchangeStreamCaptureMode(&m);
    *mode = int(m);
    return int(e);
  };
  return rt;
}

CachingAllocator::CachingAllocator(AllocatorRuntime runtime) : rt_(runtime) {}

CachingAllocator& CachingAllocator::instance() {
  // Never destroyed: tensors freed during static destruction still find it.
  static CachingAllocator* a = new CachingAllocator();
  return *a;
}

CachingAllocator::~CachingAllocator() {
  for (auto& [key, list] : free_)
    for (Block* b : list) delete b;
  for (auto& [ptr, b] : live_) delete b;
}

void CachingAllocator::set_capturing(bool on) {
  std::lock_guard lock(mutex_);
  capturing_ = on;
}

bool CachingAllocator::capturing() const {
  std::lock_guard lock(mutex_);
  return capturing_;
}

void CachingAllocator::set_current_stream(void* stream) {
  int device = 0;
  TB_CUDA_CHECK(cudaError_t(rt_.get_device(&device)));
  std::lock_guard lock(mutex_);
  streams_[device] = stream;
}

void* CachingAllocator::current_stream() const {
  int device = 0;
  TB_CUDA_CHECK(cudaError_t(rt_.get_device(&device)));
  std::lock_guard lock(mutex_);
  return stream_of(device);
}

void* CachingAllocator::stream_of(int device) const {
  const auto it = streams_.find(device);
  return it == streams_.end() ? nullptr : it->second;
}

void CachingAllocator::inject_malloc_failures(int count) {
  std::lock_guard lock(mutex_);
  fail_next_ = count;
}

void* CachingAllocator::malloc_or_throw(size_t bytes, size_t requested, int device) {
  void* p = nullptr;
  // Inside a capture one attempt only: releasing cached blocks means cudaFree.
  const int attempts = capturing_ ? 1 : 2;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    int e;
    if (fail_next_ > 0) {
      --fail_next_;
      e = kCudaErrorMemoryAllocation;
    } else if (reserved_limit_ > 0 && stats_.reserved_bytes + bytes > reserved_limit_) {
      e = kCudaErrorMemoryAllocation;
    } else {
      const RelaxedCaptureMode relaxed(rt_.exchange_capture_mode, capturing_);
      e = rt_.malloc(&p, bytes);
    }
    if (e == kCudaSuccess) {
      ++stats_.cuda_malloc_count;
      stats_.reserved_bytes += bytes;
      stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
      return p;
    }
    if (e != kCudaErrorMemoryAllocation)
      throw_cuda_error(cudaError_t(e), "cudaMalloc", __FILE__, __LINE__, requested);
    (void)rt_.clear_last_error();  // clear the sticky-free allocation error
    if (attempt + 1 < attempts) {
      // Give the wholly free segments back to the driver and try once more.
      ++stats_.oom_retries;
      release_cached();
    }
  }
  size_t free_b = 0, total_b = 0;
  (void)rt_.mem_get_info(&free_b, &total_b);
  (void)rt_.clear_last_error();
  throw OutOfMemory(
      detail::concat("cuda:", device, ": out of memory allocating ", mib(requested),
                     " (a segment of ", bytes, " bytes); allocated by tensors ",
                     mib(stats_.allocated_bytes), ", reserved by the caching allocator ",
                     mib(stats_.reserved_bytes), ", device free ", mib(free_b), " of ",
                     mib(total_b),
                     reserved_limit_ > 0
                         ? detail::concat("; the allocator's limit is ", mib(reserved_limit_))
                         : std::string(),
                     capturing_ ? "; during a CUDA graph capture, where cached blocks cannot "
                                  "be released (cuda_graphs off, or a smaller batch)"
                                : ""),
      requested);
}

void* CachingAllocator::allocate_for(const Device& device, size_t bytes) {
  int current = 0;
  TB_CUDA_CHECK(cudaError_t(rt_.get_device(&current)));
  if (device.kind != DeviceKind::CUDA || device.index == current) return allocate(bytes);
  TB_CUDA_CHECK(cudaError_t(rt_.set_device(device.index)));
  void* p = nullptr;
  try {
    p = allocate(bytes);
  } catch (...) {
    (void)rt_.set_device(current);
    throw;
  }
  TB_CUDA_CHECK(cudaError_t(rt_.set_device(current)));
  return p;
}

CachingAllocator::Block* CachingAllocator::take_free(FreeList& pool, size_t rounded) {
  Block probe;
  probe.size = rounded;
  const auto it = pool.lower_bound(&probe);  // the smallest that fits, lowest address first
  if (it == pool.end()) return nullptr;
  Block* b = *it;
  pool.erase(it);
  --stats_.cached_blocks;
  split(b, rounded, pool);
  return b;
}

void CachingAllocator::split(Block* b, size_t rounded, FreeList& pool) {
  if (!splits_off_rest(b->size, rounded)) return;
  Block* rest = new Block(*b);
  rest->ptr = static_cast<char*>(b->ptr) + rounded;
  rest->size = b->size - rounded;
  rest->prev = b;
  if (rest->next) rest->next->prev = rest;
  b->next = rest;
  b->size = rounded;
  pool.insert(rest);
  ++stats_.cached_blocks;
  ++stats_.splits;
}

void* CachingAllocator::allocate(size_t bytes) {
  const size_t rounded = round_size(bytes);
  int device = 0;
  TB_CUDA_CHECK(cudaError_t(rt_.get_device(&device)));
  std::lock_guard lock(mutex_);
  const PoolKey key{device, stream_of(device), is_small(rounded)};
  Block* b = take_free(free_[key], rounded);
  if (b) {
    ++stats_.cache_hits;
  } else {
    const size_t seg = segment_size(rounded);
    void* p = malloc_or_throw(seg, bytes, device);  // may release (and drop) pools
    ++stats_.segments;
    b = new Block{p, seg, 0, key.stream, device, key.small, false, nullptr, nullptr};
    split(b, rounded, free_[key]);
  }
  b->allocated = true;
  b->requested = bytes;
  live_[b->ptr] = b;
  ++stats_.live_blocks;
  stats_.allocated_bytes += b->size;
  stats_.requested_bytes += bytes;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  return b->ptr;
}

// b (free, not in a pool) takes in its free neighbour, which leaves the pool.
void CachingAllocator::absorb(Block* b, Block* neighbour, FreeList& pool) {
  if (!neighbour || neighbour->allocated) return;
  pool.erase(neighbour);
  --stats_.cached_blocks;
  if (neighbour == b->prev) {
    b->ptr = neighbour->ptr;
    b->prev = neighbour->prev;
    if (b->prev) b->prev->next = b;
  } else {
    b->next = neighbour->next;
    if (b->next) b->next->prev = b;
  }
  b->size += neighbour->size;
  delete neighbour;
}

void CachingAllocator::deallocate(void* ptr, size_t) {
  if (!ptr) return;
  std::lock_guard lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {  // a double free or not ours: never free blindly
    ++stats_.unknown_frees;
    return;
  }
  Block* b = it->second;
  live_.erase(it);
  --stats_.live_blocks;
  stats_.allocated_bytes -= b->size;
  stats_.requested_bytes -= b->requested;
  b->allocated = false;
  b->requested = 0;
  FreeList& pool = free_[key_of(*b)];
  absorb(b, b->prev, pool);
  absorb(b, b->next, pool);
  pool.insert(b);
  ++stats_.cached_blocks;
}

void CachingAllocator::set_reserved_limit(size_t bytes) {
  std::lock_guard lock(mutex_);
  reserved_limit_ = bytes;
}

size_t CachingAllocator::reserved_limit() const {
  std::lock_guard lock(mutex_);
  return reserved_limit_;
}

void CachingAllocator::release_cached() {
  int current = 0;
  TB_CUDA_CHECK(cudaError_t(rt_.get_device(&current)));
  for (auto& [key, list] : free_) {
    if (key.stream != nullptr && key.stream == kept_stream_) continue;  // a graph pool
    if (key.device != current) TB_CUDA_CHECK(cudaError_t(rt_.set_device(key.device)));
    for (auto it = list.begin(); it != list.end();) {
      Block* b = *it;
      if (!b->whole_segment()) {  // part of a segment another block still uses
        ++it;
        continue;
      }
      // cudaFree waits for the device, so queued kernels that used the block finish first.
      const int e = rt_.free(b->ptr);
      if (e != kCudaSuccess) throw_cuda_error(cudaError_t(e), "cudaFree", __FILE__, __LINE__);
      ++stats_.cuda_free_count;
      stats_.reserved_bytes -= b->size;
      --stats_.segments;
      --stats_.cached_blocks;
      it = list.erase(it);
      delete b;
    }
    if (key.device != current) TB_CUDA_CHECK(cudaError_t(rt_.set_device(current)));
  }
  std::erase_if(free_, [](const auto& kv) { return kv.second.empty(); });
}

void CachingAllocator::keep_stream_pool(void* stream) {
  std::lock_guard lock(mutex_);
  kept_stream_ = stream;
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  if (capturing_) {  // cudaFree inside a capture would void it
    ++stats_.releases_deferred;
    return;
  }
  release_cached();
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace tb::cuda
