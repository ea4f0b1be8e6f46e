// SPDX-License-Identifier: GPL-3.0-or-later
// parallel: dp, one process driving several GPUs (engine/parallel/device_replicas.h).
//   - CPU: the run plan's record (applied on CUDA with enough devices, refused
//     on the CPU, dp_devices only with dp, fp16 and cuda_graphs not with dp);
//     the batch split; a dp run on the CPU fails with an error naming the key
//     and value; the replicas' arithmetic (replicate, uneven scatter, two
//     threads, reduce) on two CPU backends against one model on the batch.
//   - GPU slots (QSKIP without a device or a CUDA build): dp on one device
//     gives the plain run's per-step losses and parameters; dp on two devices
//     gives the plain run's on the same total batch (QSKIP unless 2 GPUs);
//     ddp over NCCL with one rank gives the plain run's (the one NCCL check a
//     single GPU allows; this suite is in scripts/gpu-check.sh, test_ddp is not).
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/nn/model.h"
#include "engine/nn/models.h"
#include "engine/ops/loss/loss.h"
#include "engine/parallel/device_replicas.h"
#include "engine/train/config.h"
#include "engine/train/trainer.h"
#include "engine/train/tricks.h"
#include "tests/engine/gpu_slot.h"
#include "tests/engine/run_fixture.h"

#ifdef TRAINBENCH_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#endif

using namespace tb;
using json = nlohmann::json;

namespace {

json base_config(json overrides) {
  json base = {{"dataset", "synthetic"}, {"synthetic_shape", {1, 28, 28}},
               {"synthetic_size", 512},  {"test_limit", 64},
               {"max_steps", 5},         {"batch_size", 33},
               {"model", "fmnist-cnn"},  {"seed", 11},
               {"deterministic", true},  {"sync_every_step", true}};
  for (auto& [k, v] : overrides.items()) base[k] = v;
  return base;
}

RunPlan plan_for(json overrides, const BackendCapabilities& caps, const Device& device,
                 int devices) {
  RunConfig c = RunConfig::from_json(validate_config(overrides, "test"));
  return resolve_tricks(c, caps, device, {.devices = devices});
}

std::string reason(const RunPlan& p, const char* key) {
  return p.tricks[key].value("reason", "");
}

// A run's per-step losses, its parameters after every step (read on the
// trainer's own backend between steps) and its run_started/finished events.
struct Outcome {
  std::vector<double> losses;
  std::vector<std::vector<float>> params;
  json environment, summary, tricks;
};

Outcome train(const json& config) {
  Outcome o;
  const Model* model = nullptr;
  const tb::test::Recorder rec = tb::test::run_trainer(config, 0, nullptr, [&](Trainer& t) {
    t.set_step_hook_for_test([&](int64_t, const Model& m) { model = &m; });
    t.set_step_boundary_hook([&](Backend& be, int64_t next_step) {
      if (next_step < 2 || !model) return;  // before step 1: nothing trained yet
      Tensor host = Tensor::empty(model->param_block().shape(), DType::F32);
      be.copy(model->param_block(), host);  // waits for the step's work
      const float* p = host.data_as<float>();
      o.params.emplace_back(p, p + host.numel());
    });
  });
  for (const json& s : rec.of("step"))
    if (s["metrics"].contains("loss")) o.losses.push_back(s["metrics"]["loss"].get<double>());
  o.environment = rec.of("run_started").at(0)["environment"];
  o.tricks = rec.of("run_started").at(0)["tricks"];
  o.summary = rec.of("finished").at(0)["summary"];
  return o;
}

// max |a - b| / max |a| over every step's parameters.
double worst_param_error(const Outcome& a, const Outcome& b) {
  double err = 0, scale = 0;
  for (size_t s = 0; s < a.params.size(); ++s)
    for (size_t i = 0; i < a.params[s].size(); ++i) {
      err = std::max(err, double(std::fabs(a.params[s][i] - b.params[s][i])));
      scale = std::max(scale, double(std::fabs(a.params[s][i])));
    }
  return scale > 0 ? err / scale : err;
}

double worst_loss_error(const Outcome& a, const Outcome& b) {
  double err = 0;
  for (size_t s = 0; s < a.losses.size(); ++s)
    err = std::max(err, std::fabs(a.losses[s] - b.losses[s]) / std::max(1e-12, std::fabs(a.losses[s])));
  return err;
}

// The run `other` trained like `plain`: as many steps, and every step's loss
// and parameters within tol (relative). Fails the calling slot otherwise
// (call it last: a failed check here returns from here only).
void expect_same_training(const Outcome& plain, const Outcome& other, double tol,
                          const std::string& what) {
  QCOMPARE(other.losses.size(), plain.losses.size());
  QCOMPARE(other.params.size(), plain.params.size());
  QVERIFY(tb::test::report_tolerance("fp32", worst_loss_error(plain, other), tol, what + " losses"));
  QVERIFY(tb::test::report_tolerance("fp32", worst_param_error(plain, other), tol, what + " params"));
}

int cuda_devices() {
#ifdef TRAINBENCH_HAVE_CUDA
  return cuda_device_count(nullptr);
#else
  return 0;
#endif
}

}  // namespace

class TestDp : public QObject {
  Q_OBJECT

 private slots:
  void planRecordsDp() {
    const RunPlan cpu = plan_for({{"parallel", "dp"}}, CpuBackend::kCapabilities, Device::cpu(), 1);
    QVERIFY(!cpu.dp && !cpu.applied("parallel"));
    QVERIFY2(reason(cpu, "parallel").find("cpu backend drives one device") != std::string::npos,
             reason(cpu, "parallel").c_str());
    const BackendCapabilities cuda = capabilities_of(DeviceKind::CUDA);
    QVERIFY(cuda.multi_device);
    const RunPlan all = plan_for({{"parallel", "dp"}}, cuda, Device::cuda(0), 4);
    QVERIFY(all.dp && !all.ddp);
    QCOMPARE(all.dp_devices, 4);  // dp_devices 0: every visible device
    const RunPlan two = plan_for({{"parallel", "dp"}, {"dp_devices", 2}}, cuda, Device::cuda(1), 3);
    QVERIFY(two.dp);
    QCOMPARE(two.dp_devices, 2);
    QVERIFY2(reason(two, "parallel").find("cuda:1 on") != std::string::npos,
             reason(two, "parallel").c_str());
    const RunPlan too_many = plan_for({{"parallel", "dp"}, {"dp_devices", 3}}, cuda, Device::cuda(0), 2);
    QVERIFY(!too_many.dp);
    QVERIFY2(reason(too_many, "parallel").find("dp_devices = 3") != std::string::npos,
             reason(too_many, "parallel").c_str());
    const RunPlan alone = plan_for({{"dp_devices", 2}}, cuda, Device::cuda(0), 2);
    QVERIFY(!alone.applied("dp_devices"));
    QCOMPARE(reason(alone, "dp_devices"), std::string("only with parallel: dp"));
    const RunPlan with_ddp = plan_for({{"parallel", "ddp"}, {"dp_devices", 2}}, cuda, Device::cuda(0), 2);
    QCOMPARE(reason(with_ddp, "dp_devices"), std::string("only with parallel: dp"));
    const RunPlan fp16 = plan_for({{"parallel", "dp"}, {"amp", "fp16"}}, cuda, Device::cuda(0), 2);
    QVERIFY(fp16.dp && !fp16.applied("amp") && !fp16.precision.needs_loss_scaling());
    const RunPlan bf16 = plan_for({{"parallel", "dp"}, {"amp", "bf16"}}, cuda, Device::cuda(0), 2);
    QVERIFY(bf16.applied("amp"));
    QVERIFY(!cuda_graphs_blocker(RunConfig::from_json(validate_config({{"parallel", "dp"}}, "t"))).empty());
  }

  void settingsRow() {
    const ConfigKey* k = find_config_key("dp_devices");
    QVERIFY(k);
    QCOMPARE(k->group, std::string("parallel"));
    QCOMPARE(k->default_value, json(0));
    QCOMPARE(k->applies_key, std::string("parallel"));
    QCOMPARE(k->applies_values, json::array({"dp"}));
    QVERIFY(!k->zero_means.empty());
  }

  void scatterSizes() {
    QCOMPARE(scatter_sizes(10, 3), (std::vector<int64_t>{4, 3, 3}));
    QCOMPARE(scatter_sizes(33, 2), (std::vector<int64_t>{17, 16}));
    QCOMPARE(scatter_sizes(8, 1), (std::vector<int64_t>{8}));
    try {
      (void)scatter_sizes(2, 3);
      QFAIL("a batch of 2 was split across 3 devices");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("dp_devices") != std::string::npos, e.what());
    }
  }

  // dp on the CPU is an error (never a quiet single-device run): the message
  // names the key, the value and the device.
  void cpuRunRefusesDp() {
    try {
      (void)tb::test::run_trainer(base_config({{"device", "cpu"}, {"parallel", "dp"}}));
      QFAIL("a dp run on the cpu trained");
    } catch (const Error& e) {
      const std::string m = e.what();
      QVERIFY2(m.find("parallel = dp") != std::string::npos, e.what());
      QVERIFY2(m.find("cpu") != std::string::npos, e.what());
    }
  }

  // The replicas' arithmetic, on two CPU backends (copy_from_peer is a copy
  // there): replicate, an uneven scatter (7 = 4 + 3), forward and backward on
  // two threads, the reduce; the summed gradients equal one model's on the
  // whole batch (float rounding of a different summation order), and the
  // replicas' loss sums add up to the whole batch's.
  void replicasOnTwoCpuBackendsSumToTheWholeBatch() {
    CpuBackend primary, second;
    const Shape in{1, 6, 6};
    auto make = [&](Backend& be, uint64_t seed) {
      std::unique_ptr<Model> m = make_model("mlp", in, 5, ModelOptions{});
      m->build(be, seed);
      return m;
    };
    std::unique_ptr<Model> model = make(primary, 3), whole = make(primary, 3);
    std::vector<std::unique_ptr<Backend>> others;
    others.push_back(std::make_unique<CpuBackend>());
    Context ctx{primary};
    // The replica starts from other weights (seed 4): replicate must fix that.
    DeviceReplicas dp(primary, *model, std::move(others),
                      [&](Backend& be) { return make(be, 4); }, ctx);
    QCOMPARE(dp.size(), 2);
    Tensor x = Tensor::empty({7, 1, 6, 6}, DType::F32), y = Tensor::empty({7}, DType::I32);
    for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = float(std::sin(0.37 * double(i)));
    for (int64_t i = 0; i < 7; ++i) y.data_as<int32_t>()[i] = int32_t(i % 5);

    dp.replicate();
    dp.scatter(x, y);
    QCOMPARE(dp.x(0).dim(0), int64_t(4));
    QCOMPARE(dp.x(1).dim(0), int64_t(3));
    QCOMPARE(dp.share(0) + dp.share(1), 1.0);
    Tensor stats0 = Tensor::zeros({2}, DType::F64);
    std::vector<Tensor> dlogits(2);
    dp.parallel_apply([&](int r) {
      Context& c = r == 0 ? ctx : dp.context(r);
      Tensor& stats = r == 0 ? stats0 : dp.stats(r);
      Tensor logits = dp.model(r).forward(c, dp.x(r));
      dlogits[size_t(r)] = Tensor::empty(logits.shape(), DType::F32);
      loss::softmax_cross_entropy(dp.backend(r), logits, dp.y(r), 0.0f, float(dp.share(r)),
                                  dlogits[size_t(r)], stats);
      dp.model(r).backward(c, dlogits[size_t(r)]);
    });
    dp.reduce_gradients();

    Context whole_ctx{primary};
    Tensor whole_stats = Tensor::zeros({2}, DType::F64);
    Tensor logits = whole->forward(whole_ctx, x);
    Tensor d = Tensor::empty(logits.shape(), DType::F32);
    loss::softmax_cross_entropy(primary, logits, y, 0.0f, 1.0f, d, whole_stats);
    whole->backward(whole_ctx, d);

    const float* g = model->grad_block().data_as<float>();
    const float* w = whole->grad_block().data_as<float>();
    double err = 0, scale = 0;
    for (int64_t i = 0; i < model->grad_block().numel(); ++i) {
      err = std::max(err, double(std::fabs(g[i] - w[i])));
      scale = std::max(scale, double(std::fabs(w[i])));
    }
    QVERIFY(scale > 0);
    QVERIFY2(err / scale < 1e-5, qPrintable(QString::number(err / scale)));
    const auto [loss1, correct1] = dp.read_and_reset_stats();
    const double loss = stats0.data_as<double>()[0] + loss1;
    QVERIFY(std::fabs(loss - whole_stats.data_as<double>()[0]) < 1e-4 * std::fabs(loss));
    QCOMPARE(stats0.data_as<double>()[1] + correct1, whole_stats.data_as<double>()[1]);
    QCOMPARE(dp.read_and_reset_stats().first, 0.0);  // restarted
    QCOMPARE(dp.describe()["dp_devices"], json(2));
  }

  // One device: dp runs exactly the plain run's ops (the slice is the whole
  // batch, replicate and reduce have nothing to do), with deterministic
  // algorithms: equal up to a few float roundings (1e-6 relative; expected 0).
  void gpuOneDeviceMatchesPlainRun() {
    NEED_GPU();
    TB_GPU_TRY
    const Outcome plain = train(base_config({{"device", "cuda:0"}}));
    const Outcome dp = train(base_config({{"device", "cuda:0"}, {"parallel", "dp"}, {"dp_devices", 1}}));
    QVERIFY2(dp.tricks["parallel"]["applied"].get<bool>(), dp.tricks["parallel"].dump().c_str());
    QCOMPARE(dp.environment["dp_devices"], json(1));
    QCOMPARE(dp.environment["world_size"], json(1));
    QCOMPARE(dp.summary["dp_devices"], json(1));
    QCOMPARE(dp.losses.size(), size_t(5));
    QCOMPARE(dp.params.size(), size_t(5));
    expect_same_training(plain, dp, 1e-6, "dp 1 device");
    TB_GPU_CATCH
  }

  // ddp over NCCL, one rank (no launcher): the all-reduce of one rank leaves
  // the gradients as they are and the sampler's one shard is the whole epoch,
  // so the run equals the plain run (bit-equal on the CPU over MPI; 1e-6
  // relative allowed for the bucket copies on the device).
  void gpuOneRankNcclDdpMatchesPlainRun() {
    NEED_GPU();
    TB_GPU_TRY
#ifndef TRAINBENCH_HAVE_NCCL
    QSKIP("this build has no NCCL (the CUDA toolkit's libnccl)");
#endif
    const Outcome plain = train(base_config({{"device", "cuda:0"}}));
    const Outcome ddp = train(base_config({{"device", "cuda:0"}, {"parallel", "ddp"}}));
    QVERIFY2(ddp.tricks["parallel"]["applied"].get<bool>(), ddp.tricks["parallel"].dump().c_str());
    QCOMPARE(ddp.summary["world_size"], json(1));
    QVERIFY2(ddp.summary["ddp_transport"].get<std::string>().rfind("nccl", 0) == 0,
             ddp.summary["ddp_transport"].dump().c_str());
    QCOMPARE(ddp.losses.size(), size_t(5));
    expect_same_training(plain, ddp, 1e-6, "ddp nccl 1 rank");
    TB_GPU_CATCH
  }

  // Two devices on the mlp (no batch norm, whose statistics dp keeps per
  // replica): the same total batch (33, split 17 + 16) gives the plain run's
  // losses and parameters, up to the rounding of summing the mean gradient in
  // two parts: 1e-5 relative over 5 SGD steps.
  void gpuTwoDevicesMatchPlainRun() {
    NEED_GPU();
    TB_GPU_TRY
    if (cuda_devices() < 2) QSKIP("needs 2 GPUs; this machine has fewer");
    const json common = {{"device", "cuda:0"}, {"model", "mlp"}};
    json plain_cfg = base_config(common), dp_cfg = base_config(common);
    dp_cfg["parallel"] = "dp";
    dp_cfg["dp_devices"] = 2;
    const Outcome plain = train(plain_cfg);
    const Outcome dp = train(dp_cfg);
    QCOMPARE(dp.environment["dp_devices"], json(2));
    expect_same_training(plain, dp, 1e-5, "dp 2 devices");
    TB_GPU_CATCH
  }
};

QTEST_GUILESS_MAIN(TestDp)
#include "test_dp.moc"
