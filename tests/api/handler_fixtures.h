// What the handler tests share: callers of a tenant with a role, and a fresh folder per test.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "server/api/caller.h"

namespace posbias::api {

inline Caller CallerOf(const std::string& tenant, auth::Role role = auth::Role::kOperator) {
  Caller caller;
  caller.principal.name = tenant + "-user";
  caller.principal.tenant = tenant;
  caller.principal.role = role;
  return caller;
}

// An empty folder named after the running test (its "root" subfolder made, for a model root).
inline std::filesystem::path FreshTestDirectory(const std::string& suite) {
  const std::filesystem::path base =
      std::filesystem::temp_directory_path() / ("posbias_" + suite + "_" + std::to_string(::getpid()) + "_" +
                                                ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(base / "root");
  return base;
}

}  // namespace posbias::api
