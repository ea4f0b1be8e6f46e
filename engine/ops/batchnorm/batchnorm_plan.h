// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// How the CUDA batch-norm kernels (batchnorm.cu) split an (N, C, HW) tensor
// over blocks and threads: plain integers, so the host compiler and nvcc both
// take it, and test_op_batchnorm checks the split on the CPU (every value
// visited exactly once, the partials' slots, the workspace, the grid limits).
//
// A channel's M = N·HW values are numbered m = n·HW + i. Every kernel of the
// family runs on one grid:
//   grid  (slices, tiles): slice s holds the values m in
//         [s·rows_per_slice, min(M, (s+1)·rows_per_slice)) of the channels of
//         tile t, channels [t·lanes_c, (t+1)·lanes_c) ∩ [0, C)
//   block (lanes_c, lanes_m) threads: thread (tx, ty) takes channel
//         t·lanes_c + tx and the slice's values ty, ty + lanes_m, ...
// NHWC: lanes_c up to 32 adjacent channels, so a warp reads 32 consecutive
// floats of a row (coalesced) and lanes_m rows at once. NCHW: lanes_c = 1 and
// 256 threads along m, which is contiguous inside each HW plane; the walk
// steps across planes with additions only (no division per value).
// Loads in flight: a thread issues the loads of `unroll` values of every
// stream it reads before it uses any (unroll_for, below).
// Reductions: each block folds its threads into one (Σa, Σb) pair per channel,
// partials[s·C + c]; a finish kernel adds a channel's slices in a fixed order
// (kFinishLanes channels × kFinishLanes slice lanes a block), so a result does
// not depend on timing. No atomics.
#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define TB_BN_HD __host__ __device__ __forceinline__
#else
#define TB_BN_HD inline
#endif

namespace tb::batchnorm {

inline constexpr int kBlockThreads = 256;
// Blocks per SM the plan aims at (batchnorm.cu's __launch_bounds__ says the same).
inline constexpr int kBlocksPerSm = 4;
// A block's threads take at least this many values each, unless M is smaller.
inline constexpr int kMinValuesPerThread = 16;
// The finish kernel's block: kFinishLanes channels × kFinishLanes slice lanes.
inline constexpr int kFinishLanes = 32;
// CUDA's grid limit in y (x allows 2^31 − 1).
inline constexpr int64_t kMaxGridY = 65535;
// The values a thread may load ahead (batchnorm.cu has a kernel for each).
inline constexpr int kUnrolls[] = {4, 8, 16};
// The bytes a thread should have in flight. Memory's latency under load
// (≈ 0.6 µs) times an H100/H200's bandwidth (3.4-4.8 TB/s) is ≈ 2-3 MB in
// flight, ≈ 20 KB an SM over 132 SMs: 16 B for each of the kBlocksPerSm ·
// kBlockThreads = 1024 threads an SM. Four 2-byte values (bf16 statistics,
// one stream) are 8 B, half of that.
inline constexpr int kBytesInFlight = 16;

struct ReducePlan {
  int64_t M = 0, C = 0, HW = 0;
  bool nhwc = false;
  int lanes_c = 1, lanes_m = kBlockThreads;  // block shape, lanes_c·lanes_m = kBlockThreads
  int64_t slices = 0;                        // grid.x
  int64_t tiles = 0;                         // grid.y
  int64_t rows_per_slice = 0;                // a multiple of lanes_m
  int64_t finish_blocks = 0;                 // the finish kernel's grid: channels / kFinishLanes
  int unroll_forced = 0;  // 0: unroll_for's rule; else every kernel's (unroll_from_environment)
  // Workspace, doubles in pairs: partials (slices·C pairs, pair s·C + c),
  // then the per-channel totals (C pairs, pair totals_at() + c).
  size_t workspace_bytes = 0;

  TB_BN_HD bool empty() const { return slices == 0; }
  TB_BN_HD int64_t partial_at(int64_t slice, int64_t c) const { return slice * C + c; }
  TB_BN_HD int64_t totals_at() const { return slices * C; }
  // Element (0, c, 0), the first value of channel c.
  TB_BN_HD int64_t first_offset(int64_t c) const { return nhwc ? c : c * HW; }
};

// The plan for a grid of about kBlocksPerSm·sm_count blocks; an empty tensor
// (M or C zero) gets an empty() plan, launched as nothing. Throws tb::Error
// when a dimension is negative or the channels exceed the grid's y limit.
ReducePlan plan_reduce(int64_t N, int64_t C, int64_t HW, bool nhwc, int sm_count);

// The values a thread loads ahead in a kernel that reads `streams` tensors
// of `element_bytes` each: `forced` when it is not 0, else the fewest of
// kUnrolls whose loads reach kBytesInFlight (4 for f32 and for every kernel
// reading two or more f16/bf16 tensors; 8 for f16/bf16 statistics and the
// apply without a residual). The order in which a thread uses its values does
// not depend on it, so neither do the results' bits.
int unroll_for(int streams, int element_bytes, int forced);

// TRAINBENCH_CUDA_BN_UNROLL: unset or empty gives 0 (the rule); 4, 8 or 16
// forces that for every kernel (to compare them on a GPU); anything else is
// an error naming the variable and its value.
int unroll_from_environment();

// The values one thread visits, in order, and where each lies in memory
// (offset of element (n, c, i) in the NCHW or NHWC tensor).
struct ChannelWalk {
  int64_t c = 0;       // the channel; count() is 0 when c ≥ C (an idle lane)
  int64_t m = 0, end = 0, step = 1;
  int64_t offset = 0;  // memory offset of value m
  // NCHW: i = m mod HW, and the offset change for `step` values.
  int64_t i = 0, HW = 1, di = 0, jump = 0, wrap = 0;
  bool nhwc = false;

  TB_BN_HD int64_t count() const { return m < end ? (end - m + step - 1) / step : 0; }
  TB_BN_HD void next() {
    m += step;
    offset += jump;
    if (!nhwc) {
      i += di;
      if (i >= HW) i -= HW, offset += wrap;
    }
  }
};

// Thread (tx, ty) of block (slice, tile).
TB_BN_HD ChannelWalk walk(const ReducePlan& p, int64_t slice, int64_t tile, int tx, int ty) {
  ChannelWalk w;
  w.c = tile * p.lanes_c + tx;
  w.nhwc = p.nhwc;
  w.step = p.lanes_m;
  const int64_t begin = slice * p.rows_per_slice;
  const int64_t stop = begin + p.rows_per_slice < p.M ? begin + p.rows_per_slice : p.M;
  w.m = begin + ty;
  w.end = w.c < p.C ? stop : w.m;  // an idle lane visits nothing
  if (p.nhwc) {
    w.offset = w.m * p.C + w.c;
    w.jump = w.step * p.C;
  } else {
    // (n, c, i) at (n·C + c)·HW + i; `step` values on: n += step / HW and
    // i += step mod HW, one plane more when i passes HW.
    const int64_t n = w.m / p.HW;
    w.HW = p.HW;
    w.i = w.m - n * p.HW;
    w.offset = (n * p.C + w.c) * p.HW + w.i;
    w.di = w.step % p.HW;
    w.jump = (w.step / p.HW) * p.C * p.HW + w.di;
    w.wrap = p.C * p.HW - p.HW;
  }
  return w;
}

}  // namespace tb::batchnorm
