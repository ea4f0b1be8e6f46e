// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/parallel/communicator.h"

#include <chrono>
#include <optional>
#include <thread>

#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/parallel/launch.h"

namespace tb {

void wait_for_peers(const WaitPolicy& policy, int rank, int size, const std::string& what,
                    const std::function<bool()>& done) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::optional<Clock::time_point> stop_seen;
  auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  for (int polls = 0; !done(); ++polls) {
    const auto now = Clock::now();
    if (policy.stop && policy.stop->load()) {
      if (!stop_seen) stop_seen = now;
      TB_CHECK(seconds(now - *stop_seen) < policy.grace_s, "rank ", rank, " of ", size,
               ": a stop signal arrived while this rank waited for ", what,
               ": another rank failed or was killed (or the job was stopped in the middle of "
               "a step)");
    }
    TB_CHECK(policy.timeout_s <= 0 || seconds(now - t0) < policy.timeout_s, "rank ", rank, " of ",
             size, ": waited ", policy.timeout_s, " s for ", what,
             "; another rank is stuck or gone (ddp_timeout_s)");
    // Spin briefly (a collective on shared memory completes in microseconds),
    // then yield the core: with more ranks than cores, a spinning waiter
    // would starve the peer it waits for.
    if (polls < 64) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(polls < 1024 ? 20 : 200));
  }
}

std::unique_ptr<Communicator> make_communicator(const LaunchInfo& launch, Backend& backend,
                                                const WaitPolicy& policy) {
  const DeviceKind kind = backend.device().kind;
  const std::string why = ddp_unavailable_reason(kind);
  TB_CHECK(why.empty(), "parallel: ddp is unavailable on ", backend.device().str(), ": ", why);
  if (kind == DeviceKind::CUDA) return make_nccl_communicator(launch, backend, policy);
  TB_CHECK(launch.launcher != LaunchInfo::Launcher::Env,
           "parallel: ddp on the cpu uses MPI, which starts its processes itself: launch with "
           "`mpirun -np ", launch.world_size,
           " trainbench-engine run ...` (RANK/WORLD_SIZE launches need the cuda backend's NCCL)");
  return make_mpi_communicator(policy);
}

// Stand-ins for the transports this build lacks (never called: make_communicator
// checks ddp_unavailable_reason first).
#ifndef TRAINBENCH_HAVE_MPI
std::unique_ptr<Communicator> make_mpi_communicator(const WaitPolicy&) {
  TB_FAIL(ddp_unavailable_reason(DeviceKind::CPU));
}
void mpi_broadcast_bytes(void*, int64_t, int) { TB_FAIL(ddp_unavailable_reason(DeviceKind::CPU)); }
void mpi_mark_failed() {}
#endif
#ifndef TRAINBENCH_HAVE_NCCL
std::unique_ptr<Communicator> make_nccl_communicator(const LaunchInfo&, Backend&,
                                                     const WaitPolicy&) {
  TB_FAIL(ddp_unavailable_reason(DeviceKind::CUDA));
}
#endif

}  // namespace tb
