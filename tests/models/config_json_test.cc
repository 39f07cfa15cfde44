// Hugging Face config.json read and written (server/models/config_json.cc): every family round
// trips, defaults follow each configuration class, and what is not built is refused by name.
#include "server/models/config.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/status/error.h"

namespace posbias::models {
namespace {

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
      {R"("model_type": "deepseek_v3", "num_hidden_layers": 2)", absl::StatusCode::kInvalidArgument,
       "model_type 'deepseek_v3'",
       "gpt2, qwen2, llama, mistral, gpt_neox, qwen3, gemma, gemma2, gemma3_text, phi3, olmo2, granite or smollm3"},
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

// ---- 2025-26's families ----------------------------------------------------------------------

std::string Shape(const std::string& model_type, int layers = 4) {
  return R"("model_type": ")" + model_type + R"(", "num_hidden_layers": )" + std::to_string(layers) +
         R"(, "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48,
            "max_position_embeddings": 64)";
}

TEST(TodaysFamilies, EachPresetRoundTripsThroughItsConfigJsonUnchanged) {
  for (const std::string preset : {"qwen3-0.6b", "gemma-2b", "gemma2-2b", "gemma3-1b", "phi4-mini", "olmo2-1b",
                                   "granite3.1-2b", "smollm3-3b", "qwen3-tiny", "gemma-tiny", "gemma2-tiny",
                                   "gemma3-tiny", "phi3-tiny", "olmo2-tiny", "granite-tiny", "smollm3-tiny"}) {
    const ModelConfig config = *PresetConfig(preset);
    const std::string written = ConfigToHuggingFaceJson(config);
    auto back = ConfigFromHuggingFaceJson(written);
    ASSERT_TRUE(back.ok()) << preset << ": " << back.status();
    EXPECT_EQ(back->family, config.family) << preset;
    EXPECT_EQ(ConfigToHuggingFaceJson(*back), written) << preset;
    for (int64_t l = 0; l < config.num_layers; ++l) {
      EXPECT_EQ(back->WindowOf(l), config.WindowOf(l)) << preset << " layer " << l;
      EXPECT_EQ(back->RotatesAt(l), config.RotatesAt(l)) << preset << " layer " << l;
    }
    EXPECT_DOUBLE_EQ(back->AttentionScale(), config.AttentionScale()) << preset;
  }
}

TEST(TodaysFamilies, DefaultsFollowEachConfigurationClass) {
  // Gemma 2: layer 0 slides, layer 1 is full; soft-capping 50 and 30; scale 256^-1/2.
  auto gemma2 = ConfigFromHuggingFaceJson("{" + Shape("gemma2") + R"(, "head_dim": 16})");
  ASSERT_TRUE(gemma2.ok()) << gemma2.status();
  EXPECT_EQ(gemma2->WindowOf(0), 4096);
  EXPECT_EQ(gemma2->WindowOf(1), 0);
  EXPECT_DOUBLE_EQ(gemma2->attn_logit_softcapping, 50.0);
  EXPECT_DOUBLE_EQ(gemma2->final_logit_softcapping, 30.0);
  EXPECT_DOUBLE_EQ(gemma2->AttentionScale(), 1.0 / 16.0);
  EXPECT_TRUE(gemma2->tie_embeddings);
  // Gemma 3: every sliding_window_pattern-th layer full (12 layers, pattern 6: layers 5 and 11);
  // the attention is never soft-capped; the local base on sliding layers.
  auto gemma3 = ConfigFromHuggingFaceJson("{" + Shape("gemma3_text", 12) +
                                          R"(, "attn_logit_softcapping": 50.0, "rope_local_base_freq": 10000.0})");
  ASSERT_TRUE(gemma3.ok()) << gemma3.status();
  for (int64_t l = 0; l < 12; ++l) EXPECT_EQ(gemma3->WindowOf(l), l % 6 == 5 ? 0 : 512) << l;
  EXPECT_DOUBLE_EQ(gemma3->attn_logit_softcapping, 0.0);
  EXPECT_DOUBLE_EQ(gemma3->rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(gemma3->rope_local_theta, 10000.0);
  // Gemma reads hidden_act ("gelu" is the erf GELU), Gemma 2 hidden_activation.
  EXPECT_TRUE(ConfigFromHuggingFaceJson("{" + Shape("gemma") + R"(, "hidden_act": "gelu"})")->exact_gelu);
  EXPECT_FALSE(ConfigFromHuggingFaceJson("{" + Shape("gemma2") + R"(, "hidden_act": "gelu"})")->exact_gelu);
  // SmolLM3: every fourth layer without rotary; no window unless asked; then the NoPE layers slide.
  auto smollm3 = ConfigFromHuggingFaceJson("{" + Shape("smollm3", 8) + "}");
  ASSERT_TRUE(smollm3.ok()) << smollm3.status();
  for (int64_t l = 0; l < 8; ++l) EXPECT_EQ(smollm3->RotatesAt(l), l % 4 != 3) << l;
  EXPECT_EQ(smollm3->WindowOf(3), 0);
  EXPECT_DOUBLE_EQ(smollm3->rope_theta, 2e6);
  auto sliding = ConfigFromHuggingFaceJson("{" + Shape("smollm3", 8) + R"(, "use_sliding_window": true, "sliding_window": 4})");
  ASSERT_TRUE(sliding.ok()) << sliding.status();
  for (int64_t l = 0; l < 8; ++l) EXPECT_EQ(sliding->WindowOf(l), l % 4 == 3 ? 4 : 0) << l;
  // Qwen3: a window only with use_sliding_window, from max_window_layers on.
  auto qwen3 = ConfigFromHuggingFaceJson("{" + Shape("qwen3") + R"(, "sliding_window": 4, "max_window_layers": 2})");
  ASSERT_TRUE(qwen3.ok()) << qwen3.status();
  EXPECT_EQ(qwen3->WindowOf(3), 0);
  auto qwen3_sliding = ConfigFromHuggingFaceJson(
      "{" + Shape("qwen3") + R"(, "use_sliding_window": true, "sliding_window": 4, "max_window_layers": 2})");
  ASSERT_TRUE(qwen3_sliding.ok()) << qwen3_sliding.status();
  EXPECT_EQ(qwen3_sliding->WindowOf(1), 0);
  EXPECT_EQ(qwen3_sliding->WindowOf(2), 4);
  // Phi-3's longrope: the factor is max_position_embeddings over the original length, and the
  // attention factor sqrt(1 + ln 8 / ln 8).
  auto phi3 = ConfigFromHuggingFaceJson("{" + Shape("phi3") + R"(, "partial_rotary_factor": 0.5,
      "original_max_position_embeddings": 8,
      "rope_scaling": {"type": "longrope", "short_factor": [1, 1], "long_factor": [2, 3]}})");
  ASSERT_TRUE(phi3.ok()) << phi3.status();
  EXPECT_EQ(phi3->rope_scaling.type, RopeScaling::Type::kLongRope);
  EXPECT_DOUBLE_EQ(phi3->rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(RotaryScaleOf(*phi3), std::sqrt(2.0));
  // Granite's attention_multiplier defaults to 1 (not head_dim^-1/2).
  EXPECT_DOUBLE_EQ(ConfigFromHuggingFaceJson("{" + Shape("granite") + "}")->AttentionScale(), 1.0);
}

// Every value a row cannot honour exactly is refused with a message naming the key, its value and
// what is supported.

TEST(TodaysFamilies, UnsupportedValuesAreRefusedWithTheirExactMessage) {
  struct Case {
    std::string json;
    absl::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {Shape("qwen3") + R"(, "num_experts": 128)", absl::StatusCode::kUnimplemented,
       "config.json num_experts = 128 is not implemented: supported absent or 0 (mixture-of-experts layers are not built)"},
      {Shape("qwen3") + R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4.0})", absl::StatusCode::kUnimplemented,
       "config.json rope_scaling.rope_type = 'yarn' is not implemented: supported linear, llama3, default or null"},
      {Shape("qwen3") + R"(, "attn_logit_softcapping": 30.0)", absl::StatusCode::kUnimplemented,
       "config.json attn_logit_softcapping = 30.0 is not implemented: supported null (no soft-capping)"},
      {Shape("gemma") + R"(, "hidden_act": "relu")", absl::StatusCode::kUnimplemented,
       "config.json hidden_act = \"relu\" is not implemented: supported \"gelu_pytorch_tanh\" or \"gelu\""},
      {Shape("gemma2") + R"(, "hidden_activation": "silu")", absl::StatusCode::kUnimplemented,
       "config.json hidden_activation = \"silu\" is not implemented: supported \"gelu_pytorch_tanh\" or \"gelu\""},
      {Shape("gemma2", 2) + R"(, "layer_types": ["sliding_attention", "chunked_attention"])",
       absl::StatusCode::kUnimplemented,
       "config.json layer_types[1] = \"chunked_attention\" is not implemented: supported \"sliding_attention\" or "
       "\"full_attention\""},
      {Shape("phi3") + R"(, "rope_scaling": {"rope_type": "linear", "factor": 2.0})", absl::StatusCode::kUnimplemented,
       "config.json rope_scaling.rope_type = 'linear' is not implemented: supported longrope, default or null"},
      {Shape("phi3") + R"(, "attention_bias": true)", absl::StatusCode::kUnimplemented,
       "config.json attention_bias = true is not implemented: supported false"},
      {Shape("olmo2") + R"(, "mlp_bias": true)", absl::StatusCode::kUnimplemented,
       "config.json mlp_bias = true is not implemented: supported false"},
      {Shape("granite") + R"(, "hidden_act": "gelu")", absl::StatusCode::kUnimplemented,
       "config.json hidden_act = \"gelu\" is not implemented: supported \"silu\""},
      {Shape("smollm3", 2) + R"(, "no_rope_layers": [1])", absl::StatusCode::kInvalidArgument,
       "config.json no_rope_layers is not a list of 2 entries (1 = rotary, 0 = none, one per layer)"},
  };
  for (const Case& c : cases) {
    const absl::Status status = ConfigFromHuggingFaceJson("{" + c.json + "}").status();
    EXPECT_EQ(status.code(), c.code) << c.json << ": " << status;
    EXPECT_EQ(status.message(), c.message) << c.json;
  }
  // longrope's factor lists hold one factor per rotating frequency (head_dim 8 x 0.5: 2); a factor
  // below 1 (max_position_embeddings 64 below the default original 4096) is allowed.
  EXPECT_TRUE(ConfigFromHuggingFaceJson("{" + Shape("phi3") + R"(, "partial_rotary_factor": 0.5,
      "rope_scaling": {"type": "longrope", "short_factor": [1, 1], "long_factor": [2, 3]}})").ok());
  const absl::Status short_list = ConfigFromHuggingFaceJson("{" + Shape("phi3") + R"(, "partial_rotary_factor": 0.5,
      "rope_scaling": {"type": "longrope", "short_factor": [1], "long_factor": [2, 3]}})").status();
  EXPECT_EQ(short_list.code(), absl::StatusCode::kInvalidArgument) << short_list;
  EXPECT_NE(short_list.message().find("rope_scaling.short_factor"), std::string::npos) << short_list.message();
  EXPECT_NE(short_list.message().find("2 positive factors"), std::string::npos) << short_list.message();
}

// A hostile review's configs: each row refuses the same values the same way, and a depth or
// width that bounds an allocation is refused before anything is built from it (a gemma2 config
// with 1e9 layers used to allocate for seconds and abort the server).
TEST(ConfigsRefusedBeforeAllocation, EveryRowRefusesADepthBombAsAnInvalidDepth) {
  for (const std::string type : {"gpt2", "qwen2", "llama", "mistral", "gpt_neox", "qwen3", "gemma", "gemma2",
                                 "gemma3_text", "phi3", "olmo2", "granite", "smollm3"}) {
    for (const std::string layers : {"1000000000", "4294967298", "1e9"}) {
      const std::string depth_key = type == "gpt2" ? "n_layer" : "num_hidden_layers";
      const std::string json = R"({"model_type": ")" + type + R"(", ")" + depth_key + R"(": )" + layers +
                               R"(, "hidden_size": 32, "n_embd": 32, "num_attention_heads": 4, "n_head": 4,
                                  "num_key_value_heads": 4, "intermediate_size": 48, "max_position_embeddings": 64})";
      const absl::Status status = ConfigFromHuggingFaceJson(json).status();
      EXPECT_EQ(ErrorReasonOf(status), "INVALID_DEPTH") << type << " " << layers << ": " << status;
      EXPECT_EQ(status.message(), "layers = " + std::to_string(static_cast<int64_t>(std::stod(layers))) +
                                      " is invalid: allowed 1..1024")
          << type;
    }
  }
  const absl::Status negative = ConfigFromHuggingFaceJson("{" + Shape("gemma2", -1) + "}").status();
  EXPECT_EQ(negative.message(), "layers = -1 is invalid: allowed >= 1") << "the depth is blamed, not layer_types";
}

TEST(ConfigsRefusedBeforeAllocation, KeysEveryRowChecksWhetherOrNotItUsesThem) {
  struct Case {
    std::string json, message;
  };
  const std::vector<Case> cases = {
      // Qwen3 ignores both without use_sliding_window; they are checked all the same.
      {Shape("qwen3", 2) + R"(, "layer_types": ["full_attention"])",
       "config.json layer_types = [\"full_attention\"] is not a list of 2 entries (one per layer)"},
      {Shape("qwen3") + R"(, "sliding_window": -1)", "sliding_window = -1 is invalid: allowed >= 0 (0 = full causal attention)"},
      {Shape("gemma2") + R"(, "sliding_window": -1)", "sliding_window = -1 is invalid: allowed >= 0 (0 = full causal attention)"},
      {Shape("smollm3", 2) + R"(, "no_rope_layers": [2, 5])",
       "config.json no_rope_layers is not a list of 2 entries (1 = rotary, 0 = none, one per layer)"},
      {Shape("smollm3", 2) + R"(, "no_rope_layers": [-1, 0])",
       "config.json no_rope_layers is not a list of 2 entries (1 = rotary, 0 = none, one per layer)"},
      {Shape("phi3") + R"(, "original_max_position_embeddings": 0, "partial_rotary_factor": 0.5,
          "rope_scaling": {"type": "longrope", "short_factor": [1, 1], "long_factor": [2, 3]})",
       "original_max_position_embeddings = 0 is invalid: allowed >= 1"},
      {Shape("gemma3_text") + R"(, "rope_local_base_freq": 0)",
       "rope_local_base_freq = 0 is invalid: allowed a finite number > 0"},
      {Shape("llama") + R"(, "rms_norm_eps": -1)",
       "norm_eps = -1 is invalid: allowed (0, 1) (config.json rms_norm_eps or layer_norm_eps)"},
      {Shape("gemma2") + R"(, "rms_norm_eps": 0)",
       "norm_eps = 0 is invalid: allowed (0, 1) (config.json rms_norm_eps or layer_norm_eps)"},
  };
  for (const Case& c : cases) {
    const absl::Status status = ConfigFromHuggingFaceJson("{" + c.json + "}").status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.json << ": " << status;
    EXPECT_EQ(status.message(), c.message) << c.json;
  }
}

TEST(ConfigsRefusedBeforeAllocation, ASyntaxErrorNamesItsByte) {
  const std::string text = R"({"model_type": "llama", "rms_norm_eps": NaN})";
  const absl::Status status = ConfigFromHuggingFaceJson(text).status();
  EXPECT_EQ(ErrorReasonOf(status), "INVALID_MODEL_FILE");
  EXPECT_NE(status.message().find("config.json is not valid JSON: a syntax error at byte 41"), std::string::npos)
      << status.message();
  EXPECT_NE(status.message().find("NaN"), std::string::npos) << status.message();
  EXPECT_EQ(ConfigFromHuggingFaceJson("[1, 2]").status().message(), "config.json is a JSON array, not an object");
}

}  // namespace
}  // namespace posbias::models
