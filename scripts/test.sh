#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Sets up (Debian packages), builds and runs every test suite through CTest,
# then the sanitizer, emulated-GPU, fuzz and package checks. Prints how long each stage took.
# Setup and build must pass for anything to be tested; after them every stage
# runs even when an earlier one failed, and the failed ones are named at the
# end (exit 1).
set -euo pipefail
cd "$(dirname "$0")/.."
# Paths under the checkout hash alike in build/, build-deb/ and build-sanitize/,
# so ccache reuses objects whose preprocessed text is the same in two builds
# (most of the engine between the CUDA build and the CPU package build).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
failed=()
stage() {  # NAME COMMAND...: runs one stage and says how long it took
  local name=$1 started=$SECONDS
  shift
  if "$@"; then
    echo "test.sh: $name took $((SECONDS - started)) s"
  else
    echo "test.sh: $name FAILED (exit $?) after $((SECONDS - started)) s"
    failed+=("$name")
  fi
}
stage setup scripts/setup.sh
stage build scripts/build.sh
if [ ${#failed[@]} -gt 0 ]; then
  echo "test.sh: ${failed[*]} failed; nothing was tested"
  exit 1
fi
stage ctest ctest --test-dir build --output-on-failure --timeout 1200
stage check-sanitize scripts/check-sanitize.sh
stage check-emulated-gpu scripts/check-emulated-gpu.sh
stage check-fuzz scripts/check-fuzz.sh
stage check-package scripts/check-package.sh
if [ ${#failed[@]} -gt 0 ]; then
  echo "test.sh: FAILED: ${failed[*]} (the other stages passed; ${SECONDS} s)"
  exit 1
fi
echo "test.sh: all passed in ${SECONDS} s"
