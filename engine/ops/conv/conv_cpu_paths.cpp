// SPDX-License-Identifier: GPL-3.0-or-later
// The CPU convolution's path setting and per-shape choice cache (conv_cpu_paths.h).
#include "engine/ops/conv/conv_cpu_paths.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>

#include "engine/core/error.h"

namespace tb::conv {

namespace {

constexpr CpuConvPath kAllPaths[] = {CpuConvPath::Reference, CpuConvPath::Blas,
                                     CpuConvPath::OneDnn, CpuConvPath::OneDnnBlocked,
                                     CpuConvPath::OneDnnWinograd};

#ifndef TRAINBENCH_HAVE_ONEDNN
bool is_onednn(CpuConvPath p) {
  return p == CpuConvPath::OneDnn || p == CpuConvPath::OneDnnBlocked ||
         p == CpuConvPath::OneDnnWinograd;
}
#endif

}  // namespace

const char* path_name(CpuConvPath p) {
  switch (p) {
    case CpuConvPath::Reference: return "reference";
    case CpuConvPath::Blas: return "blas";
    case CpuConvPath::OneDnn: return "onednn";
    case CpuConvPath::OneDnnBlocked: return "onednn-blocked";
    case CpuConvPath::OneDnnWinograd: return "onednn-winograd";
  }
  return "?";
}

CpuConvSetting parse_cpu_conv_setting(const std::string& value, const std::string& source) {
  if (value.empty() || value == "auto") return {};
  if (value == "timed") return {CpuConvSetting::Mode::Timed};
  for (CpuConvPath p : kAllPaths) {
    if (value != path_name(p)) continue;
#ifndef TRAINBENCH_HAVE_ONEDNN
    TB_CHECK(!is_onednn(p), source, "=", value,
             ": this build has no oneDNN (configured with TRAINBENCH_ONEDNN=OFF, or "
             "libdnnl-dev was missing)");
#endif
    return {CpuConvSetting::Mode::Forced, p};
  }
  TB_FAIL(source,
          ": expected auto, timed, reference, blas, onednn, onednn-blocked or onednn-winograd, "
          "got '",
          value, "'");
}

CpuConvSetting cpu_conv_setting_from_environment() {
  const char* v = std::getenv("TRAINBENCH_CPU_CONV");
  return parse_cpu_conv_setting(v ? v : "", "TRAINBENCH_CPU_CONV");
}

CpuConvPath CpuConvChoices::choose(const std::string& key, const std::string& shape,
                                   const std::vector<CpuConvPath>& candidates,
                                   const std::function<void(CpuConvPath)>& trial) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = paths_.find(key); it != paths_.end()) return it->second;
  }
  using Clock = std::chrono::steady_clock;
  for (CpuConvPath p : candidates) trial(p);  // warm-up: oneDNN makes its primitives, buffers grow
  // Round after round, every candidate once: a burst of other work on the
  // machine slows the candidates of one round alike instead of one of them.
  std::vector<double> min_ms(candidates.size(), std::numeric_limits<double>::infinity());
  for (int r = 0; r < kTimedRuns; ++r)
    for (size_t i = 0; i < candidates.size(); ++i) {
      const auto t0 = Clock::now();
      trial(candidates[i]);
      min_ms[i] = std::min(min_ms[i],
                           std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
  const size_t best_i = size_t(std::min_element(min_ms.begin(), min_ms.end()) - min_ms.begin());
  const CpuConvPath best = candidates[best_i];
  nlohmann::json timings = nlohmann::json::object();
  for (size_t i = 0; i < candidates.size(); ++i) timings[path_name(candidates[i])] = min_ms[i];
  std::lock_guard lock(mutex_);
  paths_[key] = best;
  shape_of_[key] = shape;
  records_[shape] = {{"path", path_name(best)}, {"chosen_by", "timing"}, {"min_ms", timings}};
  return best;
}

bool CpuConvChoices::find(const std::string& key, CpuConvPath& path) const {
  std::lock_guard lock(mutex_);
  auto it = paths_.find(key);
  if (it == paths_.end()) return false;
  path = it->second;
  return true;
}

void CpuConvChoices::note(const std::string& key, const std::string& shape, CpuConvPath path,
                          const std::string& why) {
  std::lock_guard lock(mutex_);
  if (!paths_.emplace(key, path).second) return;
  shape_of_[key] = shape;
  records_[shape] = {{"path", path_name(path)}, {"chosen_by", why}};
}

void CpuConvChoices::note_implementation(const std::string& key, const std::string& impl) {
  std::lock_guard lock(mutex_);
  auto it = shape_of_.find(key);
  if (it == shape_of_.end()) return;
  nlohmann::json& r = records_[it->second];
  if (!r.contains("onednn_implementation")) r["onednn_implementation"] = impl;
}

void CpuConvChoices::clear() {
  std::lock_guard lock(mutex_);
  paths_.clear();
  shape_of_.clear();
  records_ = nlohmann::json::object();
}

nlohmann::json CpuConvChoices::describe() const {
  std::lock_guard lock(mutex_);
  return records_;
}

}  // namespace tb::conv
