// SPDX-License-Identifier: GPL-3.0-or-later
// Time to accuracy: evaluations every eval_every_steps, and a run that ends
// at the first evaluation reaching target_accuracy, recording the steps, the
// samples and the training time (evaluations excluded) it took.
#include <QtTest>

#include <nlohmann/json.hpp>

#include "engine/store/run_store.h"
#include "tests/engine/run_fixture.h"

using namespace tb;
using json = nlohmann::json;

namespace {

json base(json overrides = json::object()) {
  json c = {{"device", "cpu"},    {"model", "fmnist-cnn"}, {"train_limit", 512},
            {"test_limit", 128},  {"batch_size", 32},      {"epochs", 2},
            {"seed", 3},          {"eval_every_steps", 4}};
  for (auto& [k, v] : overrides.items()) c[k] = v;
  return c;
}

}  // namespace

class TestTimeToTarget : public QObject {
  Q_OBJECT
  test::Recorder free_run_;  // base() without a target: shared by two tests

 private slots:
  void initTestCase() {
    if (!QFile::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"))
      QSKIP("Fashion-MNIST is not installed (Debian package dataset-fashion-mnist; scripts/setup.sh)");
    free_run_ = test::run_trainer(base());
  }

  // Every eval_every_steps steps and at each epoch end; no evaluation events without it.
  void evaluationsEveryNSteps() {
    const test::Recorder& r = free_run_;
    std::vector<int64_t> steps;
    for (const json& e : r.of("evaluation")) {
      steps.push_back(e["step"].get<int64_t>());
      QVERIFY(e["metrics"]["test_accuracy"].is_number());
    }
    // 16 steps per epoch, 32 in all: 4, 8, 12, 16 (the epoch end), 20, ...
    QCOMPARE(steps, (std::vector<int64_t>{4, 8, 12, 16, 20, 24, 28, 32}));
    QCOMPARE(r.of("epoch").size(), size_t(2));
    QVERIFY(test::run_trainer(base({{"eval_every_steps", 0}, {"epochs", 1}})).of("evaluation").empty());
  }

  // The same seed trains the same model, so the run with a target stops at
  // the first evaluation of the free run whose accuracy reaches it.
  void stopsAtTheFirstEvaluationReachingTheTarget() {
    const auto evals = free_run_.of("evaluation");
    // The target: the accuracy of the first evaluation that beats every earlier one after the first.
    size_t k = 0;
    double best = evals[0]["metrics"]["test_accuracy"].get<double>();
    for (size_t i = 1; i < evals.size(); ++i) {
      const double acc = evals[i]["metrics"]["test_accuracy"].get<double>();
      if (acc > best) {
        k = i;
        break;
      }
      best = std::max(best, acc);
    }
    QVERIFY2(k > 0, "the free run never improved on its first evaluation");
    const double target = evals[k]["metrics"]["test_accuracy"].get<double>();
    const int64_t expected_step = evals[k]["step"].get<int64_t>();

    const test::Recorder r = test::run_trainer(base({{"target_accuracy", target}}));
    const json summary = r.of("finished").at(0)["summary"];
    QCOMPARE(r.of("finished").at(0)["status"].get<std::string>(), std::string("finished"));
    QVERIFY(summary["target_reached"].get<bool>());
    QCOMPARE(summary["steps_to_target"].get<int64_t>(), expected_step);
    QCOMPARE(summary["steps"].get<int64_t>(), expected_step);  // it stopped there
    QCOMPARE(summary["samples_to_target"].get<int64_t>(), expected_step * 32);
    QCOMPARE(r.of("evaluation").size(), k + 1);
    QCOMPARE(summary["final_test_accuracy"].get<double>(), target);
    const double t = summary["time_to_target_s"].get<double>();
    QVERIFY(t > 0 && t < summary["wall_time_to_target_s"].get<double>());  // evaluations excluded
    // The epoch event of the cut epoch carries that evaluation, not a second one.
    QCOMPARE(r.of("epoch").back()["metrics"]["test_accuracy"].get<double>(), target);
  }

  void unreachedTargetRunsToTheEnd() {
    const test::Recorder r = test::run_trainer(base({{"target_accuracy", 0.999}, {"epochs", 1}}));
    const json summary = r.of("finished").at(0)["summary"];
    QCOMPARE(summary["steps"].get<int64_t>(), int64_t(16));
    QVERIFY(!summary["target_reached"].get<bool>());
    QVERIFY(!summary.contains("steps_to_target"));
    QCOMPARE(summary["target_accuracy"].get<double>(), 0.999);
  }

  // A target with no eval_every_steps is checked at the epoch ends.
  void targetAtEpochEndsOnly() {
    const test::Recorder r =
        test::run_trainer(base({{"eval_every_steps", 0}, {"target_accuracy", 0.01}, {"epochs", 3}}));
    const json summary = r.of("finished").at(0)["summary"];
    QCOMPARE(summary["steps_to_target"].get<int64_t>(), int64_t(16));
    QCOMPARE(summary["epochs"].get<int64_t>(), int64_t(1));
  }

  // The store keeps the evaluations as step series beside the epoch series.
  void evaluationsAreStoredAsStepSeries() {
    QTemporaryDir dir;
    RunStore store(dir.filePath("runs.db").toStdString());
    RunRecord rec;
    const int64_t id = store.create_run(rec);
    EventBus bus;
    StoreSink sink(store, id);
    bus.add(&sink);
    std::atomic<bool> stop{false};
    Trainer(RunConfig::from_json(validate_config(base({{"epochs", 1}}), "test")), bus, stop).run(id);
    // The sink writes from its own thread: everything is in once it is closed.
    QCOMPARE(QString::fromStdString(sink.close(std::chrono::seconds(30))), QString());
    const auto acc = store.step_series(id, "test_accuracy");
    QCOMPARE(acc.size(), size_t(4));
    QCOMPARE(acc[0].step, int64_t(4));
    QCOMPARE(store.epoch_series(id, "test_accuracy").size(), size_t(1));
    QCOMPARE(store.epoch_series(id, "test_accuracy")[0].value, acc.back().value);
  }
};

QTEST_GUILESS_MAIN(TestTimeToTarget)
#include "test_time_to_target.moc"
