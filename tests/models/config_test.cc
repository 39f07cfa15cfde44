// Presets, overrides and Hugging Face config.json of the model zoo (torch-free).
#include "server/models/config.h"

#include <limits>

#include "gtest/gtest.h"
#include "server/status/error.h"

namespace posbias::models {
namespace {

TEST(Presets, HaveThePublishedShapes) {
  const ModelConfig qwen = *PresetConfig("qwen2-0.5b");
  EXPECT_EQ(qwen.num_layers, 24);
  EXPECT_EQ(qwen.hidden_size, 896);
  EXPECT_EQ(qwen.num_heads, 14);
  EXPECT_EQ(qwen.num_kv_heads, 2);
  EXPECT_EQ(qwen.intermediate_size, 4864);
  EXPECT_EQ(qwen.vocab_size, 151936);
  EXPECT_DOUBLE_EQ(qwen.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(qwen.norm_eps, 1e-6);
  const ModelConfig xl = *PresetConfig("gpt2-xl");
  EXPECT_EQ(xl.num_layers, 48);
  EXPECT_EQ(xl.hidden_size, 1600);
  EXPECT_EQ(xl.num_heads, 25);
  EXPECT_EQ(xl.intermediate_size, 6400);
  EXPECT_EQ(PresetConfig("qwen2-1.5b")->hidden_size, 1536);
  EXPECT_EQ(PresetConfig("gpt2-medium")->num_layers, 24);
  EXPECT_EQ(PresetConfig("gpt2-large")->hidden_size, 1280);
}

TEST(Presets, UnknownNamesListTheKnownOnes) {
  const auto status = PresetConfig("gpt5").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("qwen2-0.5b"), std::string::npos);
}

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

TEST(EstimatedParameters, MatchesThePublishedSizes) {
  EXPECT_NEAR(EstimatedParameters(*PresetConfig("gpt2")), 124.4e6, 0.5e6);        // GPT-2 small.
  EXPECT_NEAR(EstimatedParameters(*PresetConfig("qwen2-0.5b")), 494.0e6, 2.0e6);  // Qwen2-0.5B.
}

TEST(HuggingFaceConfig, RefusesNestingDeeperThanAnyConfigHas) {
  const std::string deep = R"({"model_type": "gpt2", "x": )" + std::string(100'000, '[') + std::string(100'000, ']') + "}";
  const absl::Status status = ConfigFromHuggingFaceJson(deep).status();
  EXPECT_EQ(ErrorReasonOf(status), "INVALID_MODEL_FILE");
  EXPECT_NE(status.message().find("nested deeper"), std::string::npos) << status.message();
}

TEST(HuggingFaceConfig, RoundTripsBothFamilies) {
  for (const std::string preset : {"gpt2-tiny", "qwen2-tiny", "qwen2-0.5b"}) {
    const ModelConfig config = *PresetConfig(preset);
    const auto read = ConfigFromHuggingFaceJson(ConfigToHuggingFaceJson(config));
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->family, config.family);
    EXPECT_EQ(read->num_layers, config.num_layers);
    EXPECT_EQ(read->hidden_size, config.hidden_size);
    EXPECT_EQ(read->num_kv_heads, config.num_kv_heads);
    EXPECT_EQ(read->intermediate_size, config.intermediate_size);
    EXPECT_EQ(read->tie_embeddings, config.tie_embeddings);
    EXPECT_DOUBLE_EQ(read->rope_theta, config.rope_theta);
  }
}

TEST(HuggingFaceConfig, RejectsUnknownModelTypesAndMalformedJson) {
  EXPECT_EQ(ErrorReasonOf(ConfigFromHuggingFaceJson(R"({"model_type": "llama"})").status()), "INVALID_MODEL_FILE");
  EXPECT_EQ(ErrorReasonOf(ConfigFromHuggingFaceJson("{").status()), "INVALID_MODEL_FILE");
  EXPECT_EQ(ErrorReasonOf(ConfigFromHuggingFaceJson(R"({"model_type": "qwen2"})").status()), "INVALID_MODEL_FILE");
}

}  // namespace
}  // namespace posbias::models
