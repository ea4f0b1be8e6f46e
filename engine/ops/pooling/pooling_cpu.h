// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The CPU backend's paths of the f32 NCHW average pooling (pooling_cpu.cpp):
//
//   fast    our loops (the window clipped once per output cell)
//   onednn  oneDNN's pooling (pooling_onednn.h), builds with oneDNN
//
// auto (the default) takes onednn where oneDNN runs a JIT kernel for the
// direction and shape (where it measured faster: bench/NOTES.md, issue 28), and
// fast elsewhere (no oneDNN in the build, an empty batch, a shape oneDNN
// refuses or runs without JIT). The reference (f64, NHWC,
// BackendOptions::reference) is unchanged. Each shape's choice is recorded
// (path, how it was chosen, oneDNN's implementation) and reported by the
// backend's describe() as kernel_paths.pooling, which the run's environment
// keeps.
#include <string>

namespace tb {

class CpuBackend;

namespace pooling {

// Sets how be's average pooling picks its path from now on: "auto", "fast"
// or "onednn" (where oneDNN takes the shape, JIT or not; else fast, and the
// record says so), and forgets the choices made so far. Throws tb::Error
// naming the value, or "onednn" in a build without oneDNN.
void set_cpu_avg_pool_path(CpuBackend& be, const std::string& setting);

}  // namespace pooling
}  // namespace tb
