#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# The GPU test slots without a GPU: the engine built with the emulated CUDA
# backend (TRAINBENCH_CUDA=EMULATED, tests/cuda_emulator: the CUDA backend's
# host code and our kernels compiled as C++ on a host emulation of CUDA,
# cuBLAS and cuDNN's convolutions as test doubles) in build-emulated/, and
# every suite with GPU slots run on two emulated GPUs (CTest label gpu-slots).
# A test tool: nothing it prints is a GPU result. Prints how long each stage
# took.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${TRAINBENCH_JOBS:-$(nproc)}
t0=$(date +%s)
cmake -S . -B build-emulated -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DTRAINBENCH_CUDA=EMULATED -DTRAINBENCH_GUI=OFF >/dev/null
cmake --build build-emulated --parallel "$jobs" --target trainbench-engine gpu_slot_tests
t1=$(date +%s)
ctest --test-dir build-emulated --output-on-failure --timeout 1200 -L gpu-slots
t2=$(date +%s)
echo "check-emulated-gpu: build $((t1 - t0)) s, tests $((t2 - t1)) s"
