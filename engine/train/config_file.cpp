// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/train/config_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/core/error.h"

namespace tb {

using json = nlohmann::json;

namespace {
// nlohmann's message without its "[json.exception.parse_error.101] " prefix.
std::string without_exception_id(const std::string& what) {
  const size_t end = what.find("] ");
  return what.rfind("[json.exception.", 0) == 0 && end != std::string::npos ? what.substr(end + 2)
                                                                            : what;
}
}  // namespace

json read_config_file(const std::string& path) {
  std::error_code ec;
  TB_CHECK(!std::filesystem::is_directory(path, ec), path,
           ": is a folder, not a configuration file; name a JSON file");
  std::ifstream in(path);
  TB_CHECK(in, path, ": cannot open the configuration file (", std::strerror(errno), ")");
  std::stringstream text;
  text << in.rdbuf();
  TB_CHECK(!in.bad(), path, ": cannot read the configuration file (", std::strerror(errno), ")");
  TB_CHECK(!text.str().empty(), path, ": the file is empty; a configuration is a JSON object, "
           "e.g. {\"batch_size\": 128}");
  // The key whose value is being parsed, for an error inside that value.
  std::string key;
  const json::parser_callback_t track = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && parsed.is_string()) key = parsed.get<std::string>();
    return true;
  };
  json config;
  try {
    config = json::parse(text.str(), track);
  } catch (const json::out_of_range& e) {  // 406: a number past the range of a double
    const std::string what = e.what();
    const size_t open = what.find('\''), close = what.rfind('\'');
    const std::string number =
        open != std::string::npos && close > open ? what.substr(open + 1, close - open - 1) : "";
    TB_FAIL(path, key.empty() ? std::string() : ": key '" + key + "'", ": ", number,
            " is beyond the range of a number (about -1.8e308 to 1.8e308)");
  } catch (const json::exception& e) {
    TB_FAIL(path, ": not valid JSON (", without_exception_id(e.what()), ")");
  }
  TB_CHECK(config.is_object(), path, ": the configuration must be a JSON object, got ",
           config.type_name());
  return config;
}

}  // namespace tb
