#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The fault tests with 100 SIGKILLs at random moments (CI runs 10): every
# killed run must leave a sound store, its committed steps 1..k, and show
# `interrupted` to every reader. FAULT_SEED picks the moments (default 11).
# Usage: bench/faults-100.sh [build dir, default build]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
exec python3 tests/faults/fault_tests.py "$build/bin/trainbench-engine" --kills 100 --only kills sigterm
