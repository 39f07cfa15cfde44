// The families' hand-written reverse pass against autograd through the models' own forward pass:
// for every output (final hidden, the residual stream after each layer), target, ablation and
// grouped-query shape, the K input gradients equal torch::autograd::grad's in float64.
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
};

std::ostream& operator<<(std::ostream& out, const Case& c) { return out << c.name; }

std::unique_ptr<DecoderModel> BuildTiny(const Case& c) {
  ModelConfig config = *PresetConfig(c.family == Family::kGpt2 ? "gpt2-tiny" : "qwen2-tiny");
  config.num_layers = 3;
  config.hidden_size = 24;
  config.num_heads = 4;
  config.num_kv_heads = c.kv_heads;
  config.intermediate_size = 40;
  config.vocab_size = 60;
  config.ablations = c.ablations;
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
  }
  return std::move(*model);
}

// Rows u_k^T dy/de for the output `layer` (0 = final hidden) at the 1-based target, by autograd.
torch::Tensor AutogradRows(DecoderModel& model, const torch::Tensor& e, const torch::Tensor& u, int64_t layer,
                           int64_t target) {
  std::vector<torch::Tensor> rows;
  for (int64_t k = 0; k < u.size(0); ++k) {
    auto input = e.detach().clone().set_requires_grad(true);
    ForwardOptions options;
    options.record_layers = layer > 0;
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
  for (int64_t target : {length, int64_t{4}, int64_t{1}}) {
    for (bool keep : {true, false}) {
      auto pass = model->PrepareReversePass(e, target, {keep});
      ASSERT_NE(pass, nullptr);
      for (int64_t layer = 0; layer <= model->config().num_layers; ++layer) {
        auto expected = AutogradRows(*model, e, u, layer, target);
        for (auto [jacobians, rows_per_product] : {std::pair{MlpJacobians::kOff, int64_t{0}},
                                                   std::pair{MlpJacobians::kOff, int64_t{2}},
                                                   std::pair{MlpJacobians::kOn, int64_t{2}}}) {
          GradientOptions options;
          options.mlp_jacobians = jacobians;
          options.rows_per_product = rows_per_product;
          auto actual = pass->InputGradients(u, layer, options);
          ASSERT_EQ(actual.sizes(), expected.sizes());
          const double error = (actual - expected).abs().max().item<double>();
          EXPECT_LE(error, 1e-12 * std::max(1.0, expected.abs().max().item<double>()))
              << "target " << target << ", output layer " << layer << (keep ? "" : ", recomputed")
              << (jacobians == MlpJacobians::kOn ? ", MLP Jacobians" : "") << ", rows " << rows_per_product;
          if (target < length) {  // Later positions cannot reach the target.
            EXPECT_EQ(actual.narrow(1, target, length - target).abs().max().item<double>(), 0.0);
          }
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
                      Case{"qwen2_uniform_no_mlp", Family::kQwen2, {false, true, true}, 2}),
    [](const ::testing::TestParamInfo<Case>& param_info) { return param_info.param.name; });

}  // namespace
}  // namespace posbias::models
