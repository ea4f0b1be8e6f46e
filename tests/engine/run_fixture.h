// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// What the trainer-level suites share: a run of the real Trainer whose events
// are kept for the test to read, and the skip of GPU slots (with the reason)
// where this build or machine has no CUDA device.
#include <QtTest>

#include <atomic>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/train/config.h"
#include "engine/train/events.h"
#include "engine/train/trainer.h"
#include "tests/engine/gpu_slot.h"
#ifdef TRAINBENCH_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#endif

namespace tb::test {

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
// times back that many steps late (Trainer::set_step_timer_lag_for_test).
inline Recorder run_trainer(const nlohmann::json& config, int lag = 0,
                            const std::atomic<bool>* stop = nullptr) {
  RunConfig c = RunConfig::from_json(validate_config(config, "test"));
  EventBus bus;
  Recorder rec;
  bus.add(&rec);
  std::atomic<bool> never{false};
  Trainer t(c, bus, stop ? *stop : never);
  t.set_step_timer_lag_for_test(lag);
  t.run(0);
  return rec;
}

// True when a CUDA device can be used; otherwise *why says why not.
inline bool gpu_available(std::string* why) {
#ifdef TRAINBENCH_HAVE_CUDA
  std::string w;
  if (cuda_device_count(&w) > 0) return true;
  *why = "no CUDA device: " + w;
#else
  *why = "this build has no CUDA backend (TRAINBENCH_CUDA=OFF or no toolkit)";
#endif
  return false;
}

}  // namespace tb::test

// First line of a GPU slot: skips it, with the reason, where there is no device.
#define NEED_GPU()                                                          \
  do {                                                                      \
    std::string why_;                                                       \
    if (!::tb::test::gpu_available(&why_)) QSKIP(qPrintable(QString::fromStdString(why_))); \
  } while (0)
