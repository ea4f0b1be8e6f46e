// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A sampled step's per-layer profile: where its time went, layer by layer and
// phase by phase, with each row's counted work (engine/nn/layer_work.h), and
// how a row compares with the device's peaks (roofline). Written by the
// LayerProfiler (layer_profiler.h), carried by the "layer_profile" event,
// stored with the run (engine/store/layer_profiles.cpp), read by
// `trainbench-engine layers`. docs/layers.md says what each row covers.
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tb {

// A row's `phase`: a layer's pass ("forward", "backward"), or a part of the
// step outside every layer: "loss" (the forward phase outside layers: the loss
// and its gradient), "backward_other" (the backward phase outside layers),
// "optimizer", "data_wait", "h2d", the dp copies ("dp_replicate", ...),
// "step_end" (from the step's work being issued to its closing boundary), and
// "unattributed": the step's time in no scope at all (gradient zeroing, the
// time between phases), so that the rows add up to the step's time.
struct LayerProfileRow {
  std::string layer;  // "layer1.0.bn1"; empty for the step's own parts
  std::string kind;   // the layer's kind ("batchnorm2d"); empty for the step's parts
  std::string phase;
  double time_ms = 0;
  // Counted work of the row's entries in the step; NaN where none is counted
  // (the step's own parts).
  double flops = std::numeric_limits<double>::quiet_NaN();
  double bytes = std::numeric_limits<double>::quiet_NaN();
};

struct LayerProfileStep {
  int64_t step = 0;
  double step_time_ms = 0;  // boundary to boundary, the step's own clock
  std::vector<LayerProfileRow> rows;

  nlohmann::json to_json() const;  // {step, step_time_ms, rows: [{layer, kind, phase, time_ms, flops?, bytes?}]}
  // Throws tb::Error naming the field that is missing or of the wrong type.
  static LayerProfileStep from_json(const nlohmann::json& j);
};

// The mean of each row over sampled steps (rows matched by layer and phase, in
// first-seen order; a row missing from a step counts 0 there), and the mean
// step time: means keep the sum, so the rows still add up to the step.
LayerProfileStep mean_profile(const std::vector<LayerProfileStep>& steps);

// A device's peaks (stored in the run's environment as "peaks"): the FMA rate
// and the memory bandwidth, both measured by a probe (device_peaks.h); NaN
// where not known.
struct DevicePeaks {
  double flops_per_s = std::numeric_limits<double>::quiet_NaN();
  double bytes_per_s = std::numeric_limits<double>::quiet_NaN();
  std::string source;  // how they were measured, or why they are not known
  std::string dtype;   // the FMA rate's dtype ("f32"); empty where not recorded
  std::string device;  // where they were measured: "AMD EPYC, 2 threads"
  bool known() const { return flops_per_s > 0 && bytes_per_s > 0; }
  static DevicePeaks from_environment(const nlohmann::json& environment);
};

// A row against the roofline: achieved FLOP/s and bytes/s, the attainable
// rate at its arithmetic intensity min(peak FLOP/s, intensity x bandwidth),
// the share of it achieved, and the bound: "memory" below the ridge point
// (peak FLOP/s / bandwidth), "compute" at or above it. NaN/empty where the
// row has no counted work or the peaks are not known.
struct RooflinePoint {
  double flops_per_s = std::numeric_limits<double>::quiet_NaN();
  double bytes_per_s = std::numeric_limits<double>::quiet_NaN();
  double intensity = std::numeric_limits<double>::quiet_NaN();  // FLOPs per byte
  double roofline_pct = std::numeric_limits<double>::quiet_NaN();
  std::string bound;
};
RooflinePoint roofline(const LayerProfileRow& row, const DevicePeaks& peaks);

// The table `trainbench-engine layers --json` and `export` print, from the
// run's sampled steps: {"sampled_steps": [step, ...], "step_time_ms" (mean),
// "peaks": {flops_per_s, bytes_per_s, source, dtype, device}, "attributed_share",
// "rows": [{layer, kind, phase, time_ms, share (of the step), flops, bytes,
// flops_per_s, bytes_per_s, intensity, roofline_pct, bound}]} (means over the
// sampled steps; a figure that is not known is null).
nlohmann::json layer_profile_table(const std::vector<LayerProfileStep>& steps,
                                   const DevicePeaks& peaks);

// Two runs' per-layer profiles side by side (the workbench's Compare): rows
// matched by layer and phase, as mean_profile matches a run's steps. A row
// only one run has (a layer the other's model fused away: fuse_pointwise
// folds `relu` into `bn`) reads NaN on the other side. Order: A's rows, each
// row only B has after the row B has before it.
enum class LayerChange { Faster, Slower, Same, OnlyA, OnlyB };
// B within this share of A's time (either way) is "about the same": sampled
// steps on a busy machine differ by that much.
constexpr double kLayerSameWithin = 0.05;

struct LayerComparisonRow {
  std::string layer, phase;
  std::string kind_a, kind_b;  // empty on the side that lacks the row
  double time_a_ms = std::numeric_limits<double>::quiet_NaN();
  double time_b_ms = std::numeric_limits<double>::quiet_NaN();
  double ratio() const { return time_b_ms / time_a_ms; }  // B's time over A's; NaN when one lacks it
  LayerChange change() const;
};
std::vector<LayerComparisonRow> compare_layer_profiles(const LayerProfileStep& a,
                                                       const LayerProfileStep& b);
// "faster", "slower", "about the same", "only in A", "only in B".
const char* layer_change_name(LayerChange change);

// Why a stored run has no profile, and what would give it one, from its
// summary ("layer_profile": {"not_measured": ...}), its status and the
// engine that recorded it: what `layers` and the workbench say.
std::string layer_profile_absence(const nlohmann::json& summary, const std::string& status,
                                  const std::string& engine_version);

}  // namespace tb
