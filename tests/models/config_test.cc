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

TEST(Presets, HaveTheNewFamiliesPublishedShapes) {
  const ModelConfig llama = *PresetConfig("llama3.2-1b");
  EXPECT_EQ(llama.family, Family::kLlama);
  EXPECT_EQ(llama.num_layers, 16);
  EXPECT_EQ(llama.hidden_size, 2048);
  EXPECT_EQ(llama.num_kv_heads, 8);
  EXPECT_EQ(llama.head_dim(), 64);
  EXPECT_EQ(llama.vocab_size, 128256);
  EXPECT_EQ(llama.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_DOUBLE_EQ(llama.rope_scaling.factor, 32.0);
  EXPECT_EQ(PresetConfig("tinyllama-1.1b")->num_kv_heads, 4);
  const ModelConfig mistral = *PresetConfig("mistral-7b");
  EXPECT_EQ(mistral.family, Family::kMistral);
  EXPECT_EQ(mistral.sliding_window, 4096);
  EXPECT_EQ(mistral.intermediate_size, 14336);
  const ModelConfig pythia = *PresetConfig("pythia-410m");
  EXPECT_EQ(pythia.family, Family::kGptNeoX);
  EXPECT_EQ(pythia.num_layers, 24);
  EXPECT_EQ(pythia.hidden_size, 1024);
  EXPECT_EQ(pythia.rotary_dims(), 16);  // 0.25 of head_dim 64.
  EXPECT_TRUE(pythia.parallel_residual);
  for (const auto& name : PresetNames()) EXPECT_TRUE(ValidateConfig(*PresetConfig(name)).ok()) << name;
}

// Each family's config.json as Hugging Face writes it reads back into the same architecture.
TEST(HuggingFaceConfig, TheNewFamiliesRoundTrip) {
  for (const std::string preset : {"llama3.2-1b", "tinyllama-1.1b", "mistral-7b", "pythia-160m", "llama-tiny"}) {
    const ModelConfig config = *PresetConfig(preset);
    auto back = ConfigFromHuggingFaceJson(ConfigToHuggingFaceJson(config));
    ASSERT_TRUE(back.ok()) << preset << ": " << back.status();
    EXPECT_EQ(back->family, config.family) << preset;
    EXPECT_EQ(back->head_dim(), config.head_dim()) << preset;
    EXPECT_EQ(back->num_kv_heads, config.num_kv_heads) << preset;
    EXPECT_EQ(back->sliding_window, config.sliding_window) << preset;
    EXPECT_EQ(back->rope_scaling.type, config.rope_scaling.type) << preset;
    EXPECT_DOUBLE_EQ(back->rope_scaling.factor, config.rope_scaling.factor) << preset;
    EXPECT_EQ(back->rope_scaling.original_max_positions, config.rope_scaling.original_max_positions) << preset;
    EXPECT_DOUBLE_EQ(back->rotary_pct, config.rotary_pct) << preset;
    EXPECT_EQ(back->parallel_residual, config.parallel_residual) << preset;
    EXPECT_EQ(back->tie_embeddings, config.tie_embeddings) << preset;
    EXPECT_DOUBLE_EQ(back->rope_theta, config.rope_theta) << preset;
  }
}

// What is not built is refused, naming the key and what is supported: never silently ignored.
TEST(HuggingFaceConfig, KeysThatChangeTheComputationAndAreNotBuiltAreRefused) {
  const std::string llama =
      R"("model_type": "llama", "num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4,
         "intermediate_size": 48)";
  const std::string neox =
      R"("model_type": "gpt_neox", "num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4,
         "intermediate_size": 64)";
  const std::string qwen2 =
      R"("model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4,
         "intermediate_size": 48)";
  struct Case {
    std::string json;
    absl::StatusCode code;
    std::string key, supported;
  };
  const std::vector<Case> cases = {
      {llama + R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4})", absl::StatusCode::kUnimplemented,
       "rope_scaling.rope_type", "linear, llama3"},
      {llama + R"(, "rope_scaling": {"type": "dynamic", "factor": 2})", absl::StatusCode::kUnimplemented,
       "rope_scaling.rope_type", "linear, llama3"},
      {llama + R"(, "hidden_act": "gelu")", absl::StatusCode::kUnimplemented, "hidden_act", "\"silu\""},
      {llama + R"(, "attn_logit_softcapping": 50.0)", absl::StatusCode::kUnimplemented, "attn_logit_softcapping",
       "null"},
      {llama + R"(, "final_logit_softcapping": 30.0)", absl::StatusCode::kUnimplemented, "final_logit_softcapping",
       "null"},
      {neox + R"(, "hidden_act": "gelu_new")", absl::StatusCode::kUnimplemented, "hidden_act", "\"gelu\""},
      {neox + R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4})", absl::StatusCode::kUnimplemented,
       "rope_scaling.rope_type", "linear, llama3"},
      {neox + R"(, "attention_bias": false)", absl::StatusCode::kUnimplemented, "attention_bias", "true"},
      {R"("model_type": "mistral", "num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4,
          "intermediate_size": 48, "attention_bias": true)",
       absl::StatusCode::kUnimplemented, "attention_bias", "false"},
      {qwen2 + R"(, "use_sliding_window": true)", absl::StatusCode::kUnimplemented, "use_sliding_window", "false"},
      {qwen2 + R"(, "rope_scaling": {"rope_type": "linear", "factor": 2})", absl::StatusCode::kUnimplemented,
       "rope_scaling", "null"},
      {R"("model_type": "gemma2", "num_hidden_layers": 2)", absl::StatusCode::kInvalidArgument, "model_type 'gemma2'",
       "gpt2, qwen2, llama, mistral or gpt_neox"},
      {llama + R"(, "rope_scaling": {"rope_type": "linear", "factor": 0.5})", absl::StatusCode::kInvalidArgument,
       "rope_scaling.factor", ">= 1"},
  };
  for (const Case& c : cases) {
    const absl::Status status = ConfigFromHuggingFaceJson("{" + c.json + "}").status();
    EXPECT_EQ(status.code(), c.code) << c.json << ": " << status;
    EXPECT_NE(status.message().find(c.key), std::string::npos) << status.message();
    EXPECT_NE(status.message().find(c.supported), std::string::npos) << status.message();
  }
}

TEST(HuggingFaceConfig, NullsAndDefaultsSpelledOutReadAsTheDefaults) {
  auto mistral = ConfigFromHuggingFaceJson(
      R"({"model_type": "mistral", "num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4,
          "intermediate_size": 48, "sliding_window": null, "rope_scaling": null, "head_dim": 8})");
  ASSERT_TRUE(mistral.ok()) << mistral.status();
  EXPECT_EQ(mistral->sliding_window, 0);
  EXPECT_EQ(mistral->explicit_head_dim, 0);  // 32 / 4.
  auto llama = ConfigFromHuggingFaceJson(
      R"({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4,
          "intermediate_size": 48, "rope_scaling": {"rope_type": "default"}, "head_dim": 16})");
  ASSERT_TRUE(llama.ok()) << llama.status();
  EXPECT_EQ(llama->rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_EQ(llama->head_dim(), 16);
}

}  // namespace
}  // namespace posbias::models
