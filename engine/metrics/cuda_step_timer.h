// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The step-time breakdown on a CUDA stream: one event at every step boundary
// (it closes one step and opens the next, so the steps of a run tile the
// stream's time), one at end_step and one at each phase's begin and end, a
// begin that follows an end sharing its event (StepMarks: 7 events a
// default step instead of 12), read back
// `lag` steps later through a ring of event sets, so measuring never
// synchronises the host with the device (cudaEventQuery, not
// cudaEventSynchronize, unless the device falls more than `lag` steps behind).
// Every part is an interval between events on the same stream inside the
// step, so the parts cannot exceed the step; where the host kept the device
// waiting (launches, the loader, end-of-step work) the device clock shows it.
//
// An earlier form (before the boundary event that closes one step and opens
// the next, and before shared marks) ran on one H200 (2026-11-26, b0014f2);
// this one is NOT RUN ON A GPU, compiled only. The mark bookkeeping is
// StepMarks', which the host timer shares and the CPU tests run. The trainer
// publishes each step's metrics when poll() hands that step's times back.
#include "engine/metrics/step_timer.h"

#ifdef TRAINBENCH_HAVE_CUDA
#include <cuda_runtime.h>

#include <deque>
#include <vector>

namespace tb {

class CudaStepTimer final : public StepTimer {
 public:
  // max_entries: how often one phase may be entered per step (micro-batches).
  // phases = false: the step total only (measurement off), one event a step.
  CudaStepTimer(cudaStream_t stream, int lag = 3, int max_entries = 64, bool phases = true);
  ~CudaStepTimer() override;
  CudaStepTimer(const CudaStepTimer&) = delete;
  CudaStepTimer& operator=(const CudaStepTimer&) = delete;

  void begin_step(int64_t step) override;
  void end_step() override;
  void close_step() override;
  void begin(Phase p) override;
  void end(Phase p) override;
  std::optional<StepTimes> poll() override;
  void flush() override;
  int lag_steps() const override { return lag_; }

 private:
  struct EventSet {
    int64_t step = 0;
    bool pending = false;     // closed, not yet read back
    // marks[0], the boundary that opened the step; then the step's marks
    // (StepMarks' indices). close: the boundary that closed it, the next
    // set's marks[0] or this set's own_close (close_step).
    std::vector<cudaEvent_t> marks;
    cudaEvent_t own_close = nullptr, close = nullptr;
    StepMarks plan;
  };
  void record(EventSet& s, int mark);
  void close_with(EventSet& s, cudaEvent_t close);
  StepTimes read(EventSet& s);  // the set's close event must have completed

  cudaStream_t stream_;
  int lag_, max_entries_;
  bool phases_;
  std::vector<EventSet> ring_;
  size_t next_ = 0;               // the set the next step records into
  std::deque<size_t> in_flight_;  // recorded sets not yet read back, oldest first
  std::deque<StepTimes> ready_;   // read back early (see begin_step), not yet polled
  EventSet* current_ = nullptr;
};

}  // namespace tb
#endif  // TRAINBENCH_HAVE_CUDA
