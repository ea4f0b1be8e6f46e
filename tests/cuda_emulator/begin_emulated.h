// SPDX-License-Identifier: GPL-3.0-or-later
// Between this and end_emulated.h, a .cuh declares the launchers as the CUDA
// emulator built them (tb::cuda_emu::*, emulator.h), beside any real
// tb::cuda::* of a CUDA build:
//   #include "tests/cuda_emulator/begin_emulated.h"
//   #include "engine/ops/batchnorm/batchnorm.cuh"
//   #include "tests/cuda_emulator/end_emulated.h"
// Include the engine's own headers before this one: a header first included
// here would declare its tb::cuda names as tb::cuda_emu.
// (No include guard: each use opens a region.)
#include "tests/cuda_emulator/emulator.h"
#define cuda cuda_emu
