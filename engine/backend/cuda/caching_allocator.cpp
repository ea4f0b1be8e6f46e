// SPDX-License-Identifier: GPL-3.0-or-later
// The caching device allocator (see caching_allocator.h for the policy).
#include "engine/backend/cuda/caching_allocator.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "engine/backend/cuda/cuda_check.h"

namespace tb::cuda {

namespace {
std::string mib(size_t bytes) {
  return detail::concat(bytes, " bytes (", double(bytes) / double(1 << 20), " MiB)");
}
}  // namespace

CachingAllocator& CachingAllocator::instance() {
  // Never destroyed: tensors freed during static destruction still find it.
  static CachingAllocator* a = new CachingAllocator();
  return *a;
}

CachingAllocator::~CachingAllocator() = default;

void CachingAllocator::set_current_stream(void* stream) {
  std::lock_guard lock(mutex_);
  stream_ = stream;
}

void* CachingAllocator::current_stream() const {
  std::lock_guard lock(mutex_);
  return stream_;
}

void CachingAllocator::inject_malloc_failures(int count) {
  std::lock_guard lock(mutex_);
  fail_next_ = count;
}

void* CachingAllocator::malloc_or_throw(size_t rounded, size_t requested, int device) {
  void* p = nullptr;
  for (int attempt = 0; attempt < 2; ++attempt) {
    cudaError_t e;
    if (fail_next_ > 0) {
      --fail_next_;
      e = cudaErrorMemoryAllocation;
    } else {
      e = cudaMalloc(&p, rounded);
    }
    if (e == cudaSuccess) {
      ++stats_.cuda_malloc_count;
      stats_.reserved_bytes += rounded;
      stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
      return p;
    }
    if (e != cudaErrorMemoryAllocation)
      throw_cuda_error(e, "cudaMalloc", __FILE__, __LINE__, requested);
    (void)cudaGetLastError();  // clear the sticky-free allocation error
    if (attempt == 0) {
      // Give the cached blocks back to the driver and try once more.
      ++stats_.oom_retries;
      release_cached();
    }
  }
  size_t free_b = 0, total_b = 0;
  (void)cudaMemGetInfo(&free_b, &total_b);
  (void)cudaGetLastError();
  throw OutOfMemory(
      detail::concat("cuda:", device, ": out of memory allocating ", mib(requested),
                     " (rounded to ", rounded, " bytes); allocated by tensors ",
                     mib(stats_.allocated_bytes), ", reserved by the caching allocator ",
                     mib(stats_.reserved_bytes), ", device free ", mib(free_b), " of ",
                     mib(total_b)),
      requested);
}

void* CachingAllocator::allocate(size_t bytes) {
  const size_t rounded = round_size(bytes);
  int device = 0;
  TB_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard lock(mutex_);
  const bool small = is_small(rounded);
  Block b;
  auto pool = free_.find(PoolKey{device, stream_, small});
  if (pool != free_.end()) {
    auto it = pool->second.lower_bound(rounded);
    // Large blocks are not split: refuse one more than twice the size asked.
    if (it != pool->second.end() && (small ? it->first == rounded : it->first <= 2 * rounded)) {
      b = it->second;
      pool->second.erase(it);
      --stats_.cached_blocks;
      ++stats_.cache_hits;
    }
  }
  if (!b.ptr) {
    b.ptr = malloc_or_throw(rounded, bytes, device);
    b.size = rounded;
    b.stream = stream_;
    b.device = device;
  }
  b.requested = bytes;
  live_[b.ptr] = b;
  ++stats_.live_blocks;
  stats_.allocated_bytes += b.size;
  stats_.requested_bytes += bytes;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  return b.ptr;
}

void CachingAllocator::deallocate(void* ptr, size_t) {
  if (!ptr) return;
  std::lock_guard lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return;  // not ours (should not happen); never free blindly
  Block b = it->second;
  live_.erase(it);
  --stats_.live_blocks;
  stats_.allocated_bytes -= b.size;
  stats_.requested_bytes -= b.requested;
  free_[PoolKey{b.device, b.stream, is_small(b.size)}].emplace(b.size, b);
  ++stats_.cached_blocks;
}

void CachingAllocator::release_cached() {
  int current = 0;
  TB_CUDA_CHECK(cudaGetDevice(&current));
  for (auto& [key, list] : free_) {
    if (key.stream != nullptr && key.stream == kept_stream_) continue;  // a graph pool
    if (key.device != current) TB_CUDA_CHECK(cudaSetDevice(key.device));
    for (auto& [size, b] : list) {
      // cudaFree waits for the device, so queued kernels that used the block finish first.
      cudaError_t e = cudaFree(b.ptr);
      if (e != cudaSuccess) throw_cuda_error(e, "cudaFree", __FILE__, __LINE__);
      ++stats_.cuda_free_count;
      stats_.reserved_bytes -= size;
      --stats_.cached_blocks;
    }
    list.clear();
    if (key.device != current) TB_CUDA_CHECK(cudaSetDevice(current));
  }
  std::erase_if(free_, [](const auto& kv) { return kv.second.empty(); });
}

void CachingAllocator::keep_stream_pool(void* stream) {
  std::lock_guard lock(mutex_);
  kept_stream_ = stream;
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
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
