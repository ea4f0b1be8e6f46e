// SPDX-License-Identifier: GPL-3.0-or-later
// The training loop, top to bottom: make the backend, resolve the run plan
// (every trick decided once, tricks.h), open the data, build the model and
// optimizer, then per step: train_step (forward, loss, backward, optimizer;
// the same code eagerly and under graph capture) and StepTelemetry (timers,
// census, memory, the "step" events); per epoch: evaluate. The trainer knows
// Backend only, never a concrete backend.
#include "engine/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <vector>

#include "engine/amp/loss_scaler.h"
#include "engine/amp/precision_policy.h"
#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/data/dataset.h"
#include "engine/data/loader.h"
#include "engine/metrics/chrome_trace.h"
#include "engine/metrics/device_peaks.h"
#include "engine/nn/models.h"
#include "engine/nn/pad_channels.h"
#include "engine/ops/amp/amp.h"
#include "engine/ops/loss/loss.h"
#include "engine/ops/optimizer/optimizer.h"
#include "engine/optim/clip.h"
#include "engine/optim/optimizer.h"
#include "engine/optim/schedule.h"
#include "engine/parallel/data_parallel.h"
#include "engine/parallel/device_replicas.h"
#include "engine/parallel/launch.h"
#include "engine/train/input_stager.h"
#include "engine/train/step_graph.h"
#include "engine/train/step_telemetry.h"
#include "engine/train/tricks.h"

namespace tb {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kGraphWarmup = 3;  // eager steps before the first capture (cuda_graphs)

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

json dataset_spec(const RunConfig& c, int64_t limit) {
  json s = {{"name", c.dataset}};
  if (c.dataset == "synthetic") {
    s["shape"] = c.synthetic_shape;
    s["size"] = c.synthetic_size;
    s["seed"] = c.seed;
  } else if (!c.data_dir.empty()) {
    s["path"] = c.data_dir;
  }
  if (limit > 0) s["limit"] = limit;
  return s;
}

// The training-set recipe: padding to 32x32 on request, augmentation, and the
// data set's standard normalisation.
TransformOptions transform_for(const RunConfig& c, const Dataset& ds, bool train) {
  TransformOptions t;
  const Shape s = ds.sample_shape();
  if (c.pad_to_32 && (s[1] < 32 || s[2] < 32)) t.pad_to_h = t.pad_to_w = 32;
  if (train) {
    t.random_crop = c.random_crop_padding > 0;
    t.crop_padding = c.random_crop_padding;
    t.random_hflip = c.horizontal_flip;
  }
  t.norm = standard_norm_stats(c.dataset, s[0]);
  return t;
}

BackendOptions backend_options(const RunConfig& c) {
  BackendOptions bo;
  bo.deterministic = c.deterministic;
  bo.cudnn_benchmark = c.cudnn_benchmark;
  return bo;
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

// Both data sets and their loaders, shaped by the plan: pinned buffers
// (pin_memory), uint8 batches (h2d_uint8) or the data set's raw bytes
// (gpu_augment).
struct RunData {
  std::unique_ptr<Dataset> train_set, test_set;
  std::unique_ptr<DataLoader> train, test;
};

RunData open_data(const RunConfig& c, const RunPlan& plan, Backend& be, const Shard& shard) {
  RunData d;
  d.train_set = open_dataset(dataset_spec(c, c.train_limit), "train");
  d.test_set = open_dataset(dataset_spec(c, c.test_limit), "test");
  LoaderOptions lo;
  lo.batch_size = c.batch_size;
  lo.seed = c.seed;
  lo.workers = static_cast<int>(c.workers);
  lo.shuffle = true;
  lo.drop_last = true;  // equal batch shapes every step
  lo.shard = shard;     // ddp: this rank's batches of every epoch (distributed_sampler.h)
  lo.transform = transform_for(c, *d.train_set, true);
  if (plan.pinned_staging) {
    Staging* staging = be.staging();
    TB_CHECK(staging, "pin_memory: the ", be.name(), " backend has no pinned host memory");
    lo.allocator = [staging](const Shape& s, DType t) {
      return staging->pinned_host_empty(s, t);
    };
  }
  if (plan.uint8_upload) lo.format = plan.gpu_augment ? BatchFormat::Uint8Raw : BatchFormat::Uint8;
  d.train = std::make_unique<DataLoader>(*d.train_set, lo);
  lo.shuffle = false;
  lo.drop_last = false;
  lo.transform = transform_for(c, *d.test_set, false);
  d.test = std::make_unique<DataLoader>(*d.test_set, lo);
  return d;
}

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

using Log = std::function<void(const std::string& level, const std::string& message)>;

std::unique_ptr<Model> build_model(const RunConfig& c, const RunPlan& plan, Backend& be,
                                   const RunData& data, const Log& log) {
  ModelOptions mo;
  mo.conv_bias_before_bn = c.conv_bias_before_bn;
  mo.pad_channels_to = plan.pad_channels_to;
  mo.fuse_pointwise = plan.fuse_pointwise;
  std::unique_ptr<Model> model =
      make_model(c.model, data.train->image_shape(), data.train_set->num_classes(), mo);
  // device_side_init: constant parameters and buffers are filled on the device
  // (the random weights keep their host draws, so the same seed gives the same model).
  if (plan.device_side_init) model->set_device_side_init(true);
  model->build(be, c.seed, DType::F32, plan.layout);
  if (plan.device_side_init)
    log("info", "device_side_init: " + std::to_string(model->init_device_bytes()) +
                    " bytes of parameters and buffers filled on the device, " +
                    std::to_string(model->init_upload_bytes()) +
                    " bytes of random weights drawn on the host and uploaded");
  for (const auto& layer : model->layers())
    if (const auto* pad = dynamic_cast<const PadChannels*>(layer.get()))
      log("info", "pad_channels_to=" + std::to_string(c.pad_channels_to) + ": input channels " +
                      std::to_string(pad->in_channels()) + " -> " +
                      std::to_string(pad->out_channels()));
  return model;
}

// What one training step touches.
struct StepContext {
  const RunConfig& c;
  Backend& be;
  Model& model;
  Context& ctx;
  Optimizer& optimizer;
  LossScaler* scaler;  // fp16 only
  Tensor& stats;       // the device's loss-sum and correct-count accumulator
  ChromeTrace* trace;  // per-layer spans when tracing
  DataParallel* ddp = nullptr;  // ddp: gradients all-reduced in buckets during backward
  Tensor dlogits = {};
  // dp: the replicas, and the step contexts of replicas 1..n-1 (replica 0 is
  // this one). A replica's gradients are never zero-filled: its first
  // micro-batch writes them.
  DeviceReplicas* dp = nullptr;
  std::vector<StepContext>* replica_steps = nullptr;
  int replica = 0;
};

// Forward that checks every layer's output for NaN/Inf when anomaly_check is on.
// With a trace, every layer's forward is a span.
Tensor forward(StepContext& s, const Tensor& x, int64_t step) {
  if (!s.c.anomaly_check && !s.trace) return s.model.forward(s.ctx, x);
  Tensor h = x;
  for (const auto& layer : s.model.layers()) {
    {
      TraceSpan span(s.trace, layer->name(), "forward");
      h = forward_layer(s.ctx, *layer, h);
    }
    if (s.c.anomaly_check)  // f16/bf16 activations widened for the f32 sum
      TB_CHECK(std::isfinite(optimizer::sum_squares(
                   s.be, amp::is_low_precision(h.dtype()) ? amp::cast_to(s.be, h, DType::F32) : h)),
               "anomaly_check: layer '",
               layer->name(), "' produced NaN or Inf at step ", step);
  }
  return h;
}

// The same order as Model::backward, one span per layer when tracing. With
// `buckets` (ddp, the step's last micro-batch) each layer's completion may
// start the all-reduce of the bucket it fills.
void backward(StepContext& s, const Tensor& dlogits, GradientBuckets* buckets) {
  if (!s.trace && !buckets) return s.model.backward(s.ctx, dlogits);
  const auto& layers = s.model.layers();
  Tensor g = dlogits;
  for (size_t i = layers.size(); i-- > 0;) {
    {
      TraceSpan span(s.trace, layers[i]->name(), "backward");
      g = backward_layer(s.ctx, *layers[i], g, /*need_dx=*/i > 0);
    }
    if (buckets) buckets->layer_done(i);
  }
}

// Micro-batch k of K: forward, loss, backward. `share` is this replica's part
// of the micro-batch (dp; 1 otherwise), so the replicas' gradients sum to
// the mean gradient of the whole micro-batch.
void forward_backward(StepContext& s, const Tensor& x, const Tensor& y, int64_t k, int64_t K,
                      int64_t step, double share, StepTimer* timer) {
  const RunConfig& c = s.c;
  Tensor* dlogits = nullptr;
  {
    std::optional<PhaseScope> ps;
    if (timer) ps.emplace(*timer, Phase::Forward);
    Tensor logits = forward(s, x, step);
    dlogits = &ensure_buffer(s.ctx, s.dlogits, logits.shape(), logits.dtype());
    // The loss is divided by K so K micro-batches sum to one big batch's
    // gradient, and by the ranks so the all-reduced sum is their mean.
    const int64_t world = s.ddp ? s.ddp->size() : 1;
    loss::softmax_cross_entropy(s.be, logits, y, static_cast<float>(c.label_smoothing),
                                static_cast<float>(share) / static_cast<float>(K * world),
                                *dlogits, s.stats);
    if (s.scaler) s.scaler->scale_grad(*dlogits);  // dlogits *= loss scale, on the device
  }
  std::optional<PhaseScope> ps;
  if (timer) ps.emplace(*timer, Phase::Backward);
  // grad_set_to_none: the first micro-batch writes the gradients, later ones add.
  s.ctx.accumulate_grads = (s.replica == 0 && !c.grad_set_to_none) || k > 0;
  // ddp: the earlier micro-batches only accumulate (no_sync); the last
  // one's backward sends the buckets.
  GradientBuckets* buckets = s.ddp && k + 1 == K ? &s.ddp->buckets() : nullptr;
  if (buckets) buckets->begin_step();
  backward(s, *dlogits, buckets);
  if (buckets) buckets->finish();  // the block holds the mean gradient of every rank's batch
}

// One optimizer step: for each of K micro-batches, stage it, forward, loss,
// backward, then the optimizer. The same code runs eagerly and under graph
// capture (then K = 1 and no clipping or anomaly check, see
// cuda_graphs_blocker, and no timer: a graph's phases are not separated).
// dp: the parameters go to every replica first, each micro-batch is split
// across them (replica 0, timed, on this thread), and their gradients are
// summed on the primary before the optimizer.
void train_step(StepContext& s, int64_t K, int64_t step, double lr, StepTimer* timer,
                const std::function<void(Tensor& x, Tensor& y)>& stage,
                const std::function<void()>& consumed, json& metrics) {
  const RunConfig& c = s.c;
  if (s.dp) {
    std::optional<PhaseScope> ps;
    if (timer) ps.emplace(*timer, Phase::Replicate);
    s.dp->replicate();
  }
  for (int64_t k = 0; k < K; ++k) {
    Tensor x, y;
    stage(x, y);
    if (s.dp) {
      {
        std::optional<PhaseScope> ps;
        if (timer) ps.emplace(*timer, Phase::Scatter);
        s.dp->scatter(x, y);
      }
      s.dp->parallel_apply([&](int r) {
        StepContext& rs = r == 0 ? s : (*s.replica_steps)[size_t(r - 1)];
        forward_backward(rs, s.dp->x(r), s.dp->y(r), k, K, step, s.dp->share(r),
                         r == 0 ? timer : nullptr);
      });
    } else {
      forward_backward(s, x, y, k, K, step, 1.0, timer);
    }
    consumed();  // the last reader of x and y (conv weight gradients) is queued
  }
  if (s.dp) {
    std::optional<PhaseScope> ps;
    if (timer) ps.emplace(*timer, Phase::Reduce);
    s.dp->reduce_gradients();
  }
  std::optional<PhaseScope> ps;
  if (timer) ps.emplace(*timer, Phase::Optimizer);
  float grad_scale = 1.0f;
  if (s.scaler) {
    Tensor grads = s.model.grad_block();  // a view: unscaled in place, found_inf set
    s.scaler->unscale(grads);
  }
  // Clipping sees unscaled gradients; after an overflow its factor is not
  // finite, harmless since that step is skipped.
  if (c.clip_grad_norm > 0) {
    ClipResult clip = clip_grad_norm(s.be, s.model.grad_block(), c.clip_grad_norm);
    grad_scale = clip.factor;
    metrics["grad_norm"] = clip.norm;
  }
  // Under fp16 an overflow is expected and handled (the step is skipped).
  if (c.anomaly_check && !s.scaler)
    TB_CHECK(std::isfinite(optimizer::sum_squares(s.be, s.model.grad_block())),
             "anomaly_check: gradients contain NaN or Inf at step ", step);
  if (s.scaler) {
    // Skipped on the device when found_inf is set; then backoff or growth.
    s.optimizer.step(static_cast<float>(lr), grad_scale, s.scaler->state());
    s.scaler->update();
  } else {
    s.optimizer.step(static_cast<float>(lr), grad_scale);
  }
}

// Test loss and accuracy over the whole test set, without gradients; nothing
// when a stop is requested midway (a long evaluation must not hold a stop back).
// Under ddp every rank evaluates its shard to the end: the ranks agree on a stop
// only between steps, and a rank leaving early would hang the others' sum.
std::optional<std::pair<double, double>> evaluate(Backend& be, Model& model, Context& ctx,
                                                  DataLoader& loader, InputStager& stager,
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

// The evaluation between epochs, with what surrounds it: the graphs dropped
// (evaluation reallocates layer buffers for its last, smaller batch, and the
// stager's slots, so their addresses go stale; one eager step puts the
// training shapes back before the next capture) and, with
// empty_cache_between_phases, the cached memory released on both sides.
// Nothing when a stop cut the evaluation short.
std::optional<json> evaluate_phase(Backend& be, Model& model, Context& ctx, DataLoader& loader,
                                   InputStager& stager, StepGraphs* graphs,
                                   StepTelemetry& telemetry, bool empty_cache,
                                   const std::atomic<bool>& stop, DataParallel* ddp) {
  const auto t_eval = Clock::now();
  if (graphs) graphs->invalidate(1);
  if (empty_cache) telemetry.release_cached_memory();
  // Per-rank batch norm: every rank evaluates with rank 0's running statistics.
  if (ddp && !ctx.sync_batchnorm) ddp->broadcast_buffers();
  static const std::atomic<bool> never{false};
  const auto result = evaluate(be, model, ctx, loader, stager, ddp ? never : stop, ddp);
  if (empty_cache) telemetry.release_cached_memory();
  if (!result) return std::nullopt;
  return json{{"test_loss", result->first}, {"test_accuracy", result->second},
              {"eval_time_s", ms_since(t_eval) / 1e3}};
}


// Logs every trick that was asked for but is not applied, and the amp test hook.
void log_plan(const RunPlan& plan, const Log& log) {
  for (const auto& [key, st] : plan.tricks.items())
    if (st["changed"].get<bool>() && !st["applied"].get<bool>())
      log("warning", key + " = " + st["requested"].dump() + " not applied: " +
                         st.value("reason", ""));
  if (plan.precision.enabled() && !plan.applied("amp"))
    log("info", "amp = " + std::string(plan.precision.name()) +
                    " on the cpu through the reference low-precision ops (test hook)");
}

// How long the run is, in steps and epochs.
struct RunShape {
  int64_t steps_per_epoch, total_steps, epochs, samples_per_step;
};

RunShape run_shape(const RunConfig& c, const RunData& data, int world_size) {
  RunShape r;
  const int64_t K = c.accumulation_steps;
  r.steps_per_epoch = data.train->num_batches() / K;
  TB_CHECK(r.steps_per_epoch > 0, data.train_set->name(), " has ", data.train_set->size(),
           " samples: not enough for one step of batch_size ", c.batch_size,
           " x accumulation_steps ", K);
  r.total_steps = c.max_steps > 0 ? c.max_steps : c.epochs * r.steps_per_epoch;
  r.epochs = (r.total_steps + r.steps_per_epoch - 1) / r.steps_per_epoch;
  r.samples_per_step = c.batch_size * K * world_size;  // every rank's batches
  return r;
}

// Publishes run_started; returns the summary's first fields.
json publish_run_started(EventBus& bus, int64_t run_id, const RunConfig& c, Backend& be,
                         const RunPlan& plan, const Model& model, const RunData& data,
                         const RunShape& shape, int world_size, const DeviceReplicas* dp) {
  json environment = be.describe();
  environment["world_size"] = world_size;  // processes that trained this run (ddp)
  if (dp) environment.update(dp->describe());  // devices this process drove (dp)
  environment["engine_version"] = TRAINBENCH_VERSION;
  environment["compiler"] = __VERSION__;
  environment["peaks"] = device_peaks(be);  // the roofline of the per-layer profile
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

// cuda_graphs: the step as one graph launch. The batch is staged outside the
// graph and the optimizer's constants are written before it; the first launch
// for a pair of input buffers captures train_step, later ones replay it. The
// timer sees the whole step.
void graph_step(StepContext& s, StepGraphs& graphs, InputStager& stager, int64_t step, double lr,
                const std::function<void(Tensor& x, Tensor& y)>& stage_next, json& metrics) {
  Tensor x, y;
  stage_next(x, y);
  s.optimizer.write_constants(static_cast<float>(lr));
  auto staged = [&](Tensor& gx, Tensor& gy) { gx = x, gy = y; };
  graphs.run(
      x, y, [&] { train_step(s, 1, step, lr, nullptr, staged, [] {}, metrics); },
      [&] { s.optimizer.count_replayed_step(); });
  stager.consumed();
}

// ddp on CUDA: one device per process, by the launcher's local rank.
std::string device_for_rank(const std::string& device, const LaunchInfo& launch) {
  if (launch.world_size == 1) return device;
  bool cuda = device == "cuda";
  if (device == "auto")
    for (const auto& [id, name] : available_devices()) cuda = cuda || id.rfind("cuda", 0) == 0;
  return cuda ? "cuda:" + std::to_string(launch.local_rank) : device;
}

// Devices of `be`'s kind visible from its device on: what parallel: dp may drive.
int devices_from(const Backend& be) {
  if (be.device().is_cpu()) return 1;
  int n = 0;
  for (const auto& [id, name] : available_devices()) n += id.rfind("cuda:", 0) == 0;
  return std::max(1, n - be.device().index);
}

// parallel: dp: the backends of devices 2..n of the plan (after the run's own)
// and the replicas that train on them.
std::unique_ptr<DeviceReplicas> make_replicas(const RunConfig& c, const RunPlan& plan, Backend& be,
                                              Model& model, const RunData& data,
                                              const Context& ctx) {
  std::vector<std::unique_ptr<Backend>> others;
  for (int r = 1; r < plan.dp_devices; ++r)
    others.push_back(make_backend("cuda:" + std::to_string(be.device().index + r),
                                  backend_options(c)));
  const Log quiet = [](const std::string&, const std::string&) {};  // replica 0 said it all
  return std::make_unique<DeviceReplicas>(
      be, model, std::move(others),
      [&](Backend& replica_be) { return build_model(c, plan, replica_be, data, quiet); }, ctx);
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

  // --- how this process was started (mpirun, torchrun: one rank of several)
  const LaunchInfo launch = launch_for_test_ ? *launch_for_test_ : launch_from_environment();
  TB_CHECK(launch.world_size == 1 || c.parallel == "ddp", "started as ", launch.describe(),
           " but parallel is '", c.parallel, "': set parallel: ddp, or start one process");

  // --- the backend, and every trick decided once from what it reports
  std::string note;
  std::unique_ptr<Backend> backend =
      make_backend(device_for_rank(c.device, launch), backend_options(c), &note);
  Backend& be = *backend;
  if (!note.empty()) log("info", note);
  const RunPlan plan = resolve_tricks(c, be.capabilities(), be.device(),
                                      {.tracing = trace_ != nullptr,
                                       .amp_on_cpu_for_test = amp_on_cpu_,
                                       .world_size = launch.world_size,
                                       .devices = c.parallel == "dp" ? devices_from(be) : 1});
  // dp cannot fall back to one device quietly: a comparison run on the
  // wrong setup would measure nothing.
  TB_CHECK(c.parallel != "dp" || plan.dp, "parallel = dp cannot run on ", be.device().str(), ": ",
           plan.tricks["parallel"].value("reason", ""));
  TB_CHECK(!plan.dp || c.batch_size >= plan.dp_devices, "parallel = dp: batch_size ",
           c.batch_size, " cannot be split across ", plan.dp_devices,
           " devices (dp_devices; batch_size is the whole step's batch)");
  TB_CHECK(launch.world_size == 1 || plan.ddp, "parallel: ddp cannot run as ", launch.describe(),
           ": ", plan.tricks["parallel"].value("reason", ""));
  const Shard shard = plan.ddp ? Shard{launch.rank, launch.world_size} : Shard{};

  // --- data, model, optimizer, schedule
  RunData data = open_data(c, plan, be, shard);
  // Plain names, not a structured binding: lambdas below capture them (clang 14).
  const RunShape shape = run_shape(c, data, shard.count);
  const int64_t steps_per_epoch = shape.steps_per_epoch, total_steps = shape.total_steps,
                epochs = shape.epochs, samples_per_step = shape.samples_per_step;
  std::unique_ptr<Model> model = build_model(c, plan, be, data, log);
  // ddp: the communicator, every rank on rank 0's model, the gradient buckets.
  std::unique_ptr<DataParallel> ddp;
  if (plan.ddp) {
    // mpirun sends SIGKILL 1 s after its SIGTERM (communicator.h).
    const double max_grace_s = launch.launcher == LaunchInfo::Launcher::Mpi ? 0.7 : 5.0;
    WaitPolicy wait{.stop = &stop_, .grace_s = 0.5};
    ddp = std::make_unique<DataParallel>(
        make_communicator(launch, be, wait), be, *model,
        DataParallelOptions{plan.bucket_elements, plan.sync_batchnorm, max_grace_s});
    TB_CHECK(ddp->rank() == launch.rank && ddp->size() == launch.world_size, "ddp: the ",
             ddp->comm().describe(), " communicator sees rank ", ddp->rank(), " of ", ddp->size(),
             ", the launcher said ", launch.describe());
    ddp->broadcast_model();
    if (c.processes != 1 && c.processes != launch.world_size)
      log("warning", "processes = " + std::to_string(c.processes) + " but the launcher started " +
                         std::to_string(launch.world_size));
    log("info", "ddp: " + launch.describe() + " over " + ddp->comm().describe() + ", " +
                    std::to_string(ddp->buckets().buckets().size()) + " gradient bucket(s), " +
                    (plan.sync_batchnorm ? "synchronised" : "per-rank") + " batch norm");
  }
  Optimizer optimizer(OptimizerConfig::from_run(c), *model, be);
  LrSchedule schedule(ScheduleConfig::from_run(c, samples_per_step, total_steps));
  log_plan(plan, log);
  // amp: conv/linear in f16/bf16, the rest in f32; fp16 adds the dynamic loss
  // scaler, driven as engine/amp/loss_scaler.h describes.
  std::optional<LossScaler> scaler;
  if (plan.precision.needs_loss_scaling()) scaler.emplace(be);
  // --- the step's parts
  Context ctx{be};
  ctx.layout = plan.layout;
  ctx.amp = plan.precision;
  if (ddp) ctx.sync_batchnorm = ddp->batchnorm_sync();
  // dp: replicas 1..n-1 on their devices, each with its step context.
  std::unique_ptr<DeviceReplicas> dp;
  std::vector<StepContext> replica_steps;
  if (plan.dp) {
    dp = make_replicas(c, plan, be, *model, data, ctx);
    replica_steps.reserve(size_t(dp->size() - 1));
    for (int r = 1; r < dp->size(); ++r) {
      replica_steps.push_back(StepContext{c, dp->backend(r), dp->model(r), dp->context(r),
                                          optimizer, nullptr, dp->stats(r), nullptr});
      replica_steps.back().replica = r;
    }
    log("info", "dp: " + dp->describe().dump() + ", batch_size " +
                    std::to_string(c.batch_size) + " split across them every step");
  }
  summary_ = publish_run_started(bus_, run_id, c, be, plan, *model, data, shape, shard.count,
                                 dp.get());
  TrainStats train_stats(be);
  train_stats.ddp = ddp.get();
  train_stats.dp = dp.get();
  InputStager stager(be, input_options(plan, *data.train));
  StepContext step_ctx{c, be, *model, ctx, optimizer, scaler ? &*scaler : nullptr,
                       train_stats.stats.device, trace_, ddp.get()};
  step_ctx.dp = dp.get();
  step_ctx.replica_steps = &replica_steps;
  std::unique_ptr<StepGraphs> graphs;  // cuda_graphs: the whole step, captured once, replayed
  if (plan.cuda_graphs) graphs = std::make_unique<StepGraphs>(be, kGraphWarmup);
  StepTelemetry telemetry(be, plan,
                          {.measure = measure_, .measure_every = c.measure_every,
                           .timer_lag_for_test = timer_lag_for_test_,
                           .trace = trace_, .cupti_requested = c.profiler || c.cupti_sampling,
                           .samples_per_step = samples_per_step,
                           .layer_work = {.dtype = ctx.activation_dtype(),
                                          .matmul = plan.precision.dtype_for(AmpOp::Conv),
                                          .layout = plan.layout}},
                          bus_);
  StepTimer& timer = telemetry.timer();
  ctx.scopes = telemetry.layer_scopes();  // the sampled steps' per-layer times

  double last_test_acc = NAN, last_test_loss = NAN;
  int64_t step = 0;
  bool stopped = false;
  const auto run_start = Clock::now();
  // Time to accuracy: evaluations every eval_every_steps (and at epoch ends);
  // the run ends at the first one that reaches target_accuracy. Its time
  // excludes the evaluations, so how often one evaluates does not change it.
  const bool periodic_eval = c.eval_every_steps > 0 || c.target_accuracy > 0;
  double eval_seconds = 0;
  int64_t evaluated_at = -1;  // the step of the last evaluation
  json last_eval;
  bool target_reached = false;
  // False when a stop cut the evaluation short: nothing of it is recorded.
  auto evaluate_now = [&](int64_t epoch) {
    std::optional<json> eval = evaluate_phase(be, *model, ctx, *data.test, stager, graphs.get(),
                                              telemetry, plan.empty_cache_between_phases, stop_,
                                              ddp.get());
    if (!eval) {
      stopped = true;
      log("info", "stop requested: evaluation at step " + std::to_string(step) + " (epoch " +
                      std::to_string(epoch + 1) + ") cut short, not recorded");
      return false;
    }
    last_eval = std::move(*eval);
    evaluated_at = step;
    eval_seconds += last_eval["eval_time_s"].get<double>();
    last_test_loss = last_eval["test_loss"], last_test_acc = last_eval["test_accuracy"];
    if (!periodic_eval) return true;
    bus_.publish("evaluation", {{"step", step}, {"epoch", epoch}, {"metrics", last_eval}});
    if (c.target_accuracy > 0 && !target_reached && last_test_acc >= c.target_accuracy) {
      target_reached = true;
      const double wall = ms_since(run_start) / 1e3;
      summary_["steps_to_target"] = step;
      summary_["samples_to_target"] = step * samples_per_step;
      summary_["time_to_target_s"] = wall - eval_seconds;
      summary_["wall_time_to_target_s"] = wall;
      log("info", "target_accuracy " + std::to_string(c.target_accuracy) + " reached at step " +
                      std::to_string(step) + " (test accuracy " + std::to_string(last_test_acc) +
                      "): the run ends here");
    }
    return true;
  };
  // A step lasts from its boundary to the next one: the next step's, or this
  // one where an evaluation or an epoch end follows (the bench hook sees the
  // same boundaries).
  bool step_open = false;
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
      if (step_hook_) step_hook_(be, step + 1);
      telemetry.begin_step(step + 1);
      step_open = true;
      if (!c.grad_set_to_none) {
        Tensor grads = model->grad_block();
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
      const double lr = schedule.lr_for_step(step);
      const auto step_start = Clock::now();
      if (graphs && graphs->ready()) {
        graph_step(step_ctx, *graphs, stager, step, lr, stage_next, metrics);
      } else {
        train_step(step_ctx, c.accumulation_steps, step, lr, &timer, stage_next, [&] { stager.consumed(); }, metrics);
        if (graphs) graphs->eager_step_done();
      }
      timer.end_step();  // what follows, to the next boundary, is the step's end-of-step work
      ++step;
      if (step_hook_for_test_) step_hook_for_test_(step, *model);
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
      if (c.eval_every_steps > 0 && step % c.eval_every_steps == 0 && !epoch_end) {
        close_step();       // the evaluation is no step's time
        telemetry.flush();  // the step events go out before the evaluation's
        if (!evaluate_now(epoch) || target_reached) break;
      }
    }

    close_step();
    telemetry.flush();  // the epoch's last step events go out before its epoch event
    // Evaluate at the end of every epoch (and of a run cut short by max_steps
    // or by reaching target_accuracy, whose evaluation is not repeated).
    if (!stopped && evaluated_at != step) evaluate_now(epoch);
    json em = stopped ? json::object() : last_eval;
    train_stats.write_epoch_means(em);
    em["epoch_time_s"] = ms_since(epoch_start) / 1e3;
    bus_.publish("epoch", {{"epoch", epoch}, {"step", step}, {"metrics", em}});
    summary_["epochs"] = epoch + 1;
    if (target_reached) break;
  }
  if (c.target_accuracy > 0) {
    summary_["target_accuracy"] = c.target_accuracy;
    summary_["target_reached"] = target_reached;
  }

  telemetry.write_summary(summary_);
  summary_["final_test_accuracy"] = last_test_acc;
  summary_["final_test_loss"] = last_test_loss;
  summary_["final_train_loss"] = train_stats.last_loss;
  summary_["total_time_s"] = ms_since(run_start) / 1e3;
  summary_["amp"] = plan.precision.name();
  if (graphs) {  // how the steps ran (0 replays: every step was eager)
    summary_["cuda_graph_captures"] = graphs->captures();
    summary_["cuda_graph_replays"] = graphs->replays();
  }
  if (scaler) summary_["amp_skipped_steps"] = scaler->read_skipped();
  if (ddp) ddp->write_summary(summary_);
  if (dp) summary_["dp_devices"] = dp->size();
  TrainResult r{stopped ? "stopped" : "finished", summary_};
  bus_.publish("finished", {{"status", r.status}, {"summary", summary_}});
  return r;
}

}  // namespace tb
