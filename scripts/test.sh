#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Sets up (Debian packages), builds and runs every test suite through CTest,
# then the sanitizer, fuzz and package checks. Prints how long each stage took.
set -euo pipefail
cd "$(dirname "$0")/.."
# Paths under the checkout hash alike in build/, build-deb/ and build-sanitize/,
# so ccache reuses objects whose preprocessed text is the same in two builds
# (most of the engine between the CUDA build and the CPU package build).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
stage_start=$SECONDS
stage() {
  echo "test.sh: $1 took $((SECONDS - stage_start)) s"
  stage_start=$SECONDS
}
scripts/setup.sh;         stage setup
scripts/build.sh;         stage build
ctest --test-dir build --output-on-failure --timeout 1200
                          stage ctest
scripts/check-sanitize.sh; stage check-sanitize
scripts/check-fuzz.sh;    stage check-fuzz
scripts/check-package.sh; stage check-package
echo "test.sh: all passed in ${SECONDS} s"
