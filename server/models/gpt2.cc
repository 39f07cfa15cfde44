// The GPT-2 family (GPT2LMHeadModel) in LibTorch: its modules under Hugging Face names, its
// weights for the hand-written reverse pass, and the DecoderModel (MakeGpt2Model, families.h).
#include <cstdint>
#include <memory>

#include <torch/torch.h>

#include "server/models/families.h"
#include "server/models/layers.h"
#include "server/models/reverse_pass.h"

namespace posbias::models {
namespace {

using layers::CausalAttention;
using layers::MergeHeads;
using layers::ReverseNorm;
using layers::SplitHeads;

// Hugging Face Conv1D: y = x W + b with W stored [in, out].
struct Conv1DImpl : torch::nn::Module {
  Conv1DImpl(int64_t in, int64_t out)
      : weight(register_parameter("weight", torch::zeros({in, out}))),
        bias(register_parameter("bias", torch::zeros({out}))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto shape = x.sizes().vec();
    shape.back() = weight.size(1);
    return torch::addmm(bias, x.reshape({-1, weight.size(0)}), weight).view(shape);
  }
  torch::Tensor weight, bias;
};
TORCH_MODULE(Conv1D);

struct Gpt2AttentionImpl : torch::nn::Module {
  Gpt2AttentionImpl(const ModelConfig& config)
      : heads(config.num_heads),
        uniform(config.ablations.uniform_attention),
        c_attn(register_module("c_attn", Conv1D(config.hidden_size, 3 * config.hidden_size))),
        c_proj(register_module("c_proj", Conv1D(config.hidden_size, config.hidden_size))) {}
  torch::Tensor forward(const torch::Tensor& x, bool detach_probabilities) {
    auto qkv = c_attn(x).chunk(3, -1);
    auto out = CausalAttention(SplitHeads(qkv[0], heads), SplitHeads(qkv[1], heads),
                               SplitHeads(qkv[2], heads), uniform, detach_probabilities);
    return c_proj(MergeHeads(out));
  }
  int64_t heads;
  bool uniform;
  Conv1D c_attn, c_proj;
};
TORCH_MODULE(Gpt2Attention);

struct Gpt2MlpImpl : torch::nn::Module {
  Gpt2MlpImpl(const ModelConfig& config)
      : c_fc(register_module("c_fc", Conv1D(config.hidden_size, config.intermediate_size))),
        c_proj(register_module("c_proj", Conv1D(config.intermediate_size, config.hidden_size))) {}
  torch::Tensor forward(const torch::Tensor& x) { return c_proj(torch::gelu(c_fc(x), "tanh")); }
  Conv1D c_fc, c_proj;
};
TORCH_MODULE(Gpt2Mlp);

torch::nn::LayerNorm MakeLayerNorm(const ModelConfig& config) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.hidden_size}).eps(config.norm_eps));
}

// The pre-norm block under its Hugging Face names: ln_1, attn, ln_2, mlp.
struct Gpt2BlockImpl : layers::PreNormBlock<torch::nn::LayerNorm, Gpt2Attention, Gpt2Mlp> {
  explicit Gpt2BlockImpl(const ModelConfig& config) {
    norm1 = register_module("ln_1", MakeLayerNorm(config));
    attention = register_module("attn", Gpt2Attention(config));
    if (config.ablations.no_mlp) return;
    norm2 = register_module("ln_2", MakeLayerNorm(config));
    mlp = register_module("mlp", Gpt2Mlp(config));
  }
};
TORCH_MODULE(Gpt2Block);

struct Gpt2BodyImpl : torch::nn::Module {
  explicit Gpt2BodyImpl(const ModelConfig& config)
      : wte(register_module("wte", torch::nn::Embedding(config.vocab_size, config.hidden_size))),
        wpe(register_module("wpe", torch::nn::Embedding(config.max_positions, config.hidden_size))),
        h(register_module("h", torch::nn::ModuleList())),
        ln_f(register_module("ln_f", MakeLayerNorm(config))) {
    for (int64_t l = 0; l < config.num_layers; ++l) h->push_back(Gpt2Block(config));
  }
  torch::nn::Embedding wte, wpe;
  torch::nn::ModuleList h;
  torch::nn::LayerNorm ln_f;
};
TORCH_MODULE(Gpt2Body);

struct Gpt2Impl : torch::nn::Module {
  explicit Gpt2Impl(const ModelConfig& config)
      : transformer(register_module("transformer", Gpt2Body(config))) {}
  Gpt2Body transformer;
};
TORCH_MODULE(Gpt2);

// ---- the weights for the hand-written reverse pass (reverse_pass.h) -------------------------

// Conv1D stores [in, out]: the reverse-pass matrix is its transpose (a view).
reverse::Linear ReverseLinear(const Conv1D& conv) { return {conv->weight.t(), conv->bias}; }

// One block's weights (the layer's MLP switch already set).
void DescribeBlock(const Gpt2BlockImpl& block, const ModelConfig& config, reverse::Layer& layer) {
  const int64_t d = config.hidden_size;
  layer.norm1 = ReverseNorm(block.norm1, config.norm_eps);
  auto fused = ReverseLinear(block.attention->c_attn);  // [3d, d]: q, k, v rows.
  layer.attention.q = {fused.back.narrow(0, 0, d), fused.bias.narrow(0, 0, d)};
  layer.attention.k = {fused.back.narrow(0, d, d), fused.bias.narrow(0, d, d)};
  layer.attention.v = {fused.back.narrow(0, 2 * d, d), fused.bias.narrow(0, 2 * d, d)};
  layer.attention.o = ReverseLinear(block.attention->c_proj);
  layer.attention.heads = layer.attention.kv_heads = config.num_heads;
  if (!layer.has_mlp) return;
  layer.norm2 = ReverseNorm(block.norm2, config.norm_eps);
  layer.mlp.kind = reverse::Mlp::Kind::kGeluTanh;
  layer.mlp.in = ReverseLinear(block.mlp->c_fc);
  layer.mlp.out = ReverseLinear(block.mlp->c_proj);
}

reverse::Stack Gpt2ReverseStack(Gpt2Impl& module, const ModelConfig& config) {
  auto& body = *module.transformer;
  return layers::BuildReverseStack(body.h, config, DescribeBlock,
                                   ReverseNorm(body.ln_f, config.norm_eps));
}

class Gpt2Model final : public layers::HuggingFaceModel<Gpt2> {
 public:
  using HuggingFaceModel::HuggingFaceModel;
  bool embeds_positions() const override { return !config().ablations.no_position_encoding; }
  torch::Tensor Embed(const torch::Tensor& ids) override {
    auto& body = module()->transformer;
    auto e = body->wte(ids);
    if (!embeds_positions()) return e;
    auto positions = torch::arange(ids.size(1), torch::dtype(torch::kLong).device(ids.device()));
    return e + body->wpe(positions).unsqueeze(0);
  }
  ForwardOutput Forward(const torch::Tensor& e, const ForwardOptions& options) override {
    auto& body = module()->transformer;
    return layers::RunDecoderLayers<Gpt2BlockImpl>(body->h, e, options, body->ln_f);
  }
  torch::Tensor Logits(const torch::Tensor& hidden) override {
    return torch::matmul(hidden, module()->transformer->wte->weight.t());
  }

 private:
  reverse::Stack ReverseStack() override { return Gpt2ReverseStack(*module(), config()); }
};

}  // namespace

std::unique_ptr<DecoderModel> MakeGpt2Model(const ModelConfig& config, uint64_t seed) {
  return std::make_unique<Gpt2Model>(config, seed);
}

}  // namespace posbias::models
