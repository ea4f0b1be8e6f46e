// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Where a model's activation memory comes from: its memory plan.
//
// A layer's forward output, what its backward keeps of it (the input, the
// ReLU mask's output, max-pool's argmax), every input gradient and a
// block's inner gradients live for part of one pass: from the op that
// writes them to the last op that reads them. They come from
// TransientBuffers and go back the moment the last Tensor viewing them is
// gone (Layer::release_saved gives up what a backward read once it ran).
// So a pass needs the most bytes it has alive at once, as PyTorch's saved
// tensors and caching allocator do, not one buffer per layer. What lasts
// from pass to pass (batch norm's statistics, low-precision weight copies)
// stays in the layers' own buffers (ensure_buffer, layer.h).
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/core/tensor.h"

namespace tb {

// One block of device memory per device (the arena), handed out in regions
// at offsets. A region is free again once no Tensor views it
// (Tensor::holders of its own, Tensor::region_of). A request takes the
// smallest free range that fits (the lowest of equal ones), else the end of
// the arena's extent, which grows. A region placed beyond the block gets a
// block of its own for its life (an overflow), and the first request that
// finds no region alive (a pass begins) replaces the block by one as large
// as the extent, after asking the device's allocator to give its cached
// blocks back (the first pass's among them), so the device never holds
// both. So the first pass allocates as it goes, like a caching allocator,
// the second starts with one block holding every offset the first used,
// and since the same requests in the same order from the same free ranges
// get the same offsets, a steady pass allocates nothing (CUDA graphs see
// the same addresses). Counted over whole models (test_memory_plan), the
// extent is the most bytes alive at once (but for mlp's +14 %: online, no
// rule foresees the rest of a pass): offsets reuse what best fit over whole
// blocks left between a large block and a smaller request (14 % of
// resnet18-cifar's activations, 31 % of fmnist-cnn's), and every dtype
// shares the one block.
//
// A block replaced or an overflow made may move what a CUDA graph captured
// before addresses (graphs.cpp: buffers allocated before a capture are used
// in place), so whoever captures must capture again after a step in which
// allocations() changed (StepRunner::run does).
//
// Ops' scratch during a pass comes from here too (ScratchSource, installed by
// Model::forward and backward): a cuDNN workspace or an operand rounded to
// bf16 lives for one call, so it takes a range the activations leave free
// at that moment, and the extent is the most of both alive at once, not the
// activations' peak plus the largest workspace on top; and a steady pass
// allocates nothing from the device's allocator, not even for a moment.
class TransientBuffers final : public ScratchSource {
 public:
  static constexpr int64_t kAlignment = 256;  // cudaMalloc's: every vector load and library call is served

  Tensor take(Backend& backend, const Shape& shape, DType dtype, Layout layout);
  Tensor scratch(Backend& backend, const Shape& shape, DType dtype, Layout layout) override {
    return take(backend, shape, dtype, layout);
  }
  int64_t bytes() const;         // held: the arenas and live overflow blocks
  int64_t blocks() const;        // allocations held
  int64_t allocations() const;   // made (arenas and overflows) since the pool was created
  // Bytes asked for since the pool was created: over one pass, what a buffer
  // of its own per request (per layer) would hold.
  int64_t requested_bytes() const;
  // The most bytes (each request rounded to kAlignment) taken and not yet
  // given up at once: the least any plan could hold.
  int64_t peak_live_bytes() const;
  // The arena's extent on `device`: what its next block will hold.
  int64_t extent(const Device& device) const;

 private:
  struct Region {
    int64_t offset, bytes;
    Tensor handle;  // the region (or its overflow block): holders() == 1 once given up
  };
  struct Arena {
    Device device;
    Tensor block;  // U8, empty until the first block is made
    int64_t extent = 0;
    std::map<int64_t, int64_t> free;  // offset -> bytes, below extent, neighbours merged
    std::vector<Region> live;
    // Beyond the block: a block of its own. (The block is replaced only with
    // nothing alive, so every live region was placed against this one.)
    bool overflows(const Region& r) const { return r.offset + r.bytes > int64_t(block.nbytes()); }
  };
  Arena& arena_for(const Device& device);
  void give_back(Arena& a, int64_t offset, int64_t bytes);
  int64_t place(Arena& a, int64_t bytes);

  mutable std::mutex mutex_;  // dp replicas may share a Context's pool across threads
  std::vector<Arena> arenas_;
  int64_t allocations_ = 0, requested_bytes_ = 0, peak_live_bytes_ = 0;
};

// What a pass asked for, as a test or a memory figure reads it: the layers'
// own buffers as ensure_buffer handed them out, keyed by the layer's member
// (a buffer reallocated counts once, at its latest size), and the bytes
// asked of TransientBuffers by dtype (how much of what a pass moves is in
// which precision; what the pool holds for it is TransientBuffers::bytes).
struct BufferCensus {
  std::map<const Tensor*, Tensor> buffers;  // layers' own, kept from pass to pass
  std::map<DType, int64_t> transients;      // bytes requested of the pool
  int64_t bytes() const;                    // both
  int64_t bytes_of(DType t) const;          // in buffers and requests of dtype t
  int64_t transient_bytes() const;
};

}  // namespace tb
