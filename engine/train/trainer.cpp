// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/data/dataset.h"
#include "engine/data/loader.h"
#include "engine/metrics/chrome_trace.h"
#include "engine/metrics/process_memory.h"
#include "engine/metrics/step_timer.h"
#include "engine/nn/models.h"
#include "engine/optim/clip.h"
#include "engine/optim/optimizer.h"
#include "engine/optim/schedule.h"
#include "engine/train/tricks.h"

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
  mo.fuse_pointwise = c.fuse_pointwise;
  std::unique_ptr<Model> model =
      make_model(c.model, train_loader.image_shape(), train_set->num_classes(), mo);
  model->build(be, c.seed, DType::F32, Layout::NCHW);

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
  ctx.layout = Layout::NCHW;
  DeviceStats train_stats(be);
  const bool on_host = be.device().is_cpu();
  Tensor device_images, device_labels;  // staging on a device backend
  auto to_device = [&](const Batch& b, Tensor& images, Tensor& labels) {
    if (on_host) {
      images = b.images, labels = b.labels;
      return;
    }
    if (!device_images.defined() || device_images.shape() != b.images.shape()) {
      device_images = be.empty(b.images.shape(), b.images.dtype());
      device_labels = be.empty(b.labels.shape(), b.labels.dtype());
    }
    be.copy(b.images, device_images);
    be.copy(b.labels, device_labels);
    images = device_images, labels = device_labels;
  };

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

  auto evaluate = [&]() -> std::pair<double, double> {
    ctx.training = false;
    DeviceStats eval_stats(be);
    int64_t n = 0;
    test_loader.start_epoch(0);
    Batch b;
    Tensor none, x, y;
    while (test_loader.next(b)) {
      to_device(b, x, y);
      Tensor logits = model->forward(ctx, x);
      be.softmax_cross_entropy(logits, y, 0.0f, 1.0f, none, eval_stats.device);
      n += b.labels.dim(0);
      test_loader.recycle(std::move(b));
    }
    ctx.training = true;
    auto [loss_sum, correct] = eval_stats.read_and_reset();
    return {loss_sum / std::max<int64_t>(n, 1), correct / std::max<int64_t>(n, 1)};
  };

  Tensor dlogits_buf;
  std::vector<double> step_ms;
  step_ms.reserve(static_cast<size_t>(total_steps));
  double last_test_acc = NAN, last_test_loss = NAN, last_train_loss = NAN;
  int64_t step = 0;
  bool stopped = false;
  const auto run_start = Clock::now();
  double cpu_mark = process_cpu_seconds();
  auto wall_mark = Clock::now();
  // Phase breakdown on the host clock (the CUDA event timer, cuda_step_timer.h,
  // is not wired in yet: it has not been run on a GPU).
  std::unique_ptr<StepTimer> base_timer;
  if (measure_)
    base_timer = std::make_unique<HostStepTimer>(/*report_h2d=*/!on_host);
  else
    base_timer = std::make_unique<TotalOnlyStepTimer>();
  std::unique_ptr<TracingStepTimer> tracing_timer;
  if (trace_) tracing_timer = std::make_unique<TracingStepTimer>(*base_timer, *trace_);
  StepTimer& timer = trace_ ? static_cast<StepTimer&>(*tracing_timer) : *base_timer;

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
      timer.begin_step(step + 1);
      if (!c.grad_set_to_none) {
        Tensor grads = model->grad_block();
        be.fill(grads, 0.0);
      }
      for (int64_t k = 0; k < K; ++k) {
        Batch b;
        double wait_s = 0;
        TB_CHECK(train_loader.next(b, &wait_s), "data loader ended early in epoch ", epoch);
        timer.add_host_ms(Phase::DataWait, 1e3 * wait_s);
        Tensor x, y;
        if (on_host) {
          to_device(b, x, y);  // no copy on the host: not a phase
        } else {
          PhaseScope ps(timer, Phase::H2D);
          to_device(b, x, y);
        }
        Tensor* dlogits = nullptr;
        {
          PhaseScope ps(timer, Phase::Forward);
          Tensor logits = forward(x, step);
          dlogits = &ensure_buffer(ctx, dlogits_buf, logits.shape(), logits.dtype());
          // The loss is divided by K so K micro-batches sum to one big batch's gradient.
          be.softmax_cross_entropy(logits, y, static_cast<float>(c.label_smoothing),
                                   1.0f / static_cast<float>(K), *dlogits, train_stats.device);
        }
        {
          PhaseScope ps(timer, Phase::Backward);
          // grad_set_to_none: the first micro-batch writes the gradients, later ones add.
          ctx.accumulate_grads = !c.grad_set_to_none || k > 0;
          backward(*dlogits);
        }
        pending_samples += b.labels.dim(0);
        train_loader.recycle(std::move(b));
      }
      json metrics;
      double lr = 0;
      {
        PhaseScope ps(timer, Phase::Optimizer);
        float grad_scale = 1.0f;
        if (c.clip_grad_norm > 0) {
          ClipResult clip = clip_grad_norm(be, model->grad_block(), c.clip_grad_norm);
          grad_scale = clip.factor;
          metrics["grad_norm"] = clip.norm;
        }
        if (c.anomaly_check)
          TB_CHECK(std::isfinite(be.sum_squares(model->grad_block())),
                   "anomaly_check: gradients contain NaN or Inf at step ", step);
        lr = schedule.lr_for_step(step);
        optimizer.step(static_cast<float>(lr), grad_scale);
      }
      ++step;

      if (c.sync_every_step || step % c.log_every == 0 || s + 1 == steps_per_epoch ||
          step == total_steps)
        read_train_stats(metrics);
      timer.end_step();
      // The host timers have this step ready now; a device timer would hand
      // back an earlier step (not wired in yet, see above).
      std::optional<StepTimes> times = timer.poll();
      TB_CHECK(times && times->step == step, "step timer: step ", step, " not ready");
      const double total_ms = times->total_ms;
      step_ms.push_back(total_ms);
      if (measure_)
        times->write_metrics(metrics);
      else
        metrics["step_time_ms"] = total_ms;
      metrics["samples_per_s"] = 1e3 * double(samples_per_step) / total_ms;
      metrics["lr"] = lr;
      if (on_host && (step % 10 == 0 || step == 1)) {
        metrics["host_rss_bytes"] = double(process_rss_bytes());
        const double wall = std::chrono::duration<double>(Clock::now() - wall_mark).count();
        const double cpu = process_cpu_seconds();
        if (wall > 0) metrics["cpu_threads_busy"] = (cpu - cpu_mark) / wall;
        cpu_mark = cpu, wall_mark = Clock::now();
      }
      bus_.publish("step", {{"step", step}, {"epoch", epoch}, {"metrics", metrics}});
      summary_["steps"] = step;
      if (stop_.load()) {
        stopped = true;
        log("info", "stop requested: ending after step " + std::to_string(step));
        break;
      }
    }

    // Evaluate at the end of every epoch (and of a run cut short by max_steps).
    const auto t_eval = Clock::now();
    json em;
    if (!stopped) {
      auto [test_loss, test_acc] = evaluate();
      last_test_loss = test_loss, last_test_acc = test_acc;
      em["test_loss"] = test_loss;
      em["test_accuracy"] = test_acc;
      em["eval_time_s"] = ms_since(t_eval) / 1e3;
    }
    if (epoch_samples > 0) {
      em["train_loss"] = epoch_loss / double(epoch_samples);
      em["train_accuracy"] = epoch_correct / double(epoch_samples);
    }
    em["epoch_time_s"] = ms_since(epoch_start) / 1e3;
    bus_.publish("epoch", {{"epoch", epoch}, {"step", step}, {"metrics", em}});
    summary_["epochs"] = epoch + 1;
  }

  const double med = median(step_ms);
  summary_["median_step_time_ms"] = med;
  summary_["samples_per_s"] = std::isfinite(med) && med > 0 ? 1e3 * samples_per_step / med : 0.0;
  summary_["peak_memory_bytes"] = on_host ? process_peak_rss_bytes() : 0;
  summary_["peak_memory_kind"] = on_host ? "host_peak_rss" : "device_peak_allocated";
  summary_["final_test_accuracy"] = last_test_acc;
  summary_["final_test_loss"] = last_test_loss;
  summary_["final_train_loss"] = last_train_loss;
  summary_["total_time_s"] = ms_since(run_start) / 1e3;
  TrainResult r{stopped ? "stopped" : "finished", summary_};
  bus_.publish("finished", {{"status", r.status}, {"summary", summary_}});
  return r;
}

}  // namespace tb
