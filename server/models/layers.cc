// The pieces the one decoder and the Cesaro model share (layers.h): attention, rotary positions,
// branch ratios, checkpointed layers and the seeded Hugging Face initialization.
#include "server/models/layers.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "server/models/config.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/models/reverse_pass.h"

namespace posbias::models::layers {
namespace {

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

}  // namespace

// ---- shared pieces -------------------------------------------------------------------------

torch::Dtype AtLeastFloat32(torch::Dtype dtype) {
  return dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

torch::Tensor CausalAttention(torch::Tensor q, torch::Tensor k, torch::Tensor v, const AttentionRule& rule) {
  const int64_t groups = q.size(1) / k.size(1);
  const int64_t window = rule.window;
  if (!torch::GradMode::is_enabled()) {
    // No graph: in blocks, O(L) memory (reverse_pass.h), one sequence of the batch at a time.
    const int64_t batch = q.size(0), kv = k.size(1), length = q.size(2), hd = q.size(3);
    std::vector<torch::Tensor> outputs;
    reverse::BlockedAttentionOptions blocked;
    blocked.uniform = rule.uniform;
    blocked.window = window;
    blocked.scale = rule.scale;
    blocked.softcap = rule.softcap;
    for (int64_t b = 0; b < batch; ++b) {
      auto out = reverse::BlockedCausalAttention(q[b].reshape({kv, groups, length, hd}), k[b].contiguous(),
                                                 v[b].contiguous(), blocked);
      outputs.push_back(out.view({kv * groups, length, hd}));
    }
    return torch::stack(outputs);
  }
  if (groups > 1) {
    k = k.repeat_interleave(groups, 1);
    v = v.repeat_interleave(groups, 1);
  }
  const int64_t length = q.size(2);
  const bool windowed = window > 0 && window < length;
  if (rule.uniform) {
    auto counts = torch::arange(1, length + 1, v.options()).view({1, 1, length, 1});
    auto sums = torch::cumsum(v, 2);
    if (!windowed) return sums / counts;
    // The window's sum: the running sum less the one `window` positions earlier.
    auto earlier = torch::cat({torch::zeros_like(sums.narrow(2, 0, window)), sums.narrow(2, 0, length - window)}, 2);
    return (sums - earlier) / counts.clamp_max(static_cast<double>(window));
  }
  const double scale = rule.scale > 0 ? rule.scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto scores = torch::matmul(q, k.transpose(-2, -1)) * scale;
  if (rule.softcap > 0) scores = torch::tanh(scores / rule.softcap) * rule.softcap;
  auto mask = torch::ones({length, length}, torch::dtype(torch::kBool).device(q.device())).triu(1);
  if (windowed) mask = mask.logical_or(torch::ones_like(mask).tril(-window));
  scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  auto probs = torch::softmax(scores.to(AtLeastFloat32(q.scalar_type())), -1).to(q.dtype());
  return torch::matmul(rule.detach_probabilities ? probs.detach() : probs, v);
}

namespace {

// Whether layer `layer` uses the local base (a family with two bases, on a sliding layer).
bool LocalRope(const ModelConfig& config, int64_t layer) {
  return config.rope_local_theta > 0 && config.WindowOf(layer) > 0;
}

}  // namespace

double RotaryScale(const ModelConfig& config) { return RotaryScaleOf(config); }

torch::Tensor RotaryInverseFrequencies(const ModelConfig& config, int64_t layer, int64_t length, int64_t dim,
                                       const torch::TensorOptions& options) {
  const bool local = LocalRope(config, layer);
  const double theta = local ? config.rope_local_theta : config.rope_theta;
  auto inv_freq = 1.0 / torch::pow(theta, torch::arange(0, dim, 2, options) / static_cast<double>(dim));
  if (local) return inv_freq;
  const auto& scaling = config.rope_scaling;
  switch (scaling.type) {
    case RopeScaling::Type::kNone: return inv_freq;
    case RopeScaling::Type::kLinear: return inv_freq / scaling.factor;
    case RopeScaling::Type::kLongRope: {
      const auto& factors = length > scaling.original_max_positions ? scaling.long_factor : scaling.short_factor;
      return inv_freq / torch::tensor(factors, torch::dtype(torch::kFloat64)).to(options);
    }
    case RopeScaling::Type::kLlama3: break;
  }
  const double old_length = static_cast<double>(scaling.original_max_positions);
  const double low_wavelength = old_length / scaling.low_freq_factor;
  const double high_wavelength = old_length / scaling.high_freq_factor;
  auto wavelength = 2.0 * M_PI / inv_freq;
  auto scaled = torch::where(wavelength > low_wavelength, inv_freq / scaling.factor, inv_freq);
  auto smooth = (old_length / wavelength - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor);
  auto smoothed = (1.0 - smooth) * scaled / scaling.factor + smooth * scaled;
  auto medium = (wavelength >= high_wavelength).logical_and(wavelength <= low_wavelength);
  return torch::where(medium, smoothed, scaled);
}

torch::Tensor ApplyRotary(const torch::Tensor& x, const torch::Tensor& inverse_frequencies, double scale) {
  const int64_t length = x.size(2);
  auto freqs = torch::outer(torch::arange(length, inverse_frequencies.options()), inverse_frequencies);
  auto emb = torch::cat({freqs, freqs}, -1);
  auto cos = emb.cos(), sin = emb.sin();
  if (scale != 1.0) cos = cos * scale, sin = sin * scale;
  cos = cos.to(x.dtype()), sin = sin.to(x.dtype());
  auto halves = x.chunk(2, -1);
  auto rotated = torch::cat({-halves[1], halves[0]}, -1);
  return x * cos + rotated * sin;
}

torch::Tensor SplitHeads(const torch::Tensor& x, int64_t heads) {
  return x.view({x.size(0), x.size(1), heads, x.size(2) / heads}).transpose(1, 2);
}
torch::Tensor MergeHeads(const torch::Tensor& x) {
  return x.transpose(1, 2).contiguous().view({x.size(0), x.size(2), x.size(1) * x.size(3)});
}

double BranchRatio(const torch::Tensor& residual, const torch::Tensor& branch) {
  torch::NoGradGuard no_grad;
  auto r = residual.to(torch::kFloat32).norm(2, -1);
  auto b = branch.to(torch::kFloat32).norm(2, -1);
  return (b / (r + b).clamp_min(1e-30)).mean().item<double>();
}

torch::Tensor RunLayer(const torch::Tensor& h, bool checkpoint,
                       std::function<torch::Tensor(const torch::Tensor&)> call) {
  if (!checkpoint || !torch::GradMode::is_enabled() || !h.requires_grad()) return call(h);
  return CheckpointedLayer::apply(h, c10::make_intrusive<LayerCall>(std::move(call)));
}

Initializer::Initializer(uint64_t seed) : generator_(at::detail::createCPUGenerator(seed)) {}

void Initializer::Normal(torch::Tensor& tensor, double std) {
  torch::NoGradGuard no_grad;
  tensor.normal_(0.0, std, generator_);
}

// ---- adapters ------------------------------------------------------------------------------

std::vector<std::pair<std::string, torch::Tensor>> Named(torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& item : module.named_parameters()) named.emplace_back(item.key(), item.value());
  return named;
}

std::string InitializeWeights(torch::nn::Module& module, const ModelConfig& config, uint64_t seed,
                              const std::vector<std::string>& scaled_projections, bool one_plus_norms) {
  Initializer init(seed);
  const double projection_std = config.initializer_range / std::sqrt(2.0 * config.num_layers);
  const auto ends_with = [](const std::string& name, const std::string& tail) {
    return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  torch::NoGradGuard no_grad;
  for (auto& [name, tensor] : Named(module)) {
    const bool is_bias = ends_with(name, "bias");
    const bool is_norm = name.find("ln_") != std::string::npos || name.find("norm") != std::string::npos;
    if (is_norm) {
      if (is_bias || one_plus_norms) tensor.zero_(); else tensor.fill_(1.0);
    } else if (is_bias) {
      tensor.zero_();
    } else {
      const bool scaled = std::any_of(scaled_projections.begin(), scaled_projections.end(),
                                      [&](const std::string& projection) { return ends_with(name, "." + projection + ".weight"); });
      init.Normal(tensor, scaled ? projection_std : config.initializer_range);
    }
  }
  std::vector<std::string> scaled_names = scaled_projections;
  std::sort(scaled_names.begin(), scaled_names.end());
  scaled_names.erase(std::unique(scaled_names.begin(), scaled_names.end()), scaled_names.end());
  return absl::StrCat("huggingface-", FamilyName(config.family), ": normal(0, ",
                      config.initializer_range, ") weights and embeddings, zero biases, ", one_plus_norms ? "zero (1 + w) norms" : "unit norms",
                      scaled_names.empty() ? "" : absl::StrCat(", ", absl::StrJoin(scaled_names, ", "), " normal(0, range / sqrt(2 H))"),
                      "; CPU generator seed ", seed, "; parameters in Hugging Face name order");
}

}  // namespace posbias::models::layers
