// The progress bar (progress.h).
#include "server/train/progress.h"

#include <unistd.h>

#include <cstdio>
#include <string>

namespace posbias::train {
namespace {

std::string Clock(double seconds) {
  const auto total = static_cast<int64_t>(seconds + 0.5);
  char text[32];
  std::snprintf(text, sizeof(text), "%lld:%02lld:%02lld", static_cast<long long>(total / 3600),
                static_cast<long long>(total / 60 % 60), static_cast<long long>(total % 60));
  return text;
}

}  // namespace

ProgressBar::ProgressBar(std::ostream& out, int64_t first_step, int64_t last_step)
    : out_(out), first_step_(first_step), last_step_(last_step),
      start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

void ProgressBar::Update(int64_t step, double loss, int64_t step_tokens) {
  tokens_ += step_tokens;
  const auto now = std::chrono::steady_clock::now();
  if (step < last_step_ && now - last_draw_ < std::chrono::milliseconds(200)) return;
  last_draw_ = now;
  Draw(step, loss);
}

void ProgressBar::Draw(int64_t step, double loss) {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double done = static_cast<double>(step - first_step_);
  const double rate = elapsed > 0 ? static_cast<double>(tokens_) / elapsed : 0.0;
  const double eta = done > 0 ? elapsed / done * static_cast<double>(last_step_ - step) : 0.0;
  const int width = 24;
  const int filled = last_step_ > 0 ? static_cast<int>(width * step / last_step_) : width;
  char line[256];
  std::snprintf(line, sizeof(line), "\r[%s%s] step %lld/%lld  loss %.4f  %.0f tok/s  ETA %s ",
                std::string(static_cast<size_t>(filled), '#').c_str(),
                std::string(static_cast<size_t>(width - filled), '.').c_str(), static_cast<long long>(step),
                static_cast<long long>(last_step_), loss, rate, Clock(eta).c_str());
  out_ << line << std::flush;
  drawn_ = true;
}

void ProgressBar::Finish() {
  if (drawn_) out_ << "\n" << std::flush;
  drawn_ = false;
}

bool StderrIsTerminal() { return isatty(STDERR_FILENO) != 0; }

}  // namespace posbias::train
