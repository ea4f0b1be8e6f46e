#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Sets up (Debian packages), builds and starts the Trainbench workbench. With no
# display (or TRAINBENCH_HEADLESS=1) it runs the engine's default run instead:
# fmnist-cnn on Fashion-MNIST for one epoch, recorded in the run store.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
if [ -x build/bin/trainbench ] && [ -z "${TRAINBENCH_HEADLESS:-}" ] && \
   [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]; then
  exec build/bin/trainbench "$@"
fi
echo "run: no display; starting the engine's default run (trainbench-engine run)"
exec build/bin/trainbench-engine run "$@"
