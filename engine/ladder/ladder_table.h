// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The ladder's table: seed article 004's columns with the spread of the
// repeats. Per rung:
//
//   batch              samples per optimizer step
//   peak memory        the largest peak over its runs
//   median step time   the median of its runs' medians (measured steps only)
//   samples/s          median, min and max over the runs
//   vs baseline        samples/s over the baseline's, paired by repetition
//                      (run r of the rung against run r of the baseline, which
//                      ran next to it): the median ratio and its min-max
//   effect             the same against the rung it is judged against (the
//                      previous one, the baseline, or "all" inverted)
//   verdict            on the effect: "faster" when every paired ratio is
//                      above 1 and the median at least kMinEffect above,
//                      "slower" likewise below, else "no measurable change";
//                      "not judged" with fewer than two paired repeats
//   accuracy           the accuracy run's final test accuracy, and its time
//                      and steps to target_accuracy
//
// The min-max over 3 repeats is an honest range, not a confidence interval:
// it says how far the repeats disagreed.
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/ladder/ladder.h"

namespace tb {

// Below this the median effect is called no change even when every repeat agrees.
constexpr double kMinEffect = 0.02;

struct RungMeasurement {
  int64_t run_id = 0;
  int repetition = 0;
  std::string kind;  // speed or accuracy
  LadderRunOutcome outcome;
};

// measurements: by rung index, in any order. Rungs with no runs yet show as
// pending, so the table can be drawn while the ladder fills it in.
nlohmann::json ladder_table(const LadderPlan& plan,
                            const std::map<int, std::vector<RungMeasurement>>& measurements);

// The verdict on paired ratios (see above).
std::string ladder_verdict(const std::vector<double>& paired_ratios);

// The formatted cells of a table row ("1.25× (1.20–1.31)", "12.3 MiB", ...),
// as the Markdown table and the GUI show them; the accuracy columns when
// the table has accuracy runs.
bool ladder_table_has_accuracy(const nlohmann::json& table);
std::vector<std::string> ladder_table_header(bool with_accuracy);
std::vector<std::string> ladder_row_cells(const nlohmann::json& row, bool with_accuracy);

// Renderings of a table (ladder_table's JSON): GitHub Markdown and CSV.
std::string ladder_table_markdown(const nlohmann::json& table);
std::string ladder_table_csv(const nlohmann::json& table);

}  // namespace tb
