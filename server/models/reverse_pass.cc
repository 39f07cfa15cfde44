#include "server/models/reverse_pass.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include <torch/torch.h>

namespace posbias::models::reverse {
namespace {

using torch::Tensor;

// Norm statistics, softmax and activation derivatives are kept in float32 for half-precision
// measurements (as the forward pass computes them), in float64 for float64 ones.
torch::Dtype StatsDtype(torch::Dtype dtype) {
  return dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

Tensor Forward(const Linear& linear, const Tensor& x) {
  return linear.bias.defined() ? torch::addmm(linear.bias, x, linear.back.t()) : torch::mm(x, linear.back.t());
}

// dy [K, R, n_out] -> dx [K, R, n_in] (contiguous dy; one matrix product over all K R rows).
Tensor Backward(const Linear& linear, const Tensor& dy) {
  return torch::matmul(dy, linear.back);
}

// ---- norms -----------------------------------------------------------------------------------

// y = weight * x_hat (+ bias), x_hat = (x - mean) * rstd (LayerNorm) or x * rstd (RMSNorm).
struct NormSaved {
  Tensor x_hat;  // [L, d], stats dtype.
  Tensor rstd;   // [L, 1], stats dtype.
  NormSaved Rows(int64_t first, int64_t count) const {
    return {x_hat.narrow(0, first, count), rstd.narrow(0, first, count)};
  }
};

// The same operations as the models' forward pass (torch::nn::LayerNorm, Qwen2's RmsNorm).
Tensor NormForward(const Norm& norm, const Tensor& x, NormSaved* saved) {
  const auto stats = StatsDtype(x.scalar_type());
  auto x32 = x.to(stats);
  if (norm.kind == Norm::Kind::kLayerNorm) {
    auto mean = x32.mean(-1, /*keepdim=*/true);
    auto centered = x32 - mean;
    saved->rstd = torch::rsqrt(centered.pow(2).mean(-1, /*keepdim=*/true) + norm.eps);
    saved->x_hat = centered * saved->rstd;
    return torch::layer_norm(x, {x.size(-1)}, norm.weight, norm.bias, norm.eps);
  }
  saved->rstd = torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + norm.eps);
  saved->x_hat = x32 * saved->rstd;
  return norm.weight * saved->x_hat.to(x.dtype());
}

// dx = rstd (g - mean(g) - x_hat mean(g x_hat)) with g = dy * weight; RMSNorm has no mean(g).
Tensor NormBackward(const Norm& norm, const NormSaved& saved, const Tensor& dy) {
  auto g = (dy * norm.weight).to(saved.x_hat.scalar_type());
  auto projection = (g * saved.x_hat).mean(-1, /*keepdim=*/true);
  auto dx = norm.kind == Norm::Kind::kLayerNorm ? g - g.mean(-1, /*keepdim=*/true) : std::move(g);
  dx.sub_(saved.x_hat * projection).mul_(saved.rstd);
  return dx.to(dy.scalar_type());
}

// ---- rotary position embedding ---------------------------------------------------------------

// cos, sin [L, hd] exactly as the Qwen2 forward pass builds them.
std::pair<Tensor, Tensor> RotaryTables(int64_t length, int64_t dim, double theta, const Tensor& like) {
  auto options = torch::dtype(StatsDtype(like.scalar_type())).device(like.device());
  auto inv_freq = 1.0 / torch::pow(theta, torch::arange(0, dim, 2, options) / static_cast<double>(dim));
  auto freqs = torch::outer(torch::arange(length, options), inv_freq);
  auto emb = torch::cat({freqs, freqs}, -1);
  return {emb.cos().to(like.dtype()), emb.sin().to(like.dtype())};
}

// x * cos + rotate_half(x) * sin, rotate_half(x) = (-x2, x1).
Tensor Rotate(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  auto halves = x.chunk(2, -1);
  return x * cos + torch::cat({-halves[1], halves[0]}, -1) * sin;
}

// The transpose: dx = dy * cos + rotate_half^T(dy * sin), rotate_half^T(y) = (y2, -y1).
Tensor RotateBackward(const Tensor& dy, const Tensor& cos, const Tensor& sin) {
  auto halves = (dy * sin).chunk(2, -1);
  return dy * cos + torch::cat({halves[1], -halves[0]}, -1);
}

// ---- one layer -------------------------------------------------------------------------------

struct LayerSaved {
  NormSaved norm1, norm2;
  Tensor q;      // [H, L, hd], rotated.
  Tensor k, v;   // [H, L, hd], rotated keys and values repeated for every query head.
  Tensor probs;  // [H, L, L], stats dtype; undefined for uniform attention.
  // MLP derivatives, [L, m]. GELU: gelu'(pre-activation) in `mlp_a`. SwiGLU: d/d gate of
  // silu(gate) * up in `mlp_a` (= up * silu'(gate)), d/d up in `mlp_b` (= silu(gate)).
  Tensor mlp_a, mlp_b;
};

struct Rotary {
  Tensor cos, sin;  // [L, hd].
};

// [L, heads * hd] -> [heads, L, hd] and back.
Tensor SplitHeads(const Tensor& x, int64_t heads) {
  return x.view({x.size(0), heads, x.size(1) / heads}).transpose(0, 1);
}

Tensor AttentionForward(const Attention& w, const Rotary& rotary, const Tensor& x, LayerSaved* saved) {
  const int64_t length = x.size(0), groups = w.heads / w.kv_heads;
  auto q = SplitHeads(Forward(w.q, x), w.heads);
  auto k = SplitHeads(Forward(w.k, x), w.kv_heads);
  auto v = SplitHeads(Forward(w.v, x), w.kv_heads);
  if (w.rotary) q = Rotate(q, rotary.cos, rotary.sin), k = Rotate(k, rotary.cos, rotary.sin);
  if (groups > 1) k = k.repeat_interleave(groups, 0), v = v.repeat_interleave(groups, 0);
  saved->q = q.contiguous();
  saved->k = k.contiguous();
  saved->v = v.contiguous();
  Tensor out;
  if (w.uniform) {
    auto counts = torch::arange(1, length + 1, v.options()).view({1, length, 1});
    out = torch::cumsum(v, 1) / counts;
  } else {
    auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
    auto mask = torch::ones({length, length}, torch::dtype(torch::kBool).device(x.device())).triu(1);
    scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
    saved->probs = torch::softmax(scores.to(StatsDtype(x.scalar_type())), -1);
    out = torch::matmul(saved->probs.to(x.dtype()), v);
  }
  return Forward(w.o, out.transpose(0, 1).reshape({length, -1}));
}

// The gradient w.r.t. the attention's input x [L, d] of cotangents dy [K, R, d] on its output
// rows first..L-1. With `value_only` the probabilities are constants: only the value branch
// dV = P^T dO, not the score branch (dP -> dq, dk).
Tensor AttentionBackward(const Attention& w, const Rotary& rotary, const LayerSaved& saved, const Tensor& dy,
                         int64_t first, bool value_only) {
  const int64_t batch = dy.size(0), rows = dy.size(1), length = saved.v.size(1);
  const int64_t heads = w.heads, kv_heads = w.kv_heads, hd = saved.v.size(2);
  const auto dtype = dy.scalar_type();
  // d(head outputs) [H, K, R, hd].
  auto d_out = Backward(w.o, dy).view({batch, rows, heads, hd}).permute({2, 0, 1, 3}).contiguous();
  // dV [H, K, L, hd] = P^T dO per head and batch row, as one product per head over all K.
  Tensor dq, dk, dv;
  if (w.uniform) {
    // o_t = sum_{i <= t} v_i / (t + 1): dV_i = sum over rows t >= i of dO_t / (t + 1).
    auto counts = torch::arange(first + 1, length + 1, d_out.options()).view({1, 1, rows, 1});
    auto suffix = (d_out / counts).flip(2).cumsum(2).flip(2);
    dv = first > 0 ? torch::cat({suffix.narrow(2, 0, 1).expand({heads, batch, first, hd}), suffix}, 2) : suffix;
  } else {
    auto probs = saved.probs.narrow(1, first, rows);  // [H, R, L]
    auto probs_c = probs.to(dtype);
    auto d_out_by_row = d_out.permute({0, 2, 1, 3}).reshape({heads, rows, batch * hd});
    dv = torch::bmm(probs_c.transpose(1, 2), d_out_by_row).view({heads, length, batch, hd}).permute({0, 2, 1, 3});
  }
  if (!w.uniform && !value_only) {
    auto probs = saved.probs.narrow(1, first, rows);  // [H, R, L]
    // dP = dO V^T; dS = P (dP - rowsum(dP P)) / sqrt(hd).
    auto d_probs = torch::bmm(d_out.view({heads, batch * rows, hd}), saved.v.transpose(1, 2))
                       .view({heads, batch, rows, length})
                       .to(probs.scalar_type());
    auto p = probs.unsqueeze(1);
    auto row_sums = (d_probs * p).sum(-1, /*keepdim=*/true);
    auto d_scores = d_probs.sub_(row_sums).mul_(p).mul_(1.0 / std::sqrt(static_cast<double>(hd))).to(dtype);
    dq = torch::bmm(d_scores.view({heads, batch * rows, length}), saved.k).view({heads, batch, rows, hd});
    auto q_rows = saved.q.narrow(1, first, rows).unsqueeze(1).expand({heads, batch, rows, hd}).reshape({heads * batch, rows, hd});
    dk = torch::bmm(d_scores.view({heads * batch, rows, length}).transpose(1, 2), q_rows).view({heads, batch, length, hd});
    if (w.rotary) {
      dq = RotateBackward(dq, rotary.cos.narrow(0, first, rows), rotary.sin.narrow(0, first, rows));
      dk = RotateBackward(dk, rotary.cos, rotary.sin);
    }
  }
  // Query heads sharing a key/value head add up their gradients.
  const int64_t groups = heads / kv_heads;
  auto per_kv_head = [&](const Tensor& t) {
    auto summed = groups > 1 ? t.reshape({kv_heads, groups, batch, length, hd}).sum(1) : t;
    return summed.permute({1, 2, 0, 3}).reshape({batch * length, kv_heads * hd});
  };
  auto dx = torch::mm(per_kv_head(dv), w.v.back);
  if (dk.defined()) dx.addmm_(per_kv_head(dk), w.k.back);
  dx = dx.view({batch, length, -1});
  if (dq.defined()) {
    auto dq_rows = dq.permute({1, 2, 0, 3}).reshape({batch * rows, heads * hd});
    dx.narrow(1, first, rows).add_(torch::mm(dq_rows, w.q.back).view({batch, rows, -1}));
  }
  return dx;
}

Tensor MlpForward(const Mlp& w, const Tensor& x, LayerSaved* saved) {
  const auto stats = StatsDtype(x.scalar_type());
  if (w.kind == Mlp::Kind::kGeluTanh) {
    auto pre = Forward(w.in, x);
    // gelu(u) = u/2 (1 + tanh(c (u + 0.044715 u^3))), c = sqrt(2 / pi).
    const double c = std::sqrt(2.0 / M_PI);
    auto u = pre.to(stats);
    auto t = torch::tanh(c * (u + 0.044715 * u.pow(3)));
    saved->mlp_a = (0.5 * (1 + t) + 0.5 * u * (1 - t * t) * c * (1 + 3 * 0.044715 * u * u)).to(x.dtype());
    return Forward(w.out, torch::gelu(pre, "tanh"));
  }
  auto gate = Forward(w.gate, x), up = Forward(w.in, x);
  auto g = gate.to(stats);
  auto sigma = torch::sigmoid(g);
  saved->mlp_a = (up.to(stats) * sigma * (1 + g * (1 - sigma))).to(x.dtype());
  saved->mlp_b = torch::silu(gate);
  return Forward(w.out, saved->mlp_b * up);
}

// dy [K, R, d] on rows first.. -> d x [K, R, d].
Tensor MlpBackward(const Mlp& w, const LayerSaved& saved, const Tensor& dy, int64_t first) {
  const int64_t rows = dy.size(1);
  auto dz = Backward(w.out, dy);  // [K, R, m]
  if (w.kind == Mlp::Kind::kGeluTanh) return Backward(w.in, dz.mul_(saved.mlp_a.narrow(0, first, rows)));
  auto d_gate = dz * saved.mlp_a.narrow(0, first, rows);
  auto d_up = dz.mul_(saved.mlp_b.narrow(0, first, rows));
  const int64_t m = dz.size(2);
  auto dx = torch::mm(d_gate.view({-1, m}), w.gate.back);
  dx.addmm_(d_up.view({-1, m}), w.in.back);
  return dx.view({dy.size(0), rows, -1});
}

// Whether the MLP's per-position Jacobians (d^2 m to form per position, then K d^2 to apply)
// cost less than K row products (2 d m for GELU, 3 d m for SwiGLU per row and position); the
// margin pays for forming them (elementwise work the count leaves out).
bool MlpJacobiansPay(const Mlp& w, int64_t rows, int64_t d) {
  const double k = static_cast<double>(rows), width = static_cast<double>(d);
  const double m = static_cast<double>(w.out.back.size(1));
  const double row_products = (w.kind == Mlp::Kind::kGeluTanh ? 2.0 : 3.0) * k * width * m;
  const double jacobians = width * width * m + k * width * width;
  return jacobians < 0.8 * row_products;
}

// dy [K, R, d] on rows first.. -> dx [K, R, d] through C_i = out.back (a_i * W1 + b_i * W2): the
// MLP's Jacobian at position i as a map of row vectors (GELU: W1 = c_fc, a = gelu'; SwiGLU:
// W1 = gate_proj, W2 = up_proj). Formed for blocks of positions as one product out.back [d, m]
// x B [m, (positions, d)], applied to all K rows of a position as one product.
Tensor MlpBackwardByJacobians(const Mlp& w, const LayerSaved& saved, const Tensor& dy, int64_t first) {
  const int64_t rows = dy.size(1), d = dy.size(2), m = w.out.back.size(1);
  const bool swiglu = w.kind == Mlp::Kind::kSwiGlu;
  const Tensor& w1 = swiglu ? w.gate.back : w.in.back;  // [m, d]
  constexpr int64_t kBlockBytes = int64_t{128} << 20;
  const int64_t block = std::clamp<int64_t>(kBlockBytes / (m * d * dy.element_size()), 1, rows);
  auto dx = torch::empty_like(dy);
  for (int64_t i = 0; i < rows; i += block) {
    const int64_t count = std::min(block, rows - i);
    auto a = saved.mlp_a.narrow(0, first + i, count).t().contiguous().unsqueeze(2);  // [m, count, 1]
    auto b_matrix = a * w1.unsqueeze(1);                                 // [m, count, d]
    if (swiglu) b_matrix.addcmul_(saved.mlp_b.narrow(0, first + i, count).t().unsqueeze(2), w.in.back.unsqueeze(1));
    auto jacobians = torch::mm(w.out.back, b_matrix.reshape({m, count * d})).view({d, count, d}).permute({1, 0, 2});
    auto by_position = torch::bmm(dy.narrow(1, i, count).transpose(0, 1), jacobians);  // [count, K, d]
    dx.narrow(1, i, count).copy_(by_position.transpose(0, 1));
  }
  return dx;
}

Tensor LayerForward(const Layer& w, const Rotary& rotary, const Tensor& h, LayerSaved* saved) {
  auto x = h + AttentionForward(w.attention, rotary, NormForward(w.norm1, h, &saved->norm1), saved);
  if (!w.has_mlp) return x;
  return x + MlpForward(w.mlp, NormForward(w.norm2, x, &saved->norm2), saved);
}

// Cotangents dy [K, R, d] on the layer's output rows first..L-1 -> [K, L, d] on its input, in
// groups of options.rows_per_product rows (the MLP's Jacobians, when used, serve all K rows).
Tensor LayerBackward(const Layer& w, const Rotary& rotary, const LayerSaved& saved, const Tensor& dy, int64_t first,
                     const GradientOptions& options) {
  const int64_t total = dy.size(0), rows = dy.size(1), d = dy.size(2), length = saved.v.size(1);
  const int64_t step = options.rows_per_product > 0 ? std::min(options.rows_per_product, total) : total;
  using MlpJacobians = GradientOptions::MlpJacobians;
  const bool jacobians = w.has_mlp && (options.mlp_jacobians == MlpJacobians::kOn ||
                                       (options.mlp_jacobians == MlpJacobians::kAuto && MlpJacobiansPay(w.mlp, total, d)));
  Tensor mlp_all = jacobians ? MlpBackwardByJacobians(w.mlp, saved, dy, first) : Tensor();
  Tensor out = step < total ? torch::empty({total, length, d}, dy.options()) : Tensor();
  for (int64_t start = 0; start < total; start += step) {
    const int64_t count = std::min(step, total - start);
    auto g = dy.narrow(0, start, count);
    Tensor dh = g;
    if (w.has_mlp) {
      auto d_mlp = jacobians ? mlp_all.narrow(0, start, count) : MlpBackward(w.mlp, saved, g, first);
      dh = g + NormBackward(w.norm2, saved.norm2.Rows(first, rows), d_mlp);
    }
    auto dx = NormBackward(w.norm1, saved.norm1,
                           AttentionBackward(w.attention, rotary, saved, dh, first, options.detach_attention_probabilities));
    dx.narrow(1, first, rows).add_(dh);
    if (!out.defined()) return dx;
    out.narrow(0, start, count).copy_(dx);
  }
  return out;
}

// ---- the prepared pass -----------------------------------------------------------------------

class PreparedPass final : public InputReversePass {
 public:
  PreparedPass(Stack stack, const Tensor& inputs_embeds, int64_t target, const ReversePassOptions& options)
      : stack_(std::move(stack)), full_length_(inputs_embeds.size(1)), keep_(options.keep_activations) {
    torch::NoGradGuard no_grad;
    // Positions after the target cannot reach it (causal attention): the pass stops there.
    auto h = inputs_embeds.squeeze(0).narrow(0, 0, target).contiguous();
    length_ = target;
    const auto& first = stack_.layers.front().attention;
    if (first.rotary) {
      auto tables = RotaryTables(length_, h.size(1) / first.heads, first.rope_theta, h);
      rotary_ = {tables.first, tables.second};
    }
    saved_.resize(stack_.layers.size());
    for (size_t l = 0; l < stack_.layers.size(); ++l) {
      inputs_.push_back(h);
      LayerSaved saved;
      h = LayerForward(stack_.layers[l], rotary_, h, &saved);
      if (keep_) saved_[l] = std::move(saved);
    }
    final_hidden_ = NormForward(stack_.final_norm, h, &final_norm_);
  }

  using InputReversePass::InputGradients;
  Tensor InputGradients(const Tensor& cotangents, int64_t layer, const GradientOptions& options) override {
    torch::NoGradGuard no_grad;
    const int64_t batch = cotangents.size(0), d = cotangents.size(1);
    auto dy = cotangents.to(final_hidden_.options()).view({batch, 1, d});
    int64_t top = layer;
    if (layer == kFinalHidden) {
      dy = NormBackward(stack_.final_norm, final_norm_.Rows(length_ - 1, 1), dy);
      top = static_cast<int64_t>(stack_.layers.size());
    }
    int64_t first = length_ - 1;  // The cotangents enter at the target row only.
    for (int64_t l = top - 1; l >= 0; --l) {
      const Layer& w = stack_.layers[l];
      if (saved_[l]) {
        dy = LayerBackward(w, rotary_, *saved_[l], dy, first, options);
      } else {
        LayerSaved saved;
        LayerForward(w, rotary_, inputs_[l], &saved);
        dy = LayerBackward(w, rotary_, saved, dy, first, options);
      }
      first = 0;
      if (options.between_layers && !options.between_layers()) return Tensor();
    }
    if (first > 0) {  // No layer below the cotangents (not reached: layer >= 1).
      dy = torch::cat({torch::zeros({batch, first, d}, dy.options()), dy}, 1);
    }
    if (full_length_ == length_) return dy;
    return torch::cat({dy, torch::zeros({batch, full_length_ - length_, d}, dy.options())}, 1);
  }

  Tensor FinalHidden() const override { return final_hidden_[length_ - 1]; }

 private:
  Stack stack_;
  int64_t full_length_ = 0, length_ = 0;
  bool keep_ = true;
  Rotary rotary_;
  std::vector<Tensor> inputs_;                   // Each layer's input [length, d].
  std::vector<std::optional<LayerSaved>> saved_;  // Kept activations (keep_activations).
  NormSaved final_norm_;
  Tensor final_hidden_;
};

}  // namespace

std::unique_ptr<InputReversePass> Prepare(Stack stack, const torch::Tensor& inputs_embeds, int64_t target,
                                          const ReversePassOptions& options) {
  return std::make_unique<PreparedPass>(std::move(stack), inputs_embeds, target, options);
}

}  // namespace posbias::models::reverse
