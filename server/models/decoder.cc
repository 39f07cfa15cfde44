// The one decoder of every built family (every row of the family table, architecture.h) in
// LibTorch (MakeDecoderModel, families.h): modules under Hugging Face's names, assembled from the
// family's row: the norm's kind and places (before, around or after each branch), q/k norms, the
// attention's layout, biases, grouped-query heads, head_dim, rotary positions (all or part of each
// head, rope_scaling, per-layer bases and NoPE layers) or learned ones, per-layer windows, the
// scores' scale and soft-capping, the MLP's kind, the embedding, residual and logit multipliers,
// and the residual layout. The same row describes the weights to the
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

// LayerNorm (weight, bias), RMSNorm (weight) or Gemma's RMSNorm scaling by (1 + weight), as
// torch::nn::LayerNorm and Hugging Face's LlamaRMSNorm and GemmaRMSNorm compute them (RMS
// statistics in float32 or wider; Gemma's scale applied there too).
struct NormImpl : torch::nn::Module {
  NormImpl(Arch::Norm norm_kind, int64_t size, double epsilon) : kind(norm_kind), eps(epsilon) {
    weight = register_parameter("weight", torch::ones({size}));
    if (kind == Arch::Norm::kLayerNorm) bias = register_parameter("bias", torch::zeros({size}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    if (kind == Arch::Norm::kLayerNorm) return torch::layer_norm(x, {x.size(-1)}, weight, bias, eps);
    auto wide = x.to(layers::AtLeastFloat32(x.scalar_type()));
    auto normed = wide * torch::rsqrt(wide.pow(2).mean(-1, /*keepdim=*/true) + eps);
    if (kind == Arch::Norm::kRmsNormOnePlus) return (normed * (1.0 + weight.to(wide.scalar_type()))).to(x.dtype());
    return weight * normed.to(x.dtype());
  }
  reverse::Norm Reverse() const {
    if (kind == Arch::Norm::kLayerNorm) return {reverse::Norm::Kind::kLayerNorm, weight, bias, eps};
    return {reverse::Norm::Kind::kRmsNorm, kind == Arch::Norm::kRmsNormOnePlus ? 1.0 + weight : weight, torch::Tensor(), eps};
  }
  Arch::Norm kind;
  double eps;
  torch::Tensor weight, bias;
};
TORCH_MODULE(Norm);

// The family's norm over `size` features registered as `name`; none where the row names none.
Norm MakeNorm(torch::nn::Module& owner, const char* name, const Arch& arch, const ModelConfig& config, int64_t size) {
  if (name == nullptr) return Norm(nullptr);
  return owner.register_module(name, Norm(arch.norm, size, config.norm_eps));
}
torch::Tensor ApplyNorm(Norm& norm, const torch::Tensor& x) { return norm ? norm(x) : x; }
reverse::Norm ReverseOf(const Norm& norm) { return norm ? norm->Reverse() : reverse::Norm{}; }

struct AttentionImpl : torch::nn::Module {
  AttentionImpl(const Arch& arch, const ModelConfig& model_config, int64_t layer_index)
      : layout(arch.attention),
        qk_norm(arch.qk_norm),
        config(model_config),
        layer(layer_index),
        rotary(arch.positions == Arch::Positions::kRotary && !model_config.ablations.no_position_encoding &&
               model_config.RotatesAt(layer_index)) {
    const int64_t d = config.hidden_size, q_width = config.num_heads * config.head_dim();
    const int64_t kv_width = config.num_kv_heads * config.head_dim();
    const bool qkv_bias = HasBias(arch.qkv_bias, config);
    if (layout == Arch::AttentionLayout::kSeparate) {
      q = register_module(arch.names.q, Projection(d, q_width, qkv_bias, arch.conv1d));
      k = register_module(arch.names.k, Projection(d, kv_width, qkv_bias, arch.conv1d));
      v = register_module(arch.names.v, Projection(d, kv_width, qkv_bias, arch.conv1d));
    } else {  // The per-head layout has no grouped-query heads (ValidateConfig).
      qkv = register_module(arch.names.q, Projection(d, q_width + 2 * kv_width, qkv_bias, arch.conv1d));
    }
    o = register_module(arch.names.o, Projection(q_width, d, HasBias(arch.o_bias, config), arch.conv1d));
    if (qk_norm != Arch::QkNorm::kNone) {
      const bool per_head = qk_norm == Arch::QkNorm::kPerHead;
      q_norm = MakeNorm(*this, arch.names.q_norm, arch, config, per_head ? config.head_dim() : q_width);
      k_norm = MakeNorm(*this, arch.names.k_norm, arch, config, per_head ? config.head_dim() : kv_width);
    }
  }

  // Queries [B, H, L, hd], keys and values [B, kvH, L, hd], before rotation (after the q/k norms).
  std::array<torch::Tensor, 3> Project(const torch::Tensor& x) {
    const int64_t heads = config.num_heads, kv_heads = config.num_kv_heads, hd = config.head_dim();
    torch::Tensor queries, keys, values;
    switch (layout) {
      case Arch::AttentionLayout::kSeparate:
        queries = q(x), keys = k(x), values = v(x);
        break;
      case Arch::AttentionLayout::kFusedColumns: {
        auto parts = qkv(x).split({heads * hd, kv_heads * hd, kv_heads * hd}, -1);
        queries = parts[0], keys = parts[1], values = parts[2];
        break;
      }
      case Arch::AttentionLayout::kFusedPerHead: {
        auto fused = SplitHeads(qkv(x), heads);  // [B, H, L, 3 hd]: each head's q, k, v side by side.
        return {fused.narrow(-1, 0, hd), fused.narrow(-1, hd, hd), fused.narrow(-1, 2 * hd, hd)};
      }
    }
    if (qk_norm == Arch::QkNorm::kWholeProjection) queries = q_norm(queries), keys = k_norm(keys);
    queries = SplitHeads(queries, heads), keys = SplitHeads(keys, kv_heads);
    if (qk_norm == Arch::QkNorm::kPerHead) queries = q_norm(queries), keys = k_norm(keys);
    return {queries, keys, SplitHeads(values, kv_heads)};
  }

  layers::AttentionRule Rule(bool detach_probabilities) const {
    layers::AttentionRule rule;
    rule.uniform = config.ablations.uniform_attention;
    rule.detach_probabilities = detach_probabilities;
    rule.window = config.WindowOf(layer);
    rule.scale = config.AttentionScale();
    rule.softcap = config.attn_logit_softcapping;
    return rule;
  }

  torch::Tensor forward(const torch::Tensor& x, bool detach_probabilities) {
    auto [queries, keys, values] = Project(x);
    if (rotary) {
      const int64_t hd = config.head_dim(), rd = config.rotary_dims();
      auto options = torch::dtype(layers::AtLeastFloat32(x.scalar_type())).device(x.device());
      auto inv_freq = layers::RotaryInverseFrequencies(config, layer, x.size(1), rd, options);
      const double scale = layers::RotaryScale(config);
      auto rotate = [&](const torch::Tensor& t) {
        if (rd == hd) return layers::ApplyRotary(t, inv_freq, scale);
        return torch::cat({layers::ApplyRotary(t.narrow(-1, 0, rd), inv_freq, scale), t.narrow(-1, rd, hd - rd)}, -1);
      };
      queries = rotate(queries), keys = rotate(keys);
    }
    return o(MergeHeads(layers::CausalAttention(queries, keys, values, Rule(detach_probabilities))));
  }

  // q, k and v as the reverse pass's maps (the fused projection's rows split), for a sequence of
  // `length` positions (longrope's frequencies depend on it).
  void Describe(reverse::Attention& w, int64_t length) const {
    const int64_t q_width = config.num_heads * config.head_dim();
    const int64_t kv_width = config.num_kv_heads * config.head_dim();
    switch (layout) {
      case Arch::AttentionLayout::kSeparate:
        w.q = q->Reverse(), w.k = k->Reverse(), w.v = v->Reverse();
        break;
      case Arch::AttentionLayout::kFusedColumns: {
        auto fused = qkv->Reverse();  // [q_width + 2 kv_width, d]: q, k, v rows.
        auto part = [&](int64_t first, int64_t width) {
          auto bias = fused.bias.defined() ? fused.bias.narrow(0, first, width) : torch::Tensor();
          return reverse::Linear{fused.back.narrow(0, first, width), bias};
        };
        w.q = part(0, q_width), w.k = part(q_width, kv_width), w.v = part(q_width + kv_width, kv_width);
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
    w.q_norm = ReverseOf(q_norm);
    w.k_norm = ReverseOf(k_norm);
    w.qk_norm_per_head = qk_norm == Arch::QkNorm::kPerHead;
    const auto rule = Rule(false);
    w.window = rule.window;
    w.scale = rule.scale;
    w.softcap = rule.softcap;
    if (rotary) {
      w.rotary_dims = config.rotary_dims();
      w.rotary_scale = layers::RotaryScale(config);
      auto options = torch::dtype(layers::AtLeastFloat32(o->weight.scalar_type())).device(o->weight.device());
      w.rotary_inv_freq = layers::RotaryInverseFrequencies(config, layer, length, w.rotary_dims, options);
    }
  }

  Arch::AttentionLayout layout;
  Arch::QkNorm qk_norm;
  ModelConfig config;
  int64_t layer;
  bool rotary;
  Projection q{nullptr}, k{nullptr}, v{nullptr}, qkv{nullptr}, o{nullptr};
  Norm q_norm{nullptr}, k_norm{nullptr};
};
TORCH_MODULE(Attention);

struct MlpImpl : torch::nn::Module {
  MlpImpl(const Arch& arch, const ModelConfig& config)
      : kind(arch.mlp), fused(arch.fused_gate_up), exact_gelu(config.exact_gelu) {
    const int64_t d = config.hidden_size, m = config.intermediate_size;
    const bool bias = HasBias(arch.mlp_bias, config);
    const bool gated = kind == Arch::Mlp::kSwiGlu || kind == Arch::Mlp::kGeGluTanh;
    // Hugging Face's order: gate_proj before up_proj; Phi-3's one gate_up_proj [gate | up].
    if (gated) gate = register_module(arch.names.mlp_gate, Projection(d, fused ? 2 * m : m, bias, arch.conv1d));
    if (!fused) in = register_module(arch.names.mlp_in, Projection(d, m, bias, arch.conv1d));
    out = register_module(arch.names.mlp_out, Projection(m, d, bias, arch.conv1d));
  }
  // The gate's and the up projection's outputs.
  std::pair<torch::Tensor, torch::Tensor> GateAndUp(const torch::Tensor& x) {
    if (!fused) return {gate(x), in(x)};
    auto parts = gate(x).chunk(2, -1);
    return {parts[0], parts[1]};
  }
  torch::Tensor forward(const torch::Tensor& x) {
    switch (kind) {
      case Arch::Mlp::kGeluTanh: return out(torch::gelu(in(x), "tanh"));
      case Arch::Mlp::kGeluErf: return out(torch::gelu(in(x)));
      case Arch::Mlp::kSwiGlu: {
        auto [g, u] = GateAndUp(x);
        return out(torch::silu(g) * u);
      }
      case Arch::Mlp::kGeGluTanh: {
        auto [g, u] = GateAndUp(x);
        return out(torch::gelu(g, exact_gelu ? "none" : "tanh") * u);
      }
    }
    return {};
  }
  void Describe(reverse::Mlp& w) const {
    switch (kind) {
      case Arch::Mlp::kGeluTanh: w.kind = reverse::Mlp::Kind::kGeluTanh; break;
      case Arch::Mlp::kGeluErf: w.kind = reverse::Mlp::Kind::kGeluErf; break;
      case Arch::Mlp::kSwiGlu: w.kind = reverse::Mlp::Kind::kSwiGlu; break;
      case Arch::Mlp::kGeGluTanh:
        w.kind = exact_gelu ? reverse::Mlp::Kind::kGeGluErf : reverse::Mlp::Kind::kGeGluTanh;
        break;
    }
    if (gate && fused) {
      auto both = gate->Reverse();
      const int64_t m = both.back.size(0) / 2;
      auto half = [&](int64_t which) {
        return reverse::Linear{both.back.narrow(0, which * m, m),
                               both.bias.defined() ? both.bias.narrow(0, which * m, m) : torch::Tensor()};
      };
      w.gate = half(0), w.in = half(1);
    } else {
      if (gate) w.gate = gate->Reverse();
      w.in = in->Reverse();
    }
    w.out = out->Reverse();
  }
  Arch::Mlp kind;
  bool fused, exact_gelu;
  Projection gate{nullptr}, in{nullptr}, out{nullptr};
};
TORCH_MODULE(Mlp);

// A block: h = x + r post1(attention(norm1 x)), then h + r post2(mlp(norm2 h)), each norm where the
// row names one (pre norms; Gemma 2's sandwich; OLMo 2's post norms) and r the residual
// multiplier (Granite; else 1); parallel x + attention(norm1 x) + mlp(norm2 x) (GPT-NeoX's
// use_parallel_residual); x + attention alone where the MLP is ablated.
struct LayerImpl : torch::nn::Module {
  LayerImpl(const Arch& arch, const ModelConfig& config, int64_t layer)
      : use_mlp(!config.ablations.no_mlp),
        parallel(arch.parallel_residual && config.parallel_residual),
        residual_multiplier(config.residual_multiplier) {
    const bool keeps_mlp = use_mlp || arch.mlp_kept_without_mlp;
    const int64_t d = config.hidden_size;
    norm1 = MakeNorm(*this, arch.names.norm1, arch, config, d);
    if (keeps_mlp && arch.norm2_before_attention) norm2 = MakeNorm(*this, arch.names.norm2, arch, config, d);
    attention = register_module(arch.names.attention, Attention(arch, config, layer));
    post_attention_norm = MakeNorm(*this, arch.names.post_attention_norm, arch, config, d);
    if (!keeps_mlp) return;
    if (!arch.norm2_before_attention) norm2 = MakeNorm(*this, arch.names.norm2, arch, config, d);
    mlp = register_module(arch.names.mlp, Mlp(arch, config));
    post_mlp_norm = MakeNorm(*this, arch.names.post_mlp_norm, arch, config, d);
  }
  torch::Tensor Residual(const torch::Tensor& x, const torch::Tensor& branch) const {
    return residual_multiplier == 1.0 ? x + branch : x + branch * residual_multiplier;
  }
  torch::Tensor forward(const torch::Tensor& x, double* branch_ratio, bool detach_probabilities) {
    auto a = ApplyNorm(post_attention_norm, attention(ApplyNorm(norm1, x), detach_probabilities));
    if (branch_ratio) *branch_ratio = layers::BranchRatio(x, a);
    if (!use_mlp) return Residual(x, a);
    if (parallel) return x + a + mlp(ApplyNorm(norm2, x));
    auto h = Residual(x, a);
    return Residual(h, ApplyNorm(post_mlp_norm, mlp(ApplyNorm(norm2, h))));
  }
  reverse::Layer Describe(bool uniform_attention, int64_t length) const {
    reverse::Layer w;
    w.norm1 = ReverseOf(norm1);
    attention->Describe(w.attention, length);
    w.attention.uniform = uniform_attention;
    w.post_attention_norm = ReverseOf(post_attention_norm);
    w.parallel_residual = parallel;
    w.residual_multiplier = residual_multiplier;
    w.has_mlp = use_mlp;
    if (!use_mlp) return w;
    w.norm2 = ReverseOf(norm2);
    mlp->Describe(w.mlp);
    w.post_mlp_norm = ReverseOf(post_mlp_norm);
    return w;
  }
  bool use_mlp, parallel;
  double residual_multiplier;
  Norm norm1{nullptr}, norm2{nullptr}, post_attention_norm{nullptr}, post_mlp_norm{nullptr};
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
    for (int64_t l = 0; l < config.num_layers; ++l) layers->push_back(Layer(arch, config, l));
    final_norm = MakeNorm(*this, arch.names.final_norm, arch, config, config.hidden_size);
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
    recipe_ = layers::InitializeWeights(*module_, config_, seed,
                                        arch.scaled_residual_init ? std::vector<std::string>{arch.names.o, arch.names.mlp_out}
                                                                  : std::vector<std::string>{},
                                        arch.norm == Arch::Norm::kRmsNormOnePlus);
  }
  const ModelConfig& config() const override { return config_; }
  std::string init_recipe() const override { return recipe_; }
  bool embeds_positions() const override {
    return arch_.positions == Arch::Positions::kLearned && !config_.ablations.no_position_encoding;
  }
  torch::Tensor Embed(const torch::Tensor& ids) override {
    auto& body = module_->body;
    auto e = body->token_embedding(ids);
    if (arch_.embedding_scale == Arch::EmbeddingScale::kSqrtWidthInEmbedding) e = e * ScaleIn(e.scalar_type());
    if (!embeds_positions()) return e;
    auto positions = torch::arange(ids.size(1), torch::dtype(torch::kLong).device(ids.device()));
    return e + body->position_embedding(positions).unsqueeze(0);
  }
  ForwardOutput Forward(const torch::Tensor& e, const ForwardOptions& options) override {
    ForwardOutput out;
    const double input_scale = BodyInputScale();
    auto h = input_scale == 1.0 ? e : e * input_scale;
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
  // The head's logits, divided by logits_scaling (Granite) and soft-capped c tanh(z / c) where
  // final_logit_softcapping says (Gemma 2).
  torch::Tensor Logits(const torch::Tensor& hidden) override {
    const auto& weight = module_->head ? module_->head->weight : module_->body->token_embedding->weight;
    auto logits = torch::matmul(hidden, weight.t());
    if (config_.logits_scaling != 1.0) logits = logits / config_.logits_scaling;
    if (config_.final_logit_softcapping > 0) {
      logits = torch::tanh(logits / config_.final_logit_softcapping) * config_.final_logit_softcapping;
    }
    return logits;
  }
  std::vector<std::pair<std::string, torch::Tensor>> NamedParameters() override { return layers::Named(*module_); }
  void To(const torch::Device& device, torch::Dtype dtype) override { module_->to(device, dtype); }
  std::unique_ptr<InputReversePass> PrepareReversePass(const torch::Tensor& e, int64_t target,
                                                       const ReversePassOptions& options) override {
    reverse::Stack stack;
    for (const auto& item : *module_->body->layers) {
      stack.layers.push_back(item->as<LayerImpl>()->Describe(config_.ablations.uniform_attention, e.size(1)));
    }
    stack.final_norm = module_->body->final_norm->Reverse();
    stack.input_scale = BodyInputScale();
    return reverse::Prepare(std::move(stack), e, target, options);
  }

 private:
  // sqrt(width) as a number of `dtype` (Hugging Face makes it a tensor of the model's dtype).
  double ScaleIn(torch::Dtype dtype) const {
    return torch::tensor(std::sqrt(static_cast<double>(config_.hidden_size)), torch::kFloat64).to(dtype).item<double>();
  }
  // What the body multiplies its input by.
  double BodyInputScale() const {
    switch (arch_.embedding_scale) {
      case Arch::EmbeddingScale::kMultiplierInBody: return config_.embedding_multiplier;
      case Arch::EmbeddingScale::kNone:
      case Arch::EmbeddingScale::kSqrtWidthInEmbedding: return 1.0;
    }
    return 1.0;
  }

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
