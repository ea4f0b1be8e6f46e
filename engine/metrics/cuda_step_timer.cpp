// SPDX-License-Identifier: GPL-3.0-or-later
// NOT RUN ON A GPU in this form: compiled under TRAINBENCH_HAVE_CUDA only; see the header.
#include "engine/metrics/cuda_step_timer.h"

#ifdef TRAINBENCH_HAVE_CUDA
#include "engine/backend/cuda/cuda_check.h"
#include "engine/core/error.h"

namespace tb {

namespace {
void check(cudaError_t e, const char* what) {
  TB_CHECK(e == cudaSuccess, "CudaStepTimer: ", what, ": ", cudaGetErrorString(e));
}
cudaEvent_t make_event() {
  cudaEvent_t e = nullptr;
  check(cudaEventCreate(&e), "cudaEventCreate");  // timing enabled: the default flags
  return e;
}
float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
  return ms;
}
}  // namespace

CudaStepTimer::CudaStepTimer(cudaStream_t stream, int lag, int max_entries, bool phases)
    : stream_(stream), lag_(lag), max_entries_(max_entries), phases_(phases) {
  TB_CHECK(lag >= 1 && max_entries >= 1, "CudaStepTimer: lag and max_entries must be >= 1");
  // lag + 1 sets: the step being recorded plus `lag` steps in flight.
  ring_.resize(static_cast<size_t>(lag + 1));
  for (EventSet& s : ring_) {
    s.marks.resize(phases ? size_t(StepMarks::capacity(max_entries)) : 1);
    for (cudaEvent_t& e : s.marks) e = make_event();
    s.own_close = make_event();
  }
}

CudaStepTimer::~CudaStepTimer() {
  for (EventSet& s : ring_) {
    for (cudaEvent_t e : s.marks) cudaEventDestroy(e);
    if (s.own_close) cudaEventDestroy(s.own_close);
  }
}

void CudaStepTimer::record(EventSet& s, int mark) {
  check(cudaEventRecord(s.marks[size_t(mark)], stream_), "cudaEventRecord");
}

void CudaStepTimer::begin_step(int64_t step) {
  const size_t index = next_;
  EventSet& s = ring_[index];
  if (s.pending) {
    // The device is more than `lag` steps behind: the only place that waits.
    // This set is the oldest in flight (its close event, the next set's
    // boundary, is still unrecorded over); its times are kept for poll().
    TB_CHECK(in_flight_.front() == index, "CudaStepTimer: ring out of order");
    check(cudaEventSynchronize(s.close), "cudaEventSynchronize");
    ready_.push_back(read(s));
    in_flight_.pop_front();
  }
  // One event closes the open step and opens this one.
  record(s, 0);
  if (current_) close_with(*current_, s.marks[0]);
  s.step = step;
  s.plan.open();
  current_ = &s;
  next_ = (next_ + 1) % ring_.size();
}

void CudaStepTimer::end_step() {
  if (!phases_ || !current_) return;
  if (std::optional<int> m = current_->plan.end_work()) record(*current_, *m);
}

void CudaStepTimer::close_step() {
  if (!current_) return;
  check(cudaEventRecord(current_->own_close, stream_), "cudaEventRecord");
  close_with(*current_, current_->own_close);
}

void CudaStepTimer::close_with(EventSet& s, cudaEvent_t close) {
  s.close = close;
  s.pending = true;
  in_flight_.push_back(size_t(&s - ring_.data()));
  current_ = nullptr;
}

void CudaStepTimer::begin(Phase p) {
  if (!phases_) return;
  EventSet& s = *current_;
  TB_CHECK(s.plan.entries(p) < max_entries_, "CudaStepTimer: phase ", phase_name(p),
           " entered more than ", max_entries_, " times in one step");
  if (std::optional<int> m = s.plan.begin(p)) record(s, *m);
}

void CudaStepTimer::end(Phase p) {
  if (!phases_) return;
  EventSet& s = *current_;
  record(s, s.plan.end(p));
}

StepTimes CudaStepTimer::read(EventSet& s) {
  StepTimes t;
  t.step = s.step;
  t.has_h2d = true;
  s.plan.fill(
      t, [&](int a, int b) { return double(elapsed_ms(s.marks[size_t(a)], s.marks[size_t(b)])); },
      [&](int a) { return double(elapsed_ms(s.marks[size_t(a)], s.close)); });
  s.pending = false;
  return t;
}

std::optional<StepTimes> CudaStepTimer::poll() {
  if (!ready_.empty()) {
    StepTimes t = ready_.front();
    ready_.pop_front();
    return t;
  }
  if (in_flight_.empty()) return std::nullopt;
  EventSet& s = ring_[in_flight_.front()];
  // Never blocks. "Not ready" is cleared from the last-error slot, or the
  // next kernel launch check would throw cudaErrorNotReady.
  if (!TB_CUDA_POLL(cudaEventQuery(s.close))) return std::nullopt;
  in_flight_.pop_front();
  return read(s);
}

void CudaStepTimer::flush() {
  while (!in_flight_.empty()) {
    EventSet& s = ring_[in_flight_.front()];
    check(cudaEventSynchronize(s.close), "cudaEventSynchronize");
    ready_.push_back(read(s));
    in_flight_.pop_front();
  }
}

}  // namespace tb
#endif  // TRAINBENCH_HAVE_CUDA
