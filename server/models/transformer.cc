// GPT-2, Qwen2 and Cesaro routing decoders in LibTorch, numerically equivalent to the Hugging Face
// reference implementations (checked by tests/models/equivalence_test.py against a plain PyTorch
// reimplementation). With reverse_pass.cc, the room's translation units that include <torch/torch.h>.
#include <cmath>
#include <limits>

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "server/models/model.h"
#include "server/models/reverse_pass.h"
#include "server/status/error.h"

namespace posbias::models {
namespace {

// ---- shared pieces -------------------------------------------------------------------------

// Half-precision activations are upcast to float32 where Hugging Face does (softmax, RMSNorm);
// float32 and float64 keep their own precision.
torch::Dtype AtLeastFloat32(torch::Dtype dtype) {
  return dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

// Causal attention of q [B, Hq, L, hd] over k, v [B, Hkv, L, hd]; kv heads are shared by
// Hq / Hkv query heads (grouped-query attention). With `uniform`, the logits are zero, so each
// position averages its prefix: computed as a running mean, O(L) instead of O(L^2).
torch::Tensor CausalAttention(torch::Tensor q, torch::Tensor k, torch::Tensor v, bool uniform) {
  const int64_t groups = q.size(1) / k.size(1);
  if (groups > 1) {
    k = k.repeat_interleave(groups, 1);
    v = v.repeat_interleave(groups, 1);
  }
  const int64_t length = q.size(2);
  if (uniform) {
    auto counts = torch::arange(1, length + 1, v.options()).view({1, 1, length, 1});
    return torch::cumsum(v, 2) / counts;
  }
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  auto mask = torch::ones({length, length}, torch::dtype(torch::kBool).device(q.device())).triu(1);
  scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  auto probs = torch::softmax(scores.to(AtLeastFloat32(q.scalar_type())), -1).to(q.dtype());
  return torch::matmul(probs, v);
}

// [B, L, H*hd] -> [B, H, L, hd] and back.
torch::Tensor SplitHeads(const torch::Tensor& x, int64_t heads) {
  return x.view({x.size(0), x.size(1), heads, x.size(2) / heads}).transpose(1, 2);
}
torch::Tensor MergeHeads(const torch::Tensor& x) {
  return x.transpose(1, 2).contiguous().view({x.size(0), x.size(2), x.size(1) * x.size(3)});
}

// Mean over batch and positions of ||branch_j|| / (||residual_j|| + ||branch_j||).
double BranchRatio(const torch::Tensor& residual, const torch::Tensor& branch) {
  torch::NoGradGuard no_grad;
  auto r = residual.to(torch::kFloat32).norm(2, -1);
  auto b = branch.to(torch::kFloat32).norm(2, -1);
  return (b / (r + b).clamp_min(1e-30)).mean().item<double>();
}

// One layer as a callable, carried through the autograd graph inside a capsule.
struct LayerCall : torch::CustomClassHolder {
  explicit LayerCall(std::function<torch::Tensor(const torch::Tensor&)> call) : fn(std::move(call)) {}
  std::function<torch::Tensor(const torch::Tensor&)> fn;
};

// Activation checkpointing: the forward pass runs the layer without recording a graph and saves
// only its input; the backward pass recomputes the layer and differentiates it w.r.t. the input.
class CheckpointedLayer : public torch::autograd::Function<CheckpointedLayer> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               c10::intrusive_ptr<LayerCall> layer) {
    ctx->save_for_backward({x});
    ctx->saved_data["layer"] = c10::IValue::make_capsule(layer);
    torch::NoGradGuard no_grad;
    return layer->fn(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    auto layer = c10::static_intrusive_pointer_cast<LayerCall>(ctx->saved_data["layer"].toCapsule());
    torch::AutoGradMode enable_grad(true);
    auto y = layer->fn(x);
    return {torch::autograd::grad({y}, {x}, {grads[0]})[0], torch::Tensor()};
  }
};

// Runs `call` on h, checkpointed when asked and a graph is being recorded.
torch::Tensor RunLayer(const torch::Tensor& h, bool checkpoint,
                       std::function<torch::Tensor(const torch::Tensor&)> call) {
  if (!checkpoint || !torch::GradMode::is_enabled() || !h.requires_grad()) return call(h);
  return CheckpointedLayer::apply(h, c10::make_intrusive<LayerCall>(std::move(call)));
}

// Seeded normal initialization in a fixed parameter order, on the CPU in float32.
class Initializer {
 public:
  explicit Initializer(uint64_t seed) : generator_(at::detail::createCPUGenerator(seed)) {}
  void Normal(torch::Tensor& tensor, double std) {
    torch::NoGradGuard no_grad;
    tensor.normal_(0.0, std, generator_);
  }
 private:
  at::Generator generator_;
};

// ---- GPT-2 ---------------------------------------------------------------------------------

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
  torch::Tensor forward(const torch::Tensor& x) {
    auto qkv = c_attn(x).chunk(3, -1);
    auto out = CausalAttention(SplitHeads(qkv[0], heads), SplitHeads(qkv[1], heads),
                               SplitHeads(qkv[2], heads), uniform);
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

struct Gpt2BlockImpl : torch::nn::Module {
  Gpt2BlockImpl(const ModelConfig& config)
      : no_mlp(config.ablations.no_mlp),
        ln_1(register_module("ln_1", MakeLayerNorm(config))),
        attn(register_module("attn", Gpt2Attention(config))) {
    if (!no_mlp) {
      ln_2 = register_module("ln_2", MakeLayerNorm(config));
      mlp = register_module("mlp", Gpt2Mlp(config));
    }
  }
  torch::Tensor forward(const torch::Tensor& x, double* branch_ratio) {
    auto a = attn(ln_1(x));
    if (branch_ratio) *branch_ratio = BranchRatio(x, a);
    auto h = x + a;
    return no_mlp ? h : h + mlp(ln_2(h));
  }
  bool no_mlp;
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  Gpt2Attention attn{nullptr};
  Gpt2Mlp mlp{nullptr};
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

// ---- Qwen2 ---------------------------------------------------------------------------------

struct RmsNormImpl : torch::nn::Module {
  RmsNormImpl(int64_t size, double epsilon)
      : eps(epsilon), weight(register_parameter("weight", torch::ones({size}))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    auto x32 = x.to(AtLeastFloat32(x.scalar_type()));
    auto normed = x32 * torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
    return weight * normed.to(x.dtype());
  }
  double eps;
  torch::Tensor weight;
};
TORCH_MODULE(RmsNorm);

// Rotary embedding as in Hugging Face: x * cos + rotate_half(x) * sin, rotate_half = (-x2, x1).
torch::Tensor ApplyRotary(const torch::Tensor& x, double theta) {
  const int64_t length = x.size(2), dim = x.size(3);
  auto options = torch::dtype(AtLeastFloat32(x.scalar_type())).device(x.device());
  auto inv_freq = 1.0 / torch::pow(theta, torch::arange(0, dim, 2, options) / static_cast<double>(dim));
  auto freqs = torch::outer(torch::arange(length, options), inv_freq);
  auto emb = torch::cat({freqs, freqs}, -1);
  auto cos = emb.cos().to(x.dtype()), sin = emb.sin().to(x.dtype());
  auto halves = x.chunk(2, -1);
  auto rotated = torch::cat({-halves[1], halves[0]}, -1);
  return x * cos + rotated * sin;
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
  torch::Tensor forward(const torch::Tensor& x) {
    auto q = SplitHeads(q_proj(x), heads), k = SplitHeads(k_proj(x), kv_heads);
    if (rotary) q = ApplyRotary(q, theta), k = ApplyRotary(k, theta);
    return o_proj(MergeHeads(CausalAttention(q, k, SplitHeads(v_proj(x), kv_heads), uniform)));
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

struct Qwen2LayerImpl : torch::nn::Module {
  explicit Qwen2LayerImpl(const ModelConfig& config)
      : no_mlp(config.ablations.no_mlp),
        input_layernorm(register_module("input_layernorm", RmsNorm(config.hidden_size, config.norm_eps))),
        self_attn(register_module("self_attn", Qwen2Attention(config))) {
    if (!no_mlp) {
      post_attention_layernorm =
          register_module("post_attention_layernorm", RmsNorm(config.hidden_size, config.norm_eps));
      mlp = register_module("mlp", Qwen2Mlp(config));
    }
  }
  torch::Tensor forward(const torch::Tensor& x, double* branch_ratio) {
    auto a = self_attn(input_layernorm(x));
    if (branch_ratio) *branch_ratio = BranchRatio(x, a);
    auto h = x + a;
    return no_mlp ? h : h + mlp(post_attention_layernorm(h));
  }
  bool no_mlp;
  RmsNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  Qwen2Attention self_attn{nullptr};
  Qwen2Mlp mlp{nullptr};
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

// ---- adapters ------------------------------------------------------------------------------

std::vector<std::pair<std::string, torch::Tensor>> Named(torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& item : module.named_parameters()) named.emplace_back(item.key(), item.value());
  return named;
}

// Hugging Face init: normal(0, range) for weights and embeddings, zero biases, unit norm weights;
// GPT-2 also rescales residual projections (c_proj) to range / sqrt(2 H).
std::string InitializeWeights(torch::nn::Module& module, const ModelConfig& config, uint64_t seed) {
  Initializer init(seed);
  const double projection_std = config.initializer_range / std::sqrt(2.0 * config.num_layers);
  torch::NoGradGuard no_grad;
  for (auto& [name, tensor] : Named(module)) {
    const bool is_bias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0;
    const bool is_norm = name.find("ln_") != std::string::npos || name.find("norm") != std::string::npos;
    if (is_norm) {
      if (is_bias) tensor.zero_(); else tensor.fill_(1.0);
    } else if (is_bias) {
      tensor.zero_();
    } else {
      const bool residual_projection = config.family == Family::kGpt2 &&
                                       name.find("c_proj.weight") != std::string::npos;
      init.Normal(tensor, residual_projection ? projection_std : config.initializer_range);
    }
  }
  return absl::StrCat("huggingface-", FamilyName(config.family), ": normal(0, ",
                      config.initializer_range, ") weights and embeddings, zero biases, unit norms",
                      config.family == Family::kGpt2 ? ", c_proj normal(0, range / sqrt(2 H))" : "",
                      "; CPU generator seed ", seed, "; parameters in Hugging Face name order");
}

// ---- the families' weights for the hand-written reverse pass (reverse_pass.h) ----------------

reverse::Norm ReverseNorm(const torch::nn::LayerNorm& norm, double eps) {
  return {reverse::Norm::Kind::kLayerNorm, norm->weight, norm->bias, eps};
}
reverse::Norm ReverseNorm(const RmsNorm& norm) {
  return {reverse::Norm::Kind::kRmsNorm, norm->weight, torch::Tensor(), norm->eps};
}
// Conv1D stores [in, out]: the reverse-pass matrix is its transpose (a view).
reverse::Linear ReverseLinear(const Conv1D& conv) { return {conv->weight.t(), conv->bias}; }
reverse::Linear ReverseLinear(const torch::nn::Linear& linear) {
  return {linear->weight, linear->options.bias() ? linear->bias : torch::Tensor()};
}

reverse::Stack Gpt2ReverseStack(Gpt2Impl& module, const ModelConfig& config) {
  reverse::Stack stack;
  const int64_t d = config.hidden_size;
  for (const auto& item : *module.transformer->h) {
    auto* block = item->as<Gpt2BlockImpl>();
    reverse::Layer layer;
    layer.norm1 = ReverseNorm(block->ln_1, config.norm_eps);
    auto fused = ReverseLinear(block->attn->c_attn);  // [3d, d]: q, k, v rows.
    layer.attention.q = {fused.back.narrow(0, 0, d), fused.bias.narrow(0, 0, d)};
    layer.attention.k = {fused.back.narrow(0, d, d), fused.bias.narrow(0, d, d)};
    layer.attention.v = {fused.back.narrow(0, 2 * d, d), fused.bias.narrow(0, 2 * d, d)};
    layer.attention.o = ReverseLinear(block->attn->c_proj);
    layer.attention.heads = layer.attention.kv_heads = config.num_heads;
    layer.attention.uniform = config.ablations.uniform_attention;
    layer.has_mlp = !config.ablations.no_mlp;
    if (layer.has_mlp) {
      layer.norm2 = ReverseNorm(block->ln_2, config.norm_eps);
      layer.mlp.kind = reverse::Mlp::Kind::kGeluTanh;
      layer.mlp.in = ReverseLinear(block->mlp->c_fc);
      layer.mlp.out = ReverseLinear(block->mlp->c_proj);
    }
    stack.layers.push_back(std::move(layer));
  }
  stack.final_norm = ReverseNorm(module.transformer->ln_f, config.norm_eps);
  return stack;
}

reverse::Stack Qwen2ReverseStack(Qwen2Impl& module, const ModelConfig& config) {
  reverse::Stack stack;
  for (const auto& item : *module.model->layers) {
    auto* decoder = item->as<Qwen2LayerImpl>();
    reverse::Layer layer;
    layer.norm1 = ReverseNorm(decoder->input_layernorm);
    const auto& attention = decoder->self_attn;
    layer.attention.q = ReverseLinear(attention->q_proj);
    layer.attention.k = ReverseLinear(attention->k_proj);
    layer.attention.v = ReverseLinear(attention->v_proj);
    layer.attention.o = ReverseLinear(attention->o_proj);
    layer.attention.heads = config.num_heads;
    layer.attention.kv_heads = config.num_kv_heads;
    layer.attention.rotary = attention->rotary;
    layer.attention.rope_theta = config.rope_theta;
    layer.attention.uniform = config.ablations.uniform_attention;
    layer.has_mlp = !config.ablations.no_mlp;
    if (layer.has_mlp) {
      layer.norm2 = ReverseNorm(decoder->post_attention_layernorm);
      layer.mlp.kind = reverse::Mlp::Kind::kSwiGlu;
      layer.mlp.in = ReverseLinear(decoder->mlp->up_proj);
      layer.mlp.gate = ReverseLinear(decoder->mlp->gate_proj);
      layer.mlp.out = ReverseLinear(decoder->mlp->down_proj);
    }
    stack.layers.push_back(std::move(layer));
  }
  stack.final_norm = ReverseNorm(module.model->norm);
  return stack;
}

class Gpt2Model final : public DecoderModel {
 public:
  Gpt2Model(const ModelConfig& config, uint64_t seed) : config_(config), module_(config) {
    recipe_ = InitializeWeights(*module_, config_, seed);
  }
  const ModelConfig& config() const override { return config_; }
  std::string init_recipe() const override { return recipe_; }
  bool embeds_positions() const override { return !config_.ablations.no_position_encoding; }
  torch::Tensor Embed(const torch::Tensor& ids) override {
    auto e = module_->transformer->wte(ids);
    if (!embeds_positions()) return e;
    auto positions = torch::arange(ids.size(1), torch::dtype(torch::kLong).device(ids.device()));
    return e + module_->transformer->wpe(positions).unsqueeze(0);
  }
  ForwardOutput Forward(const torch::Tensor& e, const ForwardOptions& options) override {
    ForwardOutput out;
    auto h = e;
    for (const auto& block : *module_->transformer->h) {
      double ratio = 0;
      double* ratio_out = options.record_branch_ratios ? &ratio : nullptr;
      auto* layer = block->as<Gpt2BlockImpl>();
      h = RunLayer(h, options.checkpoint_layers, [layer, ratio_out](const torch::Tensor& x) { return layer->forward(x, ratio_out); });
      if (options.record_branch_ratios) out.branch_ratio.push_back(ratio);
      if (options.record_layers) out.layers.push_back(h);
    }
    out.hidden = module_->transformer->ln_f(h);
    return out;
  }
  torch::Tensor Logits(const torch::Tensor& hidden) override {
    return torch::matmul(hidden, module_->transformer->wte->weight.t());
  }
  std::unique_ptr<InputReversePass> PrepareReversePass(const torch::Tensor& e, int64_t target,
                                                       const ReversePassOptions& options) override {
    return reverse::Prepare(Gpt2ReverseStack(*module_, config_), e, target, options);
  }
  std::vector<std::pair<std::string, torch::Tensor>> NamedParameters() override { return Named(*module_); }
  void To(const torch::Device& device, torch::Dtype dtype) override { module_->to(device, dtype); }

 private:
  ModelConfig config_;
  Gpt2 module_;
  std::string recipe_;
};

class Qwen2Model final : public DecoderModel {
 public:
  Qwen2Model(const ModelConfig& config, uint64_t seed) : config_(config), module_(config) {
    recipe_ = InitializeWeights(*module_, config_, seed);
  }
  const ModelConfig& config() const override { return config_; }
  std::string init_recipe() const override { return recipe_; }
  torch::Tensor Embed(const torch::Tensor& ids) override { return module_->model->embed_tokens(ids); }
  ForwardOutput Forward(const torch::Tensor& e, const ForwardOptions& options) override {
    ForwardOutput out;
    auto h = e;
    for (const auto& module : *module_->model->layers) {
      double ratio = 0;
      double* ratio_out = options.record_branch_ratios ? &ratio : nullptr;
      auto* layer = module->as<Qwen2LayerImpl>();
      h = RunLayer(h, options.checkpoint_layers, [layer, ratio_out](const torch::Tensor& x) { return layer->forward(x, ratio_out); });
      if (options.record_branch_ratios) out.branch_ratio.push_back(ratio);
      if (options.record_layers) out.layers.push_back(h);
    }
    out.hidden = module_->model->norm(h);
    return out;
  }
  torch::Tensor Logits(const torch::Tensor& hidden) override {
    const auto& weight = config_.tie_embeddings ? module_->model->embed_tokens->weight
                                                : module_->lm_head->weight;
    return torch::matmul(hidden, weight.t());
  }
  std::unique_ptr<InputReversePass> PrepareReversePass(const torch::Tensor& e, int64_t target,
                                                       const ReversePassOptions& options) override {
    return reverse::Prepare(Qwen2ReverseStack(*module_, config_), e, target, options);
  }
  std::vector<std::pair<std::string, torch::Tensor>> NamedParameters() override { return Named(*module_); }
  void To(const torch::Device& device, torch::Dtype dtype) override { module_->to(device, dtype); }

 private:
  ModelConfig config_;
  Qwen2 module_;
  std::string recipe_;
};

// h <- (1 - alpha) h + alpha * causal-mean(h) per layer; no final norm; a fixed random token
// embedding (normal(0, range)) so token inputs work too.
class CesaroModel final : public DecoderModel {
 public:
  CesaroModel(const ModelConfig& config, uint64_t seed) : config_(config) {
    embed_ = torch::zeros({config.vocab_size, config.hidden_size});
    Initializer(seed).Normal(embed_, config.initializer_range);
  }
  const ModelConfig& config() const override { return config_; }
  std::string init_recipe() const override {
    return absl::StrCat("cesaro routing, alpha = ", config_.cesaro_alpha, "; token embedding normal(0, ",
                        config_.initializer_range, ")");
  }
  torch::Tensor Embed(const torch::Tensor& ids) override { return torch::embedding(embed_, ids); }
  ForwardOutput Forward(const torch::Tensor& e, const ForwardOptions& options) override {
    ForwardOutput out;
    const double alpha = config_.cesaro_alpha;
    auto counts = torch::arange(1, e.size(1) + 1, e.options()).view({1, e.size(1), 1});
    auto h = e;
    for (int64_t l = 0; l < config_.num_layers; ++l) {
      auto branch = alpha * (torch::cumsum(h, 1) / counts);
      if (options.record_branch_ratios) out.branch_ratio.push_back(BranchRatio((1 - alpha) * h, branch));
      h = (1 - alpha) * h + branch;
      if (options.record_layers) out.layers.push_back(h);
    }
    out.hidden = h;
    return out;
  }
  torch::Tensor Logits(const torch::Tensor& hidden) override { return torch::matmul(hidden, embed_.t()); }
  std::vector<std::pair<std::string, torch::Tensor>> NamedParameters() override {
    return {{"embed_tokens.weight", embed_}};
  }
  void To(const torch::Device& device, torch::Dtype dtype) override { embed_ = embed_.to(device, dtype); }

 private:
  ModelConfig config_;
  torch::Tensor embed_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DecoderModel>> BuildModel(const ModelConfig& config, uint64_t seed) {
  if (auto status = ValidateConfig(config); !status.ok()) return status;
  try {
    switch (config.family) {
      case Family::kGpt2: return std::unique_ptr<DecoderModel>(new Gpt2Model(config, seed));
      case Family::kQwen2: return std::unique_ptr<DecoderModel>(new Qwen2Model(config, seed));
      case Family::kCesaro: return std::unique_ptr<DecoderModel>(new CesaroModel(config, seed));
      case Family::kTorchScript: break;
    }
  } catch (const c10::Error& error) {
    return ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kInsufficientMemory,
                           absl::StrCat("cannot build the model: ", error.what_without_backtrace()));
  }
  return InvalidArgumentError({ErrorReason::kInvalidArgument, "arch", "torchscript",
                               "gpt2, qwen2 or cesaro (TorchScript models are loaded, not built)"});
}

int64_t ParameterCount(DecoderModel& model) {
  int64_t count = 0;
  for (const auto& [name, tensor] : model.NamedParameters()) count += tensor.numel();
  return count;
}

}  // namespace posbias::models
