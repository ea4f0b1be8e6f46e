// SPDX-License-Identifier: GPL-3.0-or-later
// The per-layer profiles of sampled steps (schema v5; engine/metrics/layer_profile.h,
// docs/layers.md): written by the engine's store sink, read by `layers`,
// `export` and the workbench's Layers tab.
#include "engine/metrics/layer_profile.h"
#include "engine/store/store_internal.h"

namespace tb {

using store_internal::Query;
using store_internal::Transaction;

void RunStore::append_layer_profile(int64_t run, const LayerProfileStep& step) {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  d.require_writable("appending a layer profile");
  const std::string op = detail::concat("appending the layer profile of step ", step.step,
                                        " to run ", run);
  Transaction tx(d, op);
  // Written again after a failed try: the step's rows are replaced, not doubled.
  Query(d, "DELETE FROM layer_profile_steps WHERE run_id = ? AND step = ?", op)
      .bind_int(1, run)
      .bind_int(2, step.step)
      .run();
  Query(d, "INSERT INTO layer_profile_steps (run_id, step, step_time_ms) VALUES (?, ?, ?)", op)
      .bind_int(1, run)
      .bind_int(2, step.step)
      .bind_real(3, step.step_time_ms)
      .run();
  Query rows(d,
             "INSERT INTO layer_profile_rows (run_id, step, seq, layer, kind, phase, time_ms, "
             "flops, bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
             op);
  for (size_t i = 0; i < step.rows.size(); ++i) {
    const LayerProfileRow& r = step.rows[i];
    rows.bind_int(1, run).bind_int(2, step.step).bind_int(3, int64_t(i));
    rows.bind_text(4, valid_utf8(r.layer)).bind_text(5, valid_utf8(r.kind));
    rows.bind_text(6, valid_utf8(r.phase)).bind_real(7, r.time_ms);
    rows.bind_real(8, r.flops).bind_real(9, r.bytes);
    if (!rows.try_run()) d.fail(op);
  }
  tx.commit();
}

std::vector<LayerProfileStep> RunStore::layer_profile(int64_t run) const {
  Impl& d = impl();
  std::lock_guard lock(d.mutex);
  std::vector<LayerProfileStep> steps;
  if (d.version < 5) return steps;  // a read-only store from before profiles
  const std::string op = detail::concat("reading the layer profile of run ", run);
  {
    Query q(d, "SELECT step, step_time_ms FROM layer_profile_steps WHERE run_id = ? ORDER BY step",
            op);
    q.bind_int(1, run);
    while (q.next()) steps.push_back({q.int_at(0), q.real_at(1), {}});
  }
  Query q(d,
          "SELECT step, layer, kind, phase, time_ms, flops, bytes FROM layer_profile_rows "
          "WHERE run_id = ? ORDER BY step, seq",
          op);
  q.bind_int(1, run);
  size_t at = 0;
  while (q.next()) {
    while (at < steps.size() && steps[at].step < q.int_at(0)) ++at;
    if (at == steps.size()) break;
    steps[at].rows.push_back(
        {q.text_at(1), q.text_at(2), q.text_at(3), q.real_at(4), q.real_at(5), q.real_at(6)});
  }
  return steps;
}

}  // namespace tb
