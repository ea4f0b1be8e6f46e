// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/train/tricks.h"

#include <algorithm>
#include <string>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/parallel/launch.h"

namespace tb {

using json = nlohmann::json;

namespace {

// Whether the trick of key `k` takes effect, and why not (or a note) in *reason.
bool decide(const ConfigKey& k, const json& value, bool changed, const RunConfig& c,
            const BackendCapabilities& caps, const Device& device, const PlanContext& ctx,
            std::string& reason) {
  if (k.key == "parallel") {
    const std::string v = value.get<std::string>();
    if (v == "dp") {
      if (!caps.multi_device) {
        reason = device.is_cpu() ? "the cpu backend drives one device; dp (one process driving "
                                   "several GPUs) needs the cuda backend"
                                 : "not implemented by this build's backend";
        return false;
      }
      if (c.dp_devices > ctx.devices) {
        reason = "dp_devices = " + std::to_string(c.dp_devices) + " but " +
                 std::to_string(ctx.devices) + " device(s) are visible from " + device.str() +
                 " on";
        return false;
      }
      const int64_t n = c.dp_devices > 0 ? c.dp_devices : ctx.devices;
      reason = std::to_string(n) + " device(s) driven by one process (" + device.str() + " on), " +
               "batch_size split across them, gradients summed on " + device.str();
      return true;
    }
    if (v == "ddp") {
      reason = ddp_unavailable_reason(device.kind);
      if (!reason.empty()) return false;
      reason = "over " + ddp_transport(device.kind) + ", " + std::to_string(ctx.world_size) +
               (ctx.world_size == 1 ? " process (start several with mpirun -np N)" : " processes");
    }
    return true;
  }
  // The parallel keys that need one mode say so in the settings table (applies_when).
  if (k.group == "parallel" && changed && k.applies_key == "parallel" &&
      std::find(k.applies_values.begin(), k.applies_values.end(), c.parallel) ==
          k.applies_values.end()) {
    reason = "only with parallel:";
    for (const json& v : k.applies_values) reason += " " + v.get<std::string>();
    return false;
  }
  if (k.key == "amp" && c.parallel == "dp" && PrecisionPolicy::from_config(c.amp).needs_loss_scaling()) {
    reason = "not applied: dp has one loss scaler, on the first device, and the replicas' "
             "losses are scaled on theirs (use bf16, or ddp)";
    return false;
  }
  if (k.key == "fuse_pointwise" && value.get<bool>() && c.sync_batchnorm && c.parallel == "ddp") {
    reason = "not applied: sync_batchnorm synchronises the unfused BatchNorm2d";
    return false;
  }
  if (k.needs && !(caps.*k.needs)) {
    // Streams, pinned memory, cuDNN, Tensor Cores and the caching allocator
    // have no counterpart on the CPU backend.
    if (device.is_cpu())
      reason = changed ? "not applicable on the cpu backend" : "off; needs the cuda backend";
    else
      reason = "not implemented by this build's cuda backend yet";
    return false;
  }
  if (k.key == "cuda_graphs" && value.get<bool>()) {
    reason = cuda_graphs_blocker(c);
    if (reason.empty() && ctx.tracing)
      reason = "not applied: a trace records per-layer spans, a replay has none";
    return reason.empty();
  }
  if (k.key == "non_blocking" && value.get<bool>() && !c.pin_memory)
    reason = "without pin_memory the driver stages pageable batches first, so the copy "
             "does not overlap compute";
  if (k.key == "eval_inference_mode" && !value.get<bool>()) {
    reason = "evaluation in this engine never records activations for backward";
    return false;
  }
  if (k.key == "deterministic" && device.is_cpu())
    reason = "the cpu backend is deterministic for a fixed thread count";
  return true;
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
  if (c.parallel == "ddp")
    return "not applied: ddp's gradient all-reduces and control exchange run outside a capture";
  if (c.parallel == "dp")
    return "not applied: dp's step runs on several devices from several host threads";
  return {};
}

namespace {

// cpu_layout (config.cpp) -> the plan's activation layout, after channels_last
// and amp. Blocked needs f32 activations (the blocked paths are f32; amp on the
// CPU is applied only by a test hook: asked for and not applied, the
// activations are f32), NCHW otherwise and a host run; auto also needs oneDNN
// on 16-channel blocks, the only case where it saves every reorder.
void resolve_cpu_layout(const RunConfig& c, RunPlan& p) {
  p.activation_layout = p.layout;
  if (!p.on_host || c.cpu_layout == "nchw") return;
  const bool asked = c.cpu_layout == "blocked";
  std::string blocker;
  if (p.layout != Layout::NCHW) blocker = "channels_last keeps NHWC";
  else if (p.precision.enabled()) blocker = "amp's activations are not f32";
  else if (!cpu_has_onednn()) blocker = "this build has no oneDNN (its convolutions read it)";
  else if (!asked && !onednn_blocks_of_16()) blocker = "oneDNN has no AVX-512 kernels here";
  if (blocker.empty()) {
    p.activation_layout = Layout::NCHW16C;
    p.activation_layout_reason = asked ? "cpu_layout blocked" : "cpu_layout auto: oneDNN on AVX-512";
  } else {
    p.activation_layout_reason = "cpu_layout " + c.cpu_layout + ": NCHW, " + blocker;
  }
}

}  // namespace

RunPlan resolve_tricks(const RunConfig& c, const BackendCapabilities& caps, const Device& device,
                       const PlanContext& ctx) {
  RunPlan p;
  for (const ConfigKey& k : config_schema()) {
    if (k.trick == 0) continue;
    const json& value = c.values.at(k.key);
    const bool changed = value != k.default_value;  // the user asked for non-default behaviour
    std::string reason;
    const bool applied = decide(k, value, changed, c, caps, device, ctx, reason);
    json st = {{"trick", k.trick}, {"requested", value}, {"changed", changed}, {"applied", applied}};
    if (!reason.empty()) st["reason"] = reason;
    p.tricks[k.key] = st;
  }
  // Every choice below reads the record: a trick is used when it is on and applied.
  auto on = [&](const char* key, bool value) { return value && p.applied(key); };
  p.on_host = device.is_cpu();
  p.pinned_staging = on("pin_memory", c.pin_memory);
  p.non_blocking = on("non_blocking", c.non_blocking);
  p.gpu_augment = on("gpu_augment", c.gpu_augment);
  p.uint8_upload = on("h2d_uint8", c.h2d_uint8) || p.gpu_augment;
  p.layout = on("channels_last", c.channels_last) ? Layout::NHWC : Layout::NCHW;
  const PrecisionPolicy amp = PrecisionPolicy::from_config(c.amp, c.amp_activations);
  if (p.applied("amp") || ctx.amp_on_cpu_for_test) p.precision = amp;
  resolve_cpu_layout(c, p);
  p.pad_channels_to = p.applied("pad_channels_to") ? c.pad_channels_to : 0;
  p.fuse_pointwise = on("fuse_pointwise", c.fuse_pointwise);
  p.device_side_init = on("device_side_init", c.device_side_init);
  p.cuda_graphs = on("cuda_graphs", c.cuda_graphs);
  p.ddp = c.parallel == "ddp" && p.applied("parallel");
  p.bucket_elements = p.ddp ? static_cast<int64_t>(c.bucket_mb * 1024 * 1024 / 4) : 0;
  p.sync_batchnorm = p.ddp && c.sync_batchnorm;
  p.dp = c.parallel == "dp" && p.applied("parallel");
  p.dp_devices = p.dp ? (c.dp_devices > 0 ? int(c.dp_devices) : ctx.devices) : 0;
  p.empty_cache_between_phases = on("empty_cache_between_phases", c.empty_cache_between_phases);
  // Kernel counts and the Tensor Core share (CUPTI): only when asked, sampled
  // (cupti_sampling) or every step with the profiler. A trace records every
  // kernel itself (its device rows), so it has neither the census nor the
  // tensor pipe counters.
  const bool profiler = on("profiler", c.profiler);
  p.kernel_census = p.tensor_pipe = !p.on_host && !ctx.tracing && (c.cupti_sampling || profiler);
  p.census_every_step = p.kernel_census && profiler;
  p.device_trace = !p.on_host && ctx.tracing;
  return p;
}

json resolve_tricks(const RunConfig& c, const Device& device) {
  return resolve_tricks(c, capabilities_of(device.kind), device).tricks;
}

}  // namespace tb
