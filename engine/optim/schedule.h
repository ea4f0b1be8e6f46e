// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Learning-rate schedules, evaluated per optimizer step (0-based: the LR for
// the step about to be taken), and batch-size LR scaling.
//
//   constant   lr = base
//   step       lr = base · gamma^floor(s / step_size)
//   cosine     lr = min + (base − min)·(1 + cos(π·s/T))/2, reaching min at s = T
//   one-cycle  PyTorch OneCycleLR (cosine annealing, two phases): from base/div_factor
//              up to base (the peak) at s = pct_start·T − 1, then down to
//              base/(div_factor·final_div_factor) at s = T − 1
//
// Linear warm-up of W steps composes with any of them: for s < W,
// lr = main(0)·(s+1)/W; afterwards lr = main(s − W), the main schedule running
// over T = total_steps − W steps (like SequentialLR of a warm-up and the main).
#include <cstdint>
#include <string>

namespace tb {

struct RunConfig;

enum class ScheduleKind { Constant, Step, Cosine, OneCycle };
const char* schedule_name(ScheduleKind k);              // "constant", "step", "cosine", "onecycle"
ScheduleKind schedule_from_name(const std::string& s);  // throws tb::Error

struct ScheduleConfig {
  ScheduleKind kind = ScheduleKind::Constant;
  double base_lr = 0.1;     // one-cycle: the peak LR
  int64_t total_steps = 0;  // cosine and one-cycle (warm-up included)
  int64_t warmup_steps = 0;
  int64_t step_size = 1;          // step: steps between decays
  double gamma = 0.1;             // step: decay factor
  double min_lr = 0.0;            // cosine: final LR
  double pct_start = 0.3;         // one-cycle: fraction of the steps spent rising
  double div_factor = 25.0;       // one-cycle: initial LR = peak / div_factor
  double final_div_factor = 1e4;  // one-cycle: final LR = initial / final_div_factor

  // A run's schedule over `total_steps` optimizer steps of `samples_per_step`
  // samples each: its schedule keys, with lr scaled by lr_scaling relative to
  // base_batch_size.
  static ScheduleConfig from_run(const RunConfig& run, int64_t samples_per_step,
                                 int64_t total_steps);
};

class LrSchedule {
 public:
  explicit LrSchedule(const ScheduleConfig& config);  // throws tb::Error on a bad config
  double lr_for_step(int64_t step) const;             // steps past the end keep the last LR
  const ScheduleConfig& config() const { return config_; }

 private:
  double main_lr(int64_t s) const;  // the schedule without warm-up, s counted after it
  ScheduleConfig config_;
};

// LR for batch_size given base_lr tuned for base_batch: none keeps it, linear
// multiplies by batch_size/base_batch (Goyal et al.), sqrt by its square root.
enum class LrScaling { None, Linear, Sqrt };
const char* lr_scaling_name(LrScaling m);              // "none", "linear", "sqrt"
LrScaling lr_scaling_from_name(const std::string& s);  // throws tb::Error
double scaled_lr(double base_lr, int64_t batch_size, int64_t base_batch, LrScaling mode);

}  // namespace tb
