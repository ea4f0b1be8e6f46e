// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/train/step_graph.h"

#include <algorithm>

#include "engine/core/error.h"

namespace tb {

namespace {
// More input buffer pairs than this means the caller reallocates its inputs
// every step: each capture would leak a graph, so stop instead.
constexpr size_t kMaxGraphs = 4;
}  // namespace

namespace {
GraphCapture& graphs_of(Backend& be) {
  GraphCapture* g = be.graphs();
  TB_CHECK(g, "cuda_graphs: the ", be.name(), " backend cannot capture a step");
  return *g;
}
}  // namespace

StepGraphs::StepGraphs(Backend& backend, int warmup_steps)
    : capture_(graphs_of(backend)), eager_left_(warmup_steps) {
  TB_CHECK(warmup_steps >= 1, "cuda_graphs: warm-up steps must be >= 1, got ", warmup_steps);
}

StepGraphs::~StepGraphs() {
  if (graphs_.empty()) return;
  try {
    capture_.drop_all();
  } catch (...) {  // a destructor must not throw; the backend frees them at its
                   // end too
  }
}

bool StepGraphs::run(const Tensor& images, const Tensor& labels,
                     const std::function<void()>& record, const std::function<void()>& replayed) {
  TB_CHECK(ready(), "cuda_graphs: step run as a graph during the warm-up (", eager_left_,
           " eager steps left)");
  for (const Entry& e : graphs_)
    if (e.images == images.data() && e.labels == labels.data()) {
      capture_.launch(e.id);
      replayed();
      ++replays_;
      return false;
    }
  TB_CHECK(graphs_.size() < kMaxGraphs, "cuda_graphs: the step's inputs moved ", graphs_.size(),
           " times without an invalidate(); the graphs would pile up");
  capture_.begin_capture();
  try {
    record();
  } catch (...) {
    try {
      (void)capture_.end_capture();  // leaves the backend eager again; the capture is
                                // void anyway
    } catch (...) {
    }
    throw;
  }
  const int id = capture_.end_capture();
  graphs_.push_back({images.data(), labels.data(), id});
  ++captures_;
  capture_.launch(id);  // capturing ran nothing: this launch is the step
  return true;
}

void StepGraphs::invalidate(int eager_steps) {
  if (!graphs_.empty()) capture_.drop_all();
  graphs_.clear();
  eager_left_ = std::max(eager_left_, eager_steps);
}

}  // namespace tb
