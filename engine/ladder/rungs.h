// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The rungs an optimization ladder can climb, declared once: what each adds
// to a configuration. The default order follows seed article 004 (AMP, a
// bigger batch, fewer host-to-device bytes, workers, pinned memory), extended
// with the kernel and optimizer tricks. Where a rung may run is not declared
// here: the run plan (resolve_tricks) decides it from the backend's
// capabilities, like for any run.
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tb {

struct RungDef {
  std::string id;     // "amp", "batch_x4", ... (ladder_rungs names these)
  // "Mixed precision (fp16)", "Channels-last layout": the labels of the trick
  // keys it sets (settings table); a rung that sets a count or a recipe names
  // it ("4 loader workers", "batch x4, lr scaled").
  std::string title;
  // Changes the computed numbers (not only their speed): such a rung can get
  // an accuracy run (ladder_accuracy) next to the baseline's.
  bool changes_results = false;
  // The keys this rung sets, from the ladder's baseline configuration
  // (validated, so every key is present).
  std::function<nlohmann::json(const nlohmann::json& baseline)> changes;
};

const std::vector<RungDef>& rung_catalogue();
const RungDef* find_rung(const std::string& id);  // nullptr when unknown
// The order used when ladder_rungs is empty: the whole catalogue.
std::vector<std::string> default_rung_order();
// The rungs, in catalogue order, whose keys all appear in `changes` (an
// advisor's recommendation): {"workers": 4, "pin_memory": true,
// "non_blocking": true} -> {"workers", "pinned"}; for "add to ladder".
std::vector<std::string> rungs_for_changes(const nlohmann::json& changes);
// "amp, workers" -> {"amp", "workers"}; throws tb::Error naming an unknown
// rung, a repeated one or an empty name (", " or "amp,,workers"). Blank
// text: the default order.
std::vector<std::string> parse_rung_list(const std::string& text);

}  // namespace tb
