// Overrides and validation of a model config (server/models/config.cc), torch-free.
#include "server/models/config.h"

#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "server/status/error.h"

namespace posbias::models {
namespace {

TEST(Overrides, ChangeOnlyTheGivenFieldsAndKeepGpt2MlpAtFourTimesTheWidth) {
  ConfigOverrides overrides;
  overrides.num_layers = 3;
  overrides.hidden_size = 128;
  overrides.num_heads = 4;
  const ModelConfig config = ApplyOverrides(*PresetConfig("gpt2"), overrides);
  EXPECT_EQ(config.num_layers, 3);
  EXPECT_EQ(config.intermediate_size, 512);
  EXPECT_EQ(config.num_kv_heads, 4);
  EXPECT_EQ(config.vocab_size, 50257);
  EXPECT_TRUE(ValidateConfig(config).ok());
}

// Found by a first session: `posbias-train --arch llama --width 64 --heads 4` kept Llama-3.2's
// head_dim 64, so the heads' inner width was 256 against a width of 64.

TEST(Overrides, AWidthOrHeadsOverrideDerivesTheHeadWidthUnlessItIsGiven) {
  const ModelConfig llama = *FamilyConfig("llama");
  ASSERT_EQ(llama.head_dim(), 64);
  ConfigOverrides overrides;
  overrides.hidden_size = 64;
  overrides.num_heads = 4;
  EXPECT_EQ(ApplyOverrides(llama, overrides).head_dim(), 16);
  overrides.head_dim = 32;
  EXPECT_EQ(ApplyOverrides(llama, overrides).head_dim(), 32);
  ConfigOverrides layers_only;
  layers_only.num_layers = 2;
  EXPECT_EQ(ApplyOverrides(llama, layers_only).head_dim(), 64) << "the preset's own head width stays";
}

// Found by a first session: `posbias-train --arch llama --width 64 --heads 4` kept Llama-3.2-1B's
// MLP of 8,192, its 8 key/value heads (refused with 4 heads) and its llama3 rope scaling to
// 131,072 positions: 3.19 M parameters, 97 % of them in the MLP.
TEST(ShapeOverrides, AWidthAndHeadsMakeASmallModelOfTheFamilysProportions) {
  const ModelConfig llama = *FamilyConfig("llama");
  ConfigOverrides overrides;
  overrides.hidden_size = 64;
  overrides.num_heads = 4;
  const ModelConfig small = ApplyShapeOverrides(llama, overrides);
  EXPECT_EQ(small.intermediate_size, 256) << "Llama-3.2-1B's ratio of 4";
  EXPECT_EQ(small.num_kv_heads, 1) << "its group of 4 query heads per key/value head";
  EXPECT_EQ(small.rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_EQ(small.max_positions, 8192) << "the scaling's original length";
  EXPECT_TRUE(ValidateConfig(small).ok()) << ValidateConfig(small);
  overrides.num_heads = 6;  // 4 does not divide 6: one key/value head per head.
  EXPECT_EQ(ApplyShapeOverrides(llama, overrides).num_kv_heads, 6);
  overrides.intermediate_size = 100;
  overrides.num_kv_heads = 2;
  overrides.max_positions = 512;
  const ModelConfig given = ApplyShapeOverrides(llama, overrides);
  EXPECT_EQ(given.intermediate_size, 100) << "what is given stays";
  EXPECT_EQ(given.num_kv_heads, 2);
  EXPECT_EQ(given.max_positions, 512);
  ConfigOverrides depth_only;
  depth_only.num_layers = 2;
  EXPECT_EQ(ApplyShapeOverrides(llama, depth_only).intermediate_size, llama.intermediate_size)
      << "a depth alone resizes nothing else";
  EXPECT_EQ(ShapeSummary(small),
            "llama: 16 layers, width 64, 4 heads (1 key/value), MLP 256, vocabulary 128,256, 8,192 positions, rope "
            "theta 5e+05: " + absl::StrFormat("%.2f", EstimatedParameters(small) / 1e6) + " M parameters");
}

TEST(Validation, NamesTheInconsistentField) {
  ModelConfig config = *PresetConfig("qwen2-tiny");
  config.num_kv_heads = 3;
  EXPECT_EQ(ErrorFieldOf(ValidateConfig(config)), "kv_heads");
  config = *PresetConfig("gpt2-tiny");
  config.num_heads = 5;
  EXPECT_EQ(ErrorFieldOf(ValidateConfig(config)), "heads");
  config.num_heads = 4;
  config.num_layers = 0;
  EXPECT_EQ(ErrorFieldOf(ValidateConfig(config)), "layers");
}

TEST(Validation, RefusesShapesAboveTheDocumentedMaxima) {
  const std::pair<void (*)(ModelConfig&), const char*> cases[] = {
      {[](ModelConfig& c) { c.hidden_size = 16384 * 2; }, "width"},
      {[](ModelConfig& c) { c.num_heads = c.num_kv_heads = 512; c.hidden_size = 512 * 4; }, "heads"},
      {[](ModelConfig& c) { c.intermediate_size = 65537; }, "mlp_width"},
      {[](ModelConfig& c) { c.vocab_size = 262145; }, "vocab"},
      {[](ModelConfig& c) { c.max_positions = 131073; }, "max_positions"},
  };
  for (const auto& [change, field] : cases) {
    ModelConfig config = *PresetConfig("gpt2");
    change(config);
    EXPECT_EQ(ErrorFieldOf(ValidateConfig(config)), field);
  }
  ModelConfig qwen = *PresetConfig("qwen2-0.5b");
  qwen.rope_theta = std::numeric_limits<double>::infinity();
  EXPECT_EQ(ErrorFieldOf(ValidateConfig(qwen)), "rope_theta");
}

TEST(TodaysFamilies, RowSettingsStayWithTheirFamilies) {
  ModelConfig llama = *PresetConfig("llama-tiny");
  llama.attn_logit_softcapping = 50;
  EXPECT_NE(ValidateConfig(llama).message().find("gemma2 and gemma3_text"), std::string::npos) << ValidateConfig(llama);
  llama = *PresetConfig("llama-tiny");
  llama.rope_layers = {true, false};
  EXPECT_NE(ValidateConfig(llama).message().find("smollm3"), std::string::npos) << ValidateConfig(llama);
  llama = *PresetConfig("llama-tiny");
  llama.residual_multiplier = 0.5;
  EXPECT_NE(ValidateConfig(llama).message().find("granite"), std::string::npos) << ValidateConfig(llama);
}

}  // namespace
}  // namespace posbias::models
