// The Llama and Mistral families (LlamaForCausalLM, MistralForCausalLM) in LibTorch, under Hugging
// Face names: RMSNorm, grouped-query attention with head_dim, rotary positions with rope_theta
// and rope_scaling (linear, llama3), optional q/k/v/o and MLP biases (Llama's attention_bias,
// mlp_bias), Mistral's sliding window, SwiGLU MLP, tied or separate lm_head; and their weights for
// the hand-written reverse pass (reverse_pass.h).
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
using layers::RmsNorm;
using layers::SplitHeads;

torch::nn::Linear MakeLinear(int64_t in, int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

struct LlamaAttentionImpl : torch::nn::Module {
  explicit LlamaAttentionImpl(const ModelConfig& model_config)
      : config(model_config),
        heads(config.num_heads),
        kv_heads(config.num_kv_heads),
        window(config.sliding_window),
        rotary(!config.ablations.no_position_encoding),
        uniform(config.ablations.uniform_attention) {
    const int64_t d = config.hidden_size, q = heads * config.head_dim(), kv = kv_heads * config.head_dim();
    const bool bias = config.attention_bias;
    q_proj = register_module("q_proj", MakeLinear(d, q, bias));
    k_proj = register_module("k_proj", MakeLinear(d, kv, bias));
    v_proj = register_module("v_proj", MakeLinear(d, kv, bias));
    o_proj = register_module("o_proj", MakeLinear(q, d, bias));
  }
  torch::Tensor forward(const torch::Tensor& x, bool detach_probabilities) {
    auto q = SplitHeads(q_proj(x), heads), k = SplitHeads(k_proj(x), kv_heads);
    if (rotary) {
      auto options = torch::dtype(AtLeastFloat32(x.scalar_type())).device(x.device());
      auto inv_freq = layers::RotaryInverseFrequencies(config, config.head_dim(), options);
      q = layers::ApplyRotary(q, inv_freq), k = layers::ApplyRotary(k, inv_freq);
    }
    auto v = SplitHeads(v_proj(x), kv_heads);
    return o_proj(MergeHeads(CausalAttention(q, k, v, uniform, detach_probabilities, window)));
  }
  ModelConfig config;
  int64_t heads, kv_heads, window;
  bool rotary, uniform;
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
};
TORCH_MODULE(LlamaAttention);

struct LlamaMlpImpl : torch::nn::Module {
  explicit LlamaMlpImpl(const ModelConfig& config) {
    const int64_t d = config.hidden_size, m = config.intermediate_size;
    gate_proj = register_module("gate_proj", MakeLinear(d, m, config.mlp_bias));
    up_proj = register_module("up_proj", MakeLinear(d, m, config.mlp_bias));
    down_proj = register_module("down_proj", MakeLinear(m, d, config.mlp_bias));
  }
  torch::Tensor forward(const torch::Tensor& x) { return down_proj(torch::silu(gate_proj(x)) * up_proj(x)); }
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(LlamaMlp);

struct LlamaLayerImpl : layers::PreNormBlock<RmsNorm, LlamaAttention, LlamaMlp> {
  explicit LlamaLayerImpl(const ModelConfig& config) {
    norm1 = register_module("input_layernorm", RmsNorm(config.hidden_size, config.norm_eps));
    attention = register_module("self_attn", LlamaAttention(config));
    if (config.ablations.no_mlp) return;
    norm2 = register_module("post_attention_layernorm", RmsNorm(config.hidden_size, config.norm_eps));
    mlp = register_module("mlp", LlamaMlp(config));
  }
};
TORCH_MODULE(LlamaLayer);

struct LlamaBodyImpl : torch::nn::Module {
  explicit LlamaBodyImpl(const ModelConfig& config)
      : embed_tokens(register_module("embed_tokens", torch::nn::Embedding(config.vocab_size, config.hidden_size))),
        layers(register_module("layers", torch::nn::ModuleList())),
        norm(register_module("norm", RmsNorm(config.hidden_size, config.norm_eps))) {
    for (int64_t l = 0; l < config.num_layers; ++l) layers->push_back(LlamaLayer(config));
  }
  torch::nn::Embedding embed_tokens;
  torch::nn::ModuleList layers;
  RmsNorm norm;
};
TORCH_MODULE(LlamaBody);

struct LlamaImpl : torch::nn::Module {
  explicit LlamaImpl(const ModelConfig& config) : model(register_module("model", LlamaBody(config))) {
    if (!config.tie_embeddings) {
      lm_head = register_module("lm_head", MakeLinear(config.hidden_size, config.vocab_size, false));
    }
  }
  LlamaBody model;
  torch::nn::Linear lm_head{nullptr};
};
TORCH_MODULE(Llama);

class LlamaModel final : public layers::HuggingFaceModel<Llama> {
 public:
  using HuggingFaceModel::HuggingFaceModel;
  torch::Tensor Embed(const torch::Tensor& ids) override { return module()->model->embed_tokens(ids); }
  ForwardOutput Forward(const torch::Tensor& e, const ForwardOptions& options) override {
    auto& body = module()->model;
    return layers::RunDecoderLayers<LlamaLayerImpl>(body->layers, e, options, body->norm);
  }
  torch::Tensor Logits(const torch::Tensor& hidden) override {
    const auto& weight = config().tie_embeddings ? module()->model->embed_tokens->weight : module()->lm_head->weight;
    return torch::matmul(hidden, weight.t());
  }

 private:
  reverse::Stack ReverseStack() override {
    auto& body = *module()->model;
    return layers::BuildReverseStack(body.layers, config(), layers::DescribeSwiGluLayer<LlamaLayerImpl>,
                                     layers::ReverseNorm(body.norm));
  }
};

}  // namespace

std::unique_ptr<DecoderModel> MakeLlamaModel(const ModelConfig& config, uint64_t seed) {
  return std::make_unique<LlamaModel>(config, seed);
}

}  // namespace posbias::models
