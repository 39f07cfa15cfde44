// Waiting in tests on a condition with a deadline, never for a fixed time: Eventually asks
// `condition` every millisecond until it holds (true) or `within` has passed (false), so a test
// takes as long as what it waits for and no longer, and a slow machine only makes it slower.
#pragma once

#include <chrono>
#include <thread>

namespace posbias::test_support {

template <typename Condition>
bool Eventually(Condition condition, std::chrono::milliseconds within = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace posbias::test_support
