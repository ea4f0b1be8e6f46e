// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <optional>

#include "engine/amp/loss_scaler.h"
#include "engine/amp/precision_policy.h"
#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/data/dataset.h"
#include "engine/data/loader.h"
#include "engine/metrics/chrome_trace.h"
#include "engine/metrics/kernel_census.h"
#include "engine/metrics/nvml_telemetry.h"
#include "engine/metrics/process_memory.h"
#include "engine/metrics/step_timer.h"
#include "engine/metrics/tensor_pipe_profiler.h"
#include "engine/nn/models.h"
#include "engine/nn/pad_channels.h"
#include "engine/optim/clip.h"
#include "engine/optim/optimizer.h"
#include "engine/optim/schedule.h"
#include "engine/train/input_stager.h"
#include "engine/train/step_graph.h"
#include "engine/train/tricks.h"

#ifdef TRAINBENCH_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/metrics/cuda_step_timer.h"
#endif

namespace tb {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) m = 0.5 * (m + *std::max_element(v.begin(), v.begin() + mid));
  return m;
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

// Loss-sum and correct-count accumulator living on the device, read back only
// when asked (trick 16: no host synchronisation per step).
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

// GPU memory series: the allocator's figures every step (host-side counters),
// the driver's used/total when query_device (a driver call: every 10 steps).
void write_memory_metrics(const DeviceMemoryStats& m, json& metrics) {
  metrics["gpu_mem_allocated_bytes"] = double(m.allocated_bytes);
  metrics["gpu_mem_reserved_bytes"] = double(m.reserved_bytes);
  metrics["gpu_mem_peak_bytes"] = double(m.peak_allocated_bytes);
  if (m.device_used_bytes >= 0) {
    metrics["gpu_mem_used_bytes"] = double(m.device_used_bytes);
    metrics["gpu_mem_total_bytes"] = double(m.device_total_bytes);
  }
}

constexpr int64_t kCensusInterval = 50;  // steps between sampled kernel censuses

// Trick 20 between training and evaluation: cached blocks go back to the
// driver and the peak counters restart, so each phase's own peak shows. The
// run's peak so far is kept first.
void release_cached_memory(Backend& be, int64_t& run_peak_bytes) {
  if (std::optional<DeviceMemoryStats> m = be.memory_stats(false))
    run_peak_bytes = std::max(run_peak_bytes, m->peak_allocated_bytes);
  be.empty_cache();
  be.reset_peak_memory();
}

// Phase times: CUDA events on the CUDA backend (device time, read back a few
// steps late: measuring never waits for the device), steady_clock on the CPU.
std::unique_ptr<StepTimer> make_step_timer(Backend& be, bool measure, int test_lag) {
  std::unique_ptr<StepTimer> t;
#ifdef TRAINBENCH_HAVE_CUDA
  if (auto* cuda = dynamic_cast<CudaBackend*>(&be))
    t = std::make_unique<CudaStepTimer>(static_cast<cudaStream_t>(cuda->stream_handle()), 3, 64,
                                        measure);
#endif
  if (!t) {
    if (measure)
      t = std::make_unique<HostStepTimer>(/*report_h2d=*/!be.device().is_cpu());
    else
      t = std::make_unique<TotalOnlyStepTimer>();
  }
  if (test_lag > 0) t = std::make_unique<LaggedStepTimer>(std::move(t), test_lag);
  return t;
}

}  // namespace

Trainer::Trainer(RunConfig config, EventBus& bus, const std::atomic<bool>& stop)
    : config_(std::move(config)), bus_(bus), stop_(stop) {
  const char* env = std::getenv("TRAINBENCH_MEASURE");
  measure_ = !(env && std::strcmp(env, "off") == 0);
}

TrainResult Trainer::run(int64_t run_id) {
  const RunConfig& c = config_;
  auto log = [&](const std::string& level, const std::string& message) {
    bus_.publish("log", {{"level", level}, {"message", message}});
  };

  // --- backend
  BackendOptions bo;
  bo.deterministic = c.deterministic;
  bo.cudnn_benchmark = c.cudnn_benchmark;
  std::string note;
  std::unique_ptr<Backend> backend = make_backend(c.device, bo, &note);
  Backend& be = *backend;
  if (!note.empty()) log("info", note);
  const bool on_host = be.device().is_cpu();

  // --- data
  std::unique_ptr<Dataset> train_set = open_dataset(dataset_spec(c, c.train_limit), "train");
  std::unique_ptr<Dataset> test_set = open_dataset(dataset_spec(c, c.test_limit), "test");
  LoaderOptions lo;
  lo.batch_size = c.batch_size;
  lo.seed = c.seed;
  lo.workers = static_cast<int>(c.workers);
  lo.shuffle = true;
  lo.drop_last = true;  // equal batch shapes every step
  lo.transform = transform_for(c, *train_set, true);
  // Tricks 4 and 6 change where the loader's buffers live and what they hold.
  if (!on_host && c.pin_memory)
    lo.allocator = [&be](const Shape& s, DType t) { return be.pinned_host_empty(s, t); };
  if (!on_host && c.h2d_uint8) lo.format = BatchFormat::Uint8;
  // Trick 15: the data set's bytes go up as they are; the device transforms them.
  const bool gpu_augment = !on_host && c.gpu_augment;
  if (gpu_augment) lo.format = BatchFormat::Uint8Raw;
  DataLoader train_loader(*train_set, lo);
  lo.shuffle = false;
  lo.drop_last = false;
  lo.transform = transform_for(c, *test_set, false);
  DataLoader test_loader(*test_set, lo);

  const int64_t K = c.accumulation_steps;
  const int64_t steps_per_epoch = train_loader.num_batches() / K;
  TB_CHECK(steps_per_epoch > 0, train_set->name(), " has ", train_set->size(),
           " samples: not enough for one step of batch_size ", c.batch_size,
           " x accumulation_steps ", K);
  const int64_t total_steps = c.max_steps > 0 ? c.max_steps : c.epochs * steps_per_epoch;
  const int64_t epochs = (total_steps + steps_per_epoch - 1) / steps_per_epoch;
  const int64_t samples_per_step = c.batch_size * K;

  // --- model and optimizer
  ModelOptions mo;
  mo.conv_bias_before_bn = c.conv_bias_before_bn;
  // Tricks 8 (channels_last) and 22 (pad_channels_to) are cuda-only (schema
  // backends "cuda"; resolve_tricks reports them not applied on the CPU).
  const Layout act_layout = c.channels_last && !on_host ? Layout::NHWC : Layout::NCHW;
  if (!on_host) mo.pad_channels_to = c.pad_channels_to;
  mo.fuse_pointwise = c.fuse_pointwise;
  std::unique_ptr<Model> model =
      make_model(c.model, train_loader.image_shape(), train_set->num_classes(), mo);
  // Trick 15: constant parameters and buffers are filled on the device (the
  // random weights keep their host draws, so the same seed gives the same model).
  if (!on_host && c.device_side_init) model->set_device_side_init(true);
  // NHWC: KRSC filters and NHWC activations end to end (cuDNN's channels-last).
  model->build(be, c.seed, DType::F32, act_layout);
  if (!on_host && c.device_side_init)
    log("info", "device_side_init: " + std::to_string(model->init_device_bytes()) +
                    " bytes of parameters and buffers filled on the device, " +
                    std::to_string(model->init_upload_bytes()) +
                    " bytes of random weights drawn on the host and uploaded");
  for (const auto& layer : model->layers())
    if (const auto* pad = dynamic_cast<const PadChannels*>(layer.get()))
      log("info", "pad_channels_to=" + std::to_string(c.pad_channels_to) + ": input channels " +
                      std::to_string(pad->in_channels()) + " -> " +
                      std::to_string(pad->out_channels()));

  OptimizerConfig oc;
  oc.kind = optimizer_from_name(c.optimizer);
  oc.lr = static_cast<float>(c.lr);
  oc.momentum = static_cast<float>(c.momentum);
  oc.nesterov = c.nesterov;
  oc.weight_decay = static_cast<float>(c.weight_decay);
  oc.beta1 = static_cast<float>(c.beta1);
  oc.beta2 = static_cast<float>(c.beta2);
  oc.eps = static_cast<float>(c.eps);
  oc.alpha = static_cast<float>(c.alpha);
  oc.multi_tensor = c.optimizer_foreach;
  Optimizer optimizer(oc, *model, be);

  ScheduleConfig sc;
  sc.kind = schedule_from_name(c.schedule);
  sc.base_lr = scaled_lr(c.lr, samples_per_step, c.base_batch_size,
                         lr_scaling_from_name(c.lr_scaling));
  sc.total_steps = total_steps;
  sc.warmup_steps = c.warmup_steps;
  sc.step_size = c.step_size;
  sc.gamma = c.gamma;
  sc.min_lr = c.min_lr;
  LrSchedule schedule(sc);

  // --- what this run honours
  const json tricks = resolve_tricks(c, be.device());
  for (const auto& [key, st] : tricks.items())
    if (st["changed"].get<bool>() && !st["applied"].get<bool>())
      log("warning", key + " = " + st["requested"].dump() + " not applied: " +
                         st.value("reason", ""));

  // --- mixed precision (trick 1): conv/linear in f16/bf16, the rest in f32; fp16
  // adds the dynamic loss scaler, driven as engine/amp/loss_scaler.h describes.
  const PrecisionPolicy amp_policy = PrecisionPolicy::from_config(c.amp);
  const bool amp_on = amp_policy.enabled() && (tricks["amp"]["applied"].get<bool>() || amp_on_cpu_);
  if (amp_on && !tricks["amp"]["applied"].get<bool>())
    log("info", "amp = " + std::string(amp_policy.name()) +
                    " on the cpu through the reference low-precision ops (test hook)");
  std::optional<LossScaler> scaler;
  if (amp_on && amp_policy.needs_loss_scaling()) scaler.emplace(be);

  json environment = be.describe();
  environment["engine_version"] = TRAINBENCH_VERSION;
  environment["compiler"] = __VERSION__;
  summary_ = {{"steps", 0},
              {"epochs", 0},
              {"batch_size", c.batch_size},
              {"steps_per_epoch", steps_per_epoch},
              {"effective_batch_size", samples_per_step},
              {"parameters", model->num_params()},
              {"device", be.device().str()}};

  bus_.publish("run_started", {{"run_id", run_id},
                            {"name", c.name},
                            {"config", c.values},
                            {"environment", environment},
                            {"tricks", tricks},
                            {"model", model->name()},
                            {"parameters", model->num_params()},
                            {"train_size", train_set->size()},
                            {"test_size", test_set->size()},
                            {"steps_per_epoch", steps_per_epoch},
                            {"total_steps", total_steps},
                            {"epochs", epochs}});

  Context ctx{be};
  ctx.dtype = DType::F32;
  ctx.layout = act_layout;
  if (amp_on) ctx.amp = amp_policy;
  DeviceStats train_stats(be);
  InputOptions io;
  io.non_blocking = !on_host && c.non_blocking;
  io.uint8 = !on_host && (c.h2d_uint8 || gpu_augment);
  io.augment = gpu_augment;
  if (io.uint8)
    norm_scale_shift(train_loader.options().transform.norm, train_loader.image_shape()[0],
                     io.scale, io.shift);
  io.layout = act_layout;  // channels_last: one explicit NCHW -> NHWC copy per batch
  InputStager stager(be, io);

  // Forward that checks every layer's output for NaN/Inf when anomaly_check is on.
  // With a trace, every layer's forward is a span.
  auto forward = [&](const Tensor& x, int64_t step) {
    if (!c.anomaly_check && !trace_) return model->forward(ctx, x);
    Tensor h = x;
    for (const auto& layer : model->layers()) {
      {
        TraceSpan span(trace_, layer->name(), "forward");
        h = layer->forward(ctx, h);
      }
      if (c.anomaly_check)
        TB_CHECK(std::isfinite(be.sum_squares(h)), "anomaly_check: layer '", layer->name(),
                 "' produced NaN or Inf at step ", step);
    }
    return h;
  };
  // The same order as Model::backward, one span per layer when tracing.
  auto backward = [&](const Tensor& dlogits) {
    if (!trace_) return model->backward(ctx, dlogits);
    const auto& layers = model->layers();
    Tensor g = dlogits;
    for (size_t i = layers.size(); i-- > 0;) {
      TraceSpan span(trace_, layers[i]->name(), "backward");
      g = layers[i]->backward(ctx, g, /*need_dx=*/i > 0);
    }
  };

  // Ends early (eval_cut_short) when a stop is requested: a long evaluation
  // must not hold a stop signal back.
  bool eval_cut_short = false;
  auto evaluate = [&]() -> std::pair<double, double> {
    ctx.training = false;
    DeviceStats eval_stats(be);
    int64_t n = 0;
    test_loader.start_epoch(0);
    Batch b;
    Tensor none, x, y;
    while (!(eval_cut_short = stop_.load()) && test_loader.next(b)) {
      n += b.labels.dim(0);
      stager.stage(std::move(b), test_loader, x, y);
      Tensor logits = model->forward(ctx, x);
      be.softmax_cross_entropy(logits, y, 0.0f, 1.0f, none, eval_stats.device);
      stager.consumed();
    }
    stager.release_all();  // the test loader's batches go home before its next epoch
    ctx.training = true;
    auto [loss_sum, correct] = eval_stats.read_and_reset();
    return {loss_sum / std::max<int64_t>(n, 1), correct / std::max<int64_t>(n, 1)};
  };

  Tensor dlogits_buf;

  // Trick 24: the whole step as a CUDA graph after kGraphWarmup eager steps
  // (the reasons it cannot apply are in resolve_tricks). Not with a trace,
  // whose per-layer spans a replay cannot give.
  constexpr int kGraphWarmup = 3;
  std::unique_ptr<StepGraphs> graphs;
  if (tricks["cuda_graphs"]["applied"].get<bool>() && c.cuda_graphs) {
    if (trace_)
      log("warning", "cuda_graphs not applied: a trace records per-layer spans, a replay has none");
    else if (!be.supports_graphs())
      log("warning", "cuda_graphs not applied: the " + be.name() + " backend cannot capture");
    else
      graphs = std::make_unique<StepGraphs>(be, kGraphWarmup);
  }
  std::vector<double> step_ms;
  step_ms.reserve(static_cast<size_t>(total_steps));
  double last_test_acc = NAN, last_test_loss = NAN, last_train_loss = NAN;
  int64_t step = 0;
  bool stopped = false;
  const auto run_start = Clock::now();
  double cpu_mark = process_cpu_seconds();
  auto wall_mark = Clock::now();
  std::unique_ptr<StepTimer> base_timer = make_step_timer(be, measure_, timer_lag_for_test_);
  std::unique_ptr<TracingStepTimer> tracing_timer;
  if (trace_) tracing_timer = std::make_unique<TracingStepTimer>(*base_timer, *trace_);
  StepTimer& timer = trace_ ? static_cast<StepTimer&>(*tracing_timer) : *base_timer;

  // A step's event goes out when its times are known: at once with host
  // timers, a few steps later with CUDA events (so no step waits to be timed).
  struct PendingStep {
    int64_t step, epoch;
    json metrics;
  };
  std::deque<PendingStep> pending;
  auto publish_ready = [&](bool flush) {
    if (flush) timer.flush();
    while (std::optional<StepTimes> t = timer.poll()) {
      TB_CHECK(!pending.empty() && pending.front().step == t->step, "step timer: times of step ",
               t->step, " arrived, but the next unpublished step is ",
               pending.empty() ? int64_t(-1) : pending.front().step);
      PendingStep p = std::move(pending.front());
      pending.pop_front();
      step_ms.push_back(t->total_ms);
      if (measure_)
        t->write_metrics(p.metrics);
      else
        p.metrics["step_time_ms"] = t->total_ms;
      p.metrics["samples_per_s"] = 1e3 * double(samples_per_step) / t->total_ms;
      bus_.publish("step", {{"step", p.step}, {"epoch", p.epoch}, {"metrics", p.metrics}});
    }
  };

  // GPU telemetry (NVML, from the driver at run time); absent, with the reason
  // logged, where there is none. NVML numbers devices in PCI order, CUDA
  // fastest first: the same on one-GPU machines.
  std::unique_ptr<NvmlTelemetry> nvml;
  if (!on_host) {
    nvml = std::make_unique<NvmlTelemetry>(unsigned(be.device().index));
    if (!nvml->available()) {
      log("info", "GPU telemetry " + nvml->reason());
      nvml.reset();
    }
  }
  int64_t device_peak_bytes = 0;  // over the run (peaks reset between phases, trick 20)
  // Kernel counts and the Tensor Core share: one step in 50, every step with
  // the profiler trick (17), which makes its cost visible in the step times.
  std::unique_ptr<KernelCensus> census;
  // A trace records every kernel itself (device rows), so no census then.
  DeviceTraceRecorder device_trace;
  if (trace_ && !on_host && !device_trace.start(*trace_))
    log("warning", "trace: device rows " + device_trace.reason());
  if (!on_host && !trace_) {
    census = std::make_unique<KernelCensus>(be, c.profiler ? 1 : kCensusInterval);
    if (!census->available()) {
      log(c.profiler ? "warning" : "info", "kernel census " + census->reason());
      census.reset();
    }
  }
  // Tensor pipe counters (CUPTI range profiler) halfway between censuses; a
  // step never has both (two CUPTI collections), the census gives way.
  std::unique_ptr<TensorPipeProfiler> pipe;
  if (!on_host && !trace_) {
    const auto [first, every] =
        tensor_pipe_schedule(kCensusInterval, std::getenv("TRAINBENCH_TENSOR_PIPE_EVERY"));
    pipe = std::make_unique<TensorPipeProfiler>(be, first, every);
    log("info", "tensor pipe counters " + pipe->describe());
    if (!pipe->available()) pipe.reset();
  }

  for (int64_t epoch = 0; epoch < epochs && !stopped; ++epoch) {
    const auto epoch_start = Clock::now();
    train_loader.start_epoch(epoch);
    double epoch_loss = 0, epoch_correct = 0;
    int64_t epoch_samples = 0, pending_samples = 0;
    auto read_train_stats = [&](json& metrics) {
      if (pending_samples == 0) return;
      auto [loss_sum, correct] = train_stats.read_and_reset();
      epoch_loss += loss_sum, epoch_correct += correct, epoch_samples += pending_samples;
      metrics["loss"] = loss_sum / double(pending_samples);
      metrics["train_accuracy"] = correct / double(pending_samples);
      last_train_loss = loss_sum / double(pending_samples);
      pending_samples = 0;
    };

    for (int64_t s = 0; s < steps_per_epoch && step < total_steps; ++s) {
      const bool pipe_step = pipe && pipe->samples(step + 1);
      if (census && !pipe_step) census->begin_step(step + 1);
      if (pipe_step) pipe->begin_step(step + 1);
      timer.begin_step(step + 1);
      if (!c.grad_set_to_none) {
        Tensor grads = model->grad_block();
        be.fill(grads, 0.0);
      }
      int64_t h2d_bytes = 0;
      json metrics;
      double lr = 0;
      const bool graph_step = graphs && graphs->ready();
      if (graph_step) {
        // The step as one graph launch (K == 1, no clipping, no anomaly check):
        // the batch is staged outside it and the optimizer's constants written
        // before it. Phases are not separated; the timer sees the whole step.
        Batch b;
        double wait_s = 0;
        TB_CHECK(train_loader.next(b, &wait_s), "data loader ended early in epoch ", epoch);
        timer.add_host_ms(Phase::DataWait, 1e3 * wait_s);
        pending_samples += b.labels.dim(0);
        Tensor x, y;
        {
          PhaseScope ps(timer, Phase::H2D);
          stager.stage(std::move(b), train_loader, x, y);
          h2d_bytes += stager.last_bytes();
        }
        lr = schedule.lr_for_step(step);
        optimizer.write_constants(static_cast<float>(lr));
        graphs->run(
            x, y,
            [&] {
              Tensor logits = model->forward(ctx, x);
              Tensor& dlogits = ensure_buffer(ctx, dlogits_buf, logits.shape(), logits.dtype());
              be.softmax_cross_entropy(logits, y, static_cast<float>(c.label_smoothing), 1.0f,
                                       dlogits, train_stats.device);
              if (scaler) scaler->scale_grad(dlogits);
              ctx.accumulate_grads = !c.grad_set_to_none;
              model->backward(ctx, dlogits);
              if (scaler) {
                Tensor grads = model->grad_block();
                scaler->unscale(grads);
                optimizer.step(static_cast<float>(lr), 1.0f, scaler->state());
                scaler->update();
              } else {
                optimizer.step(static_cast<float>(lr), 1.0f);  // counts the step
              }
            },
            [&] { optimizer.count_replayed_step(); });
        stager.consumed();
      }
      for (int64_t k = 0; k < (graph_step ? 0 : K); ++k) {  // the eager step's micro-batches
        Batch b;
        double wait_s = 0;
        TB_CHECK(train_loader.next(b, &wait_s), "data loader ended early in epoch ", epoch);
        timer.add_host_ms(Phase::DataWait, 1e3 * wait_s);
        pending_samples += b.labels.dim(0);
        Tensor x, y;
        {
          // No copy on the host: not a phase there. With non_blocking this
          // times only what the compute stream waits for (the exposed copy).
          std::optional<PhaseScope> ps;
          if (!on_host) ps.emplace(timer, Phase::H2D);
          stager.stage(std::move(b), train_loader, x, y);
          h2d_bytes += stager.last_bytes();
        }
        Tensor* dlogits = nullptr;
        {
          PhaseScope ps(timer, Phase::Forward);
          Tensor logits = forward(x, step);
          dlogits = &ensure_buffer(ctx, dlogits_buf, logits.shape(), logits.dtype());
          // The loss is divided by K so K micro-batches sum to one big batch's gradient.
          be.softmax_cross_entropy(logits, y, static_cast<float>(c.label_smoothing),
                                   1.0f / static_cast<float>(K), *dlogits, train_stats.device);
          if (scaler) scaler->scale_grad(*dlogits);  // dlogits *= loss scale, on the device
        }
        {
          PhaseScope ps(timer, Phase::Backward);
          // grad_set_to_none: the first micro-batch writes the gradients, later ones add.
          ctx.accumulate_grads = !c.grad_set_to_none || k > 0;
          backward(*dlogits);
        }
        stager.consumed();  // the last reader of x and y (conv weight gradients) is queued
      }
      if (!graph_step) {
        PhaseScope ps(timer, Phase::Optimizer);
        float grad_scale = 1.0f;
        if (scaler) {
          Tensor grads = model->grad_block();  // a view: unscaled in place, found_inf set
          scaler->unscale(grads);
        }
        // Clipping sees unscaled gradients; after an overflow its factor is not
        // finite, harmless since that step is skipped.
        if (c.clip_grad_norm > 0) {
          ClipResult clip = clip_grad_norm(be, model->grad_block(), c.clip_grad_norm);
          grad_scale = clip.factor;
          metrics["grad_norm"] = clip.norm;
        }
        // Under fp16 an overflow is expected and handled (the step is skipped).
        if (c.anomaly_check && !scaler)
          TB_CHECK(std::isfinite(be.sum_squares(model->grad_block())),
                   "anomaly_check: gradients contain NaN or Inf at step ", step);
        lr = schedule.lr_for_step(step);
        if (scaler) {
          // Skipped on the device when found_inf is set; then backoff or growth.
          optimizer.step(static_cast<float>(lr), grad_scale, scaler->state());
          scaler->update();
        } else {
          optimizer.step(static_cast<float>(lr), grad_scale);
        }
      }
      if (graphs && !graph_step) graphs->eager_step_done();
      ++step;

      if (c.sync_every_step || step % c.log_every == 0 || s + 1 == steps_per_epoch ||
          step == total_steps) {
        read_train_stats(metrics);
        if (scaler) {  // the scaler's only host reads
          metrics["loss_scale"] = scaler->read_scale();
          metrics["amp_skipped_steps"] = double(scaler->read_skipped());
        }
      }
      timer.end_step();
      if (census) census->end_step(metrics);
      if (pipe && !pipe->end_step(metrics)) {
        log("warning", "tensor pipe counters " + pipe->reason());
        pipe.reset();
      }
      metrics["lr"] = lr;
      if (!on_host) {
        const bool every10 = step % 10 == 0 || step == 1;
        metrics["h2d_bytes"] = double(h2d_bytes);
        if (std::optional<DeviceMemoryStats> m = be.memory_stats(/*query_device=*/every10)) {
          write_memory_metrics(*m, metrics);
          device_peak_bytes = std::max(device_peak_bytes, m->peak_allocated_bytes);
        }
        if (nvml && every10)
          if (std::optional<GpuTelemetry> g = nvml->read()) g->write_metrics(metrics);
      }
      if (on_host && (step % 10 == 0 || step == 1)) {
        metrics["host_rss_bytes"] = double(process_rss_bytes());
        const double wall = std::chrono::duration<double>(Clock::now() - wall_mark).count();
        const double cpu = process_cpu_seconds();
        if (wall > 0) metrics["cpu_threads_busy"] = (cpu - cpu_mark) / wall;
        cpu_mark = cpu, wall_mark = Clock::now();
      }
      pending.push_back({step, epoch, std::move(metrics)});
      publish_ready(/*flush=*/false);
      summary_["steps"] = step;
      if (stop_.load()) {
        stopped = true;
        log("info", "stop requested: ending after step " + std::to_string(step));
        break;
      }
    }

    // The epoch's last step events go out before its epoch event.
    publish_ready(/*flush=*/true);
    // Evaluate at the end of every epoch (and of a run cut short by max_steps).
    const auto t_eval = Clock::now();
    json em;
    if (!stopped) {
      // Evaluation reallocates layer buffers (its last, smaller batch) and the
      // stager's slots, so the graphs' addresses go stale: drop them first, and
      // one eager step puts the training shapes back before the next capture.
      if (graphs) graphs->invalidate(1);
      if (c.empty_cache_between_phases) release_cached_memory(be, device_peak_bytes);
      auto [test_loss, test_acc] = evaluate();
      if (c.empty_cache_between_phases) release_cached_memory(be, device_peak_bytes);
      if (eval_cut_short) {
        stopped = true;
        log("info", "stop requested: evaluation of epoch " + std::to_string(epoch + 1) +
                        " cut short, not recorded");
      } else {
        last_test_loss = test_loss, last_test_acc = test_acc;
        em["test_loss"] = test_loss;
        em["test_accuracy"] = test_acc;
        em["eval_time_s"] = ms_since(t_eval) / 1e3;
      }
    }
    if (epoch_samples > 0) {
      em["train_loss"] = epoch_loss / double(epoch_samples);
      em["train_accuracy"] = epoch_correct / double(epoch_samples);
    }
    em["epoch_time_s"] = ms_since(epoch_start) / 1e3;
    bus_.publish("epoch", {{"epoch", epoch}, {"step", step}, {"metrics", em}});
    summary_["epochs"] = epoch + 1;
  }

  if (trace_ && !on_host) device_trace.finish(be, engine_kernel_classifier());
  const double med = median(step_ms);
  summary_["median_step_time_ms"] = med;
  summary_["samples_per_s"] = std::isfinite(med) && med > 0 ? 1e3 * samples_per_step / med : 0.0;
  if (std::optional<DeviceMemoryStats> m = be.memory_stats(false))
    device_peak_bytes = std::max(device_peak_bytes, m->peak_allocated_bytes);
  summary_["peak_memory_bytes"] = on_host ? process_peak_rss_bytes() : device_peak_bytes;
  summary_["peak_memory_kind"] = on_host ? "host_peak_rss" : "device_peak_allocated";
  if (!on_host) summary_["gpu_mem_peak_bytes"] = device_peak_bytes;
  summary_["final_test_accuracy"] = last_test_acc;
  summary_["final_test_loss"] = last_test_loss;
  summary_["final_train_loss"] = last_train_loss;
  summary_["total_time_s"] = ms_since(run_start) / 1e3;
  summary_["amp"] = amp_on ? amp_policy.name() : "off";
  if (graphs) {  // trick 24: how the steps ran (0 replays: every step was eager)
    summary_["cuda_graph_captures"] = graphs->captures();
    summary_["cuda_graph_replays"] = graphs->replays();
  }
  if (scaler) summary_["amp_skipped_steps"] = scaler->read_skipped();
  TrainResult r{stopped ? "stopped" : "finished", summary_};
  bus_.publish("finished", {{"status", r.status}, {"summary", summary_}});
  return r;
}

}  // namespace tb
