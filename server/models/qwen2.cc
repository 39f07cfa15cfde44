// The Qwen2 family (Qwen2ForCausalLM) in LibTorch: its modules under Hugging Face names, its
// weights for the hand-written reverse pass, and the DecoderModel (MakeQwen2Model, families.h).
#include <cstdint>
#include <memory>

#include <torch/torch.h>

#include "server/models/families.h"
#include "server/models/layers.h"
#include "server/models/reverse_pass.h"

namespace posbias::models {
namespace {

using layers::AtLeastFloat32;
using layers::CausalAttention;
using layers::MergeHeads;
using layers::SplitHeads;

using layers::ReverseNorm;
using layers::RmsNorm;

// Rotary embedding with the base theta alone (Qwen2 has no rope_scaling).
torch::Tensor ApplyRotary(const torch::Tensor& x, double theta) {
  const int64_t dim = x.size(3);
  auto options = torch::dtype(AtLeastFloat32(x.scalar_type())).device(x.device());
  return layers::ApplyRotary(x, 1.0 / torch::pow(theta, torch::arange(0, dim, 2, options) / static_cast<double>(dim)));
}

struct Qwen2AttentionImpl : torch::nn::Module {
  explicit Qwen2AttentionImpl(const ModelConfig& config)
      : heads(config.num_heads),
        kv_heads(config.num_kv_heads),
        theta(config.rope_theta),
        rotary(!config.ablations.no_position_encoding),
        uniform(config.ablations.uniform_attention) {
    const int64_t d = config.hidden_size, kv = kv_heads * config.head_dim();
    q_proj = register_module("q_proj", torch::nn::Linear(torch::nn::LinearOptions(d, d).bias(true)));
    k_proj = register_module("k_proj", torch::nn::Linear(torch::nn::LinearOptions(d, kv).bias(true)));
    v_proj = register_module("v_proj", torch::nn::Linear(torch::nn::LinearOptions(d, kv).bias(true)));
    o_proj = register_module("o_proj", torch::nn::Linear(torch::nn::LinearOptions(d, d).bias(false)));
  }
  torch::Tensor forward(const torch::Tensor& x, bool detach_probabilities) {
    auto q = SplitHeads(q_proj(x), heads), k = SplitHeads(k_proj(x), kv_heads);
    if (rotary) q = ApplyRotary(q, theta), k = ApplyRotary(k, theta);
    return o_proj(MergeHeads(CausalAttention(q, k, SplitHeads(v_proj(x), kv_heads), uniform, detach_probabilities)));
  }
  int64_t heads, kv_heads;
  double theta;
  bool rotary, uniform;
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
};
TORCH_MODULE(Qwen2Attention);

struct Qwen2MlpImpl : torch::nn::Module {
  explicit Qwen2MlpImpl(const ModelConfig& config) {
    const int64_t d = config.hidden_size, m = config.intermediate_size;
    gate_proj = register_module("gate_proj", torch::nn::Linear(torch::nn::LinearOptions(d, m).bias(false)));
    up_proj = register_module("up_proj", torch::nn::Linear(torch::nn::LinearOptions(d, m).bias(false)));
    down_proj = register_module("down_proj", torch::nn::Linear(torch::nn::LinearOptions(m, d).bias(false)));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return down_proj(torch::silu(gate_proj(x)) * up_proj(x));
  }
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(Qwen2Mlp);

// The pre-norm block under its Hugging Face names: input_layernorm, self_attn,
// post_attention_layernorm, mlp.
struct Qwen2LayerImpl : layers::PreNormBlock<RmsNorm, Qwen2Attention, Qwen2Mlp> {
  explicit Qwen2LayerImpl(const ModelConfig& config) {
    norm1 = register_module("input_layernorm", RmsNorm(config.hidden_size, config.norm_eps));
    attention = register_module("self_attn", Qwen2Attention(config));
    if (config.ablations.no_mlp) return;
    norm2 = register_module("post_attention_layernorm",
                            RmsNorm(config.hidden_size, config.norm_eps));
    mlp = register_module("mlp", Qwen2Mlp(config));
  }
};
TORCH_MODULE(Qwen2Layer);

struct Qwen2BodyImpl : torch::nn::Module {
  explicit Qwen2BodyImpl(const ModelConfig& config)
      : embed_tokens(register_module("embed_tokens", torch::nn::Embedding(config.vocab_size, config.hidden_size))),
        layers(register_module("layers", torch::nn::ModuleList())),
        norm(register_module("norm", RmsNorm(config.hidden_size, config.norm_eps))) {
    for (int64_t l = 0; l < config.num_layers; ++l) layers->push_back(Qwen2Layer(config));
  }
  torch::nn::Embedding embed_tokens;
  torch::nn::ModuleList layers;
  RmsNorm norm;
};
TORCH_MODULE(Qwen2Body);

struct Qwen2Impl : torch::nn::Module {
  explicit Qwen2Impl(const ModelConfig& config)
      : model(register_module("model", Qwen2Body(config))) {
    if (!config.tie_embeddings) {
      lm_head = register_module("lm_head", torch::nn::Linear(
          torch::nn::LinearOptions(config.hidden_size, config.vocab_size).bias(false)));
    }
  }
  Qwen2Body model;
  torch::nn::Linear lm_head{nullptr};
};
TORCH_MODULE(Qwen2);

// ---- the weights for the hand-written reverse pass (reverse_pass.h) -------------------------

reverse::Stack Qwen2ReverseStack(Qwen2Impl& module, const ModelConfig& config) {
  auto& body = *module.model;
  return layers::BuildReverseStack(body.layers, config, layers::DescribeSwiGluLayer<Qwen2LayerImpl>, ReverseNorm(body.norm));
}

class Qwen2Model final : public layers::HuggingFaceModel<Qwen2> {
 public:
  using HuggingFaceModel::HuggingFaceModel;
  torch::Tensor Embed(const torch::Tensor& ids) override {
    return module()->model->embed_tokens(ids);
  }
  ForwardOutput Forward(const torch::Tensor& e, const ForwardOptions& options) override {
    auto& body = module()->model;
    return layers::RunDecoderLayers<Qwen2LayerImpl>(body->layers, e, options, body->norm);
  }
  torch::Tensor Logits(const torch::Tensor& hidden) override {
    const auto& weight = config().tie_embeddings ? module()->model->embed_tokens->weight
                                                 : module()->lm_head->weight;
    return torch::matmul(hidden, weight.t());
  }

 private:
  reverse::Stack ReverseStack() override { return Qwen2ReverseStack(*module(), config()); }
};

}  // namespace

std::unique_ptr<DecoderModel> MakeQwen2Model(const ModelConfig& config, uint64_t seed) {
  return std::make_unique<Qwen2Model>(config, seed);
}

}  // namespace posbias::models
