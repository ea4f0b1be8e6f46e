// SPDX-License-Identifier: GPL-3.0-or-later
#include "engine/optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "engine/core/error.h"
#include "engine/train/config.h"

namespace tb {

ScheduleConfig ScheduleConfig::from_run(const RunConfig& c, int64_t samples_per_step,
                                        int64_t total_steps) {
  ScheduleConfig sc;
  sc.kind = schedule_from_name(c.schedule);
  sc.base_lr = scaled_lr(c.lr, samples_per_step, c.base_batch_size,
                         lr_scaling_from_name(c.lr_scaling));
  sc.total_steps = total_steps;
  sc.warmup_steps = c.warmup_steps;
  sc.step_size = c.step_size;
  sc.gamma = c.gamma;
  sc.min_lr = c.min_lr;
  return sc;
}

const char* schedule_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::Constant: return "constant";
    case ScheduleKind::Step: return "step";
    case ScheduleKind::Cosine: return "cosine";
    case ScheduleKind::OneCycle: return "onecycle";
  }
  return "?";
}

ScheduleKind schedule_from_name(const std::string& s) {
  for (auto k :
       {ScheduleKind::Constant, ScheduleKind::Step, ScheduleKind::Cosine, ScheduleKind::OneCycle})
    if (s == schedule_name(k)) return k;
  TB_FAIL("unknown LR schedule '", s, "' (expected constant, step, cosine or onecycle)");
}

LrSchedule::LrSchedule(const ScheduleConfig& c) : config_(c) {
  const char* name = schedule_name(c.kind);
  TB_CHECK(std::isfinite(c.base_lr) && c.base_lr >= 0.0, "schedule ", name,
           ": base_lr must be >= 0, got ", c.base_lr);
  TB_CHECK(c.warmup_steps >= 0, "schedule ", name, ": warmup_steps must be >= 0, got ",
           c.warmup_steps);
  switch (c.kind) {
    case ScheduleKind::Constant: break;
    case ScheduleKind::Step:
      TB_CHECK(c.step_size > 0, "schedule step: step_size must be > 0, got ", c.step_size);
      TB_CHECK(c.gamma > 0.0, "schedule step: gamma must be > 0, got ", c.gamma);
      break;
    case ScheduleKind::Cosine:
      TB_CHECK(c.total_steps > c.warmup_steps, "schedule cosine: total_steps (", c.total_steps,
               ") must exceed warmup_steps (", c.warmup_steps, ")");
      TB_CHECK(c.min_lr >= 0.0 && c.min_lr <= c.base_lr, "schedule cosine: min_lr must be in [0, ",
               c.base_lr, "], got ", c.min_lr);
      break;
    case ScheduleKind::OneCycle:
      TB_CHECK(c.total_steps > c.warmup_steps + 1, "schedule onecycle: total_steps (",
               c.total_steps, ") must exceed warmup_steps + 1 (", c.warmup_steps + 1, ")");
      TB_CHECK(c.pct_start > 0.0 && c.pct_start < 1.0,
               "schedule onecycle: pct_start must be in (0, 1), got ", c.pct_start);
      TB_CHECK(c.div_factor >= 1.0 && c.final_div_factor >= 1.0,
               "schedule onecycle: div_factor and final_div_factor must be >= 1");
      break;
  }
}

namespace {
// Cosine interpolation from `from` (pct 0) to `to` (pct 1).
double anneal_cos(double from, double to, double pct) {
  return to + (from - to) * 0.5 * (1.0 + std::cos(std::numbers::pi * pct));
}
}  // namespace

double LrSchedule::main_lr(int64_t s) const {
  const ScheduleConfig& c = config_;
  const int64_t T = c.total_steps - c.warmup_steps;
  switch (c.kind) {
    case ScheduleKind::Constant: return c.base_lr;
    case ScheduleKind::Step: return c.base_lr * std::pow(c.gamma, double(s / c.step_size));
    case ScheduleKind::Cosine:
      return anneal_cos(c.base_lr, c.min_lr, double(std::min(s, T)) / double(T));
    case ScheduleKind::OneCycle: {
      const double initial = c.base_lr / c.div_factor;
      const double final_lr = initial / c.final_div_factor;
      const double peak_at = c.pct_start * double(T) - 1.0;  // PyTorch's phase-1 end
      const double end_at = double(T - 1);
      const double x = double(std::min(s, T - 1));
      if (x <= peak_at) return anneal_cos(initial, c.base_lr, peak_at > 0.0 ? x / peak_at : 1.0);
      return anneal_cos(c.base_lr, final_lr, (x - peak_at) / (end_at - peak_at));
    }
  }
  return c.base_lr;
}

double LrSchedule::lr_for_step(int64_t step) const {
  TB_CHECK(step >= 0, "lr_for_step: negative step ", step);
  const int64_t W = config_.warmup_steps;
  if (step < W) return main_lr(0) * double(step + 1) / double(W);
  return main_lr(step - W);
}

const char* lr_scaling_name(LrScaling m) {
  switch (m) {
    case LrScaling::None: return "none";
    case LrScaling::Linear: return "linear";
    case LrScaling::Sqrt: return "sqrt";
  }
  return "?";
}

LrScaling lr_scaling_from_name(const std::string& s) {
  for (auto m : {LrScaling::None, LrScaling::Linear, LrScaling::Sqrt})
    if (s == lr_scaling_name(m)) return m;
  TB_FAIL("unknown LR scaling '", s, "' (expected none, linear or sqrt)");
}

double scaled_lr(double base_lr, int64_t batch_size, int64_t base_batch, LrScaling mode) {
  TB_CHECK(batch_size > 0 && base_batch > 0, "LR scaling needs positive batch sizes, got ",
           batch_size, " and base ", base_batch);
  const double r = double(batch_size) / double(base_batch);
  switch (mode) {
    case LrScaling::None: return base_lr;
    case LrScaling::Linear: return base_lr * r;
    case LrScaling::Sqrt: return base_lr * std::sqrt(r);
  }
  return base_lr;
}

}  // namespace tb
