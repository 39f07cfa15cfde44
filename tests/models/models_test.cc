// The model zoo: shapes and parameter counts, causality, seeded determinism, ablations, weights in
// Hugging Face form (export, load, and every malformed case), TorchScript loading.
#include "server/models/model.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <torch/torch.h>

#include "gtest/gtest.h"
#include "server/models/weights.h"
#include "server/status/error.h"

namespace posbias::models {
namespace {

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("posbias_models_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

std::unique_ptr<DecoderModel> Build(const std::string& preset, uint64_t seed = 1, Ablations ablations = {}) {
  ModelConfig config = *PresetConfig(preset);
  config.ablations = ablations;
  auto model = BuildModel(config, seed);
  EXPECT_TRUE(model.ok()) << model.status();
  return std::move(*model);
}

torch::Tensor Hidden(DecoderModel& model, const std::vector<int64_t>& tokens) {
  torch::NoGradGuard no_grad;
  auto ids = torch::tensor(tokens, torch::kLong).unsqueeze(0);
  return model.Forward(model.Embed(ids), {}).hidden;
}

TEST(ModelZoo, Gpt2PresetHasThePublishedParameterCount) {
  auto model = Build("gpt2");
  EXPECT_EQ(ParameterCount(*model), 124'439'808);  // GPT2LMHeadModel, tied output.
}

TEST(ModelZoo, TinyModelsMapTokensToHiddenStatesOfTheirWidth) {
  for (const std::string preset : {"gpt2-tiny", "qwen2-tiny"}) {
    auto model = Build(preset);
    auto hidden = Hidden(*model, {1, 2, 3, 4, 5});
    EXPECT_EQ(hidden.sizes(), (std::vector<int64_t>{1, 5, 64})) << preset;
    torch::NoGradGuard no_grad;
    EXPECT_EQ(model->Logits(hidden).size(2), 128) << preset;
  }
}

TEST(ModelZoo, EarlierPositionsIgnoreLaterTokens) {
  for (const std::string preset : {"gpt2-tiny", "qwen2-tiny"}) {
    auto model = Build(preset);
    auto a = Hidden(*model, {5, 6, 7, 8}), b = Hidden(*model, {5, 6, 7, 99});
    EXPECT_TRUE(torch::allclose(a.narrow(1, 0, 3), b.narrow(1, 0, 3), 0, 0)) << preset;
    EXPECT_FALSE(torch::allclose(a.select(1, 3), b.select(1, 3))) << preset;
  }
}

TEST(ModelZoo, TheSameSeedGivesTheSameWeightsAndAnotherSeedOthers) {
  auto a = Build("qwen2-tiny", 7), b = Build("qwen2-tiny", 7), c = Build("qwen2-tiny", 8);
  EXPECT_TRUE(torch::equal(Hidden(*a, {1, 2, 3}), Hidden(*b, {1, 2, 3})));
  EXPECT_FALSE(torch::equal(Hidden(*a, {1, 2, 3}), Hidden(*c, {1, 2, 3})));
}

TEST(ModelZoo, InitializesLikeHuggingFace) {
  auto model = Build("gpt2-tiny");
  for (const auto& [name, tensor] : model->NamedParameters()) {
    const double std = tensor.std().item<double>(), mean = tensor.mean().item<double>();
    if (name.find("ln_") != std::string::npos) {
      EXPECT_TRUE(name.find("bias") != std::string::npos ? tensor.eq(0).all().item<bool>()
                                                         : tensor.eq(1).all().item<bool>()) << name;
    } else if (name.find("bias") != std::string::npos) {
      EXPECT_TRUE(tensor.eq(0).all().item<bool>()) << name;
    } else if (name.find("c_proj.weight") != std::string::npos) {
      EXPECT_NEAR(std, 0.02 / std::sqrt(2.0 * 2), 0.003) << name;  // Scaled residual projection.
    } else {
      EXPECT_NEAR(std, 0.02, 0.003) << name;
      EXPECT_NEAR(mean, 0.0, 0.003) << name;
    }
  }
}

TEST(ModelZoo, NamesParametersAsHuggingFaceCheckpointsDo) {
  auto gpt2 = Build("gpt2-tiny"), qwen2 = Build("qwen2-tiny");
  std::set<std::string> names;
  for (const auto& [name, t] : gpt2->NamedParameters()) names.insert(name);
  for (const std::string expected : {"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.1.attn.c_attn.weight",
                                     "transformer.h.0.mlp.c_proj.bias", "transformer.ln_f.weight"}) {
    EXPECT_TRUE(names.count(expected)) << expected;
  }
  names.clear();
  for (const auto& [name, t] : qwen2->NamedParameters()) names.insert(name);
  for (const std::string expected : {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.bias",
                                     "model.layers.1.self_attn.o_proj.weight", "model.layers.0.mlp.gate_proj.weight",
                                     "model.norm.weight"}) {
    EXPECT_TRUE(names.count(expected)) << expected;
  }
  EXPECT_FALSE(names.count("model.layers.0.self_attn.o_proj.bias"));
}

TEST(Ablations, RemoveTheMlpBlocksAndPositionEmbeddings) {
  Ablations ablations;
  ablations.no_mlp = true;
  ablations.no_position_encoding = true;
  auto model = Build("gpt2-tiny", 1, ablations);
  for (const auto& [name, t] : model->NamedParameters()) EXPECT_EQ(name.find("mlp"), std::string::npos) << name;
  EXPECT_FALSE(model->embeds_positions());
  // Without positions, a permutation of an equal prefix gives... the same embedding per token.
  torch::NoGradGuard no_grad;
  auto e = model->Embed(torch::tensor({3, 3}, torch::kLong).unsqueeze(0));
  EXPECT_TRUE(torch::equal(e[0][0], e[0][1]));
}

TEST(Ablations, UniformAttentionMakesOneLayerBlindToTheOrderOfThePrefix) {
  // One layer whose attention averages its prefix uniformly (logits zero, so rotary positions do
  // not matter): the last output depends on the earlier tokens as a set, not on their order.
  ModelConfig config = *PresetConfig("qwen2-tiny");
  config.num_layers = 1;
  config.ablations.uniform_attention = true;
  auto model = std::move(*BuildModel(config, 1));
  auto shuffled = Hidden(*model, {9, 4, 7}), original = Hidden(*model, {4, 9, 7});
  EXPECT_TRUE(torch::allclose(shuffled.select(1, 2), original.select(1, 2), 1e-5, 1e-6));
  config.ablations.uniform_attention = false;
  auto attending = std::move(*BuildModel(config, 1));
  EXPECT_FALSE(torch::allclose(Hidden(*attending, {9, 4, 7}).select(1, 2),
                               Hidden(*attending, {4, 9, 7}).select(1, 2), 1e-5, 1e-6));
}

TEST(Weights, ExportedWeightsLoadIntoAnotherModelAndReproduceItsOutputs) {
  for (const std::string preset : {"gpt2-tiny", "qwen2-tiny"}) {
    auto source = Build(preset, 1), target = Build(preset, 2);
    const std::string path = TempPath(preset + ".safetensors");
    ASSERT_TRUE(ExportWeights(*source, path).ok());
    ASSERT_TRUE(LoadWeightsFromPath(*target, path).ok());
    EXPECT_TRUE(torch::equal(Hidden(*source, {1, 2, 3}), Hidden(*target, {1, 2, 3}))) << preset;
    std::filesystem::remove(path);
  }
}

TEST(Weights, Bfloat16ExportLoadsWithinBfloat16Precision) {
  auto source = Build("qwen2-tiny", 1), target = Build("qwen2-tiny", 2);
  const std::string path = TempPath("bf16.safetensors");
  ASSERT_TRUE(ExportWeights(*source, path, safetensors::DType::kBF16).ok());
  ASSERT_TRUE(LoadWeightsFromPath(*target, path).ok());
  EXPECT_TRUE(torch::allclose(Hidden(*source, {1, 2, 3}), Hidden(*target, {1, 2, 3}), 0.05, 0.05));
  std::filesystem::remove(path);
}

// Writes a checkpoint holding `tensors` (float32) and loads it into a gpt2-tiny model.
absl::Status LoadCrafted(const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  std::vector<safetensors::TensorToWrite> entries;
  std::vector<torch::Tensor> keep;
  for (const auto& [name, t] : tensors) {
    keep.push_back(t.to(torch::kFloat32).contiguous());
    entries.push_back({name, safetensors::DType::kF32, keep.back().sizes().vec(), keep.back().data_ptr<float>(),
                       static_cast<size_t>(keep.back().numel()) * 4});
  }
  const std::string path = TempPath("crafted.safetensors");
  EXPECT_TRUE(safetensors::WriteFile(path, entries, {}).ok());
  auto model = Build("gpt2-tiny");
  auto status = LoadWeightsFromPath(*model, path);
  std::filesystem::remove(path);
  return status;
}

TEST(Weights, AcceptsGpt2NamesWithoutTheTransformerPrefixAndIgnoresMaskBuffers) {
  auto model = Build("gpt2-tiny", 4);
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& [name, t] : model->NamedParameters()) tensors.emplace_back(name.substr(12), t.detach());
  tensors.emplace_back("h.0.attn.bias", torch::ones({1, 1, 4, 4}));
  EXPECT_TRUE(LoadCrafted(tensors).ok());
}

TEST(Weights, NamesTheMissingTheMisshapenAndTheUnexpectedTensor) {
  auto model = Build("gpt2-tiny", 4);
  auto named = model->NamedParameters();
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& [name, t] : named) tensors.emplace_back(name, t.detach());
  auto missing = tensors;
  missing.erase(missing.begin() + 2);
  auto status = LoadCrafted(missing);
  EXPECT_EQ(ErrorReasonOf(status), "INVALID_MODEL_FILE");
  EXPECT_NE(status.message().find(named[2].first), std::string::npos) << status;
  auto misshapen = tensors;
  misshapen[0].second = torch::zeros({3, 3});
  status = LoadCrafted(misshapen);
  EXPECT_NE(status.message().find("has shape [3, 3]"), std::string::npos) << status;
  auto unexpected = tensors;
  unexpected.emplace_back("transformer.h.9.attn.c_attn.weight", torch::zeros({2}));
  status = LoadCrafted(unexpected);
  EXPECT_NE(status.message().find("unexpected tensor 'transformer.h.9.attn.c_attn.weight'"), std::string::npos) << status;
}

TEST(TorchScript, LoadsAModuleThatKeepsTheEmbeddingShape) {
  const std::string path = TempPath("module.pt");
  const std::string script =
      "import torch\n"
      "class M(torch.nn.Module):\n"
      "    def __init__(self):\n"
      "        super().__init__()\n"
      "        self.proj = torch.nn.Linear(8, 8)\n"
      "    def forward(self, inputs_embeds):\n"
      "        return inputs_embeds + torch.cumsum(self.proj(inputs_embeds), dim=1)\n"
      "torch.jit.script(M()).save('" + path + "')\n";
  std::ofstream(path + ".py") << script;
  ASSERT_EQ(std::system(("/usr/bin/python3 " + path + ".py").c_str()), 0);
  auto model = LoadTorchScriptModel(path, 8);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_FALSE((*model)->has_token_embedding());
  torch::NoGradGuard no_grad;
  EXPECT_EQ((*model)->Forward(torch::zeros({2, 5, 8}), {}).hidden.sizes(), (std::vector<int64_t>{2, 5, 8}));
  EXPECT_EQ(ErrorReasonOf(LoadTorchScriptModel(path, 9).status()), "INVALID_MODEL_FILE");
  EXPECT_EQ(ErrorReasonOf(LoadTorchScriptModel(path + ".py", 8).status()), "INVALID_MODEL_FILE");
  std::filesystem::remove(path);
  std::filesystem::remove(path + ".py");
}

}  // namespace
}  // namespace posbias::models
