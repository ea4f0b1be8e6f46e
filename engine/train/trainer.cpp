// SPDX-License-Identifier: GPL-3.0-or-later
// The training loop, top to bottom: set the run up (RunSetup: the backend, the
// plan with every trick decided once, the data, model, optimizer and
// schedule), publish run_started, then per step: the boundary, zero the
// gradients, the learning rate, StepRunner::run (forward, loss, backward,
// optimizer in whichever variant the plan picked) and StepTelemetry (timers,
// census, memory, the "step" events); evaluations every eval_every_steps and
// per epoch; the summary. The trainer knows Backend only, never a concrete
// backend.
#include "engine/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>

#include "engine/amp/loss_scaler.h"
#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/data/dataset.h"
#include "engine/data/loader.h"
#include "engine/metrics/device_peaks.h"
#include "engine/nn/models.h"
#include "engine/ops/loss/loss.h"
#include "engine/optim/schedule.h"
#include "engine/parallel/data_parallel.h"
#include "engine/parallel/device_replicas.h"
#include "engine/train/input_stager.h"
#include "engine/train/run_setup.h"
#include "engine/train/step_runner.h"
#include "engine/train/step_telemetry.h"

namespace tb {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Loss-sum and correct-count accumulator living on the device, read back only
// when asked (sync_every_step off: no host synchronisation per step).
struct DeviceStats {
  Backend& be;
  Tensor device, host;
  explicit DeviceStats(Backend& b) : be(b) {
    device = be.empty({2}, DType::F64);
    host = Tensor::empty({2}, DType::F64);
    be.fill(device, 0.0);
  }
  // Returns {loss sum, correct} accumulated since the last read, and restarts.
  std::pair<double, double> read_and_reset() {
    be.copy(device, host);
    const double* h = host.data_as<double>();
    std::pair<double, double> r{h[0], h[1]};
    be.fill(device, 0.0);
    return r;
  }
};

// The training statistics of the current epoch, read back from the device
// every step or every log_every steps.
struct TrainStats {
  DeviceStats stats;
  DataParallel* ddp = nullptr;  // ddp: the sums are over every rank's batches
  DeviceReplicas* dp = nullptr;  // dp: and over every replica's slices
  double epoch_loss = 0, epoch_correct = 0, last_loss = NAN;
  int64_t epoch_samples = 0, pending_samples = 0;  // pending: not read back yet
  explicit TrainStats(Backend& be) : stats(be) {}
  void start_epoch() { epoch_loss = epoch_correct = 0, epoch_samples = pending_samples = 0; }
  void read(json& metrics) {
    if (pending_samples == 0) return;
    auto [loss_sum, correct] = stats.read_and_reset();
    if (dp) {
      const auto [replica_loss, replica_correct] = dp->read_and_reset_stats();
      loss_sum += replica_loss, correct += replica_correct;
    }
    double sums[3] = {loss_sum, correct, double(pending_samples)};
    if (ddp) ddp->sum(sums, 3);
    const double samples = sums[2];
    epoch_loss += sums[0], epoch_correct += sums[1], epoch_samples += int64_t(samples);
    metrics["loss"] = last_loss = sums[0] / samples;
    metrics["train_accuracy"] = sums[1] / samples;
    pending_samples = 0;
  }
  void write_epoch_means(json& metrics) const {
    if (epoch_samples == 0) return;
    metrics["train_loss"] = epoch_loss / double(epoch_samples);
    metrics["train_accuracy"] = epoch_correct / double(epoch_samples);
  }
};

InputOptions input_options(const RunPlan& plan, const DataLoader& loader) {
  InputOptions io;
  io.non_blocking = plan.non_blocking;
  io.uint8 = plan.uint8_upload;
  io.augment = plan.gpu_augment;
  if (io.uint8)
    norm_scale_shift(loader.options().transform.norm, loader.image_shape()[0], io.scale, io.shift);
  io.layout = plan.layout;  // channels_last: one explicit NCHW -> NHWC copy per batch
  return io;
}

// Test loss and accuracy over the whole test set, without gradients; nothing
// when a stop is requested midway (a long evaluation must not hold a stop back).
// Under ddp every rank evaluates its shard to the end: the ranks agree on a stop
// only between steps, and a rank leaving early would hang the others' sum.
std::optional<std::pair<double, double>> evaluate_test_set(Backend& be, Model& model,
                                                           Context& ctx, DataLoader& loader,
                                                           InputStager& stager,
                                                           const std::atomic<bool>& stop,
                                                           DataParallel* ddp) {
  ctx.training = false;
  DeviceStats eval_stats(be);
  int64_t n = 0;
  loader.start_epoch(0);
  Batch b;
  Tensor none, x, y;
  bool cut_short = false;
  while (!(cut_short = stop.load()) && loader.next(b)) {
    n += b.labels.dim(0);
    stager.stage(std::move(b), loader, x, y);
    Tensor logits = model.forward(ctx, x);
    loss::softmax_cross_entropy(be, logits, y, 0.0f, 1.0f, none, eval_stats.device);
    stager.consumed();
  }
  stager.release_all();  // the test loader's batches go home before its next epoch
  ctx.training = true;
  auto [loss_sum, correct] = eval_stats.read_and_reset();
  if (cut_short) return std::nullopt;
  double sums[3] = {loss_sum, correct, double(n)};  // ddp: each rank evaluated its shard
  if (ddp) ddp->sum(sums, 3);
  return std::pair{sums[0] / std::max(sums[2], 1.0), sums[1] / std::max(sums[2], 1.0)};
}

// Publishes run_started; returns the summary's first fields.
json publish_run_started(EventBus& bus, int64_t run_id, const RunSetup& setup) {
  const RunConfig& c = setup.config;
  Backend& be = *setup.backend;
  const RunPlan& plan = setup.plan;
  const Model& model = *setup.model;
  const RunData& data = setup.data;
  const RunShape& shape = setup.shape;
  json environment = be.describe();
  environment["world_size"] = setup.shard.count;  // processes that trained this run (ddp)
  if (setup.dp) environment.update(setup.dp->describe());  // devices this process drove (dp)
  environment["engine_version"] = TRAINBENCH_VERSION;
  environment["compiler"] = __VERSION__;
  environment["peaks"] = device_peaks(be);  // the roofline of the per-layer profile
  // The activations' memory order between layers (cpu_layout on the CPU).
  environment["activation_layout"] = layout_name(plan.activation_layout);
  if (!plan.activation_layout_reason.empty())
    environment["activation_layout_reason"] = plan.activation_layout_reason;
  bus.publish("run_started", {{"run_id", run_id},
                              {"name", c.name},
                              {"config", c.values},
                              {"environment", environment},
                              {"tricks", plan.tricks},
                              {"model", model.name()},
                              {"parameters", model.num_params()},
                              {"train_size", data.train_set->size()},
                              {"test_size", data.test_set->size()},
                              {"steps_per_epoch", shape.steps_per_epoch},
                              {"total_steps", shape.total_steps},
                              {"epochs", shape.epochs}});
  return {{"steps", 0},
          {"epochs", 0},
          {"batch_size", c.batch_size},
          {"steps_per_epoch", shape.steps_per_epoch},
          {"total_steps", shape.total_steps},
          {"effective_batch_size", shape.samples_per_step},
          {"parameters", model.num_params()},
          {"device", be.device().str()}};
}

// The run's evaluations and its time to accuracy: an evaluation every
// eval_every_steps (and at epoch ends); the run ends at the first one that
// reaches target_accuracy. Its time excludes the evaluations, so how often
// one evaluates does not change it.
class Evaluator {
 public:
  Evaluator(const RunSetup& setup, InputStager& stager, StepRunner& runner,
            StepTelemetry& telemetry, EventBus& bus, const std::atomic<bool>& stop,
            const Log& log, json& summary, Clock::time_point run_start)
      : setup_(setup), c_(setup.config), stager_(stager), runner_(runner),
        telemetry_(telemetry), bus_(bus), stop_(stop), log_(log), summary_(summary),
        run_start_(run_start), periodic_(c_.eval_every_steps > 0 || c_.target_accuracy > 0) {}

  // An evaluation between steps is due after `step` (one at the epoch's end
  // comes anyway).
  bool due(int64_t step, bool epoch_end) const {
    return c_.eval_every_steps > 0 && step % c_.eval_every_steps == 0 && !epoch_end;
  }
  // Evaluates after `step` of `epoch`. False when a stop cut the evaluation
  // short: nothing of it is recorded.
  bool evaluate(int64_t step, int64_t epoch) {
    std::optional<json> eval = evaluate_phase();
    if (!eval) {
      log_("info", "stop requested: evaluation at step " + std::to_string(step) + " (epoch " +
                       std::to_string(epoch + 1) + ") cut short, not recorded");
      return false;
    }
    last_eval_ = std::move(*eval);
    evaluated_at_ = step;
    eval_seconds_ += last_eval_["eval_time_s"].get<double>();
    last_test_loss_ = last_eval_["test_loss"], last_test_acc_ = last_eval_["test_accuracy"];
    if (!periodic_) return true;
    bus_.publish("evaluation", {{"step", step}, {"epoch", epoch}, {"metrics", last_eval_}});
    if (c_.target_accuracy > 0 && !target_reached_ && last_test_acc_ >= c_.target_accuracy) {
      target_reached_ = true;
      const double wall = ms_since(run_start_) / 1e3;
      summary_["steps_to_target"] = step;
      summary_["samples_to_target"] = step * setup_.shape.samples_per_step;
      summary_["time_to_target_s"] = wall - eval_seconds_;
      summary_["wall_time_to_target_s"] = wall;
      log_("info", "target_accuracy " + std::to_string(c_.target_accuracy) + " reached at step " +
                       std::to_string(step) + " (test accuracy " + std::to_string(last_test_acc_) +
                       "): the run ends here");
    }
    return true;
  }
  int64_t evaluated_at() const { return evaluated_at_; }  // the step of the last evaluation
  const json& last() const { return last_eval_; }
  bool target_reached() const { return target_reached_; }
  // The target's outcome and the last evaluation's figures.
  void write_summary(json& summary) const {
    if (c_.target_accuracy > 0) {
      summary["target_accuracy"] = c_.target_accuracy;
      summary["target_reached"] = target_reached_;
    }
    summary["final_test_accuracy"] = last_test_acc_;
    summary["final_test_loss"] = last_test_loss_;
  }

 private:
  std::optional<json> evaluate_phase();

  const RunSetup& setup_;
  const RunConfig& c_;
  InputStager& stager_;
  StepRunner& runner_;
  StepTelemetry& telemetry_;
  EventBus& bus_;
  const std::atomic<bool>& stop_;
  const Log& log_;
  json& summary_;
  const Clock::time_point run_start_;
  const bool periodic_;
  double eval_seconds_ = 0;
  int64_t evaluated_at_ = -1;
  json last_eval_;
  double last_test_acc_ = NAN, last_test_loss_ = NAN;
  bool target_reached_ = false;
};

// The evaluation between epochs, with what surrounds it: the graphs dropped
// (evaluation reallocates layer buffers for its last, smaller batch, and the
// stager's slots, so their addresses go stale; one eager step puts the
// training shapes back before the next capture) and, with
// empty_cache_between_phases, the cached memory released on both sides.
// Nothing when a stop cut the evaluation short.
std::optional<json> Evaluator::evaluate_phase() {
  Backend& be = *setup_.backend;
  Model& model = *setup_.model;
  Context& ctx = *setup_.ctx;
  DataLoader& loader = *setup_.data.test;
  DataParallel* ddp = setup_.ddp.get();
  const bool empty_cache = setup_.plan.empty_cache_between_phases;
  const auto t_eval = Clock::now();
  runner_.invalidate_graphs();
  if (empty_cache) telemetry_.release_cached_memory();
  // Per-rank batch norm: every rank evaluates with rank 0's running statistics.
  if (ddp && !ctx.sync_batchnorm) ddp->broadcast_buffers();
  static const std::atomic<bool> never{false};
  const auto result =
      evaluate_test_set(be, model, ctx, loader, stager_, ddp ? never : stop_, ddp);
  if (empty_cache) telemetry_.release_cached_memory();
  if (!result) return std::nullopt;
  return json{{"test_loss", result->first}, {"test_accuracy", result->second},
              {"eval_time_s", ms_since(t_eval) / 1e3}};
}

}  // namespace

Trainer::Trainer(RunConfig config, EventBus& bus, const std::atomic<bool>& stop)
    : config_(std::move(config)), bus_(bus), stop_(stop) {
  const char* env = std::getenv("TRAINBENCH_MEASURE");
  measure_ = !(env && std::strcmp(env, "off") == 0);
}

TrainResult Trainer::run(int64_t run_id) {
  const RunConfig& c = config_;
  const Log log = [&](const std::string& level, const std::string& message) {
    bus_.publish("log", {{"level", level}, {"message", message}});
  };

  // --- everything decided and built before the first step
  const RunSetup setup(c,
                       {.tracing = trace_ != nullptr,
                        .amp_on_cpu_for_test = amp_on_cpu_,
                        .launch_for_test = launch_for_test_},
                       stop_, log);
  Backend& be = *setup.backend;
  const RunPlan& plan = setup.plan;
  const RunData& data = setup.data;
  Model& model = *setup.model;
  DataParallel* ddp = setup.ddp.get();
  LossScaler* scaler = setup.scaler.get();
  const int64_t steps_per_epoch = setup.shape.steps_per_epoch,
                total_steps = setup.shape.total_steps, epochs = setup.shape.epochs;
  summary_ = publish_run_started(bus_, run_id, setup);

  // --- what the steps share: the statistics, the input path, the step, its measurement
  TrainStats train_stats(be);
  train_stats.ddp = ddp;
  train_stats.dp = setup.dp.get();
  InputStager stager(be, input_options(plan, *data.train));
  StepTelemetry telemetry(be, plan,
                          {.measure = measure_, .measure_every = c.measure_every,
                           .timer_lag_for_test = timer_lag_for_test_,
                           .trace = trace_, .cupti_requested = c.profiler || c.cupti_sampling,
                           .samples_per_step = setup.shape.samples_per_step,
                           .layer_work = {.dtype = setup.ctx->activation_dtype(),
                                          .matmul = plan.precision.dtype_for(AmpOp::Conv),
                                          .layout = plan.activation_layout}},
                          bus_);
  StepTimer& timer = telemetry.timer();
  setup.ctx->scopes = telemetry.layer_scopes();  // the sampled steps' per-layer times
  StepRunner runner(setup, train_stats.stats.device, stager, timer, trace_);

  int64_t step = 0;
  bool stopped = false;
  const auto run_start = Clock::now();
  Evaluator evaluator(setup, stager, runner, telemetry, bus_, stop_, log, summary_, run_start);
  // A step lasts from its boundary to the next one: the next step's, or this
  // one where an evaluation or an epoch end follows (the bench hook sees the
  // same boundaries).
  bool step_open = false;
  auto open_step = [&] {
    if (step_hook_) step_hook_(be, step + 1);
    telemetry.begin_step(step + 1);
    step_open = true;
  };
  auto close_step = [&] {
    if (!step_open) return;
    if (step_hook_) step_hook_(be, step + 1);
    telemetry.close_step();
    step_open = false;
  };
  for (int64_t epoch = 0; epoch < epochs && !stopped; ++epoch) {
    const auto epoch_start = Clock::now();
    data.train->start_epoch(epoch);
    train_stats.start_epoch();
    for (int64_t s = 0; s < steps_per_epoch && step < total_steps; ++s) {
      open_step();
      if (!c.grad_set_to_none) {
        Tensor grads = model.grad_block();
        be.fill(grads, 0.0);
      }
      int64_t h2d_bytes = 0;
      json metrics;
      // The next batch on the device. There is no copy on the host: no h2d
      // phase there. With non_blocking it times only the exposed copy.
      auto stage_next = [&](Tensor& x, Tensor& y) {
        Batch b;
        {
          // On the step's own clock (an event pair on a GPU), so the wait
          // counts where it kept the device idle and never exceeds the step.
          PhaseScope ps(timer, Phase::DataWait);
          TB_CHECK(data.train->next(b), "data loader ended early in epoch ", epoch);
        }
        train_stats.pending_samples += b.labels.dim(0);
        std::optional<PhaseScope> ps;
        if (!plan.on_host) ps.emplace(timer, Phase::H2D);
        stager.stage(std::move(b), *data.train, x, y);
        h2d_bytes += stager.last_bytes();
      };
      const double lr = setup.schedule->lr_for_step(step);
      const auto step_start = Clock::now();
      runner.run(step, lr, stage_next, metrics);
      timer.end_step();  // what follows, to the next boundary, is the step's end-of-step work
      ++step;
      if (step_hook_for_test_) step_hook_for_test_(step, model);
      // ddp: every rank stops after the same step; rank 0 gathers the step times.
      const bool stop_now = ddp ? ddp->end_step(stop_.load(), ms_since(step_start), metrics)
                                : stop_.load();
      if (c.sync_every_step || step % c.log_every == 0 || s + 1 == steps_per_epoch ||
          step == total_steps) {
        train_stats.read(metrics);
        if (scaler) {  // the scaler's only host reads
          metrics["loss_scale"] = scaler->read_scale();
          metrics["amp_skipped_steps"] = double(scaler->read_skipped());
        }
      }
      metrics["lr"] = lr;
      telemetry.end_step(step, epoch, std::move(metrics), h2d_bytes);
      summary_["steps"] = step;
      if (stop_now) {
        stopped = true;
        log("info", "stop requested: ending after step " + std::to_string(step));
        break;
      }
      const bool epoch_end = s + 1 == steps_per_epoch || step == total_steps;
      if (evaluator.due(step, epoch_end)) {
        close_step();       // the evaluation is no step's time
        telemetry.flush();  // the step events go out before the evaluation's
        if (!evaluator.evaluate(step, epoch)) stopped = true;
        if (stopped || evaluator.target_reached()) break;
      }
    }

    close_step();
    telemetry.flush();  // the epoch's last step events go out before its epoch event
    // Evaluate at the end of every epoch (and of a run cut short by max_steps
    // or by reaching target_accuracy, whose evaluation is not repeated).
    if (!stopped && evaluator.evaluated_at() != step && !evaluator.evaluate(step, epoch))
      stopped = true;
    json em = stopped ? json::object() : evaluator.last();
    train_stats.write_epoch_means(em);
    em["epoch_time_s"] = ms_since(epoch_start) / 1e3;
    bus_.publish("epoch", {{"epoch", epoch}, {"step", step}, {"metrics", em}});
    summary_["epochs"] = epoch + 1;
    if (evaluator.target_reached()) break;
  }

  evaluator.write_summary(summary_);
  telemetry.write_summary(summary_);
  summary_["final_train_loss"] = train_stats.last_loss;
  summary_["total_time_s"] = ms_since(run_start) / 1e3;
  summary_["amp"] = plan.precision.name();
  runner.write_summary(summary_);
  if (scaler) summary_["amp_skipped_steps"] = scaler->read_skipped();
  if (ddp) ddp->write_summary(summary_);
  if (setup.dp) summary_["dp_devices"] = setup.dp->size();
  TrainResult r{stopped ? "stopped" : "finished", summary_};
  json finished = {{"status", r.status}, {"summary", summary_}};
  // The kernel path each shape took (the CPU convolutions pick theirs on a
  // shape's first call: ops/conv/conv_cpu_paths.h), known only now; the store
  // adds them to the run's environment.
  if (json paths = be.describe().value("kernel_paths", json()); !paths.is_null())
    finished["kernel_paths"] = std::move(paths);
  bus_.publish("finished", finished);
  return r;
}

}  // namespace tb
