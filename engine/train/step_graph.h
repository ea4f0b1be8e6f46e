// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Whole-step capture for the trainer (trick 24, cuda_graphs). After a few eager
// warm-up steps (first allocations, cuDNN plans and autotuning, the optimizer's
// descriptors), the step's device work (forward, loss, backward, optimizer) is
// captured once per input buffer pair and replayed from then on. The
// InputStager alternates two device slots, so a run holds two graphs, keyed by
// the slots' addresses. Staging stays outside the graph; the optimizer's
// per-step constants are written to the device before each launch
// (Optimizer::write_constants).
//
// A replay reuses every address the capture saw: after the caller reallocates
// buffers (an evaluation's smaller last batch), invalidate() drops the graphs
// and asks for eager steps again before the next capture.
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/backend/backend.h"

namespace tb {

class StepGraphs {
 public:
  StepGraphs(Backend& backend, int warmup_steps);
  ~StepGraphs();  // drops the graphs (best effort)
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // Whether this step runs as a graph (the warm-up is over).
  bool ready() const { return eager_left_ == 0; }
  // The caller ran a step eagerly (counts down the warm-up).
  void eager_step_done() {
    if (eager_left_ > 0) --eager_left_;
  }
  // One step on inputs (images, labels): the first time these buffers are
  // seen, `record` enqueues the step under capture and the new graph is
  // launched; later, the graph is launched and `replayed` runs (host-side
  // bookkeeping of what `record` did, e.g. the optimizer's step count).
  // Returns true when this call captured.
  bool run(const Tensor& images, const Tensor& labels, const std::function<void()>& record,
           const std::function<void()>& replayed);
  // Buffers the graphs use were (or will be) reallocated: drop them;
  // `eager_steps` eager steps run before the next capture.
  void invalidate(int eager_steps);

  int64_t captures() const { return captures_; }  // graphs captured so far (all)
  int64_t replays() const { return replays_; }    // launches without a capture

 private:
  struct Entry {
    const void* images;
    const void* labels;
    int id;
  };
  GraphCapture& capture_;  // the backend's graphs()
  std::vector<Entry> graphs_;
  int eager_left_;
  int64_t captures_ = 0, replays_ = 0;
};

}  // namespace tb
