// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
#include <cstdint>
#include <functional>

namespace tb {

// Resident set size of this process now, and its peak (VmHWM, or the peak kept
// across a measurement of our own, below), in bytes; 0 where /proc is not
// available. The CPU backend's memory figures.
int64_t process_rss_bytes();
int64_t process_peak_rss_bytes();
// Restarts the peak (VmHWM) at the current RSS (/proc/self/clear_refs), so
// runs trained one after another in one process each report their own peak.
// False where the kernel does not allow it.
bool reset_process_peak_rss();
// Runs `measurement` (the engine's own, such as the device peaks probe with
// its 256 MiB of copy buffers) so that what it holds does not count in the
// process's peak: the peak restarts after it, keeping the peak before it.
// Where the peak cannot be restarted the measurement counts.
void run_outside_peak_rss(const std::function<void()>& measurement);
// CPU time (user + system) this process has used, in seconds: with wall time
// it gives the thread utilisation of the CPU backend.
double process_cpu_seconds();

}  // namespace tb
