// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// One optimizer step, whichever way the plan runs it. The trainer's loop
// calls run() once per step; the variants live here:
//
//   plain          stage the batch, forward, loss, backward, then the optimizer
//   micro-batches  accumulation_steps K: K of those before one optimizer step
//   dp             the parameters copied to every device, each micro-batch
//                  scattered across them and run in parallel, the gradients
//                  summed on the primary (engine/parallel/device_replicas.h)
//   ddp            the last micro-batch's backward all-reduces the gradient
//                  buckets as layers finish (engine/parallel/data_parallel.h)
//   cuda_graphs    a few eager warm-up steps, then the whole step captured
//                  once per input buffer pair and replayed (step_graph.h)
//
// and they compose as far as the plan allows (tricks.cpp): fp16's loss
// scaler, clipping and anomaly_check with any of them. The eager step marks
// its phases on the step timer; the step's boundaries and what follows its
// work are the trainer's (StepTelemetry).
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

namespace tb {

class ChromeTrace;
class InputStager;
class StepGraphs;
class StepTimer;
class Tensor;
struct RunSetup;
struct StepContext;  // what one replica's step touches (step_runner.cpp)

class StepRunner {
 public:
  // Puts the step's next batch on the device (images, labels): called once
  // per micro-batch, it marks its own phases (data wait, h2d).
  using StageNext = std::function<void(Tensor& images, Tensor& labels)>;

  // `stats`: the device's loss-sum and correct-count accumulator the loss
  // adds to; `stager` is told when a batch's last reader is queued; `trace`
  // (may be null) gets a span per layer.
  StepRunner(const RunSetup& setup, Tensor& stats, InputStager& stager, StepTimer& timer,
             ChromeTrace* trace);
  ~StepRunner();
  StepRunner(const StepRunner&) = delete;
  StepRunner& operator=(const StepRunner&) = delete;

  // One optimizer step at learning rate `lr` (`step` counted from 0): the
  // eager step, or under cuda_graphs its capture or replay once warmed up.
  // What the step measures on the host (grad_norm) goes into `metrics`.
  void run(int64_t step, double lr, const StageNext& stage_next, nlohmann::json& metrics);

  // Layer buffers and the stager's slots are about to be reallocated (an
  // evaluation's smaller last batch): cuda_graphs drops its graphs, and one
  // eager step puts the training shapes back before the next capture.
  void invalidate_graphs();

  // How the steps ran (cuda_graphs: captures and replays; 0 replays: every
  // step was eager).
  void write_summary(nlohmann::json& summary) const;

 private:
  std::unique_ptr<StepContext> primary_;
  // dp: the step contexts of replicas 1..n-1 (replica 0 is primary_)
  std::vector<StepContext> replicas_;
  std::unique_ptr<StepGraphs> graphs_;  // cuda_graphs: the whole step, captured once, replayed
  InputStager& stager_;
  StepTimer& timer_;
};

}  // namespace tb
