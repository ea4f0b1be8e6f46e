// SPDX-License-Identifier: GPL-3.0-or-later
// The CUDA batch-norm kernels' launch plan (batchnorm_plan.h). Host code in
// every build, so the CPU tests check it.
#include "engine/ops/batchnorm/batchnorm_plan.h"

#include <algorithm>

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

}  // namespace tb::batchnorm
