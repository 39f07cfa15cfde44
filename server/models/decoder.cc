// The one decoder of every built family (GPT-2, Qwen2, Llama, Mistral, GPT-NeoX) in LibTorch
// (MakeDecoderModel, families.h): modules under Hugging Face's names, assembled from the family's
// row of the family table (architecture.h): the norm, the attention's layout, biases, grouped-query
// heads, head_dim, rotary positions (all or part of each head, rope_scaling) or learned ones, the
// window, the MLP's kind and the residual layout. The same row describes the weights to the
// hand-written reverse pass (reverse_pass.h), so one forward and one reverse pass serve every
// family and every ablation.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "server/models/architecture.h"
#include "server/models/families.h"
#include "server/models/layers.h"
#include "server/models/reverse_pass.h"

namespace posbias::models {
namespace {

using Arch = Architecture;
using layers::MergeHeads;
using layers::SplitHeads;

// A linear map y = x W^T + b with W stored [out, in] (torch Linear), or y = x W + b with W stored
// [in, out] (Hugging Face's Conv1D, GPT-2). Parameters "weight" and, where it has one, "bias".
struct ProjectionImpl : torch::nn::Module {
  ProjectionImpl(int64_t in, int64_t out, bool with_bias, bool conv1d_layout) : conv1d(conv1d_layout) {
    weight = register_parameter("weight", conv1d ? torch::zeros({in, out}) : torch::zeros({out, in}));
    if (with_bias) bias = register_parameter("bias", torch::zeros({out}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    if (!conv1d) return torch::nn::functional::linear(x, weight, bias);
    auto shape = x.sizes().vec();
    shape.back() = weight.size(1);
    auto flat = x.reshape({-1, weight.size(0)});
    return (bias.defined() ? torch::addmm(bias, flat, weight) : torch::mm(flat, weight)).view(shape);
  }
  // The reverse pass's [out, in] matrix (a view for Conv1D).
  reverse::Linear Reverse() const { return {conv1d ? weight.t() : weight, bias}; }
  bool conv1d;
  torch::Tensor weight, bias;
};
TORCH_MODULE(Projection);

// LayerNorm (weight, bias) or RMSNorm (weight), as torch::nn::LayerNorm and Hugging Face's
// LlamaRMSNorm compute them (RMS statistics in float32 or wider).
struct NormImpl : torch::nn::Module {
  NormImpl(Arch::Norm norm_kind, int64_t size, double epsilon) : kind(norm_kind), eps(epsilon) {
    weight = register_parameter("weight", torch::ones({size}));
    if (kind == Arch::Norm::kLayerNorm) bias = register_parameter("bias", torch::zeros({size}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    if (kind == Arch::Norm::kLayerNorm) return torch::layer_norm(x, {x.size(-1)}, weight, bias, eps);
    auto wide = x.to(layers::AtLeastFloat32(x.scalar_type()));
    auto normed = wide * torch::rsqrt(wide.pow(2).mean(-1, /*keepdim=*/true) + eps);
    return weight * normed.to(x.dtype());
  }
  reverse::Norm Reverse() const {
    if (kind == Arch::Norm::kLayerNorm) return {reverse::Norm::Kind::kLayerNorm, weight, bias, eps};
    return {reverse::Norm::Kind::kRmsNorm, weight, torch::Tensor(), eps};
  }
  Arch::Norm kind;
  double eps;
  torch::Tensor weight, bias;
};
TORCH_MODULE(Norm);

Norm MakeNorm(const Arch& arch, const ModelConfig& config) {
  return Norm(arch.norm, config.hidden_size, config.norm_eps);
}

struct AttentionImpl : torch::nn::Module {
  AttentionImpl(const Arch& arch, const ModelConfig& model_config)
      : layout(arch.attention),
        config(model_config),
        rotary(arch.positions == Arch::Positions::kRotary && !model_config.ablations.no_position_encoding) {
    const int64_t d = config.hidden_size, q_width = config.num_heads * config.head_dim();
    const int64_t kv_width = config.num_kv_heads * config.head_dim();
    const bool qkv_bias = HasBias(arch.qkv_bias, config);
    if (layout == Arch::AttentionLayout::kSeparate) {
      q = register_module(arch.names.q, Projection(d, q_width, qkv_bias, arch.conv1d));
      k = register_module(arch.names.k, Projection(d, kv_width, qkv_bias, arch.conv1d));
      v = register_module(arch.names.v, Projection(d, kv_width, qkv_bias, arch.conv1d));
    } else {  // Fused layouts have no grouped-query heads (ValidateConfig).
      qkv = register_module(arch.names.q, Projection(d, 3 * q_width, qkv_bias, arch.conv1d));
    }
    o = register_module(arch.names.o, Projection(q_width, d, HasBias(arch.o_bias, config), arch.conv1d));
  }

  // Queries [B, H, L, hd], keys and values [B, kvH, L, hd], before rotation.
  std::array<torch::Tensor, 3> Project(const torch::Tensor& x) {
    const int64_t heads = config.num_heads, kv_heads = config.num_kv_heads, hd = config.head_dim();
    switch (layout) {
      case Arch::AttentionLayout::kSeparate:
        return {SplitHeads(q(x), heads), SplitHeads(k(x), kv_heads), SplitHeads(v(x), kv_heads)};
      case Arch::AttentionLayout::kFusedColumns: {
        auto parts = qkv(x).chunk(3, -1);
        return {SplitHeads(parts[0], heads), SplitHeads(parts[1], heads), SplitHeads(parts[2], heads)};
      }
      case Arch::AttentionLayout::kFusedPerHead: {
        auto fused = SplitHeads(qkv(x), heads);  // [B, H, L, 3 hd]: each head's q, k, v side by side.
        return {fused.narrow(-1, 0, hd), fused.narrow(-1, hd, hd), fused.narrow(-1, 2 * hd, hd)};
      }
    }
    return {};
  }

  torch::Tensor forward(const torch::Tensor& x, bool detach_probabilities) {
    auto [queries, keys, values] = Project(x);
    if (rotary) {
      const int64_t hd = config.head_dim(), rd = config.rotary_dims();
      auto options = torch::dtype(layers::AtLeastFloat32(x.scalar_type())).device(x.device());
      auto inv_freq = layers::RotaryInverseFrequencies(config, rd, options);
      auto rotate = [&](const torch::Tensor& t) {
        if (rd == hd) return layers::ApplyRotary(t, inv_freq);
        return torch::cat({layers::ApplyRotary(t.narrow(-1, 0, rd), inv_freq), t.narrow(-1, rd, hd - rd)}, -1);
      };
      queries = rotate(queries), keys = rotate(keys);
    }
    auto out = layers::CausalAttention(queries, keys, values, config.ablations.uniform_attention, detach_probabilities,
                                       config.sliding_window);
    return o(MergeHeads(out));
  }

  // q, k and v as the reverse pass's maps (the fused projection's rows split).
  void Describe(reverse::Attention& w) const {
    const int64_t q_width = config.num_heads * config.head_dim();
    switch (layout) {
      case Arch::AttentionLayout::kSeparate:
        w.q = q->Reverse(), w.k = k->Reverse(), w.v = v->Reverse();
        break;
      case Arch::AttentionLayout::kFusedColumns: {
        auto fused = qkv->Reverse();  // [3 d, d]: q, k, v rows.
        auto part = [&](int64_t which) {
          auto bias = fused.bias.defined() ? fused.bias.narrow(0, which * q_width, q_width) : torch::Tensor();
          return reverse::Linear{fused.back.narrow(0, which * q_width, q_width), bias};
        };
        w.q = part(0), w.k = part(1), w.v = part(2);
        break;
      }
      case Arch::AttentionLayout::kFusedPerHead: {
        // Rows in Hugging Face's per-head layout [heads, (q, k, v), hd]: part `which` of every head.
        auto fused = qkv->Reverse();
        const int64_t heads = config.num_heads, hd = config.head_dim(), d = fused.back.size(1);
        auto part = [&](int64_t which) {
          auto weight = fused.back.view({heads, 3, hd, d}).select(1, which).reshape({heads * hd, d});
          auto bias = fused.bias.defined() ? fused.bias.view({heads, 3, hd}).select(1, which).reshape({heads * hd})
                                           : torch::Tensor();
          return reverse::Linear{weight, bias};
        };
        w.q = part(0), w.k = part(1), w.v = part(2);
        break;
      }
    }
    w.o = o->Reverse();
    w.heads = config.num_heads;
    w.kv_heads = config.num_kv_heads;
    w.window = config.sliding_window;
    if (rotary) {
      w.rotary_dims = config.rotary_dims();
      auto options = torch::dtype(layers::AtLeastFloat32(o->weight.scalar_type())).device(o->weight.device());
      w.rotary_inv_freq = layers::RotaryInverseFrequencies(config, w.rotary_dims, options);
    }
  }

  Arch::AttentionLayout layout;
  ModelConfig config;
  bool rotary;
  Projection q{nullptr}, k{nullptr}, v{nullptr}, qkv{nullptr}, o{nullptr};
};
TORCH_MODULE(Attention);

struct MlpImpl : torch::nn::Module {
  MlpImpl(const Arch& arch, const ModelConfig& config) : kind(arch.mlp) {
    const int64_t d = config.hidden_size, m = config.intermediate_size;
    const bool bias = HasBias(arch.mlp_bias, config);
    // Hugging Face's order: SwiGLU's gate_proj before up_proj.
    if (kind == Arch::Mlp::kSwiGlu) gate = register_module(arch.names.mlp_gate, Projection(d, m, bias, arch.conv1d));
    in = register_module(arch.names.mlp_in, Projection(d, m, bias, arch.conv1d));
    out = register_module(arch.names.mlp_out, Projection(m, d, bias, arch.conv1d));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    switch (kind) {
      case Arch::Mlp::kGeluTanh: return out(torch::gelu(in(x), "tanh"));
      case Arch::Mlp::kGeluErf: return out(torch::gelu(in(x)));
      case Arch::Mlp::kSwiGlu: return out(torch::silu(gate(x)) * in(x));
    }
    return {};
  }
  void Describe(reverse::Mlp& w) const {
    switch (kind) {
      case Arch::Mlp::kGeluTanh: w.kind = reverse::Mlp::Kind::kGeluTanh; break;
      case Arch::Mlp::kGeluErf: w.kind = reverse::Mlp::Kind::kGeluErf; break;
      case Arch::Mlp::kSwiGlu:
        w.kind = reverse::Mlp::Kind::kSwiGlu;
        w.gate = gate->Reverse();
        break;
    }
    w.in = in->Reverse();
    w.out = out->Reverse();
  }
  Arch::Mlp kind;
  Projection gate{nullptr}, in{nullptr}, out{nullptr};
};
TORCH_MODULE(Mlp);

// A pre-norm block: sequential h = x + attention(norm1 x), then h + mlp(norm2 h); parallel
// x + attention(norm1 x) + mlp(norm2 x) (GPT-NeoX's use_parallel_residual); x + attention alone
// where the MLP is ablated.
struct LayerImpl : torch::nn::Module {
  LayerImpl(const Arch& arch, const ModelConfig& config)
      : use_mlp(!config.ablations.no_mlp), parallel(arch.parallel_residual && config.parallel_residual) {
    const bool keeps_mlp = use_mlp || arch.mlp_kept_without_mlp;
    norm1 = register_module(arch.names.norm1, MakeNorm(arch, config));
    if (keeps_mlp && arch.norm2_before_attention) norm2 = register_module(arch.names.norm2, MakeNorm(arch, config));
    attention = register_module(arch.names.attention, Attention(arch, config));
    if (!keeps_mlp) return;
    if (!arch.norm2_before_attention) norm2 = register_module(arch.names.norm2, MakeNorm(arch, config));
    mlp = register_module(arch.names.mlp, Mlp(arch, config));
  }
  torch::Tensor forward(const torch::Tensor& x, double* branch_ratio, bool detach_probabilities) {
    auto a = attention(norm1(x), detach_probabilities);
    if (branch_ratio) *branch_ratio = layers::BranchRatio(x, a);
    if (!use_mlp) return x + a;
    if (parallel) return x + a + mlp(norm2(x));
    auto h = x + a;
    return h + mlp(norm2(h));
  }
  reverse::Layer Describe(bool uniform_attention) const {
    reverse::Layer w;
    w.norm1 = norm1->Reverse();
    attention->Describe(w.attention);
    w.attention.uniform = uniform_attention;
    w.parallel_residual = parallel;
    w.has_mlp = use_mlp;
    if (!use_mlp) return w;
    w.norm2 = norm2->Reverse();
    mlp->Describe(w.mlp);
    return w;
  }
  bool use_mlp, parallel;
  Norm norm1{nullptr}, norm2{nullptr};
  Attention attention{nullptr};
  Mlp mlp{nullptr};
};
TORCH_MODULE(Layer);

// <body>: the embeddings, the layers and the final norm.
struct BodyImpl : torch::nn::Module {
  BodyImpl(const Arch& arch, const ModelConfig& config) {
    token_embedding = register_module(arch.names.token_embedding,
                                      torch::nn::Embedding(config.vocab_size, config.hidden_size));
    if (arch.positions == Arch::Positions::kLearned) {
      position_embedding = register_module(arch.names.position_embedding,
                                           torch::nn::Embedding(config.max_positions, config.hidden_size));
    }
    layers = register_module(arch.names.layers, torch::nn::ModuleList());
    for (int64_t l = 0; l < config.num_layers; ++l) layers->push_back(Layer(arch, config));
    final_norm = register_module(arch.names.final_norm, MakeNorm(arch, config));
  }
  torch::nn::Embedding token_embedding{nullptr}, position_embedding{nullptr};
  torch::nn::ModuleList layers{nullptr};
  Norm final_norm{nullptr};
};
TORCH_MODULE(Body);

// The causal language model: the body and, when untied, the output head beside it.
struct CausalLmImpl : torch::nn::Module {
  CausalLmImpl(const Arch& arch, const ModelConfig& config)
      : body(register_module(arch.names.body, Body(arch, config))) {
    if (arch.names.head != nullptr && !config.tie_embeddings) {
      head = register_module(arch.names.head, Projection(config.hidden_size, config.vocab_size, false, false));
    }
  }
  Body body;
  Projection head{nullptr};
};
TORCH_MODULE(CausalLm);

class Decoder final : public DecoderModel {
 public:
  Decoder(const Arch& arch, const ModelConfig& config, uint64_t seed)
      : arch_(arch), config_(config), module_(arch, config) {
    recipe_ = layers::InitializeWeights(*module_, config_, seed, arch.scaled_residual_init
                                                                    ? std::vector<std::string>{arch.names.o, arch.names.mlp_out}
                                                                    : std::vector<std::string>{});
  }
  const ModelConfig& config() const override { return config_; }
  std::string init_recipe() const override { return recipe_; }
  bool embeds_positions() const override {
    return arch_.positions == Arch::Positions::kLearned && !config_.ablations.no_position_encoding;
  }
  torch::Tensor Embed(const torch::Tensor& ids) override {
    auto& body = module_->body;
    auto e = body->token_embedding(ids);
    if (!embeds_positions()) return e;
    auto positions = torch::arange(ids.size(1), torch::dtype(torch::kLong).device(ids.device()));
    return e + body->position_embedding(positions).unsqueeze(0);
  }
  ForwardOutput Forward(const torch::Tensor& e, const ForwardOptions& options) override {
    ForwardOutput out;
    auto h = e;
    for (const auto& item : *module_->body->layers) {
      double ratio = 0;
      double* ratio_out = options.record_branch_ratios ? &ratio : nullptr;
      auto* layer = item->as<LayerImpl>();
      const bool detach = options.detach_attention_probabilities;
      h = layers::RunLayer(h, options.checkpoint_layers, [layer, ratio_out, detach](const torch::Tensor& x) {
        return layer->forward(x, ratio_out, detach);
      });
      if (options.record_branch_ratios) out.branch_ratio.push_back(ratio);
      if (options.record_layers) out.layers.push_back(h);
    }
    out.hidden = module_->body->final_norm(h);
    return out;
  }
  torch::Tensor Logits(const torch::Tensor& hidden) override {
    const auto& weight = module_->head ? module_->head->weight : module_->body->token_embedding->weight;
    return torch::matmul(hidden, weight.t());
  }
  std::vector<std::pair<std::string, torch::Tensor>> NamedParameters() override { return layers::Named(*module_); }
  void To(const torch::Device& device, torch::Dtype dtype) override { module_->to(device, dtype); }
  std::unique_ptr<InputReversePass> PrepareReversePass(const torch::Tensor& e, int64_t target,
                                                       const ReversePassOptions& options) override {
    reverse::Stack stack;
    for (const auto& item : *module_->body->layers) {
      stack.layers.push_back(item->as<LayerImpl>()->Describe(config_.ablations.uniform_attention));
    }
    stack.final_norm = module_->body->final_norm->Reverse();
    return reverse::Prepare(std::move(stack), e, target, options);
  }

 private:
  const Arch& arch_;
  ModelConfig config_;
  CausalLm module_;
  std::string recipe_;
};

}  // namespace

std::unique_ptr<DecoderModel> MakeDecoderModel(const ModelConfig& config, uint64_t seed) {
  const Architecture* architecture = ArchitectureOf(config.family);
  if (architecture == nullptr) return nullptr;
  return std::make_unique<Decoder>(*architecture, config, seed);
}

}  // namespace posbias::models
