// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The distributed sampler: how the ranks of a data-parallel job share one
// epoch. Every rank draws the same permutation (seed, epoch) and cuts it into
// the same batches of the per-rank batch size B; rank r of W takes batches
// r, r + W, r + 2W, ... So step k's W batches, concatenated in rank order,
// are exactly the batch of size W*B that one process would take at step k,
// and the union of the ranks' batches is that process's epoch (training drops
// the last W-1 batches or fewer so every rank takes the same number of steps,
// as one process with batch W*B and drop_last drops its partial batch).
#include <cstdint>

namespace tb {

struct Shard {
  int rank = 0, count = 1;  // this rank, and how many share the epoch
};

// The rank's batches per epoch when the epoch has `batches` batches of the
// per-rank size. equal: the same number for every rank (training);
// otherwise the first batches % count ranks take one more (evaluation).
int64_t shard_batches(int64_t batches, const Shard& shard, bool equal);

// The epoch's batch index of the rank's k-th batch.
inline int64_t shard_global_batch(int64_t k, const Shard& shard) {
  return k * shard.count + shard.rank;
}

}  // namespace tb
