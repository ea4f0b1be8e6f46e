// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// `trainbench-engine layers RUN`: where a stored run's sampled steps went,
// layer by layer, against the device's roofline; `trainbench-engine work`:
// the counted FLOPs and bytes of every model's layers (engine/nn/layer_work.h),
// which bench/bench_models.py reads for its FLOPs per sample.
#include <cstdint>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "app/engine/cmd_ladder.h"

namespace tb {
class RunStore;
struct RunRecord;
}  // namespace tb

namespace tb::cli {

// The run's per-layer table (engine/metrics/layer_profile.h,
// layer_profile_table), or {"not_measured": why} for a run without one.
nlohmann::json layer_profile_export(const RunStore& store, const RunRecord& run);

std::vector<Command> add_layers_commands(CLI::App& app);

}  // namespace tb::cli
