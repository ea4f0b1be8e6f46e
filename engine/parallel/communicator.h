// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The collective operations data parallelism needs, over a library that does
// them well: MPI on the CPU backend (mpi_communicator.cpp), NCCL on the CUDA
// backend (nccl_communicator.cpp). Nothing here moves bytes itself.
//
// Ordering: a request started with start_allreduce sees every write the
// backend has already queued to `t` (the CPU backend's ops are done when they
// return; on CUDA the collective's stream waits on an event recorded on the
// compute stream), and after wait() every op queued on the backend afterwards
// sees the sums.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "engine/core/tensor.h"

namespace tb {

class Backend;
struct LaunchInfo;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "mpi (Open MPI v4.1.4)", "nccl 2.27.3"
  virtual std::string describe() const = 0;

  // In-place sum over the ranks of an f32 tensor on the backend's device,
  // without blocking the host. Returns a request id for test/wait.
  virtual int start_allreduce(Tensor& t) = 0;
  // Drives progress; true once the request is complete (the host may read
  // the result for a host tensor).
  virtual bool test(int request) = 0;
  // Blocks until the request is complete (MPI), or makes the compute stream
  // wait for it (NCCL). Requests are then forgotten.
  virtual void wait(int request) = 0;
  // Milliseconds the request's collective took, once waited: host clock
  // from start to the completion seen by test/wait (MPI), or device events
  // (NCCL). Negative when not known.
  virtual double elapsed_ms(int request) const = 0;
  // true: wait() blocks the host until the sums are there (MPI), so the host
  // clock measures the communication; false: wait() only orders the device's
  // streams (NCCL).
  virtual bool host_waits() const = 0;

  // Blocking sum over the ranks of a few host values (statistics, control).
  virtual void allreduce_host(double* values, int64_t n) = 0;
  // Blocking: every rank's `t` (f32, on the device) becomes root's.
  virtual void broadcast(Tensor& t, int root) = 0;

  // Ends every rank of the job now (a failed rank must not leave its peers
  // waiting in a collective forever).
  [[noreturn]] virtual void abort(int code) = 0;

  virtual void set_grace_s(double seconds) = 0;  // WaitPolicy::grace_s from now on
};

// How long a rank waits for its peers, and what ends the wait early.
struct WaitPolicy {
  // Set by SIGINT/SIGTERM (mpirun and torchrun send SIGTERM to every rank
  // when one ends): a wait still open `grace_s` after it was set means a
  // peer is gone (or, with steps slower than that, a stop mid-step), and
  // throws. A stop asked by the user reaches every rank and each finishes
  // its step, so the trainer keeps grace_s at a few step times, up to
  // DataParallelOptions::max_grace_s (DataParallel::end_step). Open MPI's mpirun, when a rank
  // dies or it is stopped, sends SIGTERM to the others after
  // odls_base_sigkill_timeout (1 s) and SIGKILL as long again later: under
  // mpirun the grace must end within that second for rank 0 to record the
  // failure. torchrun waits 30 s between the two.
  const std::atomic<bool>* stop = nullptr;
  double grace_s = 0.5;
  double timeout_s = 600.0;  // a wait longer than this throws (0: no limit)
};

// Polls `done` until it returns true, with the policy's limits; `what` names
// the operation in the error ("the all-reduce of bucket 2").
void wait_for_peers(const WaitPolicy& policy, int rank, int size, const std::string& what,
                    const std::function<bool()>& done);

// A communicator for this process's launch over `backend`'s device: MPI for
// the CPU, NCCL for CUDA. Throws tb::Error naming what is missing when this
// build or this launch cannot provide one. Every wait follows `policy`: a
// peer that died ends this rank with an error naming it, never a hang.
std::unique_ptr<Communicator> make_communicator(const LaunchInfo& launch, Backend& backend,
                                                const WaitPolicy& policy);

// Transports (each compiled only when its library was found).
std::unique_ptr<Communicator> make_mpi_communicator(const WaitPolicy& policy);
std::unique_ptr<Communicator> make_nccl_communicator(const LaunchInfo& launch, Backend& backend,
                                                     const WaitPolicy& policy);

// MPI process wiring, for NCCL's unique id when mpirun started the job
// (mpi_communicator.cpp). MPI ends when the process exits: finalised, or,
// after mpi_mark_failed() (a run that threw), aborted, which ends every rank
// of the job at once instead of leaving them waiting for this one.
void mpi_broadcast_bytes(void* data, int64_t bytes, int root);
void mpi_mark_failed();

}  // namespace tb
