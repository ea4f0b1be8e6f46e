// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// parallel: dp, PyTorch's single-process DataParallel (the comparison of seed
// article 001): one process drives n devices. Replica 0 is the run's own
// backend and model; replicas 1..n-1 each have a backend and a model of their
// own. Every step:
//   replicate()         the primary's parameters and buffers copied to every replica
//   scatter(x, y)       the step's batch (staged on the primary) cut along dim 0,
//                       one slice per replica, copied to its device
//   parallel_apply(f)   f(r) for every replica at once: replica 0 on the
//                       calling thread, the others on one host thread each
//   reduce_gradients()  every replica's gradients summed into the primary's
// and the optimizer steps on the primary alone. Each replica scales its loss
// by its share of the batch, so the sum is the mean gradient of the whole
// batch (as ddp's 1/W). Copies are Backend::copy_from_peer (the CUDA
// runtime's peer copies); nothing here moves bytes itself. Batch norm
// normalises per replica, and only replica 0's running statistics are kept
// (PyTorch's DataParallel does the same).
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/tensor.h"
#include "engine/nn/layer.h"

namespace tb {

class Backend;
class Model;

class DeviceReplicas {
 public:
  // `others`: the backends of devices 1..n-1; `build` makes a model on one
  // of them (the same architecture and seed as `model`); `like` gives the
  // replicas' contexts their layout and precision.
  DeviceReplicas(Backend& primary, Model& model, std::vector<std::unique_ptr<Backend>> others,
                 const std::function<std::unique_ptr<Model>(Backend&)>& build,
                 const Context& like);
  ~DeviceReplicas();

  int size() const { return int(replicas_.size()); }
  Backend& backend(int r);
  Model& model(int r);
  Context& context(int r);
  // Replica r's loss-sum and correct-count accumulator (f64 [2], on its device).
  Tensor& stats(int r);

  void replicate();
  // Slice sizes as even as can be (the first B mod n one larger); slice 0 is
  // a view of x and y, the others are copies on their devices.
  void scatter(const Tensor& x, const Tensor& y);
  const Tensor& x(int r) const { return replicas_[size_t(r)].x; }
  const Tensor& y(int r) const { return replicas_[size_t(r)].y; }
  // Replica r's part of the last scattered batch (its loss scale).
  double share(int r) const { return replicas_[size_t(r)].share; }
  // f(r) for every replica, concurrently; rethrows the first replica's error
  // (in replica order) once every thread has ended.
  void parallel_apply(const std::function<void(int replica)>& f);
  void reduce_gradients();

  // {loss sum, correct} of replicas 1..n-1 since the last read; restarts them
  // (replica 0's accumulator is the trainer's own).
  std::pair<double, double> read_and_reset_stats();

  // {"dp_devices": n, "dp_device_names": [...]} for the run's environment.
  nlohmann::json describe() const;

 private:
  struct Replica {
    Backend* backend = nullptr;
    Model* model = nullptr;
    std::unique_ptr<Model> owned_model;  // replicas 1..n-1
    std::unique_ptr<Context> ctx;        // replicas 1..n-1
    Tensor stats;                        // replicas 1..n-1
    Tensor x, y;                         // this step's slice
    double share = 0;
  };
  Backend& primary_;
  Model& model_;
  std::vector<std::unique_ptr<Backend>> others_;
  std::vector<Replica> replicas_;
  Tensor received_;  // one replica's gradients on the primary, before the sum
  Tensor stats_host_;
};

// Sizes of n slices of a batch of `batch` along dim 0: as even as can be,
// the first batch mod n one larger.
std::vector<int64_t> scatter_sizes(int64_t batch, int n);

}  // namespace tb
