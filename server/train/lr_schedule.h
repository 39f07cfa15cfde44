// The learning-rate schedule: linear warm-up, then cosine decay to a floor.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace posbias::train {

struct LrSchedule {
  double peak_lr = 1e-3;       // Learning rate at the end of the warm-up (per update, unitless).
  int64_t warmup_steps = 0;    // Updates of the linear warm-up from 0 to peak_lr.
  int64_t total_steps = 1;     // Updates in the whole run; the decay ends there.
  double min_lr_ratio = 0.1;   // The floor, as a fraction of peak_lr, reached at total_steps.
};

// The rate of update `step` (1-based): peak * step / warmup during the warm-up (so update 1 is
// not a zero step), then peak * (r + (1 - r) (1 + cos(pi p)) / 2) with p = (step - warmup) /
// (total - warmup) going from 0 to 1 and r = min_lr_ratio.
inline double LearningRate(const LrSchedule& schedule, int64_t step) {
  if (step <= schedule.warmup_steps) {
    return schedule.peak_lr * static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, schedule.warmup_steps));
  }
  const int64_t decay_steps = std::max<int64_t>(1, schedule.total_steps - schedule.warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - schedule.warmup_steps) / static_cast<double>(decay_steps));
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return schedule.peak_lr * (schedule.min_lr_ratio + (1.0 - schedule.min_lr_ratio) * cosine);
}

}  // namespace posbias::train
