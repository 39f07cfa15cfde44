// The presets (server/models/presets.cc): the published shapes under their names.
#include "server/models/config.h"

#include <cmath>
#include <limits>
#include <string>

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

}  // namespace
}  // namespace posbias::models
