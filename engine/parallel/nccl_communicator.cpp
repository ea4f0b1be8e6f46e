// SPDX-License-Identifier: GPL-3.0-or-later
// The CUDA transport of ddp: NCCL, from the CUDA toolkit. NOT yet run on a
// GPU (compiled only on the development machines).
//
// Collectives run on a communication stream of their own. Each waits on an
// event recorded on the compute stream when it starts (the bucket's
// gradients are queued there), and wait() makes the compute stream wait on
// the collective's completion event, so the host never blocks on a bucket.
// The communicator is non-blocking (ncclConfig_t::blocking = 0) and a
// watchdog thread polls ncclCommGetAsyncError: a peer that died (or a stop
// signal while collectives stay open) aborts the communicator, which frees
// the kernels waiting on it, and the next call on the training thread
// throws, so a failed rank ends the job instead of hanging it.
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/cuda_check.h"
#include "engine/core/error.h"
#include "engine/parallel/communicator.h"
#include "engine/parallel/launch.h"
#include "engine/parallel/tcp_rendezvous.h"

namespace tb {

namespace {

using Clock = std::chrono::steady_clock;

#define TB_CUDA_OK(call)                                                               \
  do {                                                                                 \
    const cudaError_t e_ = (call);                                                     \
    TB_CHECK(e_ == cudaSuccess, #call, " failed: ", cudaGetErrorString(e_));           \
  } while (0)

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const LaunchInfo& launch, Backend& backend, const WaitPolicy& policy)
      : policy_(policy), rank_(launch.rank), size_(launch.world_size) {
    auto* cuda = dynamic_cast<CudaBackend*>(&backend);
    TB_CHECK(cuda, "nccl: needs the cuda backend, got ", backend.name());
    device_ = backend.device().index;
    TB_CUDA_OK(cudaSetDevice(device_));
    compute_ = static_cast<cudaStream_t>(cuda->stream_handle());
    TB_CUDA_OK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
    TB_CUDA_OK(cudaMalloc(&host_values_, kHostValues * sizeof(double)));

    // Rank 0's unique id to every rank: over MPI when mpirun started the job,
    // else through the rendezvous on MASTER_ADDR:MASTER_PORT.
    ncclUniqueId id{};
    if (rank_ == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    if (size_ > 1) {
      if (launch.launcher == LaunchInfo::Launcher::Mpi)
        mpi_broadcast_bytes(&id, sizeof id, 0);
      else
        tcp_rendezvous_broadcast(launch.master_addr, launch.master_port, rank_, size_, &id,
                                 sizeof id);
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    check(ncclCommInitRankConfig(&comm_, size_, id, rank_, &config), "ncclCommInitRankConfig");
    settle("the NCCL communicator's start-up");
    int version = 0;
    ncclGetVersion(&version);
    name_ = "nccl " + std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) +
            "." + std::to_string(version % 100);
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclCommunicator() override {
    quit_ = true;
    if (watchdog_.joinable()) watchdog_.join();
    for (auto& [id, r] : requests_) destroy(r);
    for (auto& r : finished_) destroy(r.second);
    if (comm_ && !aborted_) {
      if (failed_) ncclCommAbort(comm_);
      else ncclCommDestroy(comm_);
    }
    if (host_values_) cudaFree(host_values_);
    if (comm_stream_) cudaStreamDestroy(comm_stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe() const override { return name_; }
  bool host_waits() const override { return false; }
  void set_grace_s(double seconds) override { policy_.grace_s = seconds; }

  int start_allreduce(Tensor& t) override {
    TB_CHECK(t.device().is_cuda() && t.dtype() == DType::F32,
             "nccl all-reduce: expects an f32 cuda tensor, got ", t.describe());
    throw_if_failed();
    Request r = make_request();
    TB_CUDA_OK(cudaEventRecord(r.ready, compute_));
    TB_CUDA_OK(cudaStreamWaitEvent(comm_stream_, r.ready, 0));
    TB_CUDA_OK(cudaEventRecord(r.start, comm_stream_));
    check(ncclAllReduce(t.data(), t.data(), size_t(t.numel()), ncclFloat, ncclSum, comm_,
                        comm_stream_),
          "ncclAllReduce");
    settle("an all-reduce");
    TB_CUDA_OK(cudaEventRecord(r.done, comm_stream_));
    std::lock_guard lock(mu_);
    const int id = next_id_++;
    requests_[id] = r;
    return id;
  }

  bool test(int id) override {
    throw_if_failed();
    std::lock_guard lock(mu_);
    auto it = requests_.find(id);
    TB_CHECK(it != requests_.end(), "nccl: unknown or finished request ", id);
    // "Not ready" is cleared from the thread's last-error slot (TB_CUDA_POLL):
    // left there, the next kernel launch check of backward would throw it.
    return TB_CUDA_POLL(cudaEventQuery(it->second.done));
  }

  void wait(int id) override {
    throw_if_failed();
    std::lock_guard lock(mu_);
    auto it = requests_.find(id);
    TB_CHECK(it != requests_.end(), "nccl: unknown or finished request ", id);
    TB_CUDA_OK(cudaStreamWaitEvent(compute_, it->second.done, 0));
    finished_.emplace_back(id, it->second);
    requests_.erase(it);
    while (finished_.size() > 256) {
      destroy(finished_.front().second);
      finished_.erase(finished_.begin());
    }
  }

  double elapsed_ms(int id) const override {
    std::lock_guard lock(mu_);
    for (const auto& [fid, r] : finished_)
      if (fid == id && TB_CUDA_POLL(cudaEventQuery(r.done))) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, r.start, r.done) == cudaSuccess) return double(ms);
        (void)cudaGetLastError();  // unknown, not the next launch's error
        return -1.0;
      }
    return -1.0;
  }

  void allreduce_host(double* values, int64_t n) override {
    TB_CHECK(n <= kHostValues, "nccl: ", n, " host values; at most ", kHostValues);
    throw_if_failed();
    const size_t bytes = size_t(n) * sizeof(double);
    TB_CUDA_OK(cudaMemcpyAsync(host_values_, values, bytes, cudaMemcpyHostToDevice, comm_stream_));
    check(ncclAllReduce(host_values_, host_values_, size_t(n), ncclDouble, ncclSum, comm_,
                        comm_stream_),
          "ncclAllReduce");
    settle("a statistics all-reduce");
    TB_CUDA_OK(cudaMemcpyAsync(values, host_values_, bytes, cudaMemcpyDeviceToHost, comm_stream_));
    drain("a statistics all-reduce");
  }

  void broadcast(Tensor& t, int root) override {
    TB_CHECK(t.device().is_cuda() && t.dtype() == DType::F32,
             "nccl broadcast: expects an f32 cuda tensor, got ", t.describe());
    throw_if_failed();
    cudaEvent_t ready;
    TB_CUDA_OK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    TB_CUDA_OK(cudaEventRecord(ready, compute_));
    TB_CUDA_OK(cudaStreamWaitEvent(comm_stream_, ready, 0));
    cudaEventDestroy(ready);
    check(ncclBroadcast(t.data(), t.data(), size_t(t.numel()), ncclFloat, root, comm_,
                        comm_stream_),
          "ncclBroadcast");
    settle("a broadcast");
    drain("a broadcast from rank " + std::to_string(root));
  }

  [[noreturn]] void abort(int code) override {
    failed_ = true;
    if (comm_ && !aborted_.exchange(true)) ncclCommAbort(comm_);
    std::exit(code);  // an mpirun launch's exit handler aborts the MPI job too
  }

 private:
  static constexpr int64_t kHostValues = 1 << 16;

  struct Request {
    cudaEvent_t ready = nullptr, start = nullptr, done = nullptr;
  };

  Request make_request() {
    Request r;
    TB_CUDA_OK(cudaEventCreateWithFlags(&r.ready, cudaEventDisableTiming));
    TB_CUDA_OK(cudaEventCreate(&r.start));
    TB_CUDA_OK(cudaEventCreate(&r.done));
    return r;
  }
  static void destroy(Request& r) {
    if (r.ready) cudaEventDestroy(r.ready);
    if (r.start) cudaEventDestroy(r.start);
    if (r.done) cudaEventDestroy(r.done);
    r = {};
  }

  void check(ncclResult_t rc, const char* what) {
    if (rc == ncclSuccess || rc == ncclInProgress) return;
    fail(std::string(what) + " failed: " + ncclGetErrorString(rc) + " (" +
         (comm_ ? ncclGetLastError(comm_) : "") + ")");
  }

  // A non-blocking communicator returns before the call is enqueued: poll
  // until it has been (or failed).
  void settle(const std::string& what) {
    wait_for_peers(policy_, rank_, size_, what, [&] {
      ncclResult_t state = ncclSuccess;
      check(ncclCommGetAsyncError(comm_, &state), "ncclCommGetAsyncError");
      check(state, what.c_str());
      return state != ncclInProgress;
    });
  }

  // The host waits for everything on the communication stream.
  void drain(const std::string& what) {
    wait_for_peers(policy_, rank_, size_, what, [&] {
      throw_if_failed();
      return TB_CUDA_POLL(cudaStreamQuery(comm_stream_));
    });
  }

  [[noreturn]] void fail(const std::string& message) {
    {
      std::lock_guard lock(mu_);
      if (error_.empty()) error_ = message;
    }
    failed_ = true;
    TB_FAIL("rank ", rank_, " of ", size_, ": ", message);
  }

  void throw_if_failed() {
    if (!failed_) return;
    std::lock_guard lock(mu_);
    TB_FAIL("rank ", rank_, " of ", size_, ": the NCCL communicator was aborted: ", error_);
  }

  // Watchdog: an asynchronous NCCL error (a peer gone), or a stop signal
  // that collectives outlive by the grace period, aborts the communicator.
  void watch() {
    // This rank's device on this thread too: its first runtime call would
    // otherwise create a context on device 0 (memory on another rank's GPU).
    if (cudaSetDevice(device_) != cudaSuccess) (void)cudaGetLastError();
    std::optional<Clock::time_point> stop_seen;
    while (!quit_ && !failed_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state != ncclSuccess &&
          state != ncclInProgress) {
        abort_from_watchdog(std::string("asynchronous NCCL error: ") + ncclGetErrorString(state));
        return;
      }
      bool open = false;
      {
        std::lock_guard lock(mu_);
        for (auto& [id, r] : requests_) open = open || cudaEventQuery(r.done) == cudaErrorNotReady;
      }
      if (open) (void)cudaGetLastError();  // a not-ready poll leaves its code in this thread's slot
      if (policy_.stop && policy_.stop->load() && open) {
        if (!stop_seen) stop_seen = Clock::now();
        if (std::chrono::duration<double>(Clock::now() - *stop_seen).count() > policy_.grace_s) {
          abort_from_watchdog("a stop signal arrived while all-reduces were open: another rank "
                              "failed or was killed");
          return;
        }
      }
    }
  }

  void abort_from_watchdog(const std::string& why) {
    {
      std::lock_guard lock(mu_);
      if (error_.empty()) error_ = why;
    }
    failed_ = true;
    if (!aborted_.exchange(true)) ncclCommAbort(comm_);
  }

  WaitPolicy policy_;
  int rank_, size_, device_ = 0;
  cudaStream_t compute_ = nullptr, comm_stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  void* host_values_ = nullptr;
  std::string name_;
  mutable std::mutex mu_;
  std::map<int, Request> requests_;
  std::vector<std::pair<int, Request>> finished_;
  int next_id_ = 1;
  std::atomic<bool> failed_{false}, quit_{false}, aborted_{false};
  std::string error_;
  std::thread watchdog_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const LaunchInfo& launch, Backend& backend,
                                                     const WaitPolicy& policy) {
  return std::make_unique<NcclCommunicator>(launch, backend, policy);
}

}  // namespace tb
