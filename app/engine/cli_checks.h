// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Checks of number options whose messages name the bound as a person reads it
// ("--steps: must be at least 1, got 0"), not CLI11's "Value 0 not in range
// 0.000000 to 1797693134862315708145...".
#include <charconv>
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace tb::cli {

inline CLI::Validator at_least(int64_t min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        int64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [p, ec] = std::from_chars(text.data(), end, value);
        if (ec == std::errc::result_out_of_range) return "'" + text + "' is too large";
        if (ec != std::errc() || p != end) return "'" + text + "' is not a whole number";
        if (value < min) return "must be at least " + std::to_string(min) + ", got " + text;
        return "";
      },
      "INT>=" + std::to_string(min));
}

}  // namespace tb::cli
