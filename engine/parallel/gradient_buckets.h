// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Gradient bucketing for ddp: the contiguous gradient block cut into buckets
// at layer boundaries, from its end (the last layer's gradients, which
// backward writes first) towards its start. A bucket's all-reduce starts as
// soon as backward has passed its first layer, so communication overlaps the
// rest of backward; finish() starts what is left and waits for everything
// before the optimizer reads the gradients.
//
//   GradientBuckets buckets(comm, model.grad_block(), model.layer_grad_offsets(), cap);
//   buckets.begin_step();
//   for each layer i, last to first: layer i backward; buckets.layer_done(i);
//   buckets.finish();           // the block holds the sum over the ranks
#include <chrono>
#include <cstdint>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/parallel/communicator.h"

namespace tb {

struct Bucket {
  int64_t begin = 0, end = 0;  // elements [begin, end) of the gradient block
  size_t first_layer = 0;      // ready once backward has done this layer (and all after it)
};

// Cuts [layer_offsets.front(), layer_offsets.back()) at layer boundaries into
// buckets of at least cap_elements (the last, nearest the block's start, may
// be smaller); a layer larger than the cap is a bucket of its own.
// cap_elements = 0: one bucket for the whole block (bucketing off).
// layer_offsets[i] is layer i's first gradient element; size layers + 1.
std::vector<Bucket> plan_buckets(const std::vector<int64_t>& layer_offsets, int64_t cap_elements);

// What the gradients' communication cost one step.
struct StepCommStats {
  int64_t bytes = 0;       // summed over this rank's all-reduces (the payload, not the wire)
  int buckets = 0;
  double allreduce_ms = -1;  // host-waiting transports: first launch to last completion;
                             // NCCL: the collectives' device time (events), known only
                             // after collect_device_times()
  double exposed_ms = -1;    // time the step waited for them after backward (host-waiting only)
};

class GradientBuckets {
 public:
  // overlap=false: every bucket starts in finish(), after backward.
  GradientBuckets(Communicator& comm, Tensor grad_block, const std::vector<int64_t>& layer_offsets,
                  int64_t cap_elements, bool overlap = true);

  void begin_step();
  void layer_done(size_t layer);
  void finish();
  // Transports that do not block the host (NCCL): the step's all-reduces are
  // only queued when finish() returns, so their device times are read here,
  // once the caller has waited for the communication to end (DataParallel::
  // end_step, after its host exchange). -1 when one of them is not known.
  void collect_device_times();

  const std::vector<Bucket>& buckets() const { return buckets_; }
  const StepCommStats& last_step() const { return stats_; }

 private:
  using Clock = std::chrono::steady_clock;
  void start(size_t b);
  void poll();

  Communicator& comm_;
  Tensor grad_block_;
  std::vector<Bucket> buckets_;  // in launch order: the block's end first
  bool overlap_;
  std::vector<int> request_;     // per bucket: open request, or 0
  std::vector<bool> done_;
  size_t next_ = 0;              // next bucket to start
  bool times_pending_ = false;   // finished, device times not read yet
  Clock::time_point first_start_, last_done_;
  StepCommStats stats_;
};

}  // namespace tb
