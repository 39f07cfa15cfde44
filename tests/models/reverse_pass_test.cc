// The families' hand-written reverse pass against autograd through the models' own forward pass:
// for every output (final hidden, the residual stream after each layer), target, ablation and
// grouped-query shape, the K input gradients equal torch::autograd::grad's in float64; and so do
// the value pathway's (attention probabilities detached), which a 1-layer GPT-2 written out by
// hand confirms independently, and which equals the full Jacobian under uniform attention.
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "gtest/gtest.h"
#include "server/models/model.h"

namespace posbias::models {
namespace {

struct Case {
  std::string name;
  Family family;
  Ablations ablations;
  int64_t kv_heads;
  int64_t window = 0;          // Mistral's sliding window.
  double rotary_pct = 1.0;     // GPT-NeoX: the rotary share of each head.
  bool parallel_residual = true;  // GPT-NeoX.
  // q and k projections times this, so that scores reach the soft-cap's bend.
  double qk_scale = 1.0;
  std::function<void(ModelConfig&)> adjust = nullptr;  // The family's other settings.
};

const char* PresetOf(Family family) {
  switch (family) {
    case Family::kGpt2: return "gpt2-tiny";
    case Family::kQwen2: return "qwen2-tiny";
    case Family::kLlama: return "llama-tiny";
    case Family::kMistral: return "mistral-tiny";
    case Family::kGptNeoX: return "pythia-tiny";
    case Family::kQwen3: return "qwen3-tiny";
    case Family::kGemma: return "gemma-tiny";
    case Family::kGemma2: return "gemma2-tiny";
    case Family::kGemma3: return "gemma3-tiny";
    case Family::kPhi3: return "phi3-tiny";
    case Family::kOlmo2: return "olmo2-tiny";
    case Family::kGranite: return "granite-tiny";
    case Family::kSmolLm3: return "smollm3-tiny";
    default: return "gpt2-tiny";
  }
}

std::ostream& operator<<(std::ostream& out, const Case& c) { return out << c.name; }

std::unique_ptr<DecoderModel> BuildTiny(const Case& c) {
  ModelConfig config = *PresetConfig(PresetOf(c.family));
  config.num_layers = 3;
  config.sliding_window = c.window;
  config.rotary_pct = c.rotary_pct;
  config.parallel_residual = c.parallel_residual;
  if (c.family == Family::kLlama) config.attention_bias = config.mlp_bias = true;
  config.hidden_size = 24;
  config.num_heads = 4;
  config.num_kv_heads = c.kv_heads;
  config.intermediate_size = 40;
  config.vocab_size = 60;
  config.ablations = c.ablations;
  if (c.adjust) c.adjust(config);
  auto model = BuildModel(config, 17);
  EXPECT_TRUE(model.ok()) << model.status();
  (*model)->To(torch::kCPU, torch::kFloat64);
  // Non-trivial norms and biases, so that every term of the reverse pass is exercised.
  torch::NoGradGuard no_grad;
  auto generator = at::detail::createCPUGenerator(5);
  for (auto& [name, tensor] : (*model)->NamedParameters()) {
    if (name.find("norm") != std::string::npos || name.find("ln_") != std::string::npos ||
        name.find("bias") != std::string::npos) {
      tensor.add_(0.3 * torch::randn(tensor.sizes(), generator).to(torch::kFloat64));
    }
    const bool qk = name.find("q_proj.weight") != std::string::npos || name.find("k_proj.weight") != std::string::npos ||
                    name.find("qkv_proj.weight") != std::string::npos;
    if (qk) tensor.mul_(c.qk_scale);
  }
  return std::move(*model);
}

// Rows u_k^T dy/de for the output `layer` (0 = final hidden) at the 1-based target, by autograd
// (through detached attention probabilities with `value_only`).
torch::Tensor AutogradRows(DecoderModel& model, const torch::Tensor& e, const torch::Tensor& u, int64_t layer,
                           int64_t target, bool value_only = false) {
  std::vector<torch::Tensor> rows;
  for (int64_t k = 0; k < u.size(0); ++k) {
    auto input = e.detach().clone().set_requires_grad(true);
    ForwardOptions options;
    options.record_layers = layer > 0;
    options.detach_attention_probabilities = value_only;
    auto out = model.Forward(input, options);
    auto y = (layer == 0 ? out.hidden : out.layers[layer - 1]).select(1, target - 1).squeeze(0);
    rows.push_back(torch::autograd::grad({y}, {input}, {u[k]})[0].squeeze(0));
  }
  return torch::stack(rows);
}

class ReversePass : public ::testing::TestWithParam<Case> {};

TEST_P(ReversePass, EqualsAutogradForEveryOutputAndTarget) {
  auto model = BuildTiny(GetParam());
  auto generator = at::detail::createCPUGenerator(9);
  const int64_t length = 7, d = model->config().hidden_size;
  auto e = torch::randn({1, length, d}, generator).to(torch::kFloat64);
  auto u = torch::randn({3, d}, generator).to(torch::kFloat64);
  using MlpJacobians = GradientOptions::MlpJacobians;
  // Attention blocks of 3 positions (L = 7: three blocks, the last one short) and of the whole
  // sequence (one block: the dense computation).
  for (int64_t target : {length, int64_t{4}, int64_t{1}}) {
    for (auto [keep, block] : {std::pair{true, int64_t{3}}, std::pair{false, int64_t{3}}, std::pair{true, int64_t{0}}}) {
      auto pass = model->PrepareReversePass(e, target, {keep, block, nullptr});
      ASSERT_NE(pass, nullptr);
      for (int64_t layer = 0; layer <= model->config().num_layers; ++layer) {
        auto expected = AutogradRows(*model, e, u, layer, target);
        for (auto [jacobians, rows_per_product] : {std::pair{MlpJacobians::kOff, int64_t{0}},
                                                   std::pair{MlpJacobians::kOff, int64_t{2}},
                                                   std::pair{MlpJacobians::kOn, int64_t{2}}}) {
          GradientOptions options;
          options.mlp_jacobians = jacobians;
          options.rows_per_product = rows_per_product;
          options.attention_block = block == 0 ? 0 : 2;  // Reverse blocks need not match the forward's.
          auto actual = pass->InputGradients(u, layer, options);
          ASSERT_EQ(actual.sizes(), expected.sizes());
          const double error = (actual - expected).abs().max().item<double>();
          EXPECT_LE(error, 1e-12 * std::max(1.0, expected.abs().max().item<double>()))
              << "target " << target << ", output layer " << layer << (keep ? "" : ", recomputed")
              << (jacobians == MlpJacobians::kOn ? ", MLP Jacobians" : "") << ", rows " << rows_per_product
              << ", block " << block;
          if (target < length) {  // Later positions cannot reach the target.
            EXPECT_EQ(actual.narrow(1, target, length - target).abs().max().item<double>(), 0.0);
          }
        }
      }
    }
  }
}

double MaxRelativeDifference(const torch::Tensor& actual, const torch::Tensor& expected) {
  return (actual - expected).abs().max().item<double>() / expected.abs().max().item<double>();
}

TEST_P(ReversePass, ValueOnlyEqualsAutogradWithDetachedProbabilities) {
  auto model = BuildTiny(GetParam());
  auto generator = at::detail::createCPUGenerator(11);
  const int64_t length = 7, d = model->config().hidden_size;
  auto e = torch::randn({1, length, d}, generator).to(torch::kFloat64);
  auto u = torch::randn({3, d}, generator).to(torch::kFloat64);
  for (int64_t target : {length, int64_t{3}}) {
    for (bool keep : {true, false}) {
      auto pass = model->PrepareReversePass(e, target, {keep, 2, nullptr});
      ASSERT_NE(pass, nullptr);
      for (int64_t layer = 0; layer <= model->config().num_layers; ++layer) {
        auto expected = AutogradRows(*model, e, u, layer, target, /*value_only=*/true);
        for (auto jacobians : {GradientOptions::MlpJacobians::kOff, GradientOptions::MlpJacobians::kOn}) {
          GradientOptions options;
          options.detach_attention_probabilities = true;
          options.mlp_jacobians = jacobians;
          options.rows_per_product = 2;
          auto actual = pass->InputGradients(u, layer, options);
          ASSERT_EQ(actual.sizes(), expected.sizes());
          EXPECT_LE(MaxRelativeDifference(actual, expected), 1e-12)
              << "target " << target << ", output layer " << layer << (keep ? "" : ", recomputed");
        }
      }
    }
  }
}

TEST_P(ReversePass, KeepsTheFinalHiddenStateOfTheForwardPass) {
  auto model = BuildTiny(GetParam());
  auto e = torch::randn({1, 5, model->config().hidden_size}, torch::kFloat64);
  auto pass = model->PrepareReversePass(e, 5, {});
  torch::NoGradGuard no_grad;
  auto expected = model->Forward(e, {}).hidden[0][4];
  EXPECT_TRUE(torch::allclose(pass->FinalHidden(), expected, 1e-13, 1e-13));
}

TEST_P(ReversePass, StopsBetweenLayersWhenAskedTo) {
  auto model = BuildTiny(GetParam());
  auto e = torch::randn({1, 4, model->config().hidden_size}, torch::kFloat64);
  auto pass = model->PrepareReversePass(e, 4, {});
  int calls = 0;
  GradientOptions options;
  options.between_layers = [&] { return ++calls < 2; };
  EXPECT_FALSE(pass->InputGradients(torch::eye(model->config().hidden_size, torch::kFloat64), 0, options).defined());
  EXPECT_EQ(calls, 2);
}

INSTANTIATE_TEST_SUITE_P(
    Families, ReversePass,
    ::testing::Values(Case{"gpt2", Family::kGpt2, {}, 4},
                      Case{"gpt2_no_positions_uniform", Family::kGpt2, {true, true, false}, 4},
                      Case{"gpt2_no_mlp", Family::kGpt2, {false, false, true}, 4},
                      Case{"qwen2_grouped_query", Family::kQwen2, {}, 2},
                      Case{"qwen2_one_kv_head", Family::kQwen2, {}, 1},
                      Case{"qwen2_no_rotary", Family::kQwen2, {true, false, false}, 4},
                      Case{"qwen2_uniform_no_mlp", Family::kQwen2, {false, true, true}, 2},
                      Case{"llama_grouped_query_with_biases", Family::kLlama, {}, 2},
                      Case{"llama_one_kv_head", Family::kLlama, {}, 1},
                      Case{"mistral_window_crossing_blocks", Family::kMistral, {}, 2, 4},
                      Case{"mistral_window_longer_than_the_sequence", Family::kMistral, {}, 2, 16},
                      Case{"mistral_uniform_window", Family::kMistral, {false, true, false}, 2, 3},
                      Case{"pythia_partial_rotary_parallel", Family::kGptNeoX, {}, 4, 0, 0.67},
                      Case{"pythia_sequential", Family::kGptNeoX, {}, 4, 0, 0.34, false},
                      Case{"pythia_no_mlp", Family::kGptNeoX, {false, false, true}, 4, 0, 0.67},
                      Case{"qwen3_qk_norms_biases_window_on_one_layer", Family::kQwen3, {}, 2, 3, 1.0, true, 1.0,
                           [](ModelConfig& c) {
                             c.attention_bias = true;
                             c.layer_types = {LayerAttention::kFull, LayerAttention::kSliding};
                           }},
                      Case{"qwen3_one_kv_head", Family::kQwen3, {}, 1},
                      Case{"gemma_geglu_one_plus_norms", Family::kGemma, {}, 1},
                      Case{"gemma2_sandwich_soft_capping_alternating_windows", Family::kGemma2, {}, 2, 3, 1.0, true, 30.0,
                           [](ModelConfig& c) { c.attn_logit_softcapping = 2.0, c.final_logit_softcapping = 3.0; }},
                      Case{"gemma2_uniform_windows", Family::kGemma2, {false, true, false}, 2, 3},
                      Case{"gemma2_no_mlp", Family::kGemma2, {false, false, true}, 2, 3},
                      Case{"gemma3_two_bases_qk_norms", Family::kGemma3, {}, 1, 3, 1.0, true, 1.0,
                           [](ModelConfig& c) {
                             c.rope_theta = 1e6;
                             c.rope_scaling.type = RopeScaling::Type::kLinear;
                             c.rope_scaling.factor = 4.0;
                           }},
                      Case{"phi3_fused_partial_longrope_window", Family::kPhi3, {}, 2, 4, 0.67, true, 1.0,
                           [](ModelConfig& c) {
                             c.rope_scaling.type = RopeScaling::Type::kLongRope;
                             c.rope_scaling.short_factor = {1.0, 1.5};
                             c.rope_scaling.long_factor = {2.0, 7.0};
                             c.rope_scaling.original_max_positions = 4;  // L = 7: the long factors.
                             c.rope_scaling.factor = 128.0;
                           }},
                      Case{"olmo2_post_norms_whole_qk_norms", Family::kOlmo2, {}, 2},
                      Case{"olmo2_one_kv_head_no_positions", Family::kOlmo2, {true, false, false}, 1},
                      Case{"granite_multipliers", Family::kGranite, {}, 2},
                      Case{"smollm3_nope_layers_window", Family::kSmolLm3, {}, 2, 3, 1.0, true, 1.0,
                           [](ModelConfig& c) { c.layer_types = {LayerAttention::kSliding, LayerAttention::kFull}; }}),
    [](const ::testing::TestParamInfo<Case>& param_info) { return param_info.param.name; });

// Scores in the hundreds (q and k weights scaled up 60-fold): the blocks' running maximum keeps
// every exponential finite, and the pass still equals autograd's dense softmax.
TEST(BlockedAttention, LogitsInTheHundredsStayFiniteAndExact) {
  auto model = BuildTiny(Case{"llama", Family::kLlama, {}, 2});
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, tensor] : model->NamedParameters()) {
      if (name.find("q_proj.weight") != std::string::npos || name.find("k_proj.weight") != std::string::npos) {
        tensor.mul_(60.0);
      }
    }
  }
  auto generator = at::detail::createCPUGenerator(31);
  const int64_t length = 9, d = model->config().hidden_size;
  auto e = torch::randn({1, length, d}, generator).to(torch::kFloat64);
  auto u = torch::randn({3, d}, generator).to(torch::kFloat64);
  auto pass = model->PrepareReversePass(e, length, {true, 4, nullptr});
  GradientOptions options;
  options.attention_block = 2;
  auto actual = pass->InputGradients(u, 0, options);
  auto expected = AutogradRows(*model, e, u, 0, length);
  ASSERT_TRUE(torch::isfinite(actual).all().item<bool>());
  EXPECT_LE(MaxRelativeDifference(actual, expected), 1e-10);
}

// The blocked forward without a graph (every family's Forward under NoGradGuard) equals the dense
// softmax autograd records, for windows, grouped heads and uniform attention.
TEST(BlockedAttention, TheForwardWithoutAGraphEqualsTheDenseOne) {
  for (const Case& c : {Case{"mistral", Family::kMistral, {}, 2, 3}, Case{"qwen2", Family::kQwen2, {}, 1},
                        Case{"mistral_uniform", Family::kMistral, {false, true, false}, 2, 4},
                        Case{"gpt2", Family::kGpt2, {}, 4}}) {
    auto model = BuildTiny(c);
    auto e = torch::randn({2, 11, model->config().hidden_size}, torch::kFloat64);
    torch::Tensor dense, blocked;
    {
      torch::AutoGradMode enable(true);
      dense = model->Forward(e.clone().set_requires_grad(true), {}).hidden.detach();
    }
    {
      torch::NoGradGuard no_grad;
      blocked = model->Forward(e, {}).hidden;
    }
    EXPECT_LE(MaxRelativeDifference(blocked, dense), 1e-13) << c.name;
  }
}

// Both routes' full and value-pathway rows for one case (target = L, final hidden state).
struct PathwayRows {
  torch::Tensor autograd_full, autograd_value, pass_full, pass_value;
};
PathwayRows RowsBothWays(const Case& c) {
  auto model = BuildTiny(c);
  auto generator = at::detail::createCPUGenerator(13);
  const int64_t length = 6, d = model->config().hidden_size;
  auto e = torch::randn({1, length, d}, generator).to(torch::kFloat64);
  auto u = torch::randn({4, d}, generator).to(torch::kFloat64);
  auto pass = model->PrepareReversePass(e, length, {});
  GradientOptions value_only;
  value_only.detach_attention_probabilities = true;
  return {AutogradRows(*model, e, u, 0, length), AutogradRows(*model, e, u, 0, length, true),
          pass->InputGradients(u, 0), pass->InputGradients(u, 0, value_only)};
}

TEST(Pathways, ValueOnlyEqualsTheFullJacobianExactlyUnderUniformAttention) {
  for (const Case& c : {Case{"gpt2_uniform", Family::kGpt2, {false, true, false}, 4},
                        Case{"qwen2_uniform", Family::kQwen2, {false, true, false}, 2}}) {
    const PathwayRows rows = RowsBothWays(c);
    EXPECT_TRUE(torch::equal(rows.autograd_value, rows.autograd_full)) << c.name;
    EXPECT_TRUE(torch::equal(rows.pass_value, rows.pass_full)) << c.name;
  }
}

TEST(Pathways, TheScorePathwayContributesWithSoftmaxAttention) {
  for (const Case& c : {Case{"gpt2", Family::kGpt2, {}, 4}, Case{"qwen2", Family::kQwen2, {}, 2}}) {
    const PathwayRows rows = RowsBothWays(c);
    EXPECT_GT(MaxRelativeDifference(rows.pass_value, rows.pass_full), 1e-6) << c.name;
    EXPECT_LE(MaxRelativeDifference(rows.pass_value, rows.autograd_value), 1e-12) << c.name;
  }
}

// An independent route for the value pathway: a 1-layer GPT-2 block written out from its named
// parameters, h = x + c_proj(P (ln_1(x) W_v + b_v)), y = ln_f(h + mlp(ln_2(h))) at the target,
// with the attention probabilities P computed first and entering as constants.
TEST(Pathways, ValueOnlyEqualsAHandWrittenOneLayerGpt2WithFixedProbabilities) {
  ModelConfig config = *PresetConfig("gpt2-tiny");
  config.num_layers = 1;
  config.hidden_size = 12;
  config.num_heads = config.num_kv_heads = 3;
  config.intermediate_size = 20;
  config.vocab_size = 30;
  auto built = BuildModel(config, 21);
  ASSERT_TRUE(built.ok()) << built.status();
  auto& model = **built;
  model.To(torch::kCPU, torch::kFloat64);
  std::map<std::string, torch::Tensor> w;
  {
    torch::NoGradGuard no_grad;
    auto generator = at::detail::createCPUGenerator(23);
    for (auto& [name, tensor] : model.NamedParameters()) {
      if (name.find("ln_") != std::string::npos || name.find("bias") != std::string::npos) {
        tensor.add_(0.3 * torch::randn(tensor.sizes(), generator).to(torch::kFloat64));
      }
      w[name] = tensor.detach();
    }
  }
  const int64_t length = 5, d = config.hidden_size, heads = config.num_heads, hd = d / heads;
  const double eps = config.norm_eps;
  auto ln = [&](const torch::Tensor& x, const std::string& name) {
    return torch::layer_norm(x, {d}, w[name + ".weight"], w[name + ".bias"], eps);
  };
  auto conv = [&](const torch::Tensor& x, const std::string& name) {
    return torch::matmul(x, w[name + ".weight"]) + w[name + ".bias"];
  };
  const std::string block = "transformer.h.0.";
  auto generator = at::detail::createCPUGenerator(29);
  auto e = torch::randn({length, d}, generator).to(torch::kFloat64);
  // The probabilities at e, [heads, L, L].
  torch::Tensor probs;
  {
    torch::NoGradGuard no_grad;
    auto qkv = conv(ln(e, block + "ln_1"), block + "attn.c_attn").chunk(3, -1);
    auto q = qkv[0].view({length, heads, hd}).transpose(0, 1), k = qkv[1].view({length, heads, hd}).transpose(0, 1);
    auto scores = torch::matmul(q, k.transpose(1, 2)) / std::sqrt(static_cast<double>(hd));
    auto mask = torch::ones({length, length}, torch::kBool).triu(1);
    probs = torch::softmax(scores.masked_fill(mask, -std::numeric_limits<double>::infinity()), -1);
  }
  auto x = e.clone().set_requires_grad(true);
  auto v = conv(ln(x, block + "ln_1"), block + "attn.c_attn").chunk(3, -1)[2].view({length, heads, hd}).transpose(0, 1);
  auto h = x + conv(torch::matmul(probs, v).transpose(0, 1).reshape({length, d}), block + "attn.c_proj");
  auto mlp = conv(torch::gelu(conv(ln(h, block + "ln_2"), block + "mlp.c_fc"), "tanh"), block + "mlp.c_proj");
  auto y = ln(h + mlp, "transformer.ln_f")[length - 1];
  auto u = torch::randn({3, d}, generator).to(torch::kFloat64);
  std::vector<torch::Tensor> rows;
  for (int64_t i = 0; i < u.size(0); ++i) {
    rows.push_back(torch::autograd::grad({y}, {x}, {u[i]}, /*retain_graph=*/true)[0]);
  }
  auto expected = torch::stack(rows);
  auto autograd = AutogradRows(model, e.unsqueeze(0), u, 0, length, /*value_only=*/true);
  EXPECT_LE(MaxRelativeDifference(autograd, expected), 1e-12);
  GradientOptions value_only;
  value_only.detach_attention_probabilities = true;
  auto pass = model.PrepareReversePass(e.unsqueeze(0), length, {});
  EXPECT_LE(MaxRelativeDifference(pass->InputGradients(u, 0, value_only), expected), 1e-12);
}

}  // namespace
}  // namespace posbias::models
