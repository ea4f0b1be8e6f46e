// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// One decision per trick. resolve_tricks joins the configuration with what the
// backend reports (BackendCapabilities) into a RunPlan: typed choices the
// trainer reads and never re-decides, and the applied/why record stored with
// the run. A trick that is on but cannot be honoured is reported in that
// record and logged, never silently dropped.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/amp/precision_policy.h"
#include "engine/backend/capabilities.h"
#include "engine/core/device.h"
#include "engine/core/tensor.h"
#include "engine/train/config.h"

namespace tb {

// What is known about the run besides its configuration.
struct PlanContext {
  bool tracing = false;  // `trainbench-engine trace`: per-layer host spans are recorded
  // Test hook: amp on the cpu through its reference low-precision ops (slow).
  // The record still says "not applied".
  bool amp_on_cpu_for_test = false;
  int world_size = 1;  // processes the launcher started (parallel: ddp)
  // Devices of the run's kind visible from its device on (cuda:k .. the
  // last): what parallel: dp may drive; dp_devices 0 takes them all.
  int devices = 1;
};

struct RunPlan {
  // {"amp": {"trick": 1, "requested": "fp16", "changed": true, "applied": false,
  //          "reason": "..."}, ...}: one entry per key with a trick number.
  nlohmann::json tricks = nlohmann::json::object();

  // The device is the host: batches are used where they are (no copy, no h2d
  // phase), memory is the process's (RSS), and there is no kernel to count.
  bool on_host = true;

  // --- the input path (InputStager, DataLoader)
  bool pinned_staging = false;  // pin_memory: the loader fills page-locked buffers
  bool non_blocking = false;    // non_blocking: uploads on a copy stream
  bool uint8_upload = false;    // h2d_uint8 or gpu_augment: u8 batches cross the bus
  bool gpu_augment = false;     // gpu_augment: untransformed u8, transformed on the device

  // --- the model
  Layout layout = Layout::NCHW;  // channels_last: NHWC activations and KRSC filters
  // The activations between layers: layout's, or on the CPU its blocked
  // nChw16c (cpu_layout; the input and the filters stay in layout's order).
  Layout activation_layout = Layout::NCHW;
  std::string activation_layout_reason;  // why, for the run's log
  int64_t pad_channels_to = 0;   // pad_channels_to (0: no padding layer)
  bool fuse_pointwise = false;   // fuse_pointwise: BatchNorm2d and Linear with activation epilogues
  bool device_side_init = false;  // device_side_init: constants filled on the device

  // --- the step
  PrecisionPolicy precision;  // amp (off unless applied, or the cpu test hook)
  bool cuda_graphs = false;   // cuda_graphs: capture the step once, replay it
  // parallel: ddp (engine/parallel): gradients all-reduced over the ranks in
  // buckets of bucket_elements (0: one after backward), batch norm synced or not
  bool ddp = false;
  int64_t bucket_elements = 0;
  bool sync_batchnorm = false;
  // parallel: dp (engine/parallel/device_replicas.h): dp_devices devices from
  // the run's device on, driven by this process
  bool dp = false;
  int dp_devices = 0;

  // --- memory and measurement
  bool empty_cache_between_phases = false;
  bool kernel_census = false;      // sampled kernel counts and Tensor Core share
  bool census_every_step = false;  // profiler: the census of every step
  bool tensor_pipe = false;        // tensor pipe counters between censuses
  bool device_trace = false;    // a trace's device rows (CUPTI activity records)

  bool applied(const std::string& key) const { return tricks.at(key).at("applied").get<bool>(); }
};

RunPlan resolve_tricks(const RunConfig& config, const BackendCapabilities& capabilities,
                       const Device& device, const PlanContext& context = {});
// The record alone, for the capabilities the backend of `device` reports in
// this build (capabilities_of): what a run on that device would apply.
nlohmann::json resolve_tricks(const RunConfig& config, const Device& device);

// Why a run cannot capture its training step (cuda_graphs), or "" when it
// can: the step must not read values on the host midway.
std::string cuda_graphs_blocker(const RunConfig& config);

}  // namespace tb
