// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The CUDA emulator's stand-in for <cuda_runtime_api.h> (tests/cuda_emulator/emulator.h).
#include "tests/cuda_emulator/emulator.h"
