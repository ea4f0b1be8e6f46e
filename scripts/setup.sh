#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Installs every Debian package Trainbench needs. Idempotent: packages that are
# already present are left alone, and the script says what it is doing.
set -euo pipefail

packages=(
  # build tools
  build-essential cmake ninja-build ccache pkg-config git
  # engine dependencies
  libsqlite3-dev nlohmann-json3-dev libcli11-dev zlib1g-dev libopenblas-dev
  # GUI dependencies
  qt6-base-dev qt6-svg-dev libqcustomplot-dev libgl-dev
  # data set used by the default run and the tests
  dataset-fashion-mnist
  # headless GUI tests and screenshots
  xvfb xauth
  # tools for tests and checks
  sqlite3
)

need=()
for p in "${packages[@]}"; do
  if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    continue
  fi
  need+=("$p")
done

if [ ${#need[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "setup: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
echo "setup: done"
