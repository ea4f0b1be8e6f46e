#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Sets up (Debian packages), builds and runs every test suite through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
ctest --test-dir build --output-on-failure --timeout 1200
scripts/check-sanitize.sh
scripts/check-fuzz.sh
scripts/check-package.sh
