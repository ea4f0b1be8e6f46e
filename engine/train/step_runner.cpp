// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/train/step_runner.h"

#include <cmath>
#include <functional>
#include <optional>
#include <vector>

#include "engine/amp/loss_scaler.h"
#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/metrics/chrome_trace.h"
#include "engine/metrics/step_timer.h"
#include "engine/nn/models.h"
#include "engine/ops/amp/amp.h"
#include "engine/ops/loss/loss.h"
#include "engine/ops/optimizer/optimizer.h"
#include "engine/optim/clip.h"
#include "engine/optim/optimizer.h"
#include "engine/parallel/data_parallel.h"
#include "engine/parallel/device_replicas.h"
#include "engine/train/input_stager.h"
#include "engine/train/run_setup.h"
#include "engine/train/step_graph.h"

namespace tb {

using json = nlohmann::json;

// What one training step touches (one replica's, under dp).
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
  // dp: the replicas, and the step contexts of replicas 1..n-1 (replica 0 is
  // this one). A replica's gradients are never zero-filled: its first
  // micro-batch writes them.
  DeviceReplicas* dp = nullptr;
  std::vector<StepContext>* replica_steps = nullptr;
  int replica = 0;
};

namespace {

constexpr int kGraphWarmup = 3;  // eager steps before the first capture (cuda_graphs)

// Forward that checks every layer's output for NaN/Inf when anomaly_check is on.
// With a trace, every layer's forward is a span.
Tensor forward(StepContext& s, const Tensor& x, int64_t step) {
  if (!s.c.anomaly_check && !s.trace) return s.model.forward(s.ctx, x);
  return s.model.forward(s.ctx, x, [&](Layer& layer, const Tensor& in) {
    Tensor h;
    {
      TraceSpan span(s.trace, layer.name(), "forward");
      h = forward_layer(s.ctx, layer, in);
    }
    if (s.c.anomaly_check)  // f16/bf16 activations widened for the f32 sum
      TB_CHECK(std::isfinite(optimizer::sum_squares(
                   s.be, amp::is_low_precision(h.dtype()) ? amp::cast_to(s.be, h, DType::F32) : h)),
               "anomaly_check: layer '", layer.name(), "' produced NaN or Inf at step ", step);
    return h;
  });
}

// The same order as Model::backward, one span per layer when tracing. With
// `buckets` (ddp, the step's last micro-batch) each layer's completion may
// start the all-reduce of the bucket it fills.
void backward(StepContext& s, const Tensor& dlogits, GradientBuckets* buckets) {
  if (!s.trace && !buckets) return s.model.backward(s.ctx, dlogits);
  const ScratchScope scratch = pass_scratch(s.ctx);
  const auto& layers = s.model.layers();
  Tensor g = dlogits;
  for (size_t i = layers.size(); i-- > 0;) {
    {
      TraceSpan span(s.trace, layers[i]->name(), "backward");
      g = backward_layer(s.ctx, *layers[i], g, s.model.input_grad_needed(i));
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
  Tensor dlogits;  // transient: dead once the last layer's backward has read it
  {
    std::optional<PhaseScope> ps;
    if (timer) ps.emplace(*timer, Phase::Forward);
    Tensor logits = forward(s, x, step);
    dlogits = transient_buffer(s.ctx, logits.shape(), logits.dtype());
    // The loss is divided by K so K micro-batches sum to one big batch's
    // gradient, and by the ranks so the all-reduced sum is their mean.
    const int64_t world = s.ddp ? s.ddp->size() : 1;
    loss::softmax_cross_entropy(s.be, logits, y, static_cast<float>(c.label_smoothing),
                                static_cast<float>(share) / static_cast<float>(K * world),
                                dlogits, s.stats);
    if (s.scaler) s.scaler->scale_grad(dlogits);  // dlogits *= loss scale, on the device
  }
  std::optional<PhaseScope> ps;
  if (timer) ps.emplace(*timer, Phase::Backward);
  // grad_set_to_none: the first micro-batch writes the gradients, later ones add.
  s.ctx.accumulate_grads = (s.replica == 0 && !c.grad_set_to_none) || k > 0;
  // ddp: the earlier micro-batches only accumulate (no_sync); the last
  // one's backward sends the buckets.
  GradientBuckets* buckets = s.ddp && k + 1 == K ? &s.ddp->buckets() : nullptr;
  if (buckets) buckets->begin_step();
  backward(s, dlogits, buckets);
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
                const StepRunner::StageNext& stage,
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

// cuda_graphs: the step as one graph launch. The batch is staged outside the
// graph and the optimizer's constants are written before it; the first launch
// for a pair of input buffers captures train_step, later ones replay it. The
// timer sees the whole step.
void graph_step(StepContext& s, StepGraphs& graphs, InputStager& stager, int64_t step, double lr,
                const StepRunner::StageNext& stage_next, json& metrics) {
  Tensor x, y;
  stage_next(x, y);
  s.optimizer.write_constants(static_cast<float>(lr));
  auto staged = [&](Tensor& gx, Tensor& gy) { gx = x, gy = y; };
  graphs.run(
      x, y, [&] { train_step(s, 1, step, lr, nullptr, staged, [] {}, metrics); },
      [&] { s.optimizer.count_replayed_step(); });
  stager.consumed();
}

}  // namespace

StepRunner::StepRunner(const RunSetup& setup, Tensor& stats, InputStager& stager,
                       StepTimer& timer, ChromeTrace* trace)
    : stager_(stager), timer_(timer) {
  const RunConfig& c = setup.config;
  primary_ = std::make_unique<StepContext>(StepContext{c, *setup.backend, *setup.model, *setup.ctx,
                                                       *setup.optimizer, setup.scaler.get(),
                                                       stats, trace, setup.ddp.get()});
  primary_->dp = setup.dp.get();
  primary_->replica_steps = &replicas_;
  if (DeviceReplicas* dp = setup.dp.get()) {
    replicas_.reserve(size_t(dp->size() - 1));
    for (int r = 1; r < dp->size(); ++r) {
      replicas_.push_back(StepContext{c, dp->backend(r), dp->model(r), dp->context(r),
                                      *setup.optimizer, nullptr, dp->stats(r), nullptr});
      replicas_.back().replica = r;
    }
  }
  if (setup.plan.cuda_graphs) graphs_ = std::make_unique<StepGraphs>(*setup.backend, kGraphWarmup);
}

StepRunner::~StepRunner() = default;

void StepRunner::run(int64_t step, double lr, const StageNext& stage_next, json& metrics) {
  const TransientBuffers& transients = *primary_->ctx.transients;
  const int64_t made = transients.allocations();
  const bool as_graph = graphs_ && graphs_->ready();
  if (as_graph) {
    graph_step(*primary_, *graphs_, stager_, step, lr, stage_next, metrics);
  } else {
    train_step(*primary_, primary_->c.accumulation_steps, step, lr, &timer_, stage_next,
               [&] { stager_.consumed(); }, metrics);
    if (graphs_) graphs_->eager_step_done();
  }
  // A step in which the transient buffers allocated may have moved memory a
  // graph addresses (buffers.h): drop the graphs. A capture that allocated
  // is followed by an eager step; an eager step that allocated was that step
  // already (the next step of the same shapes allocates nothing), so the
  // next captures. (On an H200 the first eager step after an evaluation
  // allocated and, counted as no warm-up, cost a replay: 7 of 8.)
  if (graphs_ && transients.allocations() != made) graphs_->invalidate(as_graph ? 1 : 0);
}

void StepRunner::invalidate_graphs() {
  if (graphs_) graphs_->invalidate(1);
}

void StepRunner::write_summary(json& summary) const {
  // Where the activations went (buffers.h): what the pool holds, the most
  // bytes in use at once (what a perfect plan would hold), and how often it
  // allocated (a steady step: never).
  const TransientBuffers& transients = *primary_->ctx.transients;
  summary["activation_memory_bytes"] = transients.bytes();
  summary["activation_peak_live_bytes"] = transients.peak_live_bytes();
  summary["activation_allocations"] = transients.allocations();
  if (!graphs_) return;
  summary["cuda_graph_captures"] = graphs_->captures();
  summary["cuda_graph_replays"] = graphs_->replays();
}

}  // namespace tb
