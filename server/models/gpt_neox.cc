// The GPT-NeoX family (GPTNeoXForCausalLM: Pythia) in LibTorch, under Hugging Face names:
// LayerNorm with bias, the fused query_key_value in Hugging Face's per-head layout (the output
// viewed as [heads, 3, head_dim]: each head's q, k, v side by side), rotary positions on the first
// rotary_pct of each head's dimensions, exact-erf GELU MLP with biases, the parallel residual
// x + attn(ln1 x) + mlp(ln2 x) or the sequential one, untied embed_out; and its weights for the
// hand-written reverse pass (reverse_pass.h).
#include <cstdint>
#include <memory>

#include <torch/torch.h>

#include "server/models/families.h"
#include "server/models/layers.h"
#include "server/models/reverse_pass.h"

namespace posbias::models {
namespace {

using layers::AtLeastFloat32;
using layers::BranchRatio;
using layers::CausalAttention;
using layers::MergeHeads;
using layers::SplitHeads;

torch::nn::LayerNorm MakeLayerNorm(const ModelConfig& config) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.hidden_size}).eps(config.norm_eps));
}

struct NeoXAttentionImpl : torch::nn::Module {
  explicit NeoXAttentionImpl(const ModelConfig& model_config)
      : config(model_config), heads(config.num_heads), rotary(!config.ablations.no_position_encoding),
        uniform(config.ablations.uniform_attention) {
    const int64_t d = config.hidden_size;
    query_key_value = register_module("query_key_value", torch::nn::Linear(torch::nn::LinearOptions(d, 3 * d)));
    dense = register_module("dense", torch::nn::Linear(torch::nn::LinearOptions(d, d)));
  }
  torch::Tensor forward(const torch::Tensor& x, bool detach_probabilities) {
    const int64_t hd = config.head_dim(), rd = config.rotary_dims();
    auto qkv = SplitHeads(query_key_value(x), heads);  // [B, H, L, 3 hd]
    auto q = qkv.narrow(-1, 0, hd), k = qkv.narrow(-1, hd, hd), v = qkv.narrow(-1, 2 * hd, hd);
    if (rotary) {
      auto options = torch::dtype(AtLeastFloat32(x.scalar_type())).device(x.device());
      auto inv_freq = layers::RotaryInverseFrequencies(config, rd, options);
      auto rotate = [&](const torch::Tensor& t) {
        if (rd == hd) return layers::ApplyRotary(t, inv_freq);
        return torch::cat({layers::ApplyRotary(t.narrow(-1, 0, rd), inv_freq), t.narrow(-1, rd, hd - rd)}, -1);
      };
      q = rotate(q), k = rotate(k);
    }
    return dense(MergeHeads(CausalAttention(q, k, v, uniform, detach_probabilities)));
  }
  ModelConfig config;
  int64_t heads;
  bool rotary, uniform;
  torch::nn::Linear query_key_value{nullptr}, dense{nullptr};
};
TORCH_MODULE(NeoXAttention);

struct NeoXMlpImpl : torch::nn::Module {
  explicit NeoXMlpImpl(const ModelConfig& config) {
    const int64_t d = config.hidden_size, m = config.intermediate_size;
    dense_h_to_4h = register_module("dense_h_to_4h", torch::nn::Linear(torch::nn::LinearOptions(d, m)));
    dense_4h_to_h = register_module("dense_4h_to_h", torch::nn::Linear(torch::nn::LinearOptions(m, d)));
  }
  torch::Tensor forward(const torch::Tensor& x) { return dense_4h_to_h(torch::gelu(dense_h_to_4h(x))); }
  torch::nn::Linear dense_h_to_4h{nullptr}, dense_4h_to_h{nullptr};
};
TORCH_MODULE(NeoXMlp);

// Parallel: x + attn(ln1 x) + mlp(ln2 x). Sequential: h = x + attn(ln1 x), then h + mlp(ln2 h).
struct NeoXLayerImpl : torch::nn::Module {
  explicit NeoXLayerImpl(const ModelConfig& config) : parallel(config.parallel_residual) {
    input_layernorm = register_module("input_layernorm", MakeLayerNorm(config));
    post_attention_layernorm = register_module("post_attention_layernorm", MakeLayerNorm(config));
    attention = register_module("attention", NeoXAttention(config));
    // The MLP stays allocated under no_mlp (exports and the weights hash do not change).
    mlp = register_module("mlp", NeoXMlp(config));
    use_mlp = !config.ablations.no_mlp;
  }
  torch::Tensor forward(const torch::Tensor& x, double* branch_ratio, bool detach_probabilities = false) {
    auto a = attention(input_layernorm(x), detach_probabilities);
    if (branch_ratio) *branch_ratio = BranchRatio(x, a);
    if (!use_mlp) return x + a;
    if (parallel) return x + a + mlp(post_attention_layernorm(x));
    auto h = x + a;
    return h + mlp(post_attention_layernorm(h));
  }
  bool parallel, use_mlp = true;
  torch::nn::LayerNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  NeoXAttention attention{nullptr};
  NeoXMlp mlp{nullptr};
};
TORCH_MODULE(NeoXLayer);

struct NeoXBodyImpl : torch::nn::Module {
  explicit NeoXBodyImpl(const ModelConfig& config)
      : embed_in(register_module("embed_in", torch::nn::Embedding(config.vocab_size, config.hidden_size))),
        layers(register_module("layers", torch::nn::ModuleList())),
        final_layer_norm(register_module("final_layer_norm", MakeLayerNorm(config))) {
    for (int64_t l = 0; l < config.num_layers; ++l) layers->push_back(NeoXLayer(config));
  }
  torch::nn::Embedding embed_in;
  torch::nn::ModuleList layers;
  torch::nn::LayerNorm final_layer_norm;
};
TORCH_MODULE(NeoXBody);

struct NeoXImpl : torch::nn::Module {
  explicit NeoXImpl(const ModelConfig& config) : gpt_neox(register_module("gpt_neox", NeoXBody(config))) {
    if (!config.tie_embeddings) {
      embed_out = register_module("embed_out", torch::nn::Linear(
          torch::nn::LinearOptions(config.hidden_size, config.vocab_size).bias(false)));
    }
  }
  NeoXBody gpt_neox;
  torch::nn::Linear embed_out{nullptr};
};
TORCH_MODULE(NeoX);

// ---- the weights for the hand-written reverse pass (reverse_pass.h) -------------------------

// query_key_value's rows in Hugging Face's per-head layout [heads, (q, k, v), hd]: part `which`
// (0 q, 1 k, 2 v) of every head, as one [d, d] map.
reverse::Linear FusedPart(const torch::nn::Linear& fused, int64_t heads, int64_t which) {
  const int64_t d = fused->weight.size(1), hd = fused->weight.size(0) / (3 * heads);
  auto weight = fused->weight.view({heads, 3, hd, d}).select(1, which).reshape({heads * hd, d});
  auto bias = fused->bias.view({heads, 3, hd}).select(1, which).reshape({heads * hd});
  return {weight, bias};
}

void DescribeLayer(const NeoXLayerImpl& decoder, const ModelConfig& config, reverse::Layer& layer) {
  layer.norm1 = layers::ReverseNorm(decoder.input_layernorm, config.norm_eps);
  const auto& attention = decoder.attention;
  layer.attention.q = FusedPart(attention->query_key_value, config.num_heads, 0);
  layer.attention.k = FusedPart(attention->query_key_value, config.num_heads, 1);
  layer.attention.v = FusedPart(attention->query_key_value, config.num_heads, 2);
  layer.attention.o = layers::ReverseLinear(attention->dense);
  layer.attention.heads = layer.attention.kv_heads = config.num_heads;
  if (attention->rotary) layers::DescribeRotary(config, attention->dense->weight, layer.attention);
  layer.parallel_residual = decoder.parallel;
  if (!layer.has_mlp) return;
  layer.norm2 = layers::ReverseNorm(decoder.post_attention_layernorm, config.norm_eps);
  layer.mlp.kind = reverse::Mlp::Kind::kGeluErf;
  layer.mlp.in = layers::ReverseLinear(decoder.mlp->dense_h_to_4h);
  layer.mlp.out = layers::ReverseLinear(decoder.mlp->dense_4h_to_h);
}

class GptNeoXModel final : public layers::HuggingFaceModel<NeoX> {
 public:
  using HuggingFaceModel::HuggingFaceModel;
  torch::Tensor Embed(const torch::Tensor& ids) override { return module()->gpt_neox->embed_in(ids); }
  ForwardOutput Forward(const torch::Tensor& e, const ForwardOptions& options) override {
    auto& body = module()->gpt_neox;
    return layers::RunDecoderLayers<NeoXLayerImpl>(body->layers, e, options, body->final_layer_norm);
  }
  torch::Tensor Logits(const torch::Tensor& hidden) override {
    const auto& weight = config().tie_embeddings ? module()->gpt_neox->embed_in->weight : module()->embed_out->weight;
    return torch::matmul(hidden, weight.t());
  }

 private:
  reverse::Stack ReverseStack() override {
    auto& body = *module()->gpt_neox;
    return layers::BuildReverseStack(body.layers, config(), DescribeLayer,
                                     layers::ReverseNorm(body.final_layer_norm, config().norm_eps));
  }
};

}  // namespace

std::unique_ptr<DecoderModel> MakeGptNeoXModel(const ModelConfig& config, uint64_t seed) {
  return std::make_unique<GptNeoXModel>(config, seed);
}

}  // namespace posbias::models
