// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/advise/advisor.h"

#include <algorithm>
#include <cstdio>

#include "engine/backend/capabilities.h"
#include "engine/core/device.h"
#include "engine/store/run_store.h"
#include "engine/train/config.h"

namespace tb {

using json = nlohmann::json;

namespace {

double median_of(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string pct(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * share);
  return buf;
}

std::string num(double v, const char* f = "%.2f") {
  char buf[48];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Amdahl: the step without a part that is `share` of it.
double without_share(double share) { return share < 1 ? 1.0 / (1.0 - share) : NAN; }

bool flag(const json& config, const char* key) { return config.value(key, false); }

// Why a bound from the breakdown is missing.
std::string no_breakdown(const RunEvidence& e, const char* which = "no phase breakdown in this run") {
  return e.phases_unmeasured.empty() ? which : e.phases_unmeasured;
}

// Input channels of the model's first layer, from the data set.
int64_t input_channels(const json& c) {
  const std::string ds = c.value("dataset", "");
  if (ds == "synthetic") return c.value("synthetic_shape", json::array({3})).at(0).get<int64_t>();
  return ds == "cifar10" ? 3 : 1;
}

Advice input_wait(const RunEvidence& e) {
  const double step = e.get("step_time_ms"), wait = e.get("data_wait_ms");
  const double h2d = std::isfinite(e.get("h2d_ms")) ? e.get("h2d_ms") : 0.0;
  if (!(step > 0) || !std::isfinite(wait)) return {};
  const double share = (wait + h2d) / step;
  if (share <= kInputWaitShare) return {};
  Advice a;
  a.rule = "input_wait";
  a.title = "The step waits for its input";
  a.evidence = "data wait " + num(wait) + " ms" + (h2d > 0 ? " + host-to-device " + num(h2d) + " ms" : "") +
               " of a " + num(step) + " ms median step: " + pct(share);
  a.threshold = "input share > " + pct(kInputWaitShare) + " of the step";
  std::vector<std::string> what;
  if (e.config.value("workers", int64_t(0)) < 4) a.changes["workers"] = 4, what.push_back("loader workers");
  if (e.on_gpu()) {
    if (!flag(e.config, "pin_memory") || !flag(e.config, "non_blocking"))
      a.changes["pin_memory"] = true, a.changes["non_blocking"] = true,
      what.push_back("pinned memory with non-blocking copies");
    if (!flag(e.config, "h2d_uint8")) a.changes["h2d_uint8"] = true, what.push_back("uint8 uploads");
  }
  a.action = what.empty() ? "the loader already has workers: make the transforms cheaper or the data smaller"
                          : "try " + [&] {
                              std::string s;
                              for (size_t i = 0; i < what.size(); ++i)
                                s += (i ? (i + 1 == what.size() ? " and " : ", ") : "") + what[i];
                              return s;
                            }();
  a.max_speedup = without_share(share);
  a.bound_reason = "if the whole input wait disappeared: 1 / (1 - " + num(share, "%.3f") + ")";
  return a;
}

Advice tensor_cores(const RunEvidence& e) {
  const double tc = e.get("tensor_core_share"), step = e.get("step_time_ms");
  if (!e.on_gpu() || !std::isfinite(tc) || tc >= kTensorCoreShareZero) return {};
  if (e.config.value("amp", "off") != "off") return {};
  const double compute = e.get("forward_ms") + e.get("backward_ms");
  Advice a;
  a.rule = "tensor_cores";
  a.title = "Convolutions and matrix products run without Tensor Cores";
  a.evidence = "Tensor Core share of kernel time " + pct(tc) + " with amp off";
  a.threshold = "Tensor Core share < " + pct(kTensorCoreShareZero) + " on a GPU";
  a.changes["amp"] = "bf16";
  std::string act = "mixed precision (amp=bf16; fp16 on GPUs before Ampere)";
  if (!flag(e.config, "channels_last")) a.changes["channels_last"] = true, act += ", channels-last";
  if (input_channels(e.config) % 8 != 0 && e.config.value("pad_channels_to", int64_t(0)) == 0)
    a.changes["pad_channels_to"] = 8,
    act += ", channel padding to 8 (the input has " + std::to_string(input_channels(e.config)) + ")";
  a.action = act;
  if (std::isfinite(compute) && step > 0) {
    const double share = std::min(compute / step, 0.999);
    a.evidence += "; forward + backward are " + pct(share) + " of the step";
    a.max_speedup = without_share(share);
    a.bound_reason = "Tensor Cores speed up forward and backward only: at most 1 / (1 - " +
                     num(share, "%.3f") + ") if those took no time";
  } else {
    a.bound_reason = no_breakdown(e, "no forward/backward breakdown in this run");
  }
  return a;
}

Advice memory_headroom(const RunEvidence& e) {
  const double total = e.get("gpu_mem_total_bytes");
  double peak = e.summary.value("gpu_mem_peak_bytes", NAN);
  if (!std::isfinite(peak)) peak = e.get("gpu_mem_peak_bytes");
  if (!e.on_gpu() || !(total > 0) || !std::isfinite(peak)) return {};
  const double used = peak / total;
  if (used >= kMemoryHeadroom) return {};
  Advice a;
  a.rule = "memory_headroom";
  a.title = "Most of the device memory is unused";
  a.evidence = "peak " + num(peak / 1048576.0, "%.0f") + " MiB of " + num(total / 1048576.0, "%.0f") +
               " MiB: " + pct(used);
  a.threshold = "peak memory < " + pct(kMemoryHeadroom) + " of the device";
  const int64_t batch = e.config.value("batch_size", int64_t(64));
  const int64_t factor = std::max<int64_t>(2, std::min<int64_t>(4, int64_t(kMemoryHeadroom / std::max(used, 1e-3))));
  a.changes = {{"batch_size", batch * factor},
               {"lr_scaling", "linear"},
               {"base_batch_size", batch},
               {"warmup_steps", std::max<int64_t>(e.config.value("warmup_steps", int64_t(0)), 20)}};
  a.action = "batch x" + std::to_string(factor) + " with the learning rate scaled linearly and a warm-up";
  // Per-step fixed costs (optimizer, the rest) are shared by more samples.
  const double fixed = e.get("optimizer_ms") + e.get("other_ms"), step = e.get("step_time_ms");
  if (std::isfinite(fixed) && step > 0) {
    const double share = fixed / step, k = double(factor);
    a.max_speedup = 1.0 / ((1.0 - share) + share / k);
    a.bound_reason = "the optimizer and the rest (" + pct(share) +
                     " of the step) shared by " + std::to_string(factor) +
                     "x the samples, if forward and backward grow with the batch; an under-filled "
                     "GPU can gain more";
  } else {
    a.bound_reason = no_breakdown(e);
  }
  return a;
}

Advice launch_bound(const RunEvidence& e) {
  const double kernels = e.get("kernels_per_step"), kernel_ms = e.get("kernel_time_ms"),
               step = e.get("step_time_ms");
  if (!e.on_gpu() || !std::isfinite(kernels) || !std::isfinite(kernel_ms) || !(step > 0)) return {};
  const double mean_us = 1e3 * kernel_ms / std::max(kernels, 1.0), busy = kernel_ms / step;
  if (kernels < kLaunchKernels || mean_us >= kLaunchMeanKernelUs || busy >= kLaunchBusyShare) return {};
  Advice a;
  a.rule = "launch_bound";
  a.title = "The step is launch-bound: many short kernels, the GPU idle between them";
  a.evidence = num(kernels, "%.0f") + " kernels per step averaging " + num(mean_us, "%.1f") +
               " us; the GPU computes " + pct(busy) + " of the step";
  a.threshold = ">= " + num(kLaunchKernels, "%.0f") + " kernels, mean < " +
                num(kLaunchMeanKernelUs, "%.0f") + " us, busy < " + pct(kLaunchBusyShare);
  std::vector<std::string> what;
  if (!flag(e.config, "cuda_graphs")) a.changes["cuda_graphs"] = true, what.push_back("CUDA graphs");
  if (!flag(e.config, "fuse_pointwise")) a.changes["fuse_pointwise"] = true, what.push_back("fused pointwise kernels");
  if (!flag(e.config, "optimizer_foreach")) a.changes["optimizer_foreach"] = true, what.push_back("the multi-tensor optimizer");
  if (what.empty()) return {};
  a.action = "try ";
  for (size_t i = 0; i < what.size(); ++i) a.action += (i ? ", " : "") + what[i];
  a.max_speedup = 1.0 / busy;
  a.bound_reason = "if the idle gaps vanished the step would take its kernel time: 1 / " + num(busy, "%.3f");
  return a;
}

Advice sync_every_step(const RunEvidence& e) {
  if (!e.on_gpu() || !flag(e.config, "sync_every_step") || flag(e.config, "cuda_graphs")) return {};
  Advice a;
  a.rule = "sync_every_step";
  a.title = "The host waits for the GPU every step";
  a.evidence = "sync_every_step is on: loss and accuracy are read back after every step";
  a.threshold = "sync_every_step on, on a GPU";
  a.changes["sync_every_step"] = false;
  a.action = "read back every log_every (" + std::to_string(e.config.value("log_every", int64_t(20))) + ") steps";
  a.bound_reason = "the wait is the host's lost lead over the GPU, which the step breakdown does not separate";
  return a;
}

Advice debug_checks(const RunEvidence& e) {
  std::vector<std::string> on;
  Advice a;
  for (const char* k : {"anomaly_check", "profiler"})
    if (flag(e.config, k)) on.push_back(k), a.changes[k] = false;
  if (on.empty()) return {};
  a.rule = "debug_checks";
  a.title = "Debugging checks are on";
  a.evidence = on.size() == 2 ? "anomaly_check and profiler are on" : on[0] + " is on";
  a.threshold = "anomaly_check or profiler on";
  a.action = "switch them off once the run is known to be healthy";
  a.bound_reason = "their cost is spread over the phases they check; measure with them off";
  return a;
}

Advice grad_zeroing(const RunEvidence& e) {
  if (flag(e.config, "grad_set_to_none") || !e.config.contains("grad_set_to_none")) return {};
  const double memsets = e.get("memsets_per_step");
  if (e.on_gpu() && std::isfinite(memsets) && memsets < 1) return {};
  Advice a;
  a.rule = "grad_zeroing";
  a.title = "Gradients are zeroed every step";
  a.evidence = std::isfinite(memsets) ? num(memsets, "%.0f") + " memset kernels per step with grad_set_to_none off"
                                      : "grad_set_to_none is off: the gradient block is filled with zeros before every step";
  a.threshold = "grad_set_to_none off";
  a.changes["grad_set_to_none"] = true;
  a.action = "let the first backward write the gradients (grad_set_to_none)";
  const double other = e.get("other_ms"), step = e.get("step_time_ms");
  if (std::isfinite(other) && step > 0) {
    a.max_speedup = without_share(other / step);
    a.bound_reason = "the zeroing is part of other_ms (" + pct(other / step) + " of the step)";
  } else {
    a.bound_reason = no_breakdown(e);
  }
  return a;
}

Advice cpu_with_gpu(const RunEvidence& e) {
  if (e.on_gpu() || !e.gpu_present) return {};
  Advice a;
  a.rule = "cpu_with_gpu";
  a.title = "Trained on the CPU while a GPU is present";
  a.evidence = "device " + e.device + "; this machine has a GPU the engine can use";
  a.threshold = "cpu backend with a GPU available";
  a.changes["device"] = "cuda";
  a.action = "train on the GPU (device=cuda)";
  a.bound_reason = "a different device: this run's breakdown does not bound it";
  return a;
}

// The trick's short name, from the settings table (one truth for its words).
std::string trick_label(const char* key) {
  const ConfigKey* k = find_config_key(key);
  return k && !k->label.empty() ? k->label : key;
}

bool backend_honours(const RunEvidence& e, bool BackendCapabilities::* capability) {
  try {
    return capabilities_of(parse_device(e.device).kind).*capability;
  } catch (const std::exception&) {
    return false;  // a device this build does not know: no advice for it
  }
}

// Layer kinds whose whole pass fuse_pointwise folds into the layer before
// them (engine/nn/models.cpp, residual.cpp): a ReLU or GELU after batch norm
// or a linear layer, a residual block's add and ReLU after its last batch norm.
bool fusable_pass(const std::string& kind) {
  return kind == "relu" || kind == "gelu" || kind == "residual";
}

Advice pointwise_passes(const RunEvidence& e) {
  const double step = e.layers.step_time_ms;
  if (e.layers.rows.empty() || !e.peaks.known() || !(step > 0)) return {};
  if (flag(e.config, "fuse_pointwise") || !backend_honours(e, &BackendCapabilities::fused_pointwise))
    return {};
  double share = 0;
  int passes = 0;
  const LayerProfileRow* cited = nullptr;
  RooflinePoint cited_point;
  for (const LayerProfileRow& r : e.layers.rows) {
    if (r.layer.empty() || !fusable_pass(r.kind)) continue;
    const RooflinePoint p = roofline(r, e.peaks);
    if (p.bound != "memory") continue;
    share += r.time_ms / step;
    ++passes;
    if (!cited || r.time_ms > cited->time_ms) cited = &r, cited_point = p;
  }
  if (share <= kPointwisePassShare || !cited) return {};
  Advice a;
  a.rule = "pointwise_passes";
  a.title = "Separate pointwise passes over the activations take " + pct(share) + " of the step";
  a.evidence = "layer " + cited->layer + " (" + cited->kind + ") " + cited->phase + " takes " +
               pct(cited->time_ms / step) + " of the step at " +
               num(cited_point.bytes_per_s / 1e9) + " GB/s, " + num(cited_point.roofline_pct, "%.1f") +
               "% of the roofline (" + num(e.peaks.bytes_per_s / 1e9, "%.1f") +
               " GB/s measured): memory-bound; with it, " + std::to_string(passes) +
               " memory-bound ReLU/GELU/residual-add rows take " + pct(share) +
               " of the step (per-layer profile)";
  a.threshold = "memory-bound ReLU, GELU and residual-add rows > " + pct(kPointwisePassShare) +
                " of the step, " + trick_label("fuse_pointwise") + " off";
  a.changes["fuse_pointwise"] = true;
  a.action = trick_label("fuse_pointwise") +
             ": batch norm and the linear layers apply the activation (and the residual add) as "
             "they write their output, which removes these passes over the activations";
  a.max_speedup = without_share(share);
  a.bound_reason = "if those passes took no time: 1 / (1 - " + num(share, "%.3f") +
                   "); the fused layers still write their output once";
  a.cites = {{"layer", cited->layer}, {"phase", cited->phase}};
  return a;
}

}  // namespace

const char* const kGraphReplayUnmeasured =
    "the step replayed a CUDA graph (cuda_graphs), timed as one launch: forward, backward and optimizer "
    "were not measured and the whole step is counted in other_ms";

bool phases_unmeasured_at(bool cuda_graphs, double forward_ms, double backward_ms, double optimizer_ms) {
  return cuda_graphs && forward_ms == 0 && backward_ms == 0 && optimizer_ms == 0;
}

double RunEvidence::get(const std::string& series) const {
  auto it = median.find(series);
  return it == median.end() ? NAN : it->second;
}

RunEvidence evidence_from_series(const json& config, const json& summary, const std::string& device,
                                 const std::map<std::string, std::vector<double>>& series,
                                 int64_t warmup) {
  RunEvidence e;
  e.config = config, e.summary = summary, e.device = device;
  auto steady_part = [warmup](const std::vector<double>& values) {
    const size_t skip = std::min<size_t>(size_t(std::max<int64_t>(warmup, 1)),
                                         std::max<size_t>(1, values.size() / 4));
    return values.size() > skip ? std::vector<double>(values.begin() + skip, values.end()) : values;
  };
  for (const auto& [name, values] : series) e.median[name] = median_of(steady_part(values));
  // Graph replays: count the steady steps whose phases read exactly 0.
  auto phase = [&](const char* name) {
    auto it = series.find(name);
    return it == series.end() ? std::vector<double>() : steady_part(it->second);
  };
  const std::vector<double> fwd = phase("forward_ms"), bwd = phase("backward_ms"), opt = phase("optimizer_ms");
  const size_t n = std::min({fwd.size(), bwd.size(), opt.size()});
  size_t replays = 0;
  for (size_t i = 0; i < n; ++i) replays += phases_unmeasured_at(flag(config, "cuda_graphs"), fwd[i], bwd[i], opt[i]);
  if (n > 0 && 2 * replays > n) {
    for (const char* name : {"forward_ms", "backward_ms", "optimizer_ms", "other_ms"}) e.median.erase(name);
    e.phases_unmeasured = "the phase breakdown was not measured in " + std::to_string(replays) + " of " +
                          std::to_string(n) + " steady steps: " + kGraphReplayUnmeasured;
  }
  return e;
}

RunEvidence evidence_from_store(const RunStore& store, int64_t run_id) {
  auto run = store.get_run(run_id);
  if (!run) return {};
  std::map<std::string, std::vector<double>> series;
  for (const std::string& name : store.step_series_names(run_id))
    for (const MetricPoint& p : store.step_series(run_id, name)) series[name].push_back(p.value);
  std::string device = run->environment.value("device", run->summary.value("device", ""));
  RunEvidence e = evidence_from_series(run->config, run->summary, device, series);
  e.layers = mean_profile(store.layer_profile(run_id));
  e.peaks = DevicePeaks::from_environment(run->environment);
  return e;
}

json Advice::to_json() const {
  return {{"rule", rule},         {"title", title},   {"evidence", evidence},
          {"threshold", threshold}, {"action", action}, {"changes", changes},
          {"max_speedup", std::isfinite(max_speedup) ? json(max_speedup) : json(nullptr)},
          {"bound_reason", bound_reason}, {"cites", cites}};
}

json applied_config(const json& config, const Advice& advice) {
  json c = config;
  for (const auto& [k, v] : advice.changes.items()) c[k] = v;
  c["name"] = config.value("name", "") + " + " + advice.rule;
  return c;
}

void link_advice(RunStore& store, int64_t before, int64_t after, const Advice& advice) {
  store.link_runs({before, after, "advice", "", advice.to_json()});
}

json advice_outcomes(const RunStore& store, int64_t before) {
  json out = json::array();
  const auto base = store.get_run(before);
  if (!base) return out;
  const double base_sps = base->summary.value("samples_per_s", NAN);
  for (const RunLink& l : store.run_links(before)) {
    if (l.kind != "advice" || l.from_run != before) continue;
    const auto after = store.get_run(l.to_run);
    if (!after) continue;
    const double sps = after->summary.value("samples_per_s", NAN);
    out.push_back({{"run_id", l.to_run},
                   {"rule", l.note.value("rule", "")},
                   {"title", l.note.value("title", "")},
                   {"max_speedup", l.note.value("max_speedup", json())},
                   {"measured_speedup", std::isfinite(sps / base_sps) && base_sps > 0
                                            ? json(sps / base_sps) : json(nullptr)},
                   {"status", after->status}});
  }
  return out;
}

std::vector<Advice> advise(const RunEvidence& e) {
  std::vector<Advice> out;
  for (auto rule : {input_wait, tensor_cores, memory_headroom, launch_bound, sync_every_step,
                    debug_checks, grad_zeroing, cpu_with_gpu, pointwise_passes})
    if (Advice a = rule(e); !a.rule.empty()) out.push_back(std::move(a));
  return out;
}

}  // namespace tb
