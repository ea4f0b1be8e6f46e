// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/parallel/gradient_buckets.h"

#include <algorithm>

#include "engine/core/error.h"

namespace tb {

std::vector<Bucket> plan_buckets(const std::vector<int64_t>& offsets, int64_t cap) {
  TB_CHECK(offsets.size() >= 2, "buckets: need the offsets of at least one layer");
  for (size_t i = 1; i < offsets.size(); ++i)
    TB_CHECK(offsets[i] >= offsets[i - 1], "buckets: layer offsets must not decrease");
  std::vector<Bucket> out;
  const size_t layers = offsets.size() - 1;
  if (cap <= 0) {
    if (offsets.back() > offsets.front()) out.push_back({offsets.front(), offsets.back(), 0});
    return out;
  }
  int64_t end = offsets.back();
  for (size_t i = layers; i-- > 0;) {
    const int64_t begin = offsets[i];
    if (end - begin >= cap || (i == 0 && end > begin)) {
      out.push_back({begin, end, i});
      end = begin;
    }
  }
  return out;
}

GradientBuckets::GradientBuckets(Communicator& comm, Tensor grad_block,
                                 const std::vector<int64_t>& layer_offsets, int64_t cap_elements,
                                 bool overlap)
    : comm_(comm),
      grad_block_(std::move(grad_block)),
      buckets_(plan_buckets(layer_offsets, cap_elements)),
      overlap_(overlap) {
  TB_CHECK(layer_offsets.back() <= grad_block_.numel(), "buckets: layer offsets run past the "
           "gradient block (", layer_offsets.back(), " > ", grad_block_.numel(), ")");
  request_.assign(buckets_.size(), 0);
  done_.assign(buckets_.size(), false);
}

void GradientBuckets::begin_step() {
  TB_CHECK(next_ == 0 || next_ == buckets_.size(), "buckets: a step began before the last finished");
  next_ = 0;
  std::fill(request_.begin(), request_.end(), 0);
  std::fill(done_.begin(), done_.end(), false);
  stats_ = {};
  times_pending_ = false;
}

void GradientBuckets::start(size_t b) {
  if (b == 0) first_start_ = Clock::now();
  Tensor view = Tensor::view_of(grad_block_, buckets_[b].begin,
                                {buckets_[b].end - buckets_[b].begin});
  request_[b] = comm_.start_allreduce(view);
  stats_.bytes += int64_t(view.nbytes());
  ++stats_.buckets;
}

// MPI moves a non-blocking collective forward only inside MPI calls: test
// the open ones between layers.
void GradientBuckets::poll() {
  for (size_t b = 0; b < next_; ++b)
    if (!done_[b] && comm_.test(request_[b])) done_[b] = true, last_done_ = Clock::now();
}

void GradientBuckets::layer_done(size_t layer) {
  if (!overlap_) return;
  while (next_ < buckets_.size() && buckets_[next_].first_layer >= layer) start(next_++);
  poll();
}

void GradientBuckets::finish() {
  const auto backward_end = Clock::now();
  while (next_ < buckets_.size()) start(next_++);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (!done_[b]) {
      comm_.wait(request_[b]);
      last_done_ = Clock::now();
    } else {
      comm_.wait(request_[b]);  // complete: returns at once, and forgets it
    }
  }
  const auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  if (buckets_.empty()) return;
  if (comm_.host_waits()) {
    stats_.allreduce_ms = std::max(0.0, ms(last_done_ - first_start_));
    stats_.exposed_ms = std::max(0.0, ms(Clock::now() - backward_end));
  } else {
    // wait() only ordered the streams: the collectives may not even have
    // started, so their times are read later (collect_device_times).
    times_pending_ = true;
  }
}

void GradientBuckets::collect_device_times() {
  if (!times_pending_) return;
  times_pending_ = false;
  double device_ms = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const double ms = comm_.elapsed_ms(request_[b]);
    if (ms < 0) return;  // one unknown: the step's figure is unknown, not a partial sum
    device_ms += ms;
  }
  stats_.allreduce_ms = device_ms;
}

}  // namespace tb
