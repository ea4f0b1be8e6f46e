// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/train/tricks.h"

#include <set>
#include <string>

namespace tb {

using json = nlohmann::json;

namespace {

// The cuda-only tricks that this build's trainer and CUDA backend carry out.
// Every other cuda-only key is reported "not implemented" on a GPU, so a run
// never claims a trick it did not do. Add a key here in the commit that makes
// it real (and tests it).
bool cuda_trick_implemented(const std::string& key) {
  static const std::set<std::string> implemented = {
      "cudnn_benchmark",             // conv_cudnn.cpp: autotuned plans per shape key
      "pin_memory",                  // loader buffers from Backend::pinned_host_empty
      "non_blocking",                // InputStager: copy stream, events, two device slots
      "h2d_uint8",                   // u8 batches, Backend::normalize_u8 on the device
      "empty_cache_between_phases",  // trainer: around every evaluation
      "channels_last",     // trainer: NHWC activations + KRSC filters, input relayout once per step
      "pad_channels_to",   // PadChannels layer: input channels to a multiple (1/3 -> 8)
      "amp",               // conv/linear *_lp ops + loss scaler
      "gpu_augment",       // raw u8 batches, Backend::augment_normalize_u8
      "device_side_init",  // Model: constant params/buffers filled on the device
      "cuda_graphs",       // trainer: whole step captured once per stager slot, replayed
#ifdef TRAINBENCH_HAVE_CUPTI
      "profiler",  // KernelCensus of every step (CUPTI activity records)
#endif
  };
  return implemented.count(key) > 0;
}

}  // namespace

std::string cuda_graphs_blocker(const RunConfig& c) {
  // Each of these reads a value on the host in the middle of the step, which
  // a captured graph cannot do (it would replay the first step's value).
  if (c.accumulation_steps != 1)
    return "not applied: accumulation_steps > 1 (the captured step is one micro-batch)";
  if (c.clip_grad_norm > 0)
    return "not applied: clip_grad_norm reads the gradient norm on the host inside the step";
  if (c.anomaly_check)
    return "not applied: anomaly_check reads every layer's output on the host inside the step";
  return {};
}

json resolve_tricks(const RunConfig& c, const Device& device) {
  json out = json::object();
  for (const ConfigKey& k : config_schema()) {
    if (k.trick == 0) continue;
    const json& value = c.values.at(k.key);
    const bool changed = value != k.default_value;  // the user asked for non-default behaviour
    bool applied = true;
    std::string reason;
    if (k.backends == "cuda" && device.is_cpu()) {
      // Streams, pinned memory, cuDNN, Tensor Cores and the caching allocator
      // have no counterpart on the CPU backend.
      applied = false;
      reason = changed ? "not applicable on the cpu backend" : "off; needs the cuda backend";
    } else if (k.backends == "cuda" && !cuda_trick_implemented(k.key)) {
      applied = false;
      reason = "not implemented by this build's cuda backend yet";
    } else if (k.key == "cuda_graphs" && value.get<bool>() &&
               !(reason = cuda_graphs_blocker(c)).empty()) {
      applied = false;
    } else if (k.key == "non_blocking" && value.get<bool>() && !c.pin_memory) {
      reason = "without pin_memory the driver stages pageable batches first, so the copy "
               "does not overlap compute";
    } else if (k.key == "eval_inference_mode" && !value.get<bool>()) {
      applied = false;
      reason = "evaluation in this engine never records activations for backward";
    } else if (k.key == "deterministic" && device.is_cpu()) {
      reason = "the cpu backend is deterministic for a fixed thread count";
    }
    json st = {{"trick", k.trick}, {"requested", value}, {"changed", changed}, {"applied", applied}};
    if (!reason.empty()) st["reason"] = reason;
    out[k.key] = st;
  }
  return out;
}

}  // namespace tb
