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
  # oneDNN: the CPU convolutions' third path (TRAINBENCH_ONEDNN, engine/ops/conv/conv_onednn.h);
  # Debian's is built with an OpenCL GPU runtime, so its CMake package asks for
  # OpenCL's headers and library, which libdnnl-dev does not pull in: without
  # them the configure fails (seen on a fresh Debian 12 machine, 2026-11-27)
  libdnnl-dev ocl-icd-opencl-dev
  # data parallel (parallel: ddp): Open MPI starts and wires the processes and is the
  # CPU transport (the CUDA transport, NCCL, comes with the CUDA toolkit)
  libopenmpi-dev openmpi-bin
  # GUI dependencies
  qt6-base-dev qt6-svg-dev libqcustomplot-dev libgl-dev
  # data set used by the default run and the tests
  dataset-fashion-mnist
  # headless GUI tests and screenshots
  xvfb xauth
  # tools for tests and checks; Boost.Context switches the CUDA emulator's
  # fibers (tests/cuda_emulator)
  sqlite3 python3 libboost-context-dev
  # packaging (scripts/check-package.sh): .deb building and checking, man pages, icons
  dpkg-dev file man-db lintian desktop-file-utils appstream help2man librsvg2-bin
  # the PyTorch peer of the benchmarks' CPU smoke runs (bench/, /usr/bin/python3)
  python3-torch
  # sanitizer build (libasan/libubsan come with gcc) and libFuzzer (clang's
  # -fsanitize=fuzzer is in libclang-rt-14-dev)
  clang libclang-rt-14-dev
)

need=()
for p in "${packages[@]}"; do
  if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    continue
  fi
  need+=("$p")
done

# With a CUDA toolkit present, the CUDA backend also needs cudnn-frontend's
# headers, which ship in PyPI's nvidia-cudnn-frontend (fetched with pip, unpacked
# into .deps/, nothing installed into the system Python).
cuda=""
if [ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc >/dev/null 2>&1; then
  cuda=1
  for p in python3-pip unzip; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
  done
fi

if [ ${#need[@]} -eq 0 ]; then
  echo "setup: all Debian packages already installed"
else
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "setup: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

frontend_version=1.32.0
frontend_dir="$(cd "$(dirname "$0")/.." && pwd)/.deps/cudnn-frontend"
if [ -n "$cuda" ]; then
  if [ -f "$frontend_dir/include/cudnn_frontend.h" ] && \
     [ "$(cat "$frontend_dir/VERSION" 2>/dev/null)" = "$frontend_version" ]; then
    echo "setup: cudnn-frontend $frontend_version already in .deps/"
  else
    echo "setup: fetching cudnn-frontend $frontend_version headers into .deps/ (CUDA toolkit found)"
    wheels=$(mktemp -d)
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$wheels" \
      "nvidia-cudnn-frontend==$frontend_version"
    rm -rf "$frontend_dir"
    mkdir -p "$frontend_dir"
    unzip -q "$wheels"/nvidia_cudnn_frontend-*.whl 'include/*' -d "$frontend_dir"
    echo "$frontend_version" > "$frontend_dir/VERSION"
    rm -rf "$wheels"
  fi
fi
echo "setup: done"
