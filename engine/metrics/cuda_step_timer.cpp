// SPDX-License-Identifier: GPL-3.0-or-later
// NOT RUN ON A GPU: compiled under TRAINBENCH_HAVE_CUDA only; see the header.
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
    s.start = make_event();
    s.end = make_event();
    for (int p = 0; p < kPhaseCount && phases; ++p)
      for (int i = 0; i < max_entries; ++i) {
        s.begins[p].push_back(make_event());
        s.ends[p].push_back(make_event());
      }
  }
}

CudaStepTimer::~CudaStepTimer() {
  for (EventSet& s : ring_) {
    cudaEventDestroy(s.start);
    cudaEventDestroy(s.end);
    for (int p = 0; p < kPhaseCount; ++p) {
      for (cudaEvent_t e : s.begins[p]) cudaEventDestroy(e);
      for (cudaEvent_t e : s.ends[p]) cudaEventDestroy(e);
    }
  }
}

void CudaStepTimer::begin_step(int64_t step) {
  EventSet& s = ring_[next_];
  if (s.pending) {
    // The device is more than `lag` steps behind: the only place that waits.
    // This set is the oldest in flight; its times are kept for poll().
    check(cudaEventSynchronize(s.end), "cudaEventSynchronize");
    ready_.push_back(read(s));
    in_flight_.pop_front();
  }
  s.step = step;
  s.pending = false;
  for (int p = 0; p < kPhaseCount; ++p) s.used[p] = 0, s.host_ms[p] = 0;
  check(cudaEventRecord(s.start, stream_), "cudaEventRecord");
  current_ = &s;
}

void CudaStepTimer::end_step() {
  TB_CHECK(current_, "CudaStepTimer: end_step without begin_step");
  check(cudaEventRecord(current_->end, stream_), "cudaEventRecord");
  current_->pending = true;
  in_flight_.push_back(next_);
  current_ = nullptr;
  next_ = (next_ + 1) % ring_.size();
}

void CudaStepTimer::begin(Phase p) {
  if (!phases_) return;
  EventSet& s = *current_;
  const int i = static_cast<int>(p);
  TB_CHECK(s.used[i] < max_entries_, "CudaStepTimer: phase ", phase_name(p), " entered more than ",
           max_entries_, " times in one step");
  check(cudaEventRecord(s.begins[i][s.used[i]], stream_), "cudaEventRecord");
}

void CudaStepTimer::end(Phase p) {
  if (!phases_) return;
  EventSet& s = *current_;
  const int i = static_cast<int>(p);
  check(cudaEventRecord(s.ends[i][s.used[i]], stream_), "cudaEventRecord");
  ++s.used[i];
}

void CudaStepTimer::add_host_ms(Phase p, double ms) {
  if (phases_) current_->host_ms[static_cast<int>(p)] += ms;
}

StepTimes CudaStepTimer::read(EventSet& s) {
  StepTimes t;
  t.step = s.step;
  t.has_h2d = true;
  t.total_ms = elapsed_ms(s.start, s.end);
  for (int p = 0; p < kPhaseCount; ++p) {
    double ms = s.host_ms[p];
    for (int k = 0; k < s.used[p]; ++k) ms += elapsed_ms(s.begins[p][k], s.ends[p][k]);
    t.phase_ms[p] = ms;
    if (s.used[p] > 0 && is_dp_phase(static_cast<Phase>(p))) t.has_dp = true;
  }
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
  if (!TB_CUDA_POLL(cudaEventQuery(s.end))) return std::nullopt;
  in_flight_.pop_front();
  return read(s);
}

void CudaStepTimer::flush() {
  while (!in_flight_.empty()) {
    EventSet& s = ring_[in_flight_.front()];
    check(cudaEventSynchronize(s.end), "cudaEventSynchronize");
    ready_.push_back(read(s));
    in_flight_.pop_front();
  }
}

}  // namespace tb
#endif  // TRAINBENCH_HAVE_CUDA
