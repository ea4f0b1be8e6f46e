// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The CUDA emulator's stand-in for <cublas_v2.h>: the test double of cuBLAS
// declared in cublas_api.h (implemented in emulated_cublas.cpp; results are
// never GPU results).
#include <cublas_api.h>
