// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/parallel/data_parallel.h"

#include <algorithm>
#include <exception>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/nn/model.h"

namespace tb {

using json = nlohmann::json;

DataParallel::DataParallel(std::unique_ptr<Communicator> comm, Backend& backend, Model& model,
                           const DataParallelOptions& options)
    : comm_(std::move(comm)), model_(model), options_(options) {
  TB_CHECK(model_.built(), "ddp: the model must be built before its gradients are bucketed");
  TB_CHECK(model_.grad_block().device() == backend.device(), "ddp: the gradients are on ",
           model_.grad_block().device().str(), ", this rank's backend on ", backend.device().str());
  TB_CHECK(model_.grad_block().dtype() == DType::F32, "ddp: gradients must be f32, got ",
           model_.grad_block().describe());
  buckets_ = std::make_unique<GradientBuckets>(*comm_, model_.grad_block(),
                                               model_.layer_grad_offsets(),
                                               options_.bucket_elements,
                                               /*overlap=*/options_.bucket_elements > 0);
}

DataParallel::~DataParallel() {
  // A run that threw: this rank's exit aborts the job (its peers may wait in
  // a collective it will never join).
  if (std::uncaught_exceptions() > 0) mpi_mark_failed();
}

void DataParallel::broadcast_model() {
  Tensor params = model_.param_block();
  comm_->broadcast(params, 0);
  broadcast_buffers();
}

void DataParallel::broadcast_buffers() {
  for (const BufferInfo& b : model_.buffers()) {
    Tensor t = b.value;
    comm_->broadcast(t, 0);
  }
}

std::function<void(double*, int64_t)> DataParallel::batchnorm_sync() {
  if (!options_.sync_batchnorm) return {};
  return [this](double* v, int64_t n) { comm_->allreduce_host(v, n); };
}

bool DataParallel::end_step(bool stop_requested, double step_ms, json& metrics) {
  const int W = size(), r = rank();
  const StepCommStats& cs = buckets_->last_step();
  // [stop, step_ms x W, allreduce_ms x W, exposed_ms x W, bytes x W]: each
  // rank fills its own slots, the sum gathers them.
  std::vector<double> v(static_cast<size_t>(1 + 4 * W), 0.0);
  v[0] = stop_requested ? 1.0 : 0.0;
  v[size_t(1 + r)] = step_ms;
  v[size_t(1 + W + r)] = cs.allreduce_ms;
  v[size_t(1 + 2 * W + r)] = cs.exposed_ms;
  v[size_t(1 + 3 * W + r)] = double(cs.bytes);
  comm_->allreduce_host(v.data(), int64_t(v.size()));
  // NCCL: the exchange above waited for the communication stream, so the
  // step's all-reduces have ended and their device times can be read (the
  // allreduce_ms slots of v are not read: each rank reports its own).
  buckets_->collect_device_times();
  ++steps_;
  // A stop signal reaches every rank and each finishes its step: a wait that
  // outlives a few of the slowest steps after one is a peer that is gone.
  double slowest_s = 0;
  for (int q = 0; q < W; ++q) slowest_s = std::max(slowest_s, v[size_t(1 + q)] / 1e3);
  comm_->set_grace_s(std::clamp(3.0 * slowest_s, 0.5, options_.max_grace_s));
  if (r == 0) {
    double slowest = 0, efficiency = 0;
    for (int q = 0; q < W; ++q) {
      const double ms = v[size_t(1 + q)];
      metrics["rank" + std::to_string(q) + "_step_time_ms"] = ms;
      slowest = std::max(slowest, ms);
    }
    // What each rank spent on its own shard (its step less the communication
    // it waited for), against the slowest rank's step: 1 when W ranks go W
    // times as fast as one would on the same work.
    for (int q = 0; q < W; ++q) {
      const double exposed = std::max(0.0, v[size_t(1 + 2 * W + q)]);
      efficiency += slowest > 0 ? (v[size_t(1 + q)] - exposed) / slowest : 0.0;
    }
    efficiency /= W;
    if (cs.allreduce_ms >= 0) {
      metrics["allreduce_ms"] = cs.allreduce_ms;
      sum_allreduce_ms_ += cs.allreduce_ms, ++allreduce_steps_;
    }
    metrics["allreduce_bytes"] = double(cs.bytes);
    if (cs.exposed_ms >= 0) {
      metrics["exposed_comm_ms"] = cs.exposed_ms;
      sum_exposed_ms_ += cs.exposed_ms, ++exposed_steps_;
    }
    metrics["scaling_efficiency"] = efficiency;
    sum_efficiency_ += efficiency;
  }
  return v[0] > 0;
}

void DataParallel::write_summary(json& summary) const {
  summary["world_size"] = size();
  summary["ddp_transport"] = comm_->describe();
  summary["allreduce_buckets"] = buckets_->buckets().size();
  summary["allreduce_bytes_per_step"] = buckets_->last_step().bytes;
  if (steps_ > 0) summary["mean_scaling_efficiency"] = sum_efficiency_ / double(steps_);
  if (allreduce_steps_ > 0) summary["mean_allreduce_ms"] = sum_allreduce_ms_ / double(allreduce_steps_);
  if (exposed_steps_ > 0) summary["mean_exposed_comm_ms"] = sum_exposed_ms_ / double(exposed_steps_);
}

}  // namespace tb
