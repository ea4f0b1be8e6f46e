// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/metrics/layer_profile.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "engine/core/error.h"

namespace tb {

using json = nlohmann::json;

namespace {

double number_or_nan(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nan("");
  TB_CHECK(j[key].is_number(), "layer profile: '", key, "' must be a number, got ", j[key].dump());
  return j[key].get<double>();
}

template <typename T>
T required(const json& j, const char* key, const char* what) {
  TB_CHECK(j.is_object() && j.contains(key), "layer profile: ", what, " has no '", key, "'");
  try {
    return j[key].get<T>();
  } catch (const json::exception&) {
    TB_FAIL("layer profile: ", what, "'s '", key, "' has the wrong type: ", j[key].dump());
  }
}

}  // namespace

json LayerProfileStep::to_json() const {
  json out = {{"step", step}, {"step_time_ms", step_time_ms}, {"rows", json::array()}};
  for (const LayerProfileRow& r : rows) {
    json row = {{"layer", r.layer}, {"kind", r.kind}, {"phase", r.phase}, {"time_ms", r.time_ms}};
    if (std::isfinite(r.flops)) row["flops"] = r.flops;
    if (std::isfinite(r.bytes)) row["bytes"] = r.bytes;
    out["rows"].push_back(std::move(row));
  }
  return out;
}

LayerProfileStep LayerProfileStep::from_json(const json& j) {
  LayerProfileStep s;
  s.step = required<int64_t>(j, "step", "the event");
  s.step_time_ms = required<double>(j, "step_time_ms", "the event");
  TB_CHECK(j.contains("rows") && j["rows"].is_array(), "layer profile: the event has no 'rows' array");
  for (const json& r : j["rows"]) {
    LayerProfileRow row;
    row.layer = required<std::string>(r, "layer", "a row");
    row.kind = required<std::string>(r, "kind", "a row");
    row.phase = required<std::string>(r, "phase", "a row");
    row.time_ms = required<double>(r, "time_ms", "a row");
    row.flops = number_or_nan(r, "flops");
    row.bytes = number_or_nan(r, "bytes");
    s.rows.push_back(std::move(row));
  }
  return s;
}

LayerProfileStep mean_profile(const std::vector<LayerProfileStep>& steps) {
  LayerProfileStep out;
  if (steps.empty()) return out;
  std::map<std::pair<std::string, std::string>, size_t> index;
  for (const LayerProfileStep& s : steps) {
    out.step_time_ms += s.step_time_ms;
    for (const LayerProfileRow& r : s.rows) {
      auto [it, added] = index.try_emplace({r.layer, r.phase}, out.rows.size());
      if (added) {
        LayerProfileRow zero = r;
        zero.time_ms = 0;
        zero.flops = std::isfinite(r.flops) ? 0 : r.flops;
        zero.bytes = std::isfinite(r.bytes) ? 0 : r.bytes;
        out.rows.push_back(zero);
      }
      LayerProfileRow& m = out.rows[it->second];
      m.time_ms += r.time_ms;
      if (std::isfinite(r.flops)) m.flops = (std::isfinite(m.flops) ? m.flops : 0) + r.flops;
      if (std::isfinite(r.bytes)) m.bytes = (std::isfinite(m.bytes) ? m.bytes : 0) + r.bytes;
    }
  }
  const double n = double(steps.size());
  out.step = steps.back().step;
  out.step_time_ms /= n;
  for (LayerProfileRow& r : out.rows) r.time_ms /= n, r.flops /= n, r.bytes /= n;
  return out;
}

DevicePeaks DevicePeaks::from_environment(const json& environment) {
  DevicePeaks p;
  if (environment.is_object()) {
    p.device = environment.value("device_name", environment.value("device", std::string()));
    if (environment.contains("threads") && environment["threads"].is_number_integer())
      p.device += ", " + std::to_string(environment["threads"].get<int64_t>()) + " threads";
  }
  if (!environment.is_object() || !environment.contains("peaks") || !environment["peaks"].is_object()) {
    p.source = "not recorded (the run was made before device peaks were probed)";
    return p;
  }
  const json& j = environment["peaks"];
  p.flops_per_s = number_or_nan(j, "flops_per_s");
  p.bytes_per_s = number_or_nan(j, "bytes_per_s");
  p.source = j.value("source", j.value("not_measured", std::string("unknown")));
  if (j.contains("dtype") && j["dtype"].is_string()) p.dtype = j["dtype"].get<std::string>();
  return p;
}

RooflinePoint roofline(const LayerProfileRow& row, const DevicePeaks& peaks) {
  RooflinePoint p;
  if (!(row.time_ms > 0) || !std::isfinite(row.flops) || !std::isfinite(row.bytes)) return p;
  const double s = row.time_ms / 1e3;
  p.flops_per_s = row.flops / s;
  p.bytes_per_s = row.bytes / s;
  if (row.bytes > 0) p.intensity = row.flops / row.bytes;
  if (!peaks.known() || !(row.bytes > 0 || row.flops > 0)) return p;
  const double ridge = peaks.flops_per_s / peaks.bytes_per_s;
  const bool memory = row.bytes > 0 && p.intensity < ridge;
  p.bound = memory ? "memory" : "compute";
  // Below the ridge the attainable rate is intensity x bandwidth, so the
  // share of it achieved is the share of the bandwidth; above, of the FMA rate.
  p.roofline_pct = memory ? 100 * p.bytes_per_s / peaks.bytes_per_s
                          : 100 * p.flops_per_s / peaks.flops_per_s;
  return p;
}

namespace {
json finite_or_null(double v) { return std::isfinite(v) ? json(v) : json(); }
}  // namespace

json layer_profile_table(const std::vector<LayerProfileStep>& steps, const DevicePeaks& peaks) {
  const LayerProfileStep mean = mean_profile(steps);
  json out = {{"sampled_steps", json::array()},
              {"step_time_ms", mean.step_time_ms},
              {"peaks", {{"flops_per_s", finite_or_null(peaks.flops_per_s)},
                         {"bytes_per_s", finite_or_null(peaks.bytes_per_s)},
                         {"source", peaks.source},
                         {"dtype", peaks.dtype.empty() ? json() : json(peaks.dtype)},
                         {"device", peaks.device}}},
              {"rows", json::array()}};
  for (const LayerProfileStep& s : steps) out["sampled_steps"].push_back(s.step);
  double attributed = 0;
  for (const LayerProfileRow& r : mean.rows) {
    const RooflinePoint p = roofline(r, peaks);
    if (r.phase != "unattributed") attributed += r.time_ms;
    out["rows"].push_back(
        {{"layer", r.layer}, {"kind", r.kind}, {"phase", r.phase}, {"time_ms", r.time_ms},
         {"share", mean.step_time_ms > 0 ? json(r.time_ms / mean.step_time_ms) : json()},
         {"flops", finite_or_null(r.flops)}, {"bytes", finite_or_null(r.bytes)},
         {"flops_per_s", finite_or_null(p.flops_per_s)},
         {"bytes_per_s", finite_or_null(p.bytes_per_s)},
         {"intensity", finite_or_null(p.intensity)},
         {"roofline_pct", finite_or_null(p.roofline_pct)},
         {"bound", p.bound.empty() ? json() : json(p.bound)}});
  }
  out["attributed_share"] =
      mean.step_time_ms > 0 ? json(attributed / mean.step_time_ms) : json();
  return out;
}

LayerChange LayerComparisonRow::change() const {
  if (std::isnan(time_b_ms)) return LayerChange::OnlyA;
  if (std::isnan(time_a_ms)) return LayerChange::OnlyB;
  const double r = ratio();
  if (r < 1 - kLayerSameWithin) return LayerChange::Faster;
  if (r > 1 + kLayerSameWithin) return LayerChange::Slower;
  return LayerChange::Same;
}

const char* layer_change_name(LayerChange change) {
  switch (change) {
    case LayerChange::Faster: return "faster";
    case LayerChange::Slower: return "slower";
    case LayerChange::Same: return "about the same";
    case LayerChange::OnlyA: return "only in A";
    case LayerChange::OnlyB: return "only in B";
  }
  return "";
}

std::vector<LayerComparisonRow> compare_layer_profiles(const LayerProfileStep& a,
                                                       const LayerProfileStep& b) {
  std::vector<LayerComparisonRow> out;
  std::map<std::pair<std::string, std::string>, size_t> at;  // (layer, phase) -> row of out
  for (const LayerProfileRow& r : a.rows) {
    // A run's table has one row per layer and phase (mean_profile); a repeat adds up.
    auto [it, added] = at.try_emplace({r.layer, r.phase}, out.size());
    if (added) out.push_back({r.layer, r.phase, r.kind, "", 0.0});
    out[it->second].time_a_ms += r.time_ms;
  }
  // B's rows: matched ones fill their row; the others go after the last row
  // of B placed so far (at the top before any).
  size_t next = 0;
  for (const LayerProfileRow& r : b.rows) {
    auto it = at.find({r.layer, r.phase});
    if (it == at.end()) {
      for (auto& [key, index] : at)
        if (index >= next) ++index;
      LayerComparisonRow row{r.layer, r.phase, "", r.kind};
      row.time_b_ms = 0;
      out.insert(out.begin() + std::ptrdiff_t(next), row);
      it = at.emplace(std::make_pair(r.layer, r.phase), next).first;
    }
    LayerComparisonRow& row = out[it->second];
    row.kind_b = r.kind;
    row.time_b_ms = (std::isnan(row.time_b_ms) ? 0 : row.time_b_ms) + r.time_ms;
    next = std::max(next, it->second + 1);
  }
  return out;
}

std::string layer_profile_absence(const json& summary, const std::string& status,
                                  const std::string& engine_version) {
  const json lp = summary.is_object() ? summary.value("layer_profile", json()) : json();
  if (lp.is_object() && lp.contains("not_measured") && lp["not_measured"].is_string()) {
    const std::string why = lp["not_measured"].get<std::string>();
    std::string fix;
    if (why.rfind("not measured by default on", 0) == 0)
      fix = "re-run it with cupti_sampling on";
    else if (why.find("cuda_graphs") != std::string::npos)
      fix = "re-run it with cuda_graphs off";
    else if (why.rfind("not measured on this backend", 0) == 0)
      fix = "re-run it on the CPU backend (device: cpu)";
    else if (why.find("TRAINBENCH_MEASURE") != std::string::npos)
      fix = "re-run it without TRAINBENCH_MEASURE=off";
    else
      fix = "re-run it with more steps than measure_every, or a smaller measure_every";
    return why + "; " + fix;
  }
  if (status == "queued" || status == "running")
    return "no sampled step is recorded yet (profiles are taken at steps N+1, 2N+1, ... for "
           "measure_every N); look again later";
  return "it was recorded without one (engine " +
         (engine_version.empty() ? std::string("unknown") : engine_version) +
         ", before per-layer profiles, or it ended before a sampled step); re-run it with this "
         "engine for more than measure_every steps";
}

}  // namespace tb
