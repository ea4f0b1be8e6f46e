// SPDX-License-Identifier: GPL-3.0-or-later
// The tensor pipe profiler (tensor_pipe_profiler.h): the metric choice, the
// arithmetic and the schedule on fixed inputs, the unavailable path on the CPU
// backend (a reason, no number), and a GPU slot (QSKIP without a device, or
// where the device refuses counters) comparing an fp32 GEMM step with an fp16
// one. The GPU slot has NOT BEEN RUN: no GPU was lent when it was written.
#include <QtTest>
#include <cmath>
#include <memory>
#include <string>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/metrics/kernel_census.h"
#include "engine/metrics/tensor_pipe_profiler.h"
#include "engine/ops/linear/linear.h"
#include "tests/engine/device_fixture.h"

using namespace tb;
using json = nlohmann::json;

namespace {

const std::string kAll = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active";
const std::string kHmma = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active";
const std::string kGmma = "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active";

// A chip's metric table, as a predicate.
auto knows(std::vector<std::string> names) {
  return [names](const std::string& m) {
    return std::find(names.begin(), names.end(), m) != names.end();
  };
}

}  // namespace

class TestTensorPipe : public QObject {
  Q_OBJECT

 private slots:
  // TRAINBENCH_CUPTI=off leaves CUPTI to an outside profiler (ncu): the census,
  // these counters and a trace's device rows each say so instead of starting.
  void cuptiSwitch() {
    for (const char* on : {static_cast<const char*>(nullptr), "", "on", "1"})
      QVERIFY2(cupti_switched_off(on).empty(), on ? on : "(unset)");
    for (const char* off : {"off", "0"}) {
      const std::string r = cupti_switched_off(off);
      QVERIFY2(r.find("not available: switched off by TRAINBENCH_CUPTI=") == 0, r.c_str());
    }
    try {
      (void)cupti_switched_off("yes please");
      QFAIL("an unknown value must be refused");
    } catch (const Error& e) {
      QVERIFY2(std::string(e.what()).find("TRAINBENCH_CUPTI") != std::string::npos, e.what());
      QVERIFY2(std::string(e.what()).find("yes please") != std::string::npos, e.what());
    }
    // The process's own environment, through the census and the profiler on
    // a device backend are GPU matters; the variable is read at construction.
    qputenv("TRAINBENCH_CUPTI", "off");
    QVERIFY(!cupti_switched_off().empty());
    qunsetenv("TRAINBENCH_CUPTI");
    QVERIFY(cupti_switched_off().empty());
  }

  void candidatesPreferThePipeWideCounter() {
    const auto& c = tensor_pipe_metric_candidates();
    QCOMPARE(c.size(), size_t(3));
    QCOMPARE(c[0], std::vector<std::string>{kAll});
    QCOMPARE(c[1], (std::vector<std::string>{kHmma, kGmma}));
    QCOMPARE(c[2], std::vector<std::string>{kHmma});
    for (const auto& set : c)
      for (const std::string& m : set)
        QVERIFY2(m.ends_with(".avg.pct_of_peak_sustained_active"), m.c_str());
  }

  void firstAcceptedCandidateIsChosen() {
    const auto& c = tensor_pipe_metric_candidates();
    // A chip with every counter: the pipe-wide one.
    QCOMPARE(choose_tensor_pipe_metrics(c, knows({kHmma, kGmma, kAll})),
             std::vector<std::string>{kAll});
    // Hopper-like without the pipe-wide counter: both pipes, summed later.
    QCOMPARE(choose_tensor_pipe_metrics(c, knows({kGmma, kHmma})),
             (std::vector<std::string>{kHmma, kGmma}));
    // Ampere-like: HMMA only (the two-pipe set needs both).
    QCOMPARE(choose_tensor_pipe_metrics(c, knows({kHmma})), std::vector<std::string>{kHmma});
    // Only wgmma: no candidate fits whole, nothing is chosen.
    QVERIFY(choose_tensor_pipe_metrics(c, knows({kGmma})).empty());
    QVERIFY(choose_tensor_pipe_metrics(c, knows({})).empty());
    QVERIFY(choose_tensor_pipe_metrics({{}}, knows({kAll})).empty());  // empty set never fits
  }

  void valuesAreSummedAndClamped() {
    QCOMPARE(*combine_tensor_pipe_pct({37.5}), 37.5);
    QCOMPARE(*combine_tensor_pipe_pct({12.0, 30.5}), 42.5);
    QCOMPARE(*combine_tensor_pipe_pct({0.0}), 0.0);  // a measured 0 is a number
    QCOMPARE(*combine_tensor_pipe_pct({60.0, 40.7}), 100.0);
    QCOMPARE(*combine_tensor_pipe_pct({-0.01}), 0.0);
    QVERIFY(!combine_tensor_pipe_pct({}).has_value());
    QVERIFY(!combine_tensor_pipe_pct({12.0, std::nan("")}).has_value());
    QVERIFY(!combine_tensor_pipe_pct({INFINITY}).has_value());
  }

  void scheduleSitsBetweenCensuses() {
    QCOMPARE(tensor_pipe_schedule(50, nullptr), (std::pair<int64_t, int64_t>{26, 50}));
    QCOMPARE(tensor_pipe_schedule(1, nullptr), (std::pair<int64_t, int64_t>{1, 1}));
    QCOMPARE(tensor_pipe_schedule(50, "1"), (std::pair<int64_t, int64_t>{2, 1}));
    QCOMPARE(tensor_pipe_schedule(50, "10"), (std::pair<int64_t, int64_t>{2, 10}));
    for (const char* bad : {"", "0", "-3", "x", "5x", "2.5"})
      QVERIFY_THROWS_EXCEPTION(Error, tensor_pipe_schedule(50, bad));
  }

  void unavailableOnTheCpuGivesAReasonAndNoNumber() {
    CpuBackend cpu{BackendOptions{}};
    TensorPipeProfiler p(cpu, 1, 1);
    QVERIFY(!p.available());
    QVERIFY2(p.reason().starts_with("not available: ") && p.reason().size() > 16,
             p.reason().c_str());
    QCOMPARE(p.describe(), p.reason());
    QVERIFY(p.metrics().empty());
    QCOMPARE(p.passes(), int64_t(0));
    for (int64_t step = 1; step <= 3; ++step) {
      QVERIFY(!p.samples(step));
      p.begin_step(step);
      json m = json::object();
      QVERIFY(p.end_step(m));  // nothing failed on this step: it was never collected
      QVERIFY(!m.contains("tensor_pipe_active_pct"));
    }
  }

  // fp32 GEMMs run on the FMA pipes (the CUDA backend sets no TF32), fp16 ones
  // on the tensor pipe: the figure must tell them apart.
  void fp16GemmStepKeepsTheTensorPipeBusierThanFp32() {
    NEED_GPU();
    TB_GPU_TRY
    Backend* const gpu = &tb::test::cuda_backend();
    TensorPipeProfiler p(*gpu, 1, 1);
    if (!p.available()) QSKIP(("tensor pipe counters " + p.reason()).c_str());
    qInfo("metrics: %s", p.describe().c_str());
    const int64_t n = 4096;
    Tensor x = gpu->empty({n, n}, DType::F32), w = gpu->empty({n, n}, DType::F32);
    Tensor b = gpu->empty({n}, DType::F32), y = gpu->empty({n, n}, DType::F32);
    gpu->fill(x, 0.01), gpu->fill(w, 0.02), gpu->fill(b, 0.0);
    Tensor xh = gpu->empty({n, n}, DType::F16), wh = gpu->empty({n, n}, DType::F16);
    gpu->cast(x, xh), gpu->cast(w, wh);
    int64_t step = 0;
    // One sample: as many steps as the metric needs passes (one, normally).
    auto measure = [&](bool half) {
      json m = json::object();
      for (int64_t pass = 0; pass < p.passes(); ++pass) {
        p.begin_step(++step);
        for (int i = 0; i < 8; ++i)
          half ? linear::forward(*gpu, xh, wh, b, y) : linear::forward(*gpu, x, w, b, y);
        if (!p.end_step(m)) return std::nan("");
      }
      return m.contains("tensor_pipe_active_pct") ? m["tensor_pipe_active_pct"].get<double>()
                                                  : std::nan("");
    };
    measure(true);  // warm-up: cuBLAS picks its kernels
    const double fp32 = measure(false), fp16 = measure(true);
    QVERIFY2(p.available(), p.reason().c_str());
    qInfo("tensor pipe active: fp32 %.2f %%, fp16 %.2f %%", fp32, fp16);
    QVERIFY2(std::isfinite(fp32) && std::isfinite(fp16), "no figure on a sampled step");
    QVERIFY2(fp32 < 5.0, "fp32 GEMMs (no TF32) should leave the tensor pipe nearly idle");
    QVERIFY2(fp16 > 20.0 && fp16 > fp32 + 15.0, "fp16 GEMMs should keep the tensor pipe busy");
    TB_GPU_CATCH
  }
};

QTEST_GUILESS_MAIN(TestTensorPipe)
#include "test_tensor_pipe.moc"
