// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/nn/buffers.h"

#include <algorithm>

namespace tb {

Tensor TransientBuffers::take(Backend& backend, const Shape& shape, DType dtype, Layout layout) {
  const int64_t n = shape_numel(shape);
  const int64_t want = n * int64_t(dtype_size(dtype));
  const Device device = backend.device();
  std::lock_guard<std::mutex> lock(mutex_);
  requested_bytes_ += want;
  // The smallest free block that fits; failing that, the largest free one
  // that does not, which the new block replaces.
  auto best = blocks_.end(), too_small = blocks_.end();
  int64_t live = want;
  for (auto b = blocks_.begin(); b != blocks_.end(); ++b) {
    const Tensor& t = b->block;
    // holders() == 1: the pool's own reference is the only one left.
    if (t.holders() != 1) {
      live += b->taken_bytes;
      continue;
    }
    if (t.dtype() != dtype || t.device() != device) continue;
    if (t.numel() >= n) {
      if (best == blocks_.end() || t.numel() < best->block.numel()) best = b;
    } else if (too_small == blocks_.end() || t.numel() > too_small->block.numel()) {
      too_small = b;
    }
  }
  if (best == blocks_.end()) {
    Tensor block = backend.empty({std::max<int64_t>(n, 1)}, dtype);
    if (too_small != blocks_.end()) {
      too_small->block = std::move(block);
      best = too_small;
    } else {
      blocks_.push_back({std::move(block), 0});
      best = std::prev(blocks_.end());
    }
    ++allocations_;
  }
  best->taken_bytes = want;
  peak_live_bytes_ = std::max(peak_live_bytes_, live);
  return Tensor::view_of(best->block, 0, shape, shape.size() == 4 ? layout : Layout::NCHW);
}

int64_t TransientBuffers::bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t n = 0;
  for (const Block& b : blocks_) n += int64_t(b.block.nbytes());
  return n;
}

int64_t TransientBuffers::blocks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return int64_t(blocks_.size());
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

int64_t BufferCensus::bytes() const {
  int64_t n = 0;
  for (const auto& [member, t] : buffers) n += int64_t(t.nbytes());
  return n + transient_bytes();
}

int64_t BufferCensus::bytes_of(DType d) const {
  int64_t n = 0;
  for (const auto* m : {&buffers, &transients})
    for (const auto& [member, t] : *m)
      if (t.dtype() == d) n += int64_t(t.nbytes());
  return n;
}

int64_t BufferCensus::transient_bytes() const {
  int64_t n = 0;
  for (const auto& [block, t] : transients) n += int64_t(t.nbytes());
  return n;
}

}  // namespace tb
