// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// For an op family's test slots that run its CUDA kernels on the CUDA
// emulator (tests/cuda_emulator/emulator.h) against the CPU reference:
// the schedules to run them under, and a failed launch as the slot's failure.
// Built when the emulator is (TRAINBENCH_CUDA_EMULATED); elsewhere a slot's
// body is left out and it QSKIPs with kNoEmulator.
#include <QtTest>

#include <exception>
#include <string>

#if defined(TRAINBENCH_CUDA_EMULATED)
#include "tests/cuda_emulator/emulator.h"

namespace tb::test {

// Sets the emulator's schedule for a scope, then restores forward.
struct EmulatorSchedule {
  explicit EmulatorSchedule(tb_emu::Schedule s) { tb_emu::set_schedule(s); }
  ~EmulatorSchedule() { tb_emu::set_schedule(tb_emu::Schedule::forward); }
};

inline const char* schedule_name(tb_emu::Schedule s) {
  return s == tb_emu::Schedule::forward ? "forward" : "reverse";
}

}  // namespace tb::test

// A launch the emulator refused or a fault it found arrives as tb::Error from
// the launcher's launch check: the slot fails with its message.
#define TB_EMU_TRY try {
#define TB_EMU_CATCH                                                    \
  }                                                                      \
  catch (const std::exception& e) {                                      \
    QFAIL(qPrintable(QString("emulated CUDA: ") + e.what()));            \
  }
#endif

namespace tb::test {
inline constexpr const char* kNoEmulator =
    "built without the CUDA emulator (tests/cuda_emulator: TRAINBENCH_CUDA_EMULATOR=OFF, or no "
    "Python 3 when CMake ran)";
}
