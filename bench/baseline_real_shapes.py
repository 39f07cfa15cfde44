#!/usr/bin/python3
"""The strongest straightforward PyTorch baseline of posbias' Jacobian measurement at real shapes.

The same measurement as posbias-measure (||d h_L / d e_j||^2 per position j of the final hidden
state at the last position: exact over the d unit rows, or Hutchinson over K Gaussian probes), on
the same weights (posbias-measure --export-weights / --export-config), the same token ids and the
same probes (posbias' seeded stream, drawn here with the same generator), as a PyTorch user would
write it today:
  * attention through scaled_dot_product_attention (torch >= 2.0; on Debian bookworm's torch 1.13
    its private predecessor F._scaled_dot_product_attention when it agrees with the eager formula,
    else the eager softmax(QK^T)V: the script says which ran);
  * torch.utils.checkpoint around every layer (--checkpoint off keeps all activations);
  * the rows' vector-Jacobian products through torch.autograd.grad(..., is_grads_batched=True)
    (vmap) in chunks, or one row at a time where vmap cannot run the backward (said in the output).
Families: gpt2, qwen2, llama (rope_scaling llama3 included) and qwen3 (q/k norms).

    /usr/bin/python3 bench/baseline_real_shapes.py --weights W.safetensors --config config.json \
        --tokens tokens.json --length 1024 --method hutchinson --probes 8 --input-seed 7 \
        [--threads 2] [--checkpoint on|off] [--chunk 64] [--device cpu] [--dtype float32]

On a CUDA device (the GPU kit: bench/run_real_shapes.sh with DEVICE=cuda:0) the weights, ids and
rows live there and the clock is read after a synchronization; peak memory is then the device's
(torch.cuda.max_memory_allocated) beside the process's RSS.

Prints one JSON object: seconds (forward and every row's VJP for the one sample, after the model
is loaded), sq_norm (per position, 1-based j at index j-1), how it ran, and the peak RSS.
"""

import argparse
import json
import math
import os
import resource
import sys
import time

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models"))
import reference_models as rm  # noqa: E402  (the safetensors reader)

GOLDEN = 0x9E3779B97F4A7C15  # posbias' per-sample probe stream: seed ^ (GOLDEN * (s + 1)) mod 2^64.


def rms_norm(x, w, eps):
    xf = x.float() if x.dtype != torch.float64 else x
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def inv_frequencies(cfg, hd):
    inv = 1.0 / (float(cfg.get("rope_theta", 10000.0)) ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    scaling = cfg.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "llama3":  # transformers' _compute_llama3_parameters
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        original = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > original / low, inv / factor, inv)
        smooth = (original / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= original / high) & (wavelen <= original / low)
        inv = torch.where(medium, smoothed, scaled)
    elif kind not in (None, "default"):
        raise NotImplementedError(f"rope_scaling {scaling}")
    return inv


def pick_attention(dtype):
    """The best causal attention that agrees with the eager formula here: (name, function)."""
    def eager(q, k, v):
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).triu(1)
        return torch.softmax(scores.masked_fill(mask, float("-inf")).float(), -1).to(q.dtype) @ v

    candidates = []
    if hasattr(F, "scaled_dot_product_attention"):
        candidates.append(("sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)))
    if hasattr(F, "_scaled_dot_product_attention"):
        candidates.append(("sdpa-private",
                           lambda q, k, v: F._scaled_dot_product_attention(q, k, v, None, 0.0, False, True)[0]))
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 7, 4, generator=g, dtype=dtype) for _ in range(3))
    for name, fn in candidates:
        try:
            if torch.allclose(fn(q, k, v), eager(q, k, v), atol=1e-5, rtol=1e-4):
                return name, fn
        except (RuntimeError, TypeError):
            continue
    return "eager", eager


class Model:
    def __init__(self, state, cfg, attention):
        self.s, self.c, self.attention = state, cfg, attention
        self.gpt2 = cfg.get("model_type") == "gpt2"
        self.qwen3 = cfg.get("model_type") == "qwen3"
        if self.gpt2:
            self.layers, self.d, self.heads = cfg["n_layer"], cfg["n_embd"], cfg["n_head"]
            self.kv_heads, self.hd, self.eps = self.heads, self.d // self.heads, cfg.get("layer_norm_epsilon", 1e-5)
        else:
            self.layers, self.d, self.heads = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"]
            self.kv_heads = cfg.get("num_key_value_heads", self.heads)
            self.hd = cfg.get("head_dim") or self.d // self.heads
            self.eps = cfg.get("rms_norm_eps", 1e-6)
            self.inv = inv_frequencies(cfg, self.hd)

    def w(self, name):
        return self.s.get(name)

    def embed(self, ids):
        if self.gpt2:
            return self.w("transformer.wte.weight")[ids] + self.w("transformer.wpe.weight")[: len(ids)]
        return self.w("model.embed_tokens.weight")[ids]

    def rotary(self, length, dtype):
        angles = torch.outer(torch.arange(length, dtype=torch.float64), self.inv)
        angles = torch.cat((angles, angles), -1)
        device = self.w("model.embed_tokens.weight").device
        return angles.cos().to(device, dtype), angles.sin().to(device, dtype)

    def heads_of(self, x, n):
        return x.view(1, x.shape[1], n, self.hd).transpose(1, 2)

    def attend(self, q, k, v):
        rep = self.heads // self.kv_heads
        if rep > 1:
            k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        out = self.attention(q, k, v)
        return out.transpose(1, 2).reshape(1, q.shape[2], self.heads * self.hd)

    def gpt2_layer(self, i, x):
        p = f"transformer.h.{i}."
        h = F.layer_norm(x, (self.d,), self.w(p + "ln_1.weight"), self.w(p + "ln_1.bias"), self.eps)
        q, k, v = torch.addmm(self.w(p + "attn.c_attn.bias"), h[0], self.w(p + "attn.c_attn.weight"))[None].split(self.d, -1)
        a = self.attend(self.heads_of(q, self.heads), self.heads_of(k, self.heads), self.heads_of(v, self.heads))
        x = x + torch.addmm(self.w(p + "attn.c_proj.bias"), a[0], self.w(p + "attn.c_proj.weight"))[None]
        h = F.layer_norm(x, (self.d,), self.w(p + "ln_2.weight"), self.w(p + "ln_2.bias"), self.eps)
        h = F.gelu(torch.addmm(self.w(p + "mlp.c_fc.bias"), h[0], self.w(p + "mlp.c_fc.weight")), approximate="tanh")
        return x + torch.addmm(self.w(p + "mlp.c_proj.bias"), h, self.w(p + "mlp.c_proj.weight"))[None]

    def llama_layer(self, i, x, cos, sin):
        p = f"model.layers.{i}."
        h = rms_norm(x, self.w(p + "input_layernorm.weight"), self.eps)
        q, k, v = (F.linear(h, self.w(p + f"self_attn.{n}_proj.weight"), self.w(p + f"self_attn.{n}_proj.bias"))
                   for n in "qkv")
        q, k, v = self.heads_of(q, self.heads), self.heads_of(k, self.kv_heads), self.heads_of(v, self.kv_heads)
        if self.qwen3:
            q = rms_norm(q, self.w(p + "self_attn.q_norm.weight"), self.eps)
            k = rms_norm(k, self.w(p + "self_attn.k_norm.weight"), self.eps)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        x = x + F.linear(self.attend(q, k, v), self.w(p + "self_attn.o_proj.weight"))
        h = rms_norm(x, self.w(p + "post_attention_layernorm.weight"), self.eps)
        gate = F.linear(h, self.w(p + "mlp.gate_proj.weight"))
        return x + F.linear(F.silu(gate) * F.linear(h, self.w(p + "mlp.up_proj.weight")),
                            self.w(p + "mlp.down_proj.weight"))

    def hidden(self, e, use_checkpoint):
        x = e[None]
        extra = () if self.gpt2 else self.rotary(e.shape[0], e.dtype)
        layer = self.gpt2_layer if self.gpt2 else self.llama_layer
        for i in range(self.layers):
            fn = lambda x, *a, i=i: layer(i, x, *a)  # noqa: E731
            x = checkpoint(fn, x, *extra, use_reentrant=False) if use_checkpoint else fn(x, *extra)
        if self.gpt2:
            return F.layer_norm(x, (self.d,), self.w("transformer.ln_f.weight"), self.w("transformer.ln_f.bias"), self.eps)
        return rms_norm(x, self.w("model.norm.weight"), self.eps)


def orthogonal_rows(probes, d, g):
    """posbias' orthogonal probes (jacobian/probes.cc): K rows in blocks (2 blocks when K < d, else
    ceil(K / d)), each block the first rows of a Haar matrix (QR of a float64 Gaussian d x d, the
    columns' signs fixed by R's diagonal) times sqrt(d)."""
    blocks = -(-probes // d) if probes >= d else min(probes, 2)
    sizes = [probes // blocks + (1 if m < probes % blocks else 0) for m in range(blocks)]
    rows = []
    for size in sizes:
        q, r = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
        signs = torch.sign(r.diagonal())
        signs[signs == 0] = 1
        rows.append((q * signs)[:size] * math.sqrt(d))
    return torch.cat(rows).float()


def cotangent_rows(args, d, length):
    """[n, 1, L, d] rows on the last position: unit rows (exact) or posbias' probes of sample 1."""
    if args.method == "exact":
        rows = torch.eye(d)
    else:
        g = torch.Generator().manual_seed((args.input_seed ^ GOLDEN) % (1 << 64))
        if args.probe_distribution == "orthogonal":
            rows = orthogonal_rows(args.probes, d, g)
        else:
            rows = torch.randn(args.probes, d, generator=g, dtype=torch.float32)
    cot = torch.zeros(rows.shape[0], 1, length, d)
    cot[:, 0, length - 1, :] = rows
    return cot


def squared_norms(model, e, cot, args, how):
    """Sum (exact) or mean (Hutchinson) over rows of ||row^T J_j||^2 -> [L]: one forward, its graph
    kept for every chunk of rows but the last."""
    total = torch.zeros(e.shape[0], dtype=torch.float64, device=e.device)
    hidden = model.hidden(e, args.checkpoint == "on")
    n = cot.shape[0]
    for s in range(0, n, args.chunk):
        c = cot[s:s + args.chunk]
        last = s + args.chunk >= n
        if how["vjp"] == "vmap":
            try:
                (g,) = torch.autograd.grad(hidden, e, grad_outputs=c, retain_graph=not last, is_grads_batched=True)
                total += g.double().pow(2).sum(-1).sum(0)
                continue
            except RuntimeError as error:
                how["vjp"], how["vmap_error"] = "loop", str(error).splitlines()[0][:200]
                hidden = model.hidden(e, args.checkpoint == "on")  # The failed try may have freed the graph.
        for i in range(c.shape[0]):
            (g,) = torch.autograd.grad(hidden, e, grad_outputs=c[i], retain_graph=not (last and i + 1 == c.shape[0]))
            total += g.double().pow(2).sum(-1)
    return total if args.method == "exact" else total / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--tokens", required=True, help="posbias-measure's `tokens` (the first sample's first L ids)")
    ap.add_argument("--length", type=int, required=True)
    ap.add_argument("--method", choices=("exact", "hutchinson"), required=True)
    ap.add_argument("--probes", type=int, default=8)
    ap.add_argument("--input-seed", type=int, default=0, help="posbias-measure's --input-seed (its probes)")
    ap.add_argument("--probe-distribution", choices=("orthogonal", "gaussian"), default="orthogonal",
                    help="posbias-measure's --probe-distribution (its default: orthogonal)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--checkpoint", choices=("on", "off"), default="on")
    ap.add_argument("--chunk", type=int, default=64, help="rows per batched VJP")
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    ap.add_argument("--dtype", choices=("float32", "float64", "bfloat16", "float16"), default="float32")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    cfg = json.load(open(args.config))
    state, _ = rm.load_safetensors(args.weights)
    state = {k: v.to(device, dtype) for k, v in state.items()}
    name, attention = pick_attention(torch.float32)
    model = Model(state, cfg, attention)
    ids = torch.tensor(json.load(open(args.tokens))[0][: args.length], device=device)
    rows_of = lambda a, length: cotangent_rows(a, model.d, length).to(device, dtype)  # noqa: E731
    how = {"attention": name, "vjp": "vmap", "checkpoint": args.checkpoint == "on"}
    # Whether vmap runs this backward, found on 4 positions and 2 rows before the clock starts.
    probe_args = argparse.Namespace(**{**vars(args), "chunk": 2})
    tiny = model.embed(ids[:4]).detach().requires_grad_(True)
    squared_norms(model, tiny, rows_of(probe_args, 4)[:2], probe_args, how)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    sync()
    start = time.perf_counter()
    e = model.embed(ids).detach().requires_grad_(True)
    sq = squared_norms(model, e, rows_of(args, args.length), args, how)
    sync()
    seconds = time.perf_counter() - start
    print(json.dumps(dict(seconds=seconds, length=args.length, method=args.method,
                          rows=model.d if args.method == "exact" else args.probes, threads=args.threads,
                          device=args.device, dtype=args.dtype, torch=torch.__version__, how=how,
                          sq_norm=sq.cpu().tolist(),
                          peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                          peak_device_mib=(torch.cuda.max_memory_allocated(device) / 2**20
                                           if device.type == "cuda" else None))))


if __name__ == "__main__":
    main()
