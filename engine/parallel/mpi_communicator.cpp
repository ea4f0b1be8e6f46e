// SPDX-License-Identifier: GPL-3.0-or-later
// The CPU transport of ddp: MPI (Debian's Open MPI). Non-blocking
// MPI_Iallreduce per gradient bucket; MPI progresses a request when it is
// tested, so the trainer tests open requests after every layer's backward.
// Compiled only when CMake finds MPI.
// C only: Open MPI's C++ bindings are deprecated and need their own library.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "engine/core/error.h"
#include "engine/parallel/communicator.h"

namespace tb {

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_failed{false};

// At exit: a process whose runs finished leaves MPI properly. One whose run
// failed (its error is printed and, on rank 0, recorded by now) ends at once
// with exit code 1, on which mpirun ends every other rank (they may be
// waiting in a collective this one will never join). Both MPI_Abort and a
// plain exit with MPI still open block in Open MPI's teardown until mpirun's
// SIGKILL (odls_base_sigkill_timeout later).
void finish_at_exit() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  if (g_failed) {
    std::fflush(nullptr);
    std::_Exit(1);
  }
  MPI_Finalize();
}

void init_once() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  // One thread makes every MPI call (the training thread).
  const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  TB_CHECK(rc == MPI_SUCCESS, "MPI_Init_thread failed (code ", rc, ")");
  // Errors come back as codes, turned into tb::Error below, instead of MPI's
  // default of aborting inside the call.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  std::atexit(finish_at_exit);
}

std::string mpi_error(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return std::string(text, static_cast<size_t>(len));
}

#define TB_MPI(call)                                                                  \
  do {                                                                                \
    const int rc_ = (call);                                                           \
    TB_CHECK(rc_ == MPI_SUCCESS, #call, " failed: ", mpi_error(rc_));                 \
  } while (0)

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(const WaitPolicy& policy) : policy_(policy) {
    init_once();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    std::string v(version, static_cast<size_t>(len));
    name_ = "mpi (" + v.substr(0, v.find_first_of(",\n")) + ")";
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe() const override { return name_; }

  int start_allreduce(Tensor& t) override {
    TB_CHECK(t.device().is_cpu() && t.dtype() == DType::F32,
             "mpi all-reduce: expects an f32 host tensor, got ", t.describe());
    TB_CHECK(t.numel() < (int64_t(1) << 31), "mpi all-reduce: ", t.numel(),
             " elements are more than one MPI call takes; use smaller buckets");
    Request r;
    r.start = Clock::now();
    TB_MPI(MPI_Iallreduce(MPI_IN_PLACE, t.data_as<float>(), static_cast<int>(t.numel()), MPI_FLOAT,
                          MPI_SUM, MPI_COMM_WORLD, &r.req));
    const int id = next_id_++;
    requests_[id] = r;
    return id;
  }

  bool test(int id) override {
    Request& r = find(id);
    if (!r.done) {
      int flag = 0;
      TB_MPI(MPI_Test(&r.req, &flag, MPI_STATUS_IGNORE));
      if (flag) r.done = true, r.end = Clock::now();
    }
    return r.done;
  }

  void wait(int id) override {
    wait_for_peers(policy_, rank_, size_, "an all-reduce", [&] { return test(id); });
    Request& r = find(id);
    last_elapsed_[id] = std::chrono::duration<double, std::milli>(r.end - r.start).count();
    if (last_elapsed_.size() > 4096) last_elapsed_.erase(last_elapsed_.begin());
    requests_.erase(id);
  }

  double elapsed_ms(int id) const override {
    auto it = last_elapsed_.find(id);
    return it == last_elapsed_.end() ? -1.0 : it->second;
  }

  bool host_waits() const override { return true; }
  void set_grace_s(double seconds) override { policy_.grace_s = seconds; }

  void allreduce_host(double* values, int64_t n) override {
    MPI_Request req;
    TB_MPI(MPI_Iallreduce(MPI_IN_PLACE, values, static_cast<int>(n), MPI_DOUBLE, MPI_SUM,
                          MPI_COMM_WORLD, &req));
    complete(req, "a statistics all-reduce");
  }

  void broadcast(Tensor& t, int root) override {
    TB_CHECK(t.device().is_cpu() && t.dtype() == DType::F32,
             "mpi broadcast: expects an f32 host tensor, got ", t.describe());
    MPI_Request req;
    TB_MPI(MPI_Ibcast(t.data_as<float>(), static_cast<int>(t.numel()), MPI_FLOAT, root,
                      MPI_COMM_WORLD, &req));
    complete(req, "a broadcast from rank " + std::to_string(root));
  }

  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

 private:
  struct Request {
    MPI_Request req = MPI_REQUEST_NULL;
    Clock::time_point start, end;
    bool done = false;
  };

  Request& find(int id) {
    auto it = requests_.find(id);
    TB_CHECK(it != requests_.end(), "mpi: unknown or finished request ", id);
    return it->second;
  }

  void complete(MPI_Request& req, const std::string& what) {
    wait_for_peers(policy_, rank_, size_, what, [&] {
      int flag = 0;
      TB_MPI(MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
      return flag != 0;
    });
  }

  WaitPolicy policy_;
  int rank_ = 0, size_ = 1;
  std::string name_;
  std::map<int, Request> requests_;
  std::map<int, double> last_elapsed_;
  int next_id_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(const WaitPolicy& policy) {
  return std::make_unique<MpiCommunicator>(policy);
}

void mpi_broadcast_bytes(void* data, int64_t bytes, int root) {
  init_once();
  TB_MPI(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD));
}

void mpi_mark_failed() { g_failed = true; }

}  // namespace tb
