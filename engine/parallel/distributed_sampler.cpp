// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/parallel/distributed_sampler.h"

#include "engine/core/error.h"

namespace tb {

int64_t shard_batches(int64_t batches, const Shard& s, bool equal) {
  TB_CHECK(s.count >= 1 && s.rank >= 0 && s.rank < s.count, "sampler: rank ", s.rank,
           " is not in [0, ", s.count, ")");
  const int64_t full = batches / s.count;
  if (equal) return full;
  return full + (s.rank < batches % s.count ? 1 : 0);
}

}  // namespace tb
