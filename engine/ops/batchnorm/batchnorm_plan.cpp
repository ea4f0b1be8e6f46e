// SPDX-License-Identifier: GPL-3.0-or-later
// The CUDA batch-norm kernels' launch plan (batchnorm_plan.h). Host code in
// every build, so the CPU tests check it.
#include "engine/ops/batchnorm/batchnorm_plan.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "engine/core/error.h"

namespace tb::batchnorm {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int pow2_at_least(int64_t v, int cap) {
  int p = 1;
  while (p < v && p < cap) p *= 2;
  return p;
}

}  // namespace

ReducePlan plan_reduce(int64_t N, int64_t C, int64_t HW, bool nhwc, int sm_count) {
  TB_CHECK(N >= 0 && C >= 0 && HW >= 0, "batch norm launch plan: negative dimension (N ", N,
           ", C ", C, ", HW ", HW, ")");
  TB_CHECK(sm_count > 0, "batch norm launch plan: sm_count ", sm_count, " is not positive");
  ReducePlan p;
  p.M = N * HW, p.C = C, p.HW = HW, p.nhwc = nhwc;
  if (p.M == 0 || C == 0) return p;  // nothing to launch
  // NHWC: adjacent channels across the warp (up to 32; fewer channels, more rows).
  p.lanes_c = nhwc ? pow2_at_least(C, 32) : 1;
  p.lanes_m = kBlockThreads / p.lanes_c;
  p.tiles = ceil_div(C, p.lanes_c);
  TB_CHECK(p.tiles <= kMaxGridY, "batch norm launch plan: ", C, " channels in ",
           nhwc ? "NHWC" : "NCHW", " need ", p.tiles, " channel tiles, above the grid's limit of ",
           kMaxGridY);
  // Slices so that the grid holds about kBlocksPerSm blocks per SM, none of
  // them with fewer than kMinValuesPerThread values a thread.
  const int64_t want_slices = std::max<int64_t>(1, ceil_div(int64_t(kBlocksPerSm) * sm_count, p.tiles));
  const int64_t min_rows = int64_t(p.lanes_m) * kMinValuesPerThread;
  int64_t rows = std::max(min_rows, ceil_div(p.M, want_slices));
  rows = ceil_div(rows, p.lanes_m) * p.lanes_m;
  p.rows_per_slice = rows;
  p.slices = ceil_div(p.M, rows);
  p.finish_blocks = ceil_div(C, kFinishLanes);
  p.workspace_bytes = size_t(p.slices * C + C) * 2 * sizeof(double);
  return p;
}

int unroll_for(int streams, int element_bytes, int forced) {
  if (forced != 0) {
    TB_CHECK(std::find(std::begin(kUnrolls), std::end(kUnrolls), forced) != std::end(kUnrolls),
             "batch norm launch plan: unroll ", forced, " is not 4, 8 or 16");
    return forced;
  }
  TB_CHECK(streams > 0 && element_bytes > 0, "batch norm launch plan: ", streams,
           " streams of ", element_bytes, "-byte values");
  for (int u : kUnrolls)
    if (u * streams * element_bytes >= kBytesInFlight) return u;
  return kUnrolls[std::size(kUnrolls) - 1];
}

int unroll_from_environment() {
  const char* v = std::getenv("TRAINBENCH_CUDA_BN_UNROLL");
  if (!v || !*v) return 0;
  const std::string s(v);
  for (int u : kUnrolls)
    if (s == std::to_string(u)) return u;
  TB_FAIL("TRAINBENCH_CUDA_BN_UNROLL=", s, ": expected 4, 8 or 16 (values a batch-norm "
          "kernel's thread loads ahead), or unset for the rule");
}

}  // namespace tb::batchnorm
