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
    if (!x_hat.defined()) return {};
    return {x_hat.narrow(0, first, count), rstd.narrow(0, first, count)};
  }
};

// The same operations as the models' forward pass (torch::nn::LayerNorm, Qwen2's RmsNorm).
// An absent norm is the identity (nothing saved).
Tensor NormForward(const Norm& norm, const Tensor& x, NormSaved* saved) {
  if (!norm.present()) return x;
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
  if (!norm.present()) return dy;
  auto g = (dy * norm.weight).to(saved.x_hat.scalar_type());
  auto projection = (g * saved.x_hat).mean(-1, /*keepdim=*/true);
  auto dx = norm.kind == Norm::Kind::kLayerNorm ? g - g.mean(-1, /*keepdim=*/true) : std::move(g);
  dx.sub_(saved.x_hat * projection).mul_(saved.rstd);
  return dx.to(dy.scalar_type());
}

// ---- rotary position embedding ---------------------------------------------------------------

// cos, sin [L, rotary_dims] exactly as the families' forward pass builds them (layers::ApplyRotary).
// Times `scale` (longrope's attention factor).
std::pair<Tensor, Tensor> RotaryTables(int64_t length, const Tensor& inv_freq, double scale, const Tensor& like) {
  auto freqs = torch::outer(torch::arange(length, inv_freq.options()), inv_freq);
  auto emb = torch::cat({freqs, freqs}, -1);
  if (scale == 1.0) return {emb.cos().to(like.dtype()), emb.sin().to(like.dtype())};
  return {(emb.cos() * scale).to(like.dtype()), (emb.sin() * scale).to(like.dtype())};
}

// x * cos + rotate_half(x) * sin, rotate_half(x) = (-x2, x1), on the first cos.size(-1) dims.
Tensor Rotate(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  const int64_t rd = cos.size(-1), hd = x.size(-1);
  auto part = rd == hd ? x : x.narrow(-1, 0, rd);
  auto halves = part.chunk(2, -1);
  auto rotated = part * cos + torch::cat({-halves[1], halves[0]}, -1) * sin;
  return rd == hd ? rotated : torch::cat({rotated, x.narrow(-1, rd, hd - rd)}, -1);
}

// The transpose: dx = dy * cos + rotate_half^T(dy * sin), rotate_half^T(y) = (y2, -y1). Two
// temporaries of dy's size (at long L dy holds K L heads hd elements).
Tensor RotateBackward(const Tensor& dy, const Tensor& cos, const Tensor& sin) {
  const int64_t rd = cos.size(-1), hd = dy.size(-1), half = rd / 2;
  auto dx = rd == hd ? dy * cos : dy.clone();
  if (rd != hd) dx.narrow(-1, 0, rd).mul_(cos);
  auto by_sin = dy.narrow(-1, 0, rd) * sin;
  dx.narrow(-1, 0, half).add_(by_sin.narrow(-1, half, half));
  dx.narrow(-1, half, half).sub_(by_sin.narrow(-1, 0, half));
  return dx;
}

// ---- attention in blocks ---------------------------------------------------------------------

struct LayerSaved {
  NormSaved norm1, norm2, post_attention, post_mlp, q_norm, k_norm;
  // Rotated queries [kvH, G, L, hd] (query head h = kv * G + g, as Hugging Face's
  // repeat_interleave pairs them), rotated keys and values [kvH, L, hd] (not repeated), the
  // attention's output per head [kvH, G, L, hd] and the log-sum-exp of each query's scores
  // [kvH, G, L] (stats dtype; undefined for uniform attention without a window).
  Tensor q, k, v, out, lse;
  // MLP derivatives, [L, m]. GELU: gelu'(pre-activation) in `mlp_a`. Gated (SwiGLU, GeGLU): d/d
  // gate of act(gate) * up in `mlp_a` (= up * act'(gate)), d/d up in `mlp_b` (= act(gate)).
  Tensor mlp_a, mlp_b;
};

struct Rotary {
  Tensor cos, sin;  // [L, rotary_dims]; undefined without rotary.
};

// The key blocks query rows [i0, i1) see: keys [max(0, i0 - w + 1), i1), on the grid of `block`.
struct KeyRange {
  int64_t first_block = 0, end = 0;
};
KeyRange KeysOf(int64_t i0, int64_t i1, int64_t window, int64_t block) {
  const int64_t lowest = window > 0 ? std::max<int64_t>(0, i0 - window + 1) : 0;
  return {lowest / block * block, i1};
}

// The mask of rows [i0, i1) x keys [j0, j1): true where the key is hidden (after the row, or at
// or before row - window); undefined when the whole block is visible.
Tensor HiddenKeys(int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t window, const torch::Device& device) {
  const bool crosses_diagonal = j1 - 1 > i0;
  const bool crosses_window = window > 0 && j0 <= i1 - 1 - window;
  if (!crosses_diagonal && !crosses_window) return Tensor();
  auto options = torch::dtype(torch::kInt64).device(device);
  auto rows = torch::arange(i0, i1, options).view({-1, 1});
  auto keys = torch::arange(j0, j1, options).view({1, -1});
  auto hidden = keys > rows;
  if (window > 0) hidden = hidden.logical_or(keys <= rows - window);
  return hidden;
}

// The block loops' temporaries, reused from one block pair to the next: each slot keeps the
// largest buffer asked of it, so a loop over thousands of pairs allocates a handful of times
// (no allocator churn, and no fragments left behind at long L).
class BlockScratch {
 public:
  // A contiguous tensor of `shape` in slot `slot`'s storage (contents undefined).
  Tensor Take(size_t slot, at::IntArrayRef shape, const torch::TensorOptions& options) {
    if (slots_.size() <= slot) slots_.resize(slot + 1);
    int64_t count = 1;
    for (int64_t size : shape) count *= size;
    Tensor& buffer = slots_[slot];
    if (!buffer.defined() || buffer.numel() < count || buffer.scalar_type() != options.dtype().toScalarType() ||
        buffer.device() != options.device()) {
      buffer = torch::empty({count}, options);
    }
    return buffer.narrow(0, 0, count).view(shape);
  }
  // torch::bmm(a, b) into slot `slot`.
  Tensor Bmm(size_t slot, const Tensor& a, const Tensor& b) {
    auto out = Take(slot, {a.size(0), a.size(1), b.size(2)}, a.options());
    return torch::bmm_out(out, a, b);
  }

 private:
  std::vector<Tensor> slots_;
};

// How a block's scores are formed: S = scale q k^T (scale 0: head_dim^-1/2), then c tanh(S / c)
// when softcap c > 0; uniform attention: zeros.
struct ScoreRule {
  bool uniform = false;
  double scale = 0, softcap = 0;
};

// Scores of the query rows q [kvH, G, Bq, hd] against keys [kvH, Bk, hd], stats dtype, hidden keys
// at -inf: [kvH, G, Bq, Bk], in `scratch`'s slot 0. With soft-capping, tanh(S / c) stays in slot 5
// (the reverse pass's 1 - tanh^2).
Tensor BlockScores(const ScoreRule& rule, const Tensor& q, const Tensor& k, const Tensor& hidden, torch::Dtype stats,
                   BlockScratch& scratch) {
  const int64_t kv = q.size(0), groups = q.size(1), rows = q.size(2), hd = q.size(3), keys = k.size(1);
  Tensor scores;
  if (rule.uniform) {
    scores = scratch.Take(0, {kv, groups, rows, keys}, q.options().dtype(stats)).zero_();
  } else {
    const double scale = rule.scale > 0 ? rule.scale : 1.0 / std::sqrt(static_cast<double>(hd));
    scores = scratch.Bmm(0, q.reshape({kv, groups * rows, hd}), k.transpose(1, 2)).view({kv, groups, rows, keys});
    scores = scores.to(stats).mul_(scale);
    if (rule.softcap > 0) {
      auto t = scratch.Take(5, scores.sizes(), scores.options());
      torch::tanh_out(t, scores.mul_(1.0 / rule.softcap));
      scores.copy_(t).mul_(rule.softcap);
    }
  }
  if (hidden.defined()) scores.masked_fill_(hidden, -std::numeric_limits<double>::infinity());
  return scores;
}

// [L, heads * hd] -> [kvH, G, L, hd] for queries (G = heads / kvH), [kvH, L, hd] for keys.
Tensor HeadsOf(const Tensor& x, int64_t kv_heads, int64_t groups) {
  const int64_t length = x.size(0), hd = x.size(1) / (kv_heads * groups);
  return x.view({length, kv_heads, groups, hd}).permute({1, 2, 0, 3}).contiguous();
}

}  // namespace

Tensor BlockedCausalAttention(const Tensor& q, const Tensor& k, const Tensor& v, const BlockedAttentionOptions& options) {
  const bool uniform = options.uniform;
  const int64_t window = options.window;
  const auto* between_blocks = options.between_blocks;
  const int64_t kv = q.size(0), groups = q.size(1), length = q.size(2), hd = q.size(3);
  if (uniform && window == 0) {  // A running mean: O(L), no scores at all.
    auto counts = torch::arange(1, length + 1, v.options()).view({1, 1, length, 1});
    return (torch::cumsum(v, 1).unsqueeze(1) / counts).expand({kv, groups, length, hd}).contiguous();
  }
  const auto stats = StatsDtype(q.scalar_type());
  const int64_t block = std::max<int64_t>(1, std::min(options.block, length));
  auto out = torch::empty({kv, groups, length, hd}, v.options());
  Tensor sums = torch::empty({kv, groups, length}, v.options().dtype(stats));
  BlockScratch scratch;
  int64_t pairs = 0;
  for (int64_t i0 = 0; i0 < length; i0 += block) {
    const int64_t i1 = std::min(length, i0 + block), rows = i1 - i0;
    auto q_block = q.narrow(2, i0, rows);
    auto maximum = torch::full({kv, groups, rows, 1}, -std::numeric_limits<double>::infinity(), v.options().dtype(stats));
    auto sum = torch::zeros({kv, groups, rows, 1}, v.options().dtype(stats));
    auto acc = torch::zeros({kv, groups, rows, hd}, v.options().dtype(stats));
    const KeyRange keys = KeysOf(i0, i1, window, block);
    for (int64_t j0 = keys.first_block; j0 < keys.end; j0 += block) {
      const int64_t j1 = std::min(keys.end, j0 + block);
      auto scores = BlockScores({uniform, options.scale, options.softcap}, q_block, k.narrow(1, j0, j1 - j0),
                                HiddenKeys(i0, i1, j0, j1, window, q.device()), stats, scratch);
      auto next = torch::maximum(maximum, std::get<0>(scores.max(-1, /*keepdim=*/true)));
      // A row with every key of the blocks so far hidden keeps -inf: its terms are exp(-inf) = 0.
      auto shift = torch::where(torch::isinf(next), torch::zeros_like(next), next);
      auto rescale = torch::exp(maximum - shift);
      auto p = scores.sub_(shift).exp_();
      sum.mul_(rescale).add_(p.sum(-1, /*keepdim=*/true));
      auto values = v.narrow(1, j0, j1 - j0).to(stats);  // [kvH, Bk, hd]
      acc.mul_(rescale).add_(scratch.Bmm(1, p.view({kv, groups * rows, j1 - j0}), values).view({kv, groups, rows, hd}));
      maximum = next;
      if (between_blocks && *between_blocks && ++pairs % kBlocksPerHeartbeat == 0 && !(*between_blocks)()) return Tensor();
    }
    out.narrow(2, i0, rows).copy_(acc / sum);
    sums.narrow(2, i0, rows).copy_((maximum + torch::log(sum)).squeeze(-1));
  }
  if (options.lse != nullptr) *options.lse = sums;
  return out;
}

namespace {

// The projection x [L, heads * hd] through a q/k norm: over each head's hd, or the whole width.
Tensor QkNormForward(const Attention& w, const Norm& norm, const Tensor& x, int64_t heads, NormSaved* saved) {
  if (!norm.present()) return x;
  if (!w.qk_norm_per_head) return NormForward(norm, x, saved);
  return NormForward(norm, x.view({x.size(0), heads, -1}), saved).reshape({x.size(0), -1});
}

Tensor AttentionForward(const Attention& w, const Rotary& rotary, const Tensor& x, int64_t block, LayerSaved* saved,
                        const std::function<bool()>* between_blocks) {
  const int64_t length = x.size(0), kv = w.kv_heads, groups = w.heads / w.kv_heads;
  auto q = HeadsOf(QkNormForward(w, w.q_norm, Forward(w.q, x), w.heads, &saved->q_norm), kv, groups);
  auto k = HeadsOf(QkNormForward(w, w.k_norm, Forward(w.k, x), kv, &saved->k_norm), kv, 1).squeeze(1);
  auto v = HeadsOf(Forward(w.v, x), kv, 1).squeeze(1).contiguous();
  if (rotary.cos.defined()) q = Rotate(q, rotary.cos, rotary.sin), k = Rotate(k, rotary.cos, rotary.sin);
  saved->q = q.contiguous();
  saved->k = k.contiguous();
  saved->v = v;
  BlockedAttentionOptions options;
  options.uniform = w.uniform;
  options.window = w.window;
  options.scale = w.scale;
  options.softcap = w.softcap;
  options.block = block;
  options.lse = &saved->lse;
  options.between_blocks = between_blocks;
  saved->out = BlockedCausalAttention(saved->q, saved->k, v, options);
  if (!saved->out.defined()) return Tensor();  // Stopped between blocks.
  // [kvH, G, L, hd] -> [L, heads * hd].
  return Forward(w.o, saved->out.permute({2, 0, 1, 3}).reshape({length, -1}));
}

// Positions per block of the reverse pass for `rows` cotangent rows (GradientOptions::attention_block).
int64_t ReverseBlock(const GradientOptions& options, int64_t heads, int64_t rows, int64_t length) {
  if (options.attention_block > 0) return std::min(options.attention_block, length);
  return CpuReverseAttentionBlock(heads, rows, length);
}

// d(normed projection) [K, R, heads * hd] -> d(projection), through the q/k norm of rows first...
Tensor QkNormBackward(const Attention& w, const Norm& norm, const NormSaved& saved, const Tensor& dy, int64_t heads,
                      int64_t first) {
  if (!norm.present()) return dy;
  const NormSaved rows = saved.Rows(first, dy.size(1));
  if (!w.qk_norm_per_head) return NormBackward(norm, rows, dy);
  return NormBackward(norm, rows, dy.view({dy.size(0), dy.size(1), heads, -1})).reshape(dy.sizes());
}

// dx = dV Wv + dK Wk over all L positions, + dQ Wq on the cotangent rows first.. (dv [kvH, L, K, hd],
// dk [kvH, K, L, hd], dq [kvH, G, R, K, hd]; dk and dq undefined for the value pathway), the q/k
// norms' transposes between. Each gradient is released once it is used (at long L each is
// K L kv_heads hd elements).
Tensor ProjectionsBackward(const Attention& w, const LayerSaved& saved, Tensor dv, Tensor dk, Tensor dq, int64_t first) {
  const int64_t kv = dv.size(0), length = dv.size(1), batch = dv.size(2), hd = dv.size(3);
  auto dx = torch::mm(dv.permute({2, 1, 0, 3}).reshape({batch * length, kv * hd}), w.v.back);
  dv.reset();
  if (dk.defined()) {
    auto dk_rows = QkNormBackward(w, w.k_norm, saved.k_norm, dk.permute({1, 2, 0, 3}).reshape({batch, length, kv * hd}), kv, 0);
    dk.reset();
    dx.addmm_(dk_rows.view({batch * length, kv * hd}), w.k.back);
  }
  dx = dx.view({batch, length, -1});
  if (dq.defined()) {
    const int64_t rows = dq.size(2);
    auto dq_rows = QkNormBackward(w, w.q_norm, saved.q_norm, dq.permute({3, 2, 0, 1, 4}).reshape({batch, rows, w.heads * hd}),
                                  w.heads, first);
    dq.reset();
    dx.narrow(1, first, rows).add_(torch::mm(dq_rows.view({batch * rows, w.heads * hd}), w.q.back).view({batch, rows, -1}));
  }
  return dx;
}

// The gradient w.r.t. the attention's input x [L, d] of cotangents dy [K, R, d] on its output
// rows first..L-1. With `value_only` the probabilities are constants: only the value branch
// dV = P^T dO, not the score branch (dP -> dq, dk). Undefined when between_blocks stopped it.
Tensor AttentionBackward(const Attention& w, const Rotary& rotary, const LayerSaved& saved, const Tensor& dy,
                         int64_t first, bool value_only, const GradientOptions& options) {
  const int64_t batch = dy.size(0), rows = dy.size(1), length = saved.v.size(1);
  const int64_t kv = w.kv_heads, groups = w.heads / w.kv_heads, hd = saved.v.size(2);
  const auto dtype = dy.scalar_type();
  const auto stats = StatsDtype(dtype);
  // d(head outputs) [kvH, G, R, K, hd]: positions before rows, so that a block of positions is
  // [kvH, G * Bq, K * hd] for the products shared by all K rows.
  auto d_out = Backward(w.o, dy).view({batch, rows, kv, groups, hd}).permute({2, 3, 1, 0, 4}).contiguous();
  Tensor dv = torch::zeros({kv, length, batch, hd}, dy.options());  // [kvH, L, K, hd]
  Tensor dq, dk;
  const bool scores = !w.uniform && !value_only;
  if (scores) {
    dq = torch::zeros({kv, groups, rows, batch, hd}, dy.options());
    dk = torch::zeros({kv, batch, length, hd}, dy.options());
  }
  if (w.uniform && w.window == 0) {
    // o_t = sum_{i <= t} v_i / (t + 1): dV_i = sum over rows t >= i of dO_t / (t + 1), per group.
    auto counts = torch::arange(first + 1, length + 1, d_out.options()).view({1, 1, rows, 1, 1});
    auto suffix = (d_out / counts).sum(1).flip(1).cumsum(1).flip(1);  // [kvH, R, K, hd]
    dv.narrow(1, first, rows).copy_(suffix);
    if (first > 0) dv.narrow(1, 0, first).copy_(suffix.narrow(1, 0, 1).expand({kv, first, batch, hd}));
  } else {
    const int64_t block = ReverseBlock(options, w.heads, batch, length);
    const double scale = w.scale > 0 ? w.scale : 1.0 / std::sqrt(static_cast<double>(hd));
    const ScoreRule rule{w.uniform, w.scale, w.softcap};
    const bool capped = w.softcap > 0 && !w.uniform;
    BlockScratch scratch;
    for (int64_t r0 = 0; r0 < rows; r0 += block) {
      const int64_t r1 = std::min(rows, r0 + block), count = r1 - r0, i0 = first + r0, i1 = first + r1;
      auto d_o = d_out.narrow(2, r0, count).contiguous();                 // [kvH, G, Bq, K, hd]
      auto q_block = saved.q.narrow(2, i0, count);                        // [kvH, G, Bq, hd]
      auto lse = saved.lse.narrow(2, i0, count).unsqueeze(-1);            // [kvH, G, Bq, 1]
      Tensor delta;  // D_i = dO_i . O_i per row and cotangent: [kvH, G, Bq, K, 1].
      if (scores) delta = (d_o.to(stats) * saved.out.narrow(2, i0, count).unsqueeze(3).to(stats)).sum(-1, true);
      const KeyRange keys = KeysOf(i0, i1, w.window, block);
      int64_t pairs = 0;
      for (int64_t j0 = keys.first_block; j0 < keys.end; j0 += block) {
        const int64_t j1 = std::min(keys.end, j0 + block), width = j1 - j0;
        // A long row of key blocks beats in groups too (the query block's end beats below).
        if (++pairs % kBlocksPerHeartbeat == 0 && options.between_blocks && !options.between_blocks()) return Tensor();
        auto k_block = saved.k.narrow(1, j0, width);
        auto p = BlockScores(rule, q_block, k_block, HiddenKeys(i0, i1, j0, j1, w.window, dy.device()), stats, scratch)
                     .sub_(lse)
                     .exp_();
        auto p_c = p.to(dtype);                                            // [kvH, G, Bq, Bk]
        // dV_j += P^T dO over every query head of the group and every cotangent row at once.
        dv.narrow(1, j0, width).add_(scratch.Bmm(1, p_c.view({kv, groups * count, width}).transpose(1, 2),
                                                 d_o.view({kv, groups * count, batch * hd}))
                                         .view({kv, width, batch, hd}));
        if (!scores) continue;
        // dP = dO V^T; dS = P (dP - D) scale: [kvH, G, Bq, K, Bk]; soft-capping's derivative
        // 1 - tanh^2(S / c) between (scratch slot 5 holds the block's tanh).
        if (capped) p.mul_(scratch.Take(5, p.sizes(), p.options()).pow(2).neg_().add_(1));
        auto d_p = scratch.Bmm(2, d_o.view({kv, groups * count * batch, hd}), saved.v.narrow(1, j0, width).transpose(1, 2))
                       .view({kv, groups, count, batch, width})
                       .to(stats);
        auto d_s = d_p.sub_(delta).mul_(p.unsqueeze(3)).mul_(scale).to(dtype);
        dq.narrow(2, r0, count).add_(scratch.Bmm(3, d_s.view({kv, groups * count * batch, width}), k_block)
                                         .view({kv, groups, count, batch, hd}));
        // dK_j += dS^T Q: the (group, row) pairs contracted, [kvH, K * Bk, G * Bq] x [kvH, G * Bq, hd].
        dk.narrow(2, j0, width).add_(scratch.Bmm(4, d_s.view({kv, groups * count, batch * width}).transpose(1, 2),
                                                 q_block.reshape({kv, groups * count, hd}))
                                         .view({kv, batch, width, hd}));
      }
      if (options.between_blocks && !options.between_blocks()) return Tensor();
    }
  }
  d_out.reset();  // The products are done: what follows holds dV, dK and dQ only.
  if (scores && rotary.cos.defined()) {
    dq = RotateBackward(dq.transpose(2, 3), rotary.cos.narrow(0, first, rows), rotary.sin.narrow(0, first, rows))
             .transpose(2, 3);
    dk = RotateBackward(dk, rotary.cos, rotary.sin);
  }
  return ProjectionsBackward(w, saved, std::move(dv), std::move(dk), std::move(dq), first);
}

// gelu(u) = u Phi(u): gelu'(u) = Phi(u) + u phi(u), formed in place.
Tensor GeluErfDerivative(const Tensor& u) {
  auto derivative = u.mul(M_SQRT1_2).erf_().add_(1).mul_(0.5);                              // Phi(u)
  return derivative.add_(u.pow(2).mul_(-0.5).exp_().mul_(u).mul_(M_2_SQRTPI * M_SQRT1_2 * 0.5));  // + u phi(u)
}

// gelu(u) = u/2 (1 + t), t = tanh(c (u + a u^3)), c = sqrt(2 / pi), a = 0.044715:
// gelu'(u) = (1 + t) / 2 + u/2 (1 - t^2) c (1 + 3 a u^2), formed in place.
Tensor GeluTanhDerivative(const Tensor& u) {
  const double c = std::sqrt(2.0 / M_PI), a = 0.044715;
  auto t = u.pow(3).mul_(a).add_(u).mul_(c).tanh_();
  auto derivative = t.pow(2).neg_().add_(1);                 // 1 - t^2
  derivative.mul_(u.pow(2).mul_(3 * a).add_(1)).mul_(u).mul_(0.5 * c);
  return derivative.add_(t.add_(1).mul_(0.5));               // + (1 + t) / 2
}

// The derivatives are formed in place, a few [L, m] temporaries at a time (a full expression
// would hold a dozen of them at once: at long L the forward's peak).
Tensor MlpForward(const Mlp& w, const Tensor& x, LayerSaved* saved) {
  const auto stats = StatsDtype(x.scalar_type());
  if (w.kind == Mlp::Kind::kGeluErf) {
    auto pre = Forward(w.in, x);
    saved->mlp_a = GeluErfDerivative(pre.to(stats)).to(x.dtype());
    return Forward(w.out, torch::gelu(pre));
  }
  if (w.kind == Mlp::Kind::kGeluTanh) {
    auto pre = Forward(w.in, x);
    saved->mlp_a = GeluTanhDerivative(pre.to(stats)).to(x.dtype());
    return Forward(w.out, torch::gelu(pre, "tanh"));
  }
  auto gate = Forward(w.gate, x), up = Forward(w.in, x);
  auto g = gate.to(stats);
  if (w.kind == Mlp::Kind::kGeGluTanh || w.kind == Mlp::Kind::kGeGluErf) {
    const bool exact = w.kind == Mlp::Kind::kGeGluErf;
    saved->mlp_a = (exact ? GeluErfDerivative(g) : GeluTanhDerivative(g)).mul_(up.to(stats)).to(x.dtype());
    saved->mlp_b = torch::gelu(gate, exact ? "none" : "tanh");
    return Forward(w.out, saved->mlp_b * up);
  }
  auto sigma = torch::sigmoid(g);
  // d/d gate of silu(gate) * up = up * sigma (1 + g (1 - sigma)).
  saved->mlp_a = sigma.neg().add_(1).mul_(g).add_(1).mul_(sigma).mul_(up.to(stats)).to(x.dtype());
  saved->mlp_b = torch::silu(gate);
  return Forward(w.out, saved->mlp_b * up);
}

// Whether the MLP multiplies an activated gate by an up projection (SwiGLU, GeGLU).
bool Gated(const Mlp& w) { return w.kind != Mlp::Kind::kGeluTanh && w.kind != Mlp::Kind::kGeluErf; }

// dy [K, R, d] on rows first.. -> d x [K, R, d].
Tensor MlpBackward(const Mlp& w, const LayerSaved& saved, const Tensor& dy, int64_t first) {
  const int64_t rows = dy.size(1);
  auto dz = Backward(w.out, dy);  // [K, R, m]
  if (!Gated(w)) return Backward(w.in, dz.mul_(saved.mlp_a.narrow(0, first, rows)));
  auto d_gate = dz * saved.mlp_a.narrow(0, first, rows);
  auto d_up = dz.mul_(saved.mlp_b.narrow(0, first, rows));
  const int64_t m = dz.size(2);
  auto dx = torch::mm(d_gate.view({-1, m}), w.gate.back);
  dx.addmm_(d_up.view({-1, m}), w.in.back);
  return dx.view({dy.size(0), rows, -1});
}

// schedule.h's rule for this MLP: whether its per-position Jacobians cost less than K row products.
bool MlpJacobiansPay(const Mlp& w, int64_t rows, int64_t d) {
  return models::MlpJacobiansPay(rows, d, w.out.back.size(1), Gated(w));
}

// dy [K, R, d] on rows first.. -> dx [K, R, d] through C_i = out.back (a_i * W1 + b_i * W2): the
// MLP's Jacobian at position i as a map of row vectors (GELU: W1 = c_fc, a = gelu'; SwiGLU:
// W1 = gate_proj, W2 = up_proj). Formed for blocks of positions as one product out.back [d, m]
// x B [m, (positions, d)], applied to all K rows of a position as one product.
Tensor MlpBackwardByJacobians(const Mlp& w, const LayerSaved& saved, const Tensor& dy, int64_t first) {
  const int64_t rows = dy.size(1), d = dy.size(2), m = w.out.back.size(1);
  const bool swiglu = Gated(w);
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

// Undefined when `between_blocks` stopped it.
Tensor LayerForward(const Layer& w, const Rotary& rotary, const Tensor& h, int64_t block, LayerSaved* saved,
                    const std::function<bool()>* between_blocks = nullptr) {
  auto attention = AttentionForward(w.attention, rotary, NormForward(w.norm1, h, &saved->norm1), block, saved, between_blocks);
  if (!attention.defined()) return Tensor();
  attention = NormForward(w.post_attention_norm, attention, &saved->post_attention);
  const double r = w.residual_multiplier;
  auto x = r == 1.0 ? h + attention : h + attention * r;
  if (!w.has_mlp) return x;
  // Parallel: the MLP reads the layer's input, not the attention's sum.
  auto mlp = NormForward(w.post_mlp_norm, MlpForward(w.mlp, NormForward(w.norm2, w.parallel_residual ? h : x, &saved->norm2), saved),
                         &saved->post_mlp);
  return r == 1.0 ? x + mlp : x + mlp * r;
}

// Cotangents dy [K, R, d] on the layer's output rows first..L-1 -> [K, L, d] on its input, in
// groups of options.rows_per_product rows (the MLP's Jacobians, when used, serve all K rows).
Tensor LayerBackward(const Layer& w, const Rotary& rotary, const LayerSaved& saved, const Tensor& dy, int64_t first,
                     const GradientOptions& options) {
  const int64_t total = dy.size(0), rows = dy.size(1), d = dy.size(2), length = saved.v.size(1);
  const int64_t step = options.rows_per_product > 0 ? std::min(options.rows_per_product, total) : total;
  const double r = w.residual_multiplier;
  // The cotangent on a branch's output before its post norm (the residual's multiplier and the
  // post norm's transpose).
  const auto into_branch = [r](const Norm& post, const NormSaved& saved_rows, const Tensor& g) {
    return NormBackward(post, saved_rows, r == 1.0 ? g : g * r);
  };
  using MlpJacobians = GradientOptions::MlpJacobians;
  const bool jacobians = w.has_mlp && (options.mlp_jacobians == MlpJacobians::kOn ||
                                       (options.mlp_jacobians == MlpJacobians::kAuto && MlpJacobiansPay(w.mlp, total, d)));
  const NormSaved post_mlp_rows = saved.post_mlp.Rows(first, rows);
  Tensor mlp_all = jacobians ? MlpBackwardByJacobians(w.mlp, saved, into_branch(w.post_mlp_norm, post_mlp_rows, dy), first)
                             : Tensor();
  Tensor out = step < total ? torch::empty({total, length, d}, dy.options()) : Tensor();
  for (int64_t start = 0; start < total; start += step) {
    const int64_t count = std::min(step, total - start);
    auto g = dy.narrow(0, start, count);
    Tensor dh = g, d_mlp_input;  // dh: on the attention's output (sequential: through the MLP too).
    if (w.has_mlp) {
      d_mlp_input = NormBackward(w.norm2, saved.norm2.Rows(first, rows),
                                 jacobians ? mlp_all.narrow(0, start, count)
                                           : MlpBackward(w.mlp, saved, into_branch(w.post_mlp_norm, post_mlp_rows, g), first));
      // Sequential: the MLP's part joins dh now and is not kept beside it.
      if (!w.parallel_residual) dh = d_mlp_input.add_(g), d_mlp_input = Tensor();
    }
    auto d_attention = AttentionBackward(w.attention, rotary, saved, into_branch(w.post_attention_norm, saved.post_attention.Rows(first, rows), dh),
                                         first, options.detach_attention_probabilities, options);
    if (!d_attention.defined()) return Tensor();  // Stopped between blocks.
    auto dx = NormBackward(w.norm1, saved.norm1, d_attention);
    dx.narrow(1, first, rows).add_(dh);
    if (w.parallel_residual && d_mlp_input.defined()) dx.narrow(1, first, rows).add_(d_mlp_input);
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
    if (stack_.input_scale != 1.0) h = h * stack_.input_scale;
    length_ = target;
    // Each layer's rotary tables; layers with the same frequencies and scale share theirs.
    for (size_t l = 0; l < stack_.layers.size(); ++l) {
      const auto& attention = stack_.layers[l].attention;
      rotary_.emplace_back();
      if (!attention.rotary_inv_freq.defined()) continue;
      for (size_t j = 0; j < l; ++j) {
        const auto& other = stack_.layers[j].attention;
        if (other.rotary_inv_freq.defined() && other.rotary_scale == attention.rotary_scale &&
            other.rotary_inv_freq.sizes() == attention.rotary_inv_freq.sizes() &&
            torch::equal(other.rotary_inv_freq, attention.rotary_inv_freq)) {
          rotary_[l] = rotary_[j];
          break;
        }
      }
      if (rotary_[l].cos.defined()) continue;
      auto tables = RotaryTables(length_, attention.rotary_inv_freq.to(h.device()), attention.rotary_scale, h);
      rotary_[l] = {tables.first, tables.second};
    }
    block_ = std::min(options.attention_block > 0 ? options.attention_block : kDefaultAttentionBlock, length_);
    saved_.resize(stack_.layers.size());
    for (size_t l = 0; l < stack_.layers.size(); ++l) {
      inputs_.push_back(h);
      LayerSaved saved;
      h = LayerForward(stack_.layers[l], rotary_[l], h, block_, &saved, &options.between_blocks);
      if (!h.defined()) {  // Stopped: nothing more is computed.
        stopped_ = true;
        return;
      }
      if (keep_) saved_[l] = std::move(saved);
    }
    final_hidden_ = NormForward(stack_.final_norm, h, &final_norm_);
  }

  using InputReversePass::InputGradients;
  Tensor InputGradients(const Tensor& cotangents, int64_t layer, const GradientOptions& options) override {
    torch::NoGradGuard no_grad;
    if (stopped_) return Tensor();
    const int64_t batch = cotangents.size(0), d = cotangents.size(1);
    auto dy = cotangents.to(final_hidden_.options()).view({batch, 1, d});
    int64_t top = layer;
    if (layer == kFinalHidden) {
      dy = NormBackward(stack_.final_norm, final_norm_.Rows(length_ - 1, 1), dy);
      top = static_cast<int64_t>(stack_.layers.size());
    }
    return Backward(std::move(dy), top, length_ - 1, options);  // The cotangents enter at the target row only.
  }

  Tensor SequenceInputGradients(const Tensor& cotangents, const GradientOptions& options) override {
    torch::NoGradGuard no_grad;
    if (stopped_) return Tensor();
    auto dy = NormBackward(stack_.final_norm, final_norm_, cotangents.to(final_hidden_.options()).contiguous());
    return Backward(std::move(dy), static_cast<int64_t>(stack_.layers.size()), 0, options);
  }

  Tensor FinalHidden() const override { return final_hidden_[length_ - 1]; }
  Tensor FinalHiddenStates() const override { return final_hidden_; }
  bool Stopped() const override { return stopped_; }

 private:
  // dy [K, R, d] on the output rows first..T-1 of layer `top` (1-based; its output) -> [K, L, d]
  // on the input embeddings, layer by layer.
  Tensor Backward(Tensor dy, int64_t top, int64_t first, const GradientOptions& options) {
    const int64_t batch = dy.size(0), d = dy.size(2);
    for (int64_t l = top - 1; l >= 0; --l) {
      const Layer& w = stack_.layers[l];
      if (saved_[l]) {
        dy = LayerBackward(w, rotary_[l], *saved_[l], dy, first, options);
      } else {
        LayerSaved saved;
        if (!LayerForward(w, rotary_[l], inputs_[l], block_, &saved, &options.between_blocks).defined()) return Tensor();
        dy = LayerBackward(w, rotary_[l], saved, dy, first, options);
      }
      if (!dy.defined()) return Tensor();
      first = 0;
      if (options.between_layers && !options.between_layers()) return Tensor();
    }
    if (first > 0) {  // No layer below the cotangents (not reached: layer >= 1).
      dy = torch::cat({torch::zeros({batch, first, d}, dy.options()), dy}, 1);
    }
    if (stack_.input_scale != 1.0) dy.mul_(stack_.input_scale);
    if (full_length_ == length_) return dy;
    return torch::cat({dy, torch::zeros({batch, full_length_ - length_, d}, dy.options())}, 1);
  }

  Stack stack_;
  int64_t full_length_ = 0, length_ = 0, block_ = kDefaultAttentionBlock;
  bool keep_ = true;
  bool stopped_ = false;
  std::vector<Rotary> rotary_;                  // Per layer (undefined tables: no rotary).
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
