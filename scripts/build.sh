#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Configures and builds Trainbench into build/ (Release, Ninja, ccache when present).
# Extra arguments go to CMake, e.g. scripts/build.sh -DTRAINBENCH_GUI=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${TRAINBENCH_JOBS:-$(nproc)}
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build --parallel "$jobs"
