// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/ladder/rungs.h"

#include <algorithm>

#include "engine/core/error.h"
#include "engine/train/config.h"

namespace tb {

using json = nlohmann::json;

namespace {

// A trick's label in the settings table: rungs are titled with them.
std::string label_of(const std::string& key) {
  const ConfigKey* k = find_config_key(key);
  TB_CHECK(k && !k->label.empty(), "ladder rungs: key '", key, "' has no label in the settings table");
  return k->label;
}

std::function<json(const json&)> fixed(json changes) {
  return [changes](const json&) { return changes; };
}

// A rung that turns trick switches on, titled with their labels.
RungDef switches_on(std::string id, const std::vector<std::string>& keys) {
  json changes = json::object();
  std::string title;
  for (const std::string& k : keys) {
    changes[k] = true;
    title += (title.empty() ? "" : " + ") + label_of(k);
  }
  return {std::move(id), std::move(title), false, fixed(std::move(changes))};
}

std::vector<RungDef> make_catalogue() {
  return {
      {"amp", label_of("amp") + " (fp16)", true, fixed({{"amp", "fp16"}})},
      // Four times the batch with the learning rate scaled to match and a short
      // warm-up, so the bigger batch is a speed-up and not a different recipe.
      {"batch_x4", "batch x4, lr scaled", true,
       [](const json& base) {
         const int64_t b = base.at("batch_size").get<int64_t>();
         return json{{"batch_size", 4 * b},
                     {"lr_scaling", "linear"},
                     {"base_batch_size", b},
                     {"warmup_steps", std::max<int64_t>(base.at("warmup_steps").get<int64_t>(), 20)}};
       }},
      switches_on("h2d_uint8", {"h2d_uint8"}),
      {"workers", "4 loader workers", false, fixed({{"workers", 4}})},
      switches_on("pinned", {"pin_memory", "non_blocking"}),
      switches_on("channels_last", {"channels_last"}),
      switches_on("cudnn_benchmark", {"cudnn_benchmark"}),
      switches_on("fuse_pointwise", {"fuse_pointwise"}),
      switches_on("optimizer_foreach", {"optimizer_foreach"}),
      switches_on("cuda_graphs", {"cuda_graphs"}),
  };
}

}  // namespace

const std::vector<RungDef>& rung_catalogue() {
  static const std::vector<RungDef> catalogue = make_catalogue();
  return catalogue;
}

const RungDef* find_rung(const std::string& id) {
  for (const RungDef& r : rung_catalogue())
    if (r.id == id) return &r;
  return nullptr;
}

std::vector<std::string> default_rung_order() {
  std::vector<std::string> ids;
  for (const RungDef& r : rung_catalogue()) ids.push_back(r.id);
  return ids;
}

std::vector<std::string> rungs_for_changes(const json& changes) {
  std::vector<std::string> ids;
  const json base = default_config();
  for (const RungDef& r : rung_catalogue()) {
    const json keys = r.changes(base);  // named: items() of a temporary would dangle
    bool all = true;
    for (const auto& [k, v] : keys.items()) all = all && changes.contains(k);
    if (all) ids.push_back(r.id);
  }
  return ids;
}

std::vector<std::string> parse_rung_list(const std::string& text) {
  std::string known;
  for (const RungDef& r : rung_catalogue()) known += (known.empty() ? "" : ", ") + r.id;
  // Blank: the default order. Anything else names every rung: "," or "amp,,x"
  // is a slip, not a request for the whole ladder.
  if (text.find_first_not_of(" \t") == std::string::npos) return default_rung_order();
  std::vector<std::string> ids;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string id = text.substr(start, end - start);
    id.erase(0, id.find_first_not_of(" \t"));
    id.erase(id.find_last_not_of(" \t") + 1);
    TB_CHECK(!id.empty(), "'", text, "' has an empty rung name; list rungs separated by commas "
             "(the rungs are: ", known, "), or leave it empty for the default order");
    TB_CHECK(find_rung(id), "unknown rung '", id, "'; the rungs are: ", known);
    TB_CHECK(std::find(ids.begin(), ids.end(), id) == ids.end(), "rung '", id,
             "' is listed twice");
    ids.push_back(id);
    start = end + 1;
  }
  return ids;
}

}  // namespace tb
