// The size formulas (server/models/size_formulas.cc): parameters and activations from a config.
#include "server/models/config.h"

#include <cmath>
#include <limits>
#include <string>

#include "gtest/gtest.h"
#include "server/status/error.h"

namespace posbias::models {
namespace {

TEST(EstimatedParameters, MatchesThePublishedSizes) {
  EXPECT_NEAR(EstimatedParameters(*PresetConfig("gpt2")), 124.4e6, 0.5e6);        // GPT-2 small.
  EXPECT_NEAR(EstimatedParameters(*PresetConfig("qwen2-0.5b")), 494.0e6, 2.0e6);  // Qwen2-0.5B.
}

}  // namespace
}  // namespace posbias::models
