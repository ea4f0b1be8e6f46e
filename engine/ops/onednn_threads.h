// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// oneDNN on the CPU backend's threads, for the op families' oneDNN paths
// (*_onednn.cpp, built when oneDNN was found). Debian's libdnnl2 runs on
// OpenMP, the runtime of our own kernels (docs/cpu-conv-paths.md, "Threads").
#include <omp.h>

namespace tb::onednn {

// oneDNN reads omp_get_max_threads() when it makes a primitive (its kernels'
// work split) and when it runs one: both happen inside this guard, which sets
// it to the backend's thread count for its lifetime.
class OmpThreads {
 public:
  explicit OmpThreads(int n) : prev_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~OmpThreads() { omp_set_num_threads(prev_); }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int prev_;
};

}  // namespace tb::onednn
