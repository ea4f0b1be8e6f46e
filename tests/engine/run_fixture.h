// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// What the trainer-level suites share: a run of the real Trainer whose events
// are kept for the test to read; the device fixture (device_fixture.h: the
// backends, NEED_GPU) comes with it.
#include <QtTest>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/data/idx_dataset.h"
#include "engine/train/config.h"
#include "engine/train/events.h"
#include "engine/train/trainer.h"
#include "tests/engine/device_fixture.h"

namespace tb::test {

// Where the suites find Fashion-MNIST: $TB_TEST_FASHION_MNIST_DIR (the GPU
// check points it at the data it carried; the GPU machine has no
// dataset-fashion-mnist package), else the package's folder.
inline std::string fashion_mnist_dir() {
  const char* dir = std::getenv("TB_TEST_FASHION_MNIST_DIR");
  return dir && *dir ? dir : kFashionMnistDefaultDir;
}

struct Recorder final : EventSink {
  std::vector<nlohmann::json> events;
  void on_event(const nlohmann::json& e) override { events.push_back(e); }
  std::vector<nlohmann::json> of(const std::string& type) const {
    std::vector<nlohmann::json> out;
    for (const nlohmann::json& e : events)
      if (e["type"] == type) out.push_back(e);
    return out;
  }
};

// Trains `config` (validated) and returns every event. lag > 0 hands step
// times back that many steps late (Trainer::set_step_timer_lag_for_test);
// `configure` sets the trainer's other test hooks before it runs.
inline Recorder run_trainer(const nlohmann::json& config, int lag = 0,
                            const std::atomic<bool>* stop = nullptr,
                            const std::function<void(Trainer&)>& configure = {}) {
  RunConfig c = RunConfig::from_json(validate_config(config, "test"));
  EventBus bus;
  Recorder rec;
  bus.add(&rec);
  std::atomic<bool> never{false};
  Trainer t(c, bus, stop ? *stop : never);
  t.set_step_timer_lag_for_test(lag);
  if (configure) configure(t);
  t.run(0);
  return rec;
}

}  // namespace tb::test
