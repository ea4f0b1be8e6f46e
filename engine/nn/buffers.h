// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Where a model's activation memory comes from: its memory plan.
//
// What a layer's backward reads (its saved input, its output for a ReLU mask,
// max-pool's argmax, batch norm's statistics) lives in buffers of the layer's
// own, for the whole run (ensure_buffer, layer.h). Everything else a pass
// writes lives for part of one pass: an input gradient from the backward that
// writes it to the backward that reads it, a block's inner gradients inside
// its backward, the loss gradient until the last layer has read it. Those
// come from TransientBuffers, so a backward needs about as much gradient
// memory as its few largest gradients alive at once, not one buffer per
// layer (which had doubled the activations' memory).
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>

#include "engine/backend/backend.h"
#include "engine/core/tensor.h"

namespace tb {

// Blocks handed out while nobody else holds them: a block is free again once
// every Tensor viewing it is gone (Tensor::holders). A request takes the
// smallest free block of its dtype and device that fits; when none fits, a
// new block of exactly its size replaces the largest free one that is too
// small (a backward's gradients grow from the last layer to the first, so
// blocks made early would otherwise pile up beside the larger ones), or
// joins the others. So a pass holds about as many blocks as it has
// gradients alive at once, each as large as the largest it held, and once a
// pass made none, the same requests in the same order get the same blocks
// and allocate nothing.
//
// A block replaced is given back to the allocator: a CUDA graph captured
// before may still address it (graphs.cpp: buffers allocated before a
// capture are used in place), so whoever captures must capture again after
// a step in which allocations() changed (StepRunner::run does).
class TransientBuffers {
 public:
  Tensor take(Backend& backend, const Shape& shape, DType dtype, Layout layout);
  int64_t bytes() const;         // held in blocks, free or not
  int64_t blocks() const;
  int64_t allocations() const;   // blocks made (new or replacing) since the pool was created
  // Bytes asked for since the pool was created: over one pass, what a buffer
  // of its own per request (per layer) would hold.
  int64_t requested_bytes() const;
  // The most bytes taken and not yet given up at once (each block counted
  // at the size of the request that took it): the least any plan could
  // hold; bytes() beyond it is what best fit loses to mismatched sizes.
  int64_t peak_live_bytes() const;
  // The blocks, for a census (addresses stable while the pool lives).
  template <typename F> void for_each_block(F&& f) const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Block& b : blocks_) f(b.block);
  }

 private:
  mutable std::mutex mutex_;     // dp replicas may share a Context's pool across threads
  struct Block {
    Tensor block;
    int64_t taken_bytes;  // the size of the request that took it last
  };
  std::deque<Block> blocks_;  // deque: a new block leaves the others' addresses alone
                              // (the census keys by them)
  int64_t allocations_ = 0, requested_bytes_ = 0, peak_live_bytes_ = 0;
};

// The layers' buffers as ensure_buffer handed them out, keyed by the layer's
// member, so a buffer reallocated counts once at its latest size, and the
// transient blocks of the pass: what a test or a memory figure reads to see
// what the activations cost.
struct BufferCensus {
  std::map<const Tensor*, Tensor> buffers;     // layers' own (saved for backward)
  std::map<const Tensor*, Tensor> transients;  // TransientBuffers' blocks (non-owning views)
  int64_t bytes() const;
  int64_t bytes_of(DType t) const;             // in buffers and blocks of dtype t
  int64_t transient_bytes() const;
};

}  // namespace tb
