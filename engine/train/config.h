// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The run configuration: one flat JSON object whose keys are described by a
// schema (type, default, allowed values, group, which backends honour it).
// The schema is the single source for validation, for `trainbench-engine
// config --schema`, and for the GUI's controls.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tb {

enum class KeyType { Bool, Int, Float, String, IntList };

struct ConfigKey {
  std::string key;
  KeyType type;
  nlohmann::json default_value;
  std::vector<std::string> choices;  // allowed values for String keys (empty: any)
  double min = 0, max = 0;           // numeric range when min < max
  std::string group;                 // "run", "data", "optimizer", or a trick group
  int trick = 0;                     // row number in TRICKS.md, 0 if not a trick
  std::string backends;              // "all" or "cuda": where it can be honoured
  std::string help;                  // one line for --help and tooltips
};

const std::vector<ConfigKey>& config_schema();
nlohmann::json config_schema_json();
nlohmann::json default_config();

// Merges `overrides` onto the defaults and validates every key. Throws tb::Error
// naming the key, the value and what was expected; `source` (a file name or
// "--set") prefixes the message.
nlohmann::json validate_config(const nlohmann::json& overrides, const std::string& source);

// Parses "key=value" (value as JSON when it parses, else as a string).
void apply_assignment(nlohmann::json& config, const std::string& assignment);

// Typed view of a validated configuration.
struct RunConfig {
  nlohmann::json values;  // the full validated object, stored with the run

  std::string name, model, dataset, data_dir, device;
  int64_t train_limit = 0, test_limit = 0;
  std::vector<int64_t> synthetic_shape;
  int64_t synthetic_size = 0;
  int64_t epochs = 1, max_steps = 0, batch_size = 64;
  std::string optimizer, schedule, lr_scaling;
  double lr = 0, momentum = 0, weight_decay = 0, beta1 = 0, beta2 = 0, eps = 0, alpha = 0;
  bool nesterov = false;
  int64_t step_size = 0;
  double gamma = 0, min_lr = 0;
  int64_t base_batch_size = 64, warmup_steps = 0;
  double label_smoothing = 0;
  uint64_t seed = 0;
  int64_t random_crop_padding = 0;
  bool horizontal_flip = false, pad_to_32 = false;
  int64_t log_every = 20;

  // tricks
  std::string amp, parallel;
  int64_t workers = 0, accumulation_steps = 1, pad_channels_to = 0;
  bool pin_memory = false, non_blocking = false, h2d_uint8 = false, cudnn_benchmark = false,
       channels_last = false, grad_set_to_none = true, conv_bias_before_bn = true,
       fuse_pointwise = false, optimizer_foreach = false, device_side_init = false,
       gpu_augment = false, sync_every_step = true, anomaly_check = false, profiler = false,
       eval_inference_mode = true, deterministic = false, empty_cache_between_phases = false,
       cuda_graphs = false;
  double clip_grad_norm = 0;

  static RunConfig from_json(const nlohmann::json& validated);
};

}  // namespace tb
