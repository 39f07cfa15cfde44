// A fresh folder under gtest's temporary directory for one test, removed with everything in it
// when the test's variable goes out of scope (a trainer's run writes checkpoints there).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace posbias::train {

class ScratchDir : public std::filesystem::path {
 public:
  // <TempDir>/<prefix>_<name>_<pid>, emptied first.
  ScratchDir(const std::string& prefix, const std::string& name)
      : std::filesystem::path(std::filesystem::path(::testing::TempDir()) /
                              (prefix + "_" + name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(*this);
    std::filesystem::create_directories(*this);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(*this, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
};

}  // namespace posbias::train
