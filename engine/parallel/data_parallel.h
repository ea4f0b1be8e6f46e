// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// What the trainer does differently as one rank of a ddp job, in one place:
// the shard of every epoch it reads, the same starting model on every rank,
// the gradient buckets, synchronised batch norm, and a small exchange after
// every step that agrees on stopping and gathers every rank's step time and
// communication cost for rank 0's metrics.
#include <cstdint>
#include <functional>
#include <memory>

#include <nlohmann/json.hpp>

#include "engine/parallel/communicator.h"
#include "engine/parallel/distributed_sampler.h"
#include "engine/parallel/gradient_buckets.h"

namespace tb {

class Backend;
class Model;

struct DataParallelOptions {
  int64_t bucket_elements = 0;  // 0: one all-reduce after backward
  bool sync_batchnorm = false;
  double max_grace_s = 5.0;  // WaitPolicy::max_grace_s
};

class DataParallel {
 public:
  DataParallel(std::unique_ptr<Communicator> comm, Backend& backend, Model& model,
               const DataParallelOptions& options);
  // Destroyed while an exception unwinds (the run failed), it marks the
  // process failed: its exit then aborts every rank (mpi_mark_failed).
  ~DataParallel();

  Communicator& comm() { return *comm_; }
  int rank() const { return comm_->rank(); }
  int size() const { return comm_->size(); }
  Shard shard() const { return {comm_->rank(), comm_->size()}; }

  // Every rank starts from rank 0's parameters and buffers (each built the
  // same model from the same seed; this makes it so whatever the device).
  void broadcast_model();
  // Rank 0's batch-norm running statistics everywhere, before evaluation
  // (per-rank batch norm lets them drift apart; PyTorch's DDP broadcasts
  // them from rank 0 at every forward).
  void broadcast_buffers();
  // For Context::sync_batchnorm; empty when sync_batchnorm is off.
  std::function<void(double*, int64_t)> batchnorm_sync();
  // Sums a few host values over the ranks (loss and accuracy sums).
  void sum(double* values, int64_t n) { comm_->allreduce_host(values, n); }

  GradientBuckets& buckets() { return *buckets_; }

  // After every step, on every rank: whether any rank was asked to stop (so
  // all stop after the same step), and on rank 0 the step's parallel metrics:
  // rank{r}_step_time_ms, allreduce_ms, allreduce_bytes, exposed_comm_ms and
  // scaling_efficiency (docs/parallel.md defines them).
  bool end_step(bool stop_requested, double step_ms, nlohmann::json& metrics);

  // world_size, transport, buckets and the run's means of the step metrics.
  void write_summary(nlohmann::json& summary) const;

 private:
  std::unique_ptr<Communicator> comm_;
  Model& model_;
  DataParallelOptions options_;
  std::unique_ptr<GradientBuckets> buckets_;
  int64_t steps_ = 0;
  double sum_allreduce_ms_ = 0, sum_exposed_ms_ = 0, sum_efficiency_ = 0;
  int64_t exposed_steps_ = 0, allreduce_steps_ = 0;
};

}  // namespace tb
