// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The run configuration: one flat JSON object, every key declared once in the
// settings table (config.cpp, make_table): type, default, range or choices,
// group, the backend capability it needs, the RunConfig field it fills, and a
// one-line help. Validation, RunConfig::from_json, default_config(),
// `trainbench-engine config --schema` and through it the GUI's controls all
// read that table. Adding a setting: a RunConfig member and one table row
// (docs/architecture.md, "Adding a setting").
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend/capabilities.h"

namespace tb {

// Typed view of a validated configuration; every member is filled from the
// table (the `field` of its row). The members have no initializers of their
// own: a default value lives in the table alone, and RunConfig() takes it
// from there.
struct RunConfig {
  RunConfig();  // every member at the settings table's default
  static RunConfig from_json(const nlohmann::json& validated);

  nlohmann::json values;  // the full validated object, stored with the run

  std::string name, model, dataset, data_dir, device;
  int64_t cpu_threads;
  std::string cpu_layout;
  int64_t train_limit, test_limit;
  std::vector<int64_t> synthetic_shape;
  int64_t synthetic_size;
  int64_t epochs, max_steps, batch_size;
  std::string optimizer, schedule, lr_scaling;
  double lr, momentum, weight_decay, beta1, beta2, eps, alpha;
  bool nesterov;
  int64_t step_size;
  double gamma, min_lr;
  int64_t base_batch_size, warmup_steps;
  double label_smoothing;
  uint64_t seed;
  int64_t random_crop_padding;
  bool horizontal_flip, pad_to_32;
  int64_t log_every;
  // measurement: sampled figures every N steps; CUPTI (census, tensor pipe) only when asked
  int64_t measure_every;
  bool cupti_sampling;
  // time to accuracy: stop at a target test accuracy, evaluated every N steps
  double target_accuracy;
  int64_t eval_every_steps;
  // the ladder (`trainbench-engine ladder`; a plain run ignores them)
  std::string ladder_rungs, ladder_mode;
  int64_t ladder_repeats, ladder_warmup_steps, ladder_measured_steps;
  bool ladder_accuracy;

  // tricks
  std::string amp, amp_activations, parallel;
  int64_t workers, accumulation_steps, pad_channels_to;
  bool pin_memory, non_blocking, h2d_uint8, cudnn_benchmark,
       channels_last, grad_set_to_none, conv_bias_before_bn,
       fuse_pointwise, optimizer_foreach, device_side_init,
       gpu_augment, sync_every_step, anomaly_check, profiler,
       eval_inference_mode, deterministic, empty_cache_between_phases,
       cuda_graphs;
  double clip_grad_norm;
  // data parallel (parallel: ddp; dp_devices: parallel: dp)
  int64_t processes, dp_devices;
  double bucket_mb;
  bool sync_batchnorm;

 private:
  explicit RunConfig(const nlohmann::json& validated);
};

enum class KeyType { Bool, Int, Float, String, IntList };

// The RunConfig member a key fills; its type must match the key's
// (Bool: bool, Int: int64_t or uint64_t, Float: double, String: std::string,
// IntList: std::vector<int64_t>), which make_table checks.
using ConfigField =
    std::variant<bool RunConfig::*, int64_t RunConfig::*, uint64_t RunConfig::*,
                 double RunConfig::*, std::string RunConfig::*, std::vector<int64_t> RunConfig::*>;

// A section of the settings: the GUI shows each as one box; trick groups go
// to the trick panel, the others to the run settings.
struct ConfigGroup {
  std::string id, title;
  bool tricks = false;
};

struct ConfigKey {
  std::string key;
  KeyType type;
  nlohmann::json default_value;
  nlohmann::json choices = nlohmann::json::array();  // allowed values (empty: any)
  double min = 0, max = 0;                           // numeric range when min < max
  std::string group;                                 // a ConfigGroup id
  int trick = 0;  // its row in the spec's trick catalogue (TRICKS.md), 0 if none
  // The capability a backend must report for this key to take effect; null:
  // every backend honours it.
  bool BackendCapabilities::* needs = nullptr;
  int min_devices = 1;  // devices the key needs when on (parallel: 2)
  ConfigField field;
  std::string help;  // one line for --help and tooltips
  // How front ends show it: a short name (every trick has one; the ladder's
  // rungs are titled with them), display names of choices (by value as text),
  // and what a special 0 means ("all", "off"); empty when there is none.
  std::string label;
  nlohmann::json choice_labels = nlohmann::json::object();
  std::string zero_means;
  // The key takes effect only while `applies_key` has one of `applies_values`
  // (step_size: schedule is step); empty: always.
  std::string applies_key;
  nlohmann::json applies_values = nlohmann::json::array();

  // "all" when the CPU backend honours it (the CUDA backend honours all it
  // does), "cpu" for the host kernels' threads, else "cuda".
  std::string backends() const;
};

const std::vector<ConfigGroup>& config_groups();
const std::vector<ConfigKey>& config_schema();
const ConfigKey* find_config_key(const std::string& key);  // nullptr when unknown
// The table as JSON (`config --schema`; the GUI builds its controls from it):
// {"version": 2, "groups": [{id, title, tricks}], "keys": [{key, type, default,
//  choices?, min?, max?, group, trick, backends, min_devices, help, label?,
//  choice_labels?, zero_means?, applies_when?: {key, values}}],
//  "models": [{name, label, input_shape, min_image_size}] (engine/nn/models.h)}
nlohmann::json config_schema_json();
nlohmann::json default_config();
// The name of a run whose configuration gives none: its model and batch size,
// e.g. "fmnist-cnn b64" (the history, the tabs and the plots' legends show it).
std::string default_run_name(const std::string& model, int64_t batch_size);

// One key and its value alone: the key is in the table, the value of its type,
// range and choices. Returns the value as validate_config stores it; throws
// tb::Error naming the key, the value and what was expected (the cross-key
// rules of validate_config are not checked here).
nlohmann::json check_config_entry(const std::string& key, const nlohmann::json& value,
                                  const std::string& source);

// Each key of `overrides` as written (check_config_entry: no defaults merged,
// no cross-key rules); the values as validate_config stores them.
nlohmann::json check_config_keys(const nlohmann::json& overrides, const std::string& source);

// Merges `overrides` onto the defaults and validates every key. Throws tb::Error
// naming the key, the value and what was expected; `source` (a file name or
// "--set") prefixes the message.
nlohmann::json validate_config(const nlohmann::json& overrides, const std::string& source);

// Parses "key=value" (value as JSON when it parses, else as a string).
void apply_assignment(nlohmann::json& config, const std::string& assignment);

}  // namespace tb
