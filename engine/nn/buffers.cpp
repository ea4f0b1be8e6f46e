// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/nn/buffers.h"

#include <algorithm>

namespace tb {

TransientBuffers::Arena& TransientBuffers::arena_for(const Device& device) {
  for (Arena& a : arenas_)
    if (a.device == device) return a;
  arenas_.push_back(Arena{device, {}, 0, {}, {}});
  return arenas_.back();
}

void TransientBuffers::give_back(Arena& a, int64_t offset, int64_t bytes) {
  auto next = a.free.lower_bound(offset);
  if (next != a.free.end() && offset + bytes == next->first) {
    bytes += next->second;
    next = a.free.erase(next);
  }
  if (next != a.free.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += bytes;
      return;
    }
  }
  a.free.emplace(offset, bytes);
}

int64_t TransientBuffers::place(Arena& a, int64_t bytes) {
  auto best = a.free.end();
  for (auto f = a.free.begin(); f != a.free.end(); ++f)
    if (f->second >= bytes && (best == a.free.end() || f->second < best->second)) best = f;
  if (best != a.free.end()) {
    const auto [offset, have] = *best;
    a.free.erase(best);
    if (have > bytes) a.free.emplace(offset + bytes, have - bytes);
    return offset;
  }
  // None fits: the end of the extent, grown from the free range that ends it.
  int64_t offset = a.extent;
  if (!a.free.empty()) {
    auto last = std::prev(a.free.end());
    if (last->first + last->second == a.extent) {
      offset = last->first;
      a.free.erase(last);
    }
  }
  a.extent = offset + bytes;
  return offset;
}

Tensor TransientBuffers::take(Backend& backend, const Shape& shape, DType dtype, Layout layout) {
  const int64_t n = shape_numel(shape);
  const int64_t want = n * int64_t(dtype_size(dtype));
  const int64_t bytes = std::max<int64_t>((want + kAlignment - 1) / kAlignment, 1) * kAlignment;
  std::lock_guard<std::mutex> lock(mutex_);
  requested_bytes_ += want;
  Arena& a = arena_for(backend.device());
  // Regions nobody views any more go back (holders() == 1: the pool's own).
  int64_t live = bytes;
  for (size_t i = 0; i < a.live.size();) {
    Region& r = a.live[i];
    if (r.handle.holders() == 1) {
      give_back(a, r.offset, r.bytes);
      r = std::move(a.live.back());
      a.live.pop_back();
      continue;
    }
    live += r.bytes;
    ++i;
  }
  // Nothing alive (a pass begins): replace the block by one that holds the extent.
  if (a.live.empty() && a.extent > int64_t(a.block.nbytes())) {
    a.block = Tensor{};  // first, so the old and the new are never both held
    // The regions that overflowed were blocks of their own, now free in the
    // allocator's cache (the device's, the C heap): back to the system, or
    // the process would hold both.
    allocator_for(a.device).release_free();
    try {
      a.block = backend.empty({a.extent}, DType::U8);
    } catch (const OutOfMemory& e) {  // the run's largest allocation: say what it is
      throw OutOfMemory(detail::concat("the activation pool's block (", a.extent,
                                       " B for the step's activations and gradients, at most ",
                                       peak_live_bytes_, " B of them live at once so far): ",
                                       e.what()),
                        e.requested_bytes);
    }
    ++allocations_;
  }
  peak_live_bytes_ = std::max(peak_live_bytes_, live);
  Region r{place(a, bytes), bytes, {}};
  if (a.overflows(r)) {
    r.handle = backend.empty({std::max<int64_t>(n, 1)}, dtype);
    ++allocations_;
  } else {
    r.handle = Tensor::region_of(a.block, r.offset, {std::max<int64_t>(n, 1)}, dtype);
  }
  Tensor t = Tensor::view_of(r.handle, 0, shape, shape.size() == 4 ? layout : Layout::NCHW);
  a.live.push_back(std::move(r));
  return t;
}

int64_t TransientBuffers::bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t n = 0;
  for (const Arena& a : arenas_) {
    n += int64_t(a.block.nbytes());
    for (const Region& r : a.live)
      if (a.overflows(r)) n += int64_t(r.handle.nbytes());
  }
  return n;
}

int64_t TransientBuffers::blocks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t n = 0;
  for (const Arena& a : arenas_) {
    n += a.block.defined() ? 1 : 0;
    for (const Region& r : a.live) n += a.overflows(r) ? 1 : 0;
  }
  return n;
}

int64_t TransientBuffers::allocations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return allocations_;
}

int64_t TransientBuffers::requested_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return requested_bytes_;
}

int64_t TransientBuffers::peak_live_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_live_bytes_;
}

int64_t TransientBuffers::extent(const Device& device) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Arena& a : arenas_)
    if (a.device == device) return a.extent;
  return 0;
}

int64_t BufferCensus::bytes() const {
  int64_t n = 0;
  for (const auto& [member, t] : buffers) n += int64_t(t.nbytes());
  return n + transient_bytes();
}

int64_t BufferCensus::bytes_of(DType d) const {
  int64_t n = 0;
  for (const auto& [member, t] : buffers)
    if (t.dtype() == d) n += int64_t(t.nbytes());
  if (auto it = transients.find(d); it != transients.end()) n += it->second;
  return n;
}

int64_t BufferCensus::transient_bytes() const {
  int64_t n = 0;
  for (const auto& [dtype, b] : transients) n += b;
  return n;
}

}  // namespace tb
