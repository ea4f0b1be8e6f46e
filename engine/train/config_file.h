// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A run configuration file as written (run --config, ladder --config, config
// --validate): the JSON object, or tb::Error naming the file and what is wrong
// with it.
#include <string>

#include <nlohmann/json.hpp>

namespace tb {

// Refuses, naming the file: a missing or unreadable file, a folder, an empty
// file, text that is not JSON (where the parse stopped), a number too large
// for a double (and the key it belongs to), JSON that is not an object.
// The values are not checked here: check_config_keys / validate_config do that.
nlohmann::json read_config_file(const std::string& path);

}  // namespace tb
