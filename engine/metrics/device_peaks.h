// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The device's peaks for the roofline of the per-layer profile
// (layer_profile.h): its FMA rate and its memory bandwidth, measured by a
// short probe once per machine and kept with the device description (the
// run's environment, "peaks"). On the CPU backend: an f32 matrix product
// through OpenBLAS (sgemm, 1024^3, best of 5) and a multi-threaded copy of
// 128 MiB (bytes read + written, best of 5), about half a second, cached in
// $XDG_CACHE_HOME/trainbench/device-peaks.json (else ~/.cache/...) by the
// device's description, so later runs on the machine read the cache.
// Elsewhere (CUDA) not measured: {"not_measured": why}.
#include <string>

#include <nlohmann/json.hpp>

namespace tb {

class Backend;

// {"flops_per_s", "bytes_per_s", "dtype" (the FMA rate's: "f32"), "source",
//  "gemm": {...}, "copy": {...}}.
nlohmann::json probe_cpu_peaks(int threads);

// The peaks of `be`'s device for its run's environment: the cache's entry for
// this device, else a probe (stored in the cache when it can be written).
// cache_path empty: the default path (TRAINBENCH_PEAKS_CACHE overrides it).
nlohmann::json device_peaks(const Backend& be, std::string cache_path = "");

}  // namespace tb
