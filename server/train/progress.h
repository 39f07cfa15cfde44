// A one-line progress bar for a training run: step/steps, loss, tokens per second and the time
// left, redrawn in place ("\r") at most every 0.2 s and once more at the end.
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>

namespace posbias::train {

class ProgressBar {
 public:
  // Counts from `first_step` (a resumed run's start) to `last_step`.
  ProgressBar(std::ostream& out, int64_t first_step, int64_t last_step);
  // After update `step`: its loss and the target tokens it trained on.
  void Update(int64_t step, double loss, int64_t step_tokens);
  // Ends the line.
  void Finish();

 private:
  void Draw(int64_t step, double loss);

  std::ostream& out_;
  int64_t first_step_, last_step_;
  int64_t tokens_ = 0;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

// Whether stderr is a terminal (the progress bar's default).
bool StderrIsTerminal();

}  // namespace posbias::train
