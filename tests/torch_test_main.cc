// Shared main of the LibTorch test binaries: one suite serves the CPU CI and a GPU machine. Tests
// whose name ends in _CUDA are filtered out when no CUDA device is present.
#include <torch/cuda.h>
#include <torch/utils.h>

#include "gtest/gtest.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!torch::cuda::is_available()) {
    std::string filter = ::testing::GTEST_FLAG(filter);
    filter += filter.find('-') == std::string::npos ? "-*_CUDA" : ":*_CUDA";
    ::testing::GTEST_FLAG(filter) = filter;
  }
  torch::set_num_threads(2);
  return RUN_ALL_TESTS();
}
