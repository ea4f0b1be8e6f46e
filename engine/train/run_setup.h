// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Everything a run decides and builds before its first step, built by one
// constructor in the order each part depends on the ones before it:
//
//   launch     how this process was started (mpirun, torchrun: one rank of several)
//   backend    the device
//   plan       every trick decided once from what the backend reports
//              (tricks.h), and the checks that refuse a plan which would
//              measure the wrong setup (dp on one device, ddp refused)
//   shard      ddp: this rank's part of every epoch
//   data       both data sets and loaders, shaped by the plan
//   shape      how long the run is, in steps and epochs
//   model      built on the backend in the plan's layout
//   ddp        the communicator, every rank on rank 0's model, the gradient buckets
//   optimizer, schedule, and (fp16) the loss scaler
//   ctx        the layers' Context: layout, precision, synchronised batch norm
//   dp         replicas 1..n-1 on their devices
//
// What it decides is logged through `log` (the run's "log" events); what
// cannot run throws tb::Error naming the setting. After construction the
// parts are the trainer's to use; none is rebuilt.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "engine/parallel/distributed_sampler.h"
#include "engine/parallel/launch.h"
#include "engine/train/config.h"
#include "engine/train/tricks.h"

namespace tb {

class Backend;
class DataLoader;
class DataParallel;
class Dataset;
class DeviceReplicas;
class LossScaler;
class LrSchedule;
class Model;
class Optimizer;
struct Context;

using Log = std::function<void(const std::string& level, const std::string& message)>;

// Both data sets and their loaders, shaped by the plan: pinned buffers
// (pin_memory), uint8 batches (h2d_uint8) or the data set's raw bytes
// (gpu_augment).
struct RunData {
  std::unique_ptr<Dataset> train_set, test_set;
  std::unique_ptr<DataLoader> train, test;
};

// How long the run is, in steps and epochs.
struct RunShape {
  int64_t steps_per_epoch = 0, total_steps = 0, epochs = 0, samples_per_step = 0;
};

// What the trainer knows besides the configuration (its hooks).
struct SetupOptions {
  bool tracing = false;              // `trainbench-engine trace`
  bool amp_on_cpu_for_test = false;  // Trainer::set_amp_on_cpu
  std::optional<LaunchInfo> launch_for_test;  // Trainer::set_launch_for_test
};

struct RunSetup {
  // `stop` (SIGINT/SIGTERM) lets ddp's communicator give up waiting.
  RunSetup(const RunConfig& config, const SetupOptions& options, const std::atomic<bool>& stop,
           const Log& log);
  ~RunSetup();
  RunSetup(const RunSetup&) = delete;
  RunSetup& operator=(const RunSetup&) = delete;

  // Members in construction order (and destroyed in reverse: the backend last).
  const RunConfig& config;
  LaunchInfo launch;
  std::unique_ptr<Backend> backend;
  RunPlan plan;
  Shard shard;
  RunData data;
  RunShape shape;
  std::unique_ptr<Model> model;
  std::unique_ptr<DataParallel> ddp;  // parallel: ddp only
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<LrSchedule> schedule;
  std::unique_ptr<LossScaler> scaler;  // fp16 only
  std::unique_ptr<Context> ctx;
  std::unique_ptr<DeviceReplicas> dp;  // parallel: dp only
};

}  // namespace tb
