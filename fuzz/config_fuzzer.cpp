// SPDX-License-Identifier: GPL-3.0-or-later
// The run configuration: a JSON document (as `run --config` reads it) and
// `--set key=value` assignments go through validation; anything invalid must
// be a tb::Error naming the problem, and anything valid must give a RunConfig.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // As a configuration file.
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_discarded()) {
    try {
      tb::RunConfig::from_json(tb::validate_config(doc, "fuzz.json"));
    } catch (const tb::Error&) {
    }
  }
  // As --set assignments, one per line.
  nlohmann::json overrides = nlohmann::json::object();
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    try {
      tb::apply_assignment(overrides, text.substr(start, end - start));
    } catch (const tb::Error&) {
    }
    start = end + 1;
  }
  try {
    tb::RunConfig::from_json(tb::validate_config(overrides, "--set"));
  } catch (const tb::Error&) {
  }
  return 0;
}
