// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "engine/core/device.h"
#include "engine/train/config.h"

namespace tb {

// For every trick key: what was requested, whether this run honours it on this
// device, and why not when it does not. A trick that is on but cannot be
// honoured is reported here and logged, never silently dropped.
// {"amp": {"requested": "fp16", "applied": false, "reason": "..."}, ...}
nlohmann::json resolve_tricks(const RunConfig& config, const Device& device);

// Why a run cannot capture its training step (trick 24, cuda_graphs), or ""
// when it can: the step must not read values on the host midway.
std::string cuda_graphs_blocker(const RunConfig& config);

}  // namespace tb
