// SPDX-License-Identifier: GPL-3.0-or-later
// ddp's parts that run in one process: the distributed sampler's union
// property, the gradient buckets' plan, the layer offsets they follow,
// synchronised batch norm against one batch norm over the whole batch, the
// launch variables, the mpirun command, the NCCL id rendezvous on loopback,
// and what the run plan says about parallel. The multi-process runs are in
// test_ddp.cpp.
#include <QtTest>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <barrier>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/data/dataset.h"
#include "engine/data/loader.h"
#include "engine/nn/batchnorm2d.h"
#include "engine/nn/model.h"
#include "engine/nn/models.h"
#include "engine/parallel/data_parallel.h"
#include "engine/parallel/gradient_buckets.h"
#include "engine/parallel/launch.h"
#include "engine/parallel/tcp_rendezvous.h"
#include "engine/train/config.h"
#include "engine/train/tricks.h"

using namespace tb;
using json = nlohmann::json;

namespace {

std::unique_ptr<Dataset> small_set(int64_t n) {
  return open_dataset({{"name", "synthetic"}, {"shape", {1, 4, 4}}, {"size", n}, {"seed", 7}},
                      "train");
}

// The data set indices of every batch a loader hands out in `epoch`.
std::vector<std::vector<int32_t>> epoch_batches(const Dataset& ds, int64_t batch, bool drop_last,
                                                Shard shard, int64_t epoch) {
  LoaderOptions o;
  o.batch_size = batch;
  o.seed = 11;
  o.shuffle = true;
  o.drop_last = drop_last;
  o.format = BatchFormat::Uint8Raw;  // carries each row's data set index
  o.shard = shard;
  DataLoader loader(ds, o);
  loader.start_epoch(epoch);
  std::vector<std::vector<int32_t>> out;
  Batch b;
  while (loader.next(b)) {
    const int32_t* idx = b.indices.data_as<int32_t>();
    out.emplace_back(idx, idx + b.indices.dim(0));
  }
  return out;
}

void set_env(const char* name, const char* value) {
  if (value) setenv(name, value, 1);
  else unsetenv(name);
}

const char* const kLaunchVars[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                   "OMPI_COMM_WORLD_LOCAL_RANK", "PMIX_RANK", "PMI_RANK",
                                   "PMI_SIZE", "MPI_LOCALRANKID", "RANK", "WORLD_SIZE",
                                   "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                                   "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE",
                                   "TRAINBENCH_RENDEZVOUS_PORT", "OMPI_COMM_WORLD_LOCAL_SIZE",
                                   "MPI_LOCALNRANKS", "LOCAL_WORLD_SIZE"};

// A free loopback port (bound, read, released: another process could take
// it in between, which a test on one machine does not meet in practice).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// A transport that, like NCCL, does not block the host: wait() only orders
// the device's work, and a collective's device time is known once the host
// has waited for the communication to end (here: the next allreduce_host).
class DeviceOrderedComm final : public Communicator {
 public:
  static constexpr double kMsPerCollective = 1.5;
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string describe() const override { return "device-ordered fake"; }
  int start_allreduce(Tensor&) override {
    drained_ = false;
    return next_++;
  }
  bool test(int) override { return false; }
  void wait(int) override {}
  double elapsed_ms(int) const override { return drained_ ? kMsPerCollective : -1.0; }
  bool host_waits() const override { return false; }
  void allreduce_host(double*, int64_t) override { drained_ = true; }
  void broadcast(Tensor&, int) override {}
  [[noreturn]] void abort(int code) override { std::exit(code); }
  void set_grace_s(double) override {}

 private:
  int next_ = 1;
  bool drained_ = true;
};

}  // namespace

class TestParallel : public QObject {
  Q_OBJECT

 private slots:
  void init() {
    for (const char* v : kLaunchVars) unsetenv(v);
  }

  // Step k's batches of the W ranks, concatenated in rank order, are the
  // batch one process with batch W*B takes at step k; their union over the
  // epoch is that process's epoch. Evaluation (no drop_last) covers every
  // sample exactly once.
  void samplerUnionIsTheSingleProcessEpoch() {
    const auto ds = small_set(103);
    const int64_t B = 4;
    for (int W : {1, 2, 3, 4}) {
      for (int64_t epoch : {0, 1}) {
        const auto single = epoch_batches(*ds, W * B, /*drop_last=*/true, {}, epoch);
        std::vector<std::vector<std::vector<int32_t>>> ranks;
        for (int r = 0; r < W; ++r)
          ranks.push_back(epoch_batches(*ds, B, true, {r, W}, epoch));
        for (int r = 0; r < W; ++r) QCOMPARE(ranks[size_t(r)].size(), single.size());
        std::multiset<int32_t> union_of_ranks, single_epoch;
        for (size_t k = 0; k < single.size(); ++k) {
          std::vector<int32_t> concatenated;
          for (int r = 0; r < W; ++r) {
            const auto& b = ranks[size_t(r)][k];
            concatenated.insert(concatenated.end(), b.begin(), b.end());
          }
          QVERIFY2(concatenated == single[k],
                   qPrintable(QString("W=%1 epoch %2 step %3").arg(W).arg(epoch).arg(k)));
          union_of_ranks.insert(concatenated.begin(), concatenated.end());
          single_epoch.insert(single[k].begin(), single[k].end());
        }
        QCOMPARE(union_of_ranks, single_epoch);
        QCOMPARE(int64_t(union_of_ranks.size()), (103 / (W * B)) * W * B);

        std::multiset<int32_t> eval;
        for (int r = 0; r < W; ++r)
          for (const auto& b : epoch_batches(*ds, B, /*drop_last=*/false, {r, W}, epoch))
            eval.insert(b.begin(), b.end());
        QCOMPARE(int64_t(eval.size()), int64_t(103));
        QCOMPARE(int64_t(std::set<int32_t>(eval.begin(), eval.end()).size()), int64_t(103));
      }
    }
  }

  void shardBatchCounts() {
    QCOMPARE(shard_batches(10, {0, 4}, true), int64_t(2));
    QCOMPARE(shard_batches(10, {1, 4}, false), int64_t(3));
    QCOMPARE(shard_batches(10, {2, 4}, false), int64_t(2));
    QVERIFY_THROWS_EXCEPTION(Error, shard_batches(10, {4, 4}, true));
  }

  // Buckets cover the block once, at layer boundaries, from its end; each is
  // at least the cap except the one nearest the start; cap 0 is one bucket.
  void bucketsFollowLayerBoundaries() {
    const std::vector<int64_t> offsets{0, 320, 320, 352, 18848, 18912, 18912, 420320, 420448, 421738};
    for (int64_t cap : {0, 1, 100, 1000, 20000, 1000000}) {
      const auto b = plan_buckets(offsets, cap);
      QVERIFY(!b.empty());
      QCOMPARE(b.front().end, offsets.back());
      QCOMPARE(b.back().begin, int64_t(0));
      for (size_t i = 0; i < b.size(); ++i) {
        QCOMPARE(b[i].begin, offsets[b[i].first_layer]);
        if (i > 0) QCOMPARE(b[i].end, b[i - 1].begin);
        if (cap > 0 && i + 1 < b.size()) QVERIFY(b[i].end - b[i].begin >= cap);
        QVERIFY(std::count(offsets.begin(), offsets.end(), b[i].end) > 0);
      }
      if (cap == 0) QCOMPARE(b.size(), size_t(1));
    }
    // A layer bigger than the cap is a bucket of its own; layers without
    // parameters never make an empty bucket.
    const auto b = plan_buckets(offsets, 1);
    QCOMPARE(b.size(), size_t(7));
    for (const Bucket& x : b) QVERIFY(x.end > x.begin);
  }

  // NCCL's wait() returns before the all-reduces have run: the step's
  // allreduce_ms must be their device time read once the communication has
  // ended (after end_step's host exchange), not a sum of "not yet" (0).
  void deviceOrderedAllreduceTimeIsReadAfterTheExchange() {
    CpuBackend be;
    auto model = make_model("fmnist-cnn", {1, 28, 28}, 10, {});
    model->build(be, 1);
    DataParallel ddp(std::make_unique<DeviceOrderedComm>(), be, *model,
                     {.bucket_elements = 1000});
    GradientBuckets& buckets = ddp.buckets();
    QVERIFY(buckets.buckets().size() > 1);
    for (int step = 0; step < 2; ++step) {
      buckets.begin_step();
      for (size_t layer = model->layers().size(); layer-- > 0;) buckets.layer_done(layer);
      buckets.finish();
      json metrics;
      ddp.end_step(false, 10.0, metrics);
      QVERIFY2(metrics.contains("allreduce_ms"), metrics.dump().c_str());
      QCOMPARE(metrics["allreduce_ms"].get<double>(),
               DeviceOrderedComm::kMsPerCollective * double(buckets.buckets().size()));
    }
  }

  // The offsets the buckets follow are where each layer's gradients live.
  void layerOffsetsMatchTheGradientViews() {
    CpuBackend be;
    auto model = make_model("fmnist-cnn", {1, 28, 28}, 10, {});
    model->build(be, 1);
    const auto& off = model->layer_grad_offsets();
    QCOMPARE(off.size(), model->layers().size() + 1);
    QCOMPARE(off.front(), int64_t(0));
    QCOMPARE(off.back(), model->num_params());
    const float* base = model->grad_block().data_as<float>();
    std::set<int64_t> starts;
    for (const ParamInfo& p : model->params()) starts.insert(p.grad.data_as<float>() - base);
    for (size_t i = 0; i + 1 < off.size(); ++i)
      if (off[i + 1] > off[i]) QVERIFY2(starts.count(off[i]), qPrintable(QString::number(i)));
  }

  // Two ranks (threads here, summing through a barrier) each with half the
  // batch and sync_batchnorm: the same outputs, input gradients, parameter
  // gradients (summed) and running statistics as one batch norm over the
  // whole batch, in double.
  void syncedBatchNormEqualsOneBatchNorm() {
    const int64_t N = 6, C = 3, H = 4, W = 5;
    std::vector<double> x(size_t(N * C * H * W)), dy(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = std::sin(0.37 * double(i)) * 2.0 + 0.5 * double(i % 7);
      dy[i] = std::cos(0.11 * double(i) + 0.3);
    }
    auto make = [&](CpuBackend& be) {
      auto m = std::make_unique<Model>("bn", Shape{C, H, W}, 2);
      m->emplace<BatchNorm2d>("bn");
      m->build(be, 1, DType::F64);
      // Non-trivial affine parameters and running statistics.
      for (const ParamInfo& p : m->params())
        for (int64_t c = 0; c < C; ++c) p.value.data_as<double>()[c] = 0.5 + 0.25 * double(c);
      return m;
    };
    auto rows = [&](const std::vector<double>& v, int64_t n0, int64_t n1) {
      Tensor t = Tensor::empty({n1 - n0, C, H, W}, DType::F64);
      std::copy(v.begin() + n0 * C * H * W, v.begin() + n1 * C * H * W, t.data_as<double>());
      return t;
    };
    // The whole batch in one process.
    CpuBackend be_all;
    auto whole = make(be_all);
    Context ctx_all{be_all};
    ctx_all.dtype = DType::F64;
    Tensor y_all = whole->forward(ctx_all, rows(x, 0, N));
    Tensor dx_all = whole->layers()[0]->backward(ctx_all, rows(dy, 0, N), true);

    // Two ranks, N/2 rows each.
    std::mutex mu;
    std::vector<double> shared;
    std::barrier summed(2);
    auto clear = [&]() noexcept { shared.clear(); };
    std::barrier read(2, clear);
    auto sum = [&](double* v, int64_t n) {
      {
        std::lock_guard l(mu);
        if (shared.empty()) shared.assign(size_t(n), 0.0);
        for (int64_t i = 0; i < n; ++i) shared[size_t(i)] += v[i];
      }
      summed.arrive_and_wait();
      std::copy(shared.begin(), shared.end(), v);
      read.arrive_and_wait();
    };
    struct Rank {
      CpuBackend be;
      std::unique_ptr<Model> model;
      Tensor y, dx;
    } ranks[2];
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      ranks[r].model = make(ranks[r].be);
      threads.emplace_back([&, r] {
        Context ctx{ranks[r].be};
        ctx.dtype = DType::F64;
        ctx.sync_batchnorm = sum;
        const int64_t n0 = r * N / 2, n1 = (r + 1) * N / 2;
        Tensor y = ranks[r].model->forward(ctx, rows(x, n0, n1));
        ranks[r].y = Tensor::empty(y.shape(), DType::F64);
        ranks[r].be.copy(y, ranks[r].y);
        Tensor dx = ranks[r].model->layers()[0]->backward(ctx, rows(dy, n0, n1), true);
        ranks[r].dx = Tensor::empty(dx.shape(), DType::F64);
        ranks[r].be.copy(dx, ranks[r].dx);
      });
    }
    for (auto& t : threads) t.join();

    double worst = 0;
    auto cmp = [&](double a, double b) { worst = std::max(worst, std::abs(a - b)); };
    const int64_t half = N / 2 * C * H * W;
    for (int r = 0; r < 2; ++r)
      for (int64_t i = 0; i < half; ++i) {
        cmp(ranks[r].y.data_as<double>()[i], y_all.data_as<double>()[r * half + i]);
        cmp(ranks[r].dx.data_as<double>()[i], dx_all.data_as<double>()[r * half + i]);
      }
    for (size_t p = 0; p < whole->params().size(); ++p)
      for (int64_t c = 0; c < C; ++c)
        cmp(ranks[0].model->params()[p].grad.data_as<double>()[c] +
                ranks[1].model->params()[p].grad.data_as<double>()[c],
            whole->params()[p].grad.data_as<double>()[c]);
    for (size_t b = 0; b < whole->buffers().size(); ++b)
      for (int r = 0; r < 2; ++r)
        for (int64_t c = 0; c < C; ++c)
          cmp(ranks[r].model->buffers()[b].value.data_as<double>()[c],
              whole->buffers()[b].value.data_as<double>()[c]);
    QVERIFY2(worst < 1e-12, qPrintable(QString("worst difference %1").arg(worst)));

    // Without the sync, each rank normalises its own half: different outputs.
    CpuBackend be_half;
    auto alone = make(be_half);
    Context ctx_half{be_half};
    ctx_half.dtype = DType::F64;
    Tensor y_half = alone->forward(ctx_half, rows(x, 0, N / 2));
    double apart = 0;
    for (int64_t i = 0; i < half; ++i)
      apart = std::max(apart, std::abs(y_half.data_as<double>()[i] - y_all.data_as<double>()[i]));
    QVERIFY(apart > 1e-3);
  }

  void launchReadsTheEnvironment() {
    LaunchInfo l = launch_from_environment();
    QVERIFY(l.launcher == LaunchInfo::Launcher::None);
    QCOMPARE(l.world_size, 1);
    set_env("OMPI_COMM_WORLD_RANK", "1");
    set_env("OMPI_COMM_WORLD_SIZE", "4");
    set_env("OMPI_COMM_WORLD_LOCAL_RANK", "1");
    l = launch_from_environment();
    QVERIFY(l.launcher == LaunchInfo::Launcher::Mpi);
    QCOMPARE(l.rank, 1);
    QCOMPARE(l.world_size, 4);
    QCOMPARE(l.local_size, 1);  // not said: this process alone on its machine
    set_env("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
    QCOMPARE(launch_from_environment().local_size, 2);
    QCOMPARE(launch_rank(), 1);
    init();
    set_env("RANK", "2");
    set_env("WORLD_SIZE", "3");
    set_env("LOCAL_RANK", "0");
    set_env("MASTER_ADDR", "127.0.0.1");
    set_env("MASTER_PORT", "29500");
    l = launch_from_environment();
    QVERIFY(l.launcher == LaunchInfo::Launcher::Env);
    QCOMPARE(l.rank, 2);
    QCOMPARE(l.master_port, 29500);
    set_env("LOCAL_WORLD_SIZE", "3");  // torchrun's
    QCOMPARE(launch_from_environment().local_size, 3);
    // torchrun's agent store holds MASTER_PORT: the rendezvous takes the next.
    set_env("TORCHELASTIC_USE_AGENT_STORE", "True");
    QCOMPARE(launch_from_environment().master_port, 29501);
    set_env("TRAINBENCH_RENDEZVOUS_PORT", "31000");
    QCOMPARE(launch_from_environment().master_port, 31000);
    set_env("TRAINBENCH_RENDEZVOUS_PORT", "70000");
    QVERIFY_THROWS_EXCEPTION(Error, launch_from_environment());
    set_env("WORLD_SIZE", "two");
    try {
      launch_from_environment();
      QFAIL("WORLD_SIZE=two was accepted");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("WORLD_SIZE='two'") != std::string::npos, e.what());
    }
    QCOMPARE(launch_rank(), 0);  // the trainer reports the malformed variable
    set_env("WORLD_SIZE", "2");
    QVERIFY_THROWS_EXCEPTION(Error, launch_from_environment());  // RANK 2 of 2
    init();
    // SLURM's task variables alone are any job step's, not a ddp launch.
    set_env("SLURM_PROCID", "3");
    set_env("SLURM_NTASKS", "8");
    QVERIFY(launch_from_environment().launcher == LaunchInfo::Launcher::None);
    set_env("MASTER_ADDR", "node1");
    QCOMPARE(launch_from_environment().rank, 3);
    init();
  }

  void mpirunCommand() {
    const QByteArray path = qgetenv("PATH");
    set_env("PATH", "/nonexistent");
    std::string why;
    QVERIFY(find_mpirun(&why).empty());
    QVERIFY2(why.find("mpirun was not found on PATH") != std::string::npos, why.c_str());
    QVERIFY_THROWS_EXCEPTION(Error, mpirun_command(2, "engine", {}));
    set_env("TRAINBENCH_MPIRUN", "/bin/true");
    const MpirunCommand c = mpirun_command(64, "/x/trainbench-engine", {"run", "--set", "a=1"});
    const std::vector<std::string> argv{"/bin/true", "-np", "64", "/x/trainbench-engine",
                                        "run", "--set", "a=1"};
    QVERIFY(c.argv == argv);
    auto has = [&](const char* k) {
      return std::any_of(c.env.begin(), c.env.end(), [&](const auto& e) { return e.first == k; });
    };
    QCOMPARE(has("OMPI_ALLOW_RUN_AS_ROOT"), geteuid() == 0);
    QCOMPARE(has("OMPI_MCA_rmaps_base_oversubscribe"),
             64 > int(std::thread::hardware_concurrency()));
    set_env("TRAINBENCH_MPIRUN", nullptr);
    set_env("PATH", path.constData());
  }

  // Rank 0's bytes reach every rank over loopback; a rank with no rank 0 to
  // reach fails with the address in the message.
  void rendezvousHandsRank0sBytesToEveryRank() {
    const int port = free_port();
    const int W = 4;
    std::vector<std::array<char, 128>> ids(W);
    for (int r = 0; r < W; ++r) ids[size_t(r)].fill(r == 0 ? 0 : char(-1));
    for (int i = 0; i < 128; ++i) ids[0][size_t(i)] = char(i * 7 + 3);
    std::vector<std::string> errors(W);
    std::vector<std::thread> threads;
    for (int r = W - 1; r >= 0; --r)  // the others start before rank 0 listens
      threads.emplace_back([&, r] {
        try {
          tcp_rendezvous_broadcast("127.0.0.1", port, r, W, ids[size_t(r)].data(), 128, 20.0);
        } catch (const std::exception& e) {
          errors[size_t(r)] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < W; ++r) {
      QVERIFY2(errors[size_t(r)].empty(), errors[size_t(r)].c_str());
      QVERIFY(ids[size_t(r)] == ids[0]);
    }
    char id[16];
    try {
      tcp_rendezvous_broadcast("127.0.0.1", free_port(), 1, 2, id, sizeof id, 0.5);
      QFAIL("a rank without rank 0 got an id");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("127.0.0.1") != std::string::npos, e.what());
    }
  }

  // What the run plan records for parallel and its settings.
  void planRecordsParallel() {
    auto plan = [](json overrides) {
      RunConfig c = RunConfig::from_json(validate_config(overrides, "test"));
      return resolve_tricks(c, CpuBackend::kCapabilities, Device::cpu(), {.world_size = 2});
    };
    const RunPlan ddp = plan({{"parallel", "ddp"}, {"bucket_mb", 1.0}});
#ifdef TRAINBENCH_HAVE_MPI
    QVERIFY(ddp.ddp);
    QCOMPARE(ddp.bucket_elements, int64_t(1024 * 1024 / 4));
    QVERIFY2(ddp.tricks["parallel"]["reason"].get<std::string>().find("mpi, 2 processes") !=
                 std::string::npos,
             ddp.tricks["parallel"].dump().c_str());
#else
    QVERIFY(!ddp.ddp);
    QVERIFY(ddp.tricks["parallel"]["reason"].get<std::string>().find("no MPI") != std::string::npos);
#endif
    const RunPlan dp = plan({{"parallel", "dp"}});
    QVERIFY(!dp.applied("parallel") && !dp.ddp);
    QVERIFY(!dp.dp);  // the cpu backend drives one device (test_dp.cpp has the rest)
    QVERIFY2(dp.tricks["parallel"]["reason"].get<std::string>().find("needs the cuda backend") !=
                 std::string::npos,
             dp.tricks["parallel"].dump().c_str());
    const RunPlan alone = plan({{"sync_batchnorm", true}, {"bucket_mb", 5.0}});
    QVERIFY(!alone.applied("sync_batchnorm") && !alone.applied("bucket_mb"));
    QCOMPARE(alone.tricks["bucket_mb"]["reason"].get<std::string>(), std::string("only with parallel: ddp"));
    const RunPlan synced = plan({{"parallel", "ddp"}, {"sync_batchnorm", true}, {"fuse_pointwise", true}});
#ifdef TRAINBENCH_HAVE_MPI
    QVERIFY(synced.sync_batchnorm);
    QVERIFY(!synced.fuse_pointwise);
#endif
    QVERIFY(!cuda_graphs_blocker(RunConfig::from_json(validate_config({{"parallel", "ddp"}}, "t"))).empty());
  }
};

QTEST_GUILESS_MAIN(TestParallel)
#include "test_parallel.moc"
