#!/usr/bin/python3
"""Plain PyTorch reimplementation of the Hugging Face GPT-2 and Qwen2 forward passes.

This is the independent Python route that checks posbias' LibTorch model zoo and its Jacobian-norm
engine (THEORY.md sections 6-7). It needs only Debian's /usr/bin/python3 with python3-torch (1.13):
no transformers, no safetensors package. Models are plain functions of a state dict with Hugging Face
parameter names and a Hugging Face config dict (as read from config.json).

Contents:

* ``load_safetensors(path) -> (tensors, metadata)`` / ``save_safetensors(path, tensors, metadata)``:
  a pure-Python safetensors reader/writer (dtypes F64, F32, F16, BF16, I64, plus I32/I16/I8/U8/BOOL).
* ``embed(state, config, input_ids, ...)``: the input embeddings e_j the Jacobians are taken against
  (token embedding, plus the learned absolute position embedding for GPT-2 unless ablated).
* ``forward(state, config, input_ids=None, inputs_embeds=None, ...)``: dict with ``hidden`` (after the
  final norm), ``logits`` and ``layer_outputs`` (residual stream after each layer).
  NOTE: unlike Hugging Face, ``inputs_embeds`` here are the e_j returned by ``embed`` -- for GPT-2
  they already contain the position embedding, which is *not* added again.
* ``jacobian_sq_norms(state, config, input_ids, target=None, ...)``: brute-force exact
  ||d hidden[:, target] / d e_j||_F^2 for every position j, one autograd.grad call per output
  coordinate.
* ``random_state(config, seed, ...)``: random HF-named weights for tests and benchmarks.

Ablation switches (keyword arguments everywhere): ``no_position_encoding`` (GPT-2: no wpe; Qwen2: no
rotary rotation), ``uniform_attention`` (attention logits forced to 0 before the causal mask, so each
position averages its prefix uniformly: the Cesaro matrix), ``no_mlp`` (skip the MLP sub-block,
including its norm).

Semantics follow transformers' eager implementations (GPT2LMHeadModel, Qwen2ForCausalLM) in eval mode
(no dropout), without a KV cache, without padding/attention masks, positions 0..L-1.
"""

import json
import math
import struct
import sys

import torch
import torch.nn.functional as F

__all__ = [
    "load_safetensors", "save_safetensors", "load_model", "normalize_config", "model_type",
    "cast_state", "embed", "forward", "jacobian_sq_norms", "random_state", "gpt2_config",
    "qwen2_config", "cesaro_matrix", "layer_norm", "rms_norm", "gelu_new",
]

# ------------------------------------------------------------------------------------------------
# safetensors
# ------------------------------------------------------------------------------------------------
# Format: u64 little-endian header length N, N bytes of JSON header
#   {name: {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, "__metadata__": {...}}
# then the byte buffer; offsets are relative to the start of the buffer. Data is little-endian,
# C-contiguous.

_ST_DTYPES = {
    "F64": (torch.float64, 8),
    "F32": (torch.float32, 4),
    "F16": (torch.float16, 2),
    "BF16": (None, 2),  # special-cased: read as int16 and shifted into float32
    "I64": (torch.int64, 8),
    "I32": (torch.int32, 4),
    "I16": (torch.int16, 2),
    "I8": (torch.int8, 1),
    "U8": (torch.uint8, 1),
    "BOOL": (torch.bool, 1),
}
_TORCH_TO_ST = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}

if sys.byteorder != "little":  # pragma: no cover - every supported host is little-endian
    raise ImportError("reference_models' safetensors code assumes a little-endian host")


def _bf16_bits_to_float32(bits_i16):
    """int16 tensor of bfloat16 bit patterns -> float32 tensor (exact)."""
    return ((bits_i16.to(torch.int32) & 0xFFFF) << 16).view(torch.float32)


def _float_to_bf16_bits(t):
    """Any float tensor -> int16 tensor of bfloat16 bit patterns (round-to-nearest-even via torch)."""
    f32 = t.to(torch.bfloat16).to(torch.float32).contiguous()  # exactly representable now
    hi = (f32.view(torch.int32) >> 16) & 0xFFFF                 # low 16 bits are zero
    hi = torch.where(hi >= 0x8000, hi - 0x10000, hi)           # reinterpret as signed int16
    return hi.to(torch.int16)


def load_safetensors(path, bf16="float32"):
    """Read a .safetensors file. Returns (dict name -> tensor, metadata dict (str -> str)).

    BF16 tensors are returned as float32 (exact) by default, or as torch.bfloat16 if
    ``bf16="bfloat16"``. Tensors own their memory (the file is not kept mapped).
    """
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header length {n} exceeds file size {len(raw)}")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    buf = bytearray(raw[8 + n:])  # writable, so torch.frombuffer does not warn
    metadata = header.pop("__metadata__", None) or {}
    tensors = {}
    for name, info in header.items():
        dt = info["dtype"]
        if dt not in _ST_DTYPES:
            raise ValueError(f"{path}: tensor {name!r} has unsupported dtype {dt}")
        torch_dtype, size = _ST_DTYPES[dt]
        shape = [int(s) for s in info["shape"]]
        begin, end = (int(o) for o in info["data_offsets"])
        count = math.prod(shape)
        if end - begin != count * size or end > len(buf) or begin < 0:
            raise ValueError(f"{path}: tensor {name!r} has inconsistent data_offsets {begin},{end}")
        if count == 0:
            t = torch.empty(shape, dtype=torch_dtype or torch.float32)
        elif dt == "BF16":
            bits = torch.frombuffer(buf, dtype=torch.int16, count=count, offset=begin)
            t = _bf16_bits_to_float32(bits).reshape(shape)
            if bf16 == "bfloat16":
                t = t.to(torch.bfloat16)
        else:
            t = torch.frombuffer(buf, dtype=torch_dtype, count=count, offset=begin).reshape(shape)
        tensors[name] = t.clone()
    return tensors, metadata


def save_safetensors(path, tensors, metadata=None, dtypes=None):
    """Write tensors (dict name -> tensor) to ``path`` in safetensors format.

    ``dtypes`` optionally maps names to the safetensors dtype to store ("F32", "BF16", ...); by
    default a tensor's own dtype is used. Names are written in sorted order, like the safetensors
    package does.
    """
    dtypes = dtypes or {}
    header = {}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu()
        dt = dtypes.get(name) or _TORCH_TO_ST.get(t.dtype)
        if dt is None:
            raise ValueError(f"tensor {name!r}: unsupported dtype {t.dtype}")
        if dt == "BF16":
            data = _float_to_bf16_bits(t).contiguous().numpy().tobytes()
        else:
            data = t.to(_ST_DTYPES[dt][0]).contiguous().numpy().tobytes()
        header[name] = {"dtype": dt, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hbytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hbytes += b" " * ((-len(hbytes)) % 8)  # pad to 8-byte alignment, as the reference writer does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hbytes)))
        f.write(hbytes)
        for c in chunks:
            f.write(c)


# ------------------------------------------------------------------------------------------------
# Configs
# ------------------------------------------------------------------------------------------------

def gpt2_config(n_layer=2, n_embd=64, n_head=4, n_inner=None, vocab_size=128, n_positions=64,
                layer_norm_epsilon=1e-5, activation_function="gelu_new", **extra):
    cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": n_layer,
           "n_embd": n_embd, "n_head": n_head, "n_inner": n_inner, "vocab_size": vocab_size,
           "n_positions": n_positions, "layer_norm_epsilon": layer_norm_epsilon,
           "activation_function": activation_function, "tie_word_embeddings": True}
    cfg.update(extra)
    return cfg


def qwen2_config(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=128, vocab_size=128, max_position_embeddings=64,
                 rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False, **extra):
    cfg = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"],
           "num_hidden_layers": num_hidden_layers, "hidden_size": hidden_size,
           "num_attention_heads": num_attention_heads, "num_key_value_heads": num_key_value_heads,
           "intermediate_size": intermediate_size, "vocab_size": vocab_size,
           "max_position_embeddings": max_position_embeddings, "rms_norm_eps": rms_norm_eps,
           "rope_theta": rope_theta, "tie_word_embeddings": tie_word_embeddings,
           "hidden_act": "silu"}
    cfg.update(extra)
    return cfg


def model_type(config, state=None):
    """'gpt2' or 'qwen2', from config["model_type"], config["architectures"], the keys, or names."""
    mt = str(config.get("model_type") or "").lower()
    if mt in ("gpt2", "qwen2"):
        return mt
    for a in config.get("architectures") or []:
        a = a.lower()
        if a.startswith("gpt2"):
            return "gpt2"
        if a.startswith("qwen2"):
            return "qwen2"
    if "n_embd" in config or "n_layer" in config:
        return "gpt2"
    if "num_key_value_heads" in config or "rope_theta" in config or "rms_norm_eps" in config:
        return "qwen2"
    if state is not None:
        if any(k.endswith("wte.weight") for k in state):
            return "gpt2"
        if any(k.endswith("embed_tokens.weight") for k in state):
            return "qwen2"
    raise ValueError(f"cannot tell the architecture of config {config}")


def normalize_config(config, state=None):
    """Canonical internal config: arch, layers, width, heads, kv_heads, head_dim, mlp_width, vocab,
    max_positions, eps, rope_theta, tie, act. Accepts HF keys (and GPT-2's HF attribute aliases)."""
    arch = model_type(config, state)
    c = dict(config)
    if arch == "gpt2":
        layers = c.get("n_layer", c.get("num_hidden_layers"))
        width = c.get("n_embd", c.get("hidden_size"))
        heads = c.get("n_head", c.get("num_attention_heads"))
        inner = c.get("n_inner")
        out = dict(arch="gpt2", layers=int(layers), width=int(width), heads=int(heads),
                   kv_heads=int(heads), mlp_width=int(inner) if inner is not None else 4 * int(width),
                   vocab=int(c.get("vocab_size", 50257)),
                   max_positions=int(c.get("n_positions", c.get("max_position_embeddings", 1024))),
                   eps=float(c.get("layer_norm_epsilon", 1e-5)), rope_theta=None,
                   tie=bool(c.get("tie_word_embeddings", True)),
                   act=str(c.get("activation_function", "gelu_new")),
                   scale_attn_weights=bool(c.get("scale_attn_weights", True)),
                   scale_by_layer=bool(c.get("scale_attn_by_inverse_layer_idx", False)))
    else:
        width = int(c["hidden_size"])
        heads = int(c["num_attention_heads"])
        kv = c.get("num_key_value_heads")
        if c.get("rope_scaling"):
            raise NotImplementedError(f"rope_scaling {c['rope_scaling']} is not implemented")
        out = dict(arch="qwen2", layers=int(c["num_hidden_layers"]), width=width, heads=heads,
                   kv_heads=int(kv) if kv is not None else heads,
                   mlp_width=int(c["intermediate_size"]), vocab=int(c["vocab_size"]),
                   max_positions=int(c.get("max_position_embeddings", 32768)),
                   eps=float(c.get("rms_norm_eps", 1e-6)),
                   rope_theta=float(c.get("rope_theta", 10000.0)),
                   tie=bool(c.get("tie_word_embeddings", False)),
                   act=str(c.get("hidden_act", "silu")))
    hd = config.get("head_dim")
    out["head_dim"] = int(hd) if hd is not None else out["width"] // out["heads"]
    if hd is None and out["width"] % out["heads"]:
        raise ValueError("width is not divisible by the number of heads")
    if out["heads"] % out["kv_heads"]:
        raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
    return out


def load_model(weights_path, config_path):
    """(state, config dict) from a .safetensors file and an HF config.json."""
    state, _ = load_safetensors(weights_path)
    with open(config_path) as f:
        config = json.load(f)
    return state, config


def cast_state(state, dtype):
    """Copy of ``state`` with every floating tensor cast to ``dtype``."""
    return {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in state.items()}


# ------------------------------------------------------------------------------------------------
# Building blocks
# ------------------------------------------------------------------------------------------------

def _compute_dtype(dt):
    # HF computes RMSNorm (and rotary tables) in float32 even for half-precision models; in a
    # float64 run we stay in float64.
    return torch.float64 if dt == torch.float64 else torch.float32


def layer_norm(x, weight, bias, eps):
    """nn.LayerNorm over the last dimension (what GPT-2 uses), i.e. F.layer_norm."""
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def layer_norm_explicit(x, weight, bias, eps):
    """The same from the formula (biased variance); the self-tests compare the two."""
    mu = x.mean(-1, keepdim=True)
    var = (x - mu).pow(2).mean(-1, keepdim=True)
    return (x - mu) * torch.rsqrt(var + eps) * weight + bias


def rms_norm(x, weight, eps):
    """Qwen2RMSNorm: weight * (x * rsqrt(mean(x^2) + eps)) computed in float32, cast back."""
    in_dtype = x.dtype
    h = x.to(_compute_dtype(in_dtype))
    var = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(var + eps)
    return weight * h.to(in_dtype)


def gelu_new(x):
    """GPT-2's "gelu_new": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def _activation(name):
    name = name.lower()
    if name in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        return gelu_new
    if name == "gelu":
        return lambda x: F.gelu(x)
    if name in ("silu", "swish"):
        return F.silu
    if name == "relu":
        return F.relu
    raise NotImplementedError(f"activation {name!r}")


def _conv1d(x, w, b):
    """transformers' Conv1D: weight [in, out], y = x @ W + b."""
    return torch.addmm(b, x.reshape(-1, x.shape[-1]), w).reshape(*x.shape[:-1], w.shape[-1])


def _linear(x, w, b=None):
    """nn.Linear: weight [out, in], y = x W^T + b."""
    return F.linear(x, w, b)


def cesaro_matrix(L, dtype=torch.float64):
    """M[i][j] = 1/(i+1) for j <= i (0-based), else 0."""
    m = torch.tril(torch.ones(L, L, dtype=dtype))
    return m / m.sum(-1, keepdim=True)


def _causal_attention(q, k, v, scale, uniform):
    """q [B,H,L,hd], k/v [B,H,L,hd] (already repeated for GQA). Eager softmax attention."""
    L = q.shape[-2]
    if uniform:
        scores = torch.zeros(q.shape[:-1] + (L,), dtype=q.dtype)
    else:
        scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    mask = torch.ones(L, L, dtype=torch.bool).tril()
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    # Qwen2's eager path does the softmax in float32; GPT-2's in the weights' dtype. They coincide
    # for float32 / float64 runs.
    probs = torch.softmax(scores.to(_compute_dtype(scores.dtype)), dim=-1).to(v.dtype)
    return torch.matmul(probs, v)


def _split_heads(x, n, hd):
    B, L, _ = x.shape
    return x.view(B, L, n, hd).transpose(1, 2)  # [B, n, L, hd]


def _merge_heads(x):
    B, n, L, hd = x.shape
    return x.transpose(1, 2).reshape(B, L, n * hd)


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rotary_cos_sin(L, head_dim, theta, dtype):
    cd = _compute_dtype(dtype)
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).to(cd) / head_dim))
    t = torch.arange(L, dtype=torch.int64).to(cd)
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _repeat_kv(x, n_rep):
    """[B, kv, L, hd] -> [B, kv*n_rep, L, hd]; kv head i serves query heads i*n_rep..i*n_rep+n_rep-1."""
    if n_rep == 1:
        return x
    B, kv, L, hd = x.shape
    return x[:, :, None, :, :].expand(B, kv, n_rep, L, hd).reshape(B, kv * n_rep, L, hd)


# ------------------------------------------------------------------------------------------------
# Parameter lookup
# ------------------------------------------------------------------------------------------------

class _Params:
    def __init__(self, state, prefixes):
        self.state = state
        self.prefixes = prefixes

    def get(self, name, required=True):
        for p in self.prefixes:
            if p + name in self.state:
                return self.state[p + name]
        if required:
            raise KeyError(f"parameter {name!r} (prefixes {self.prefixes}) not in state dict")
        return None


def _params(state, cfg):
    if cfg["arch"] == "gpt2":
        return _Params(state, ("transformer.", ""))
    return _Params(state, ("model.", ""))


def _lm_head(state, cfg, P):
    w = state.get("lm_head.weight")
    if w is not None:
        return w
    if cfg["arch"] == "gpt2":
        return P.get("wte.weight")
    if cfg["tie"]:
        return P.get("embed_tokens.weight")
    raise KeyError("lm_head.weight missing and tie_word_embeddings is false")


# ------------------------------------------------------------------------------------------------
# Forward passes
# ------------------------------------------------------------------------------------------------

def _as_ids(input_ids):
    if not torch.is_tensor(input_ids):
        input_ids = torch.tensor(input_ids, dtype=torch.int64)
    if input_ids.dim() == 1:
        input_ids = input_ids[None]
    return input_ids.to(torch.int64)


def embed(state, config, input_ids, no_position_encoding=False, uniform_attention=False,
          no_mlp=False):
    """Input embeddings e_j [B, L, d]: wte[ids] (+ wpe[0..L-1] for GPT-2 unless ablated)."""
    del uniform_attention, no_mlp  # accepted for a uniform call signature
    cfg = normalize_config(config, state)
    P = _params(state, cfg)
    ids = _as_ids(input_ids)
    L = ids.shape[1]
    if cfg["arch"] == "gpt2":
        e = F.embedding(ids, P.get("wte.weight"))
        if not no_position_encoding:
            if L > P.get("wpe.weight").shape[0]:
                raise ValueError(f"sequence length {L} exceeds n_positions")
            e = e + P.get("wpe.weight")[:L][None]
        return e
    return F.embedding(ids, P.get("embed_tokens.weight"))


def forward(state, config, input_ids=None, inputs_embeds=None, no_position_encoding=False,
            uniform_attention=False, no_mlp=False, return_branches=False, compute_logits=True):
    """Reference forward pass.

    Returns dict(hidden=[B,L,d] after the final norm, logits=[B,L,V], layer_outputs=[H x [B,L,d]]
    residual stream after each layer, embeddings=e [B,L,d]); with ``return_branches`` also
    attn_branches / mlp_branches (what each sub-block added to the residual stream). With
    ``compute_logits=False`` the LM head is skipped and ``logits`` is None.
    """
    cfg = normalize_config(config, state)
    P = _params(state, cfg)
    if inputs_embeds is None:
        if input_ids is None:
            raise ValueError("give input_ids or inputs_embeds")
        inputs_embeds = embed(state, config, input_ids, no_position_encoding=no_position_encoding)
    x = inputs_embeds
    B, L, d = x.shape
    if d != cfg["width"]:
        raise ValueError(f"embedding width {d} != config width {cfg['width']}")
    nh, nkv, hd = cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    act = _activation(cfg["act"])
    layer_outputs, attn_br, mlp_br = [], [], []

    if cfg["arch"] == "gpt2":
        eps = cfg["eps"]
        for i in range(cfg["layers"]):
            p = f"h.{i}."
            h = layer_norm(x, P.get(p + "ln_1.weight"), P.get(p + "ln_1.bias"), eps)
            qkv = _conv1d(h, P.get(p + "attn.c_attn.weight"), P.get(p + "attn.c_attn.bias"))
            q, k, v = qkv.split(d, dim=-1)
            q, k, v = (_split_heads(t, nh, hd) for t in (q, k, v))
            scale = 1.0
            if cfg["scale_attn_weights"]:
                scale /= math.sqrt(hd)
            if cfg["scale_by_layer"]:
                scale /= float(i + 1)
            a = _merge_heads(_causal_attention(q, k, v, scale, uniform_attention))
            a = _conv1d(a, P.get(p + "attn.c_proj.weight"), P.get(p + "attn.c_proj.bias"))
            x = x + a
            if return_branches:
                attn_br.append(a)
            if not no_mlp:
                h = layer_norm(x, P.get(p + "ln_2.weight"), P.get(p + "ln_2.bias"), eps)
                h = act(_conv1d(h, P.get(p + "mlp.c_fc.weight"), P.get(p + "mlp.c_fc.bias")))
                m = _conv1d(h, P.get(p + "mlp.c_proj.weight"), P.get(p + "mlp.c_proj.bias"))
                x = x + m
                if return_branches:
                    mlp_br.append(m)
            layer_outputs.append(x)
        hidden = layer_norm(x, P.get("ln_f.weight"), P.get("ln_f.bias"), eps)
    else:
        eps = cfg["eps"]
        if not no_position_encoding:
            cos, sin = rotary_cos_sin(L, hd, cfg["rope_theta"], x.dtype)
        for i in range(cfg["layers"]):
            p = f"layers.{i}."
            h = rms_norm(x, P.get(p + "input_layernorm.weight"), eps)
            q = _linear(h, P.get(p + "self_attn.q_proj.weight"), P.get(p + "self_attn.q_proj.bias", False))
            k = _linear(h, P.get(p + "self_attn.k_proj.weight"), P.get(p + "self_attn.k_proj.bias", False))
            v = _linear(h, P.get(p + "self_attn.v_proj.weight"), P.get(p + "self_attn.v_proj.bias", False))
            q, k, v = _split_heads(q, nh, hd), _split_heads(k, nkv, hd), _split_heads(v, nkv, hd)
            if not no_position_encoding:
                q = q * cos + _rotate_half(q) * sin
                k = k * cos + _rotate_half(k) * sin
            k, v = _repeat_kv(k, nh // nkv), _repeat_kv(v, nh // nkv)
            a = _merge_heads(_causal_attention(q, k, v, hd ** -0.5, uniform_attention))
            a = _linear(a, P.get(p + "self_attn.o_proj.weight"), P.get(p + "self_attn.o_proj.bias", False))
            x = x + a
            if return_branches:
                attn_br.append(a)
            if not no_mlp:
                h = rms_norm(x, P.get(p + "post_attention_layernorm.weight"), eps)
                g = _linear(h, P.get(p + "mlp.gate_proj.weight"), P.get(p + "mlp.gate_proj.bias", False))
                u = _linear(h, P.get(p + "mlp.up_proj.weight"), P.get(p + "mlp.up_proj.bias", False))
                m = _linear(act(g) * u, P.get(p + "mlp.down_proj.weight"),
                            P.get(p + "mlp.down_proj.bias", False))
                x = x + m
                if return_branches:
                    mlp_br.append(m)
            layer_outputs.append(x)
        hidden = rms_norm(x, P.get("norm.weight"), eps)

    logits = F.linear(hidden, _lm_head(state, cfg, P)) if compute_logits else None
    out = dict(hidden=hidden, logits=logits, layer_outputs=layer_outputs, embeddings=inputs_embeds)
    if return_branches:
        out["attn_branches"] = attn_br
        out["mlp_branches"] = mlp_br
    return out


# ------------------------------------------------------------------------------------------------
# Jacobians
# ------------------------------------------------------------------------------------------------

def jacobian_sq_norms(state, config, input_ids, target=None, dtype=torch.float64,
                      no_position_encoding=False, uniform_attention=False, no_mlp=False):
    """Exact ||d hidden[b, target, :] / d e[b, j, :]||_F^2 for all b, j -> tensor [B, L] (dtype).

    Brute force: one torch.autograd.grad per output coordinate k (d calls). Sequences in a batch
    are independent, so summing the output over the batch gives each sequence's own gradient.
    ``target`` is a 0-based position (default L-1); ``dtype`` None keeps the state's dtype.
    """
    abl = dict(no_position_encoding=no_position_encoding, uniform_attention=uniform_attention,
               no_mlp=no_mlp)
    if dtype is not None:
        state = cast_state(state, dtype)
    ids = _as_ids(input_ids)
    L = ids.shape[1]
    t = L - 1 if target is None else (target % L)
    with torch.no_grad():
        e0 = embed(state, config, ids, **abl)
    e = e0.detach().clone().requires_grad_(True)
    hidden = forward(state, config, inputs_embeds=e, compute_logits=False, **abl)["hidden"]
    out = hidden[:, t, :]
    acc = torch.zeros(e.shape[:2], dtype=e.dtype)
    d = out.shape[-1]
    for k in range(d):
        (g,) = torch.autograd.grad(out[:, k].sum(), e, retain_graph=k + 1 < d)
        acc += g.pow(2).sum(-1)
    return acc.detach()


# ------------------------------------------------------------------------------------------------
# Random weights
# ------------------------------------------------------------------------------------------------

def random_state(config, seed=0, std=0.02, dtype=torch.float32, random_norms=False):
    """Random weights with HF names: N(0, std) matrices/embeddings, zero biases (small random biases
    if ``random_norms``), unit norm weights (perturbed if ``random_norms``)."""
    cfg = normalize_config(config)
    g = torch.Generator().manual_seed(seed)

    def n(*shape, s=std):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * s).to(dtype)

    def bias(m):
        return n(m, s=0.1) if random_norms else torch.zeros(m, dtype=dtype)

    def normw(m):
        return (1.0 + n(m, s=0.1)) if random_norms else torch.ones(m, dtype=dtype)

    d, V, f = cfg["width"], cfg["vocab"], cfg["mlp_width"]
    st = {}
    if cfg["arch"] == "gpt2":
        st["transformer.wte.weight"] = n(V, d)
        st["transformer.wpe.weight"] = n(cfg["max_positions"], d, s=0.01)
        for i in range(cfg["layers"]):
            p = f"transformer.h.{i}."
            st[p + "ln_1.weight"], st[p + "ln_1.bias"] = normw(d), bias(d)
            st[p + "attn.c_attn.weight"], st[p + "attn.c_attn.bias"] = n(d, 3 * d), bias(3 * d)
            st[p + "attn.c_proj.weight"], st[p + "attn.c_proj.bias"] = n(d, d), bias(d)
            st[p + "ln_2.weight"], st[p + "ln_2.bias"] = normw(d), bias(d)
            st[p + "mlp.c_fc.weight"], st[p + "mlp.c_fc.bias"] = n(d, f), bias(f)
            st[p + "mlp.c_proj.weight"], st[p + "mlp.c_proj.bias"] = n(f, d), bias(d)
        st["transformer.ln_f.weight"], st["transformer.ln_f.bias"] = normw(d), bias(d)
    else:
        hd, nh, nkv = cfg["head_dim"], cfg["heads"], cfg["kv_heads"]
        st["model.embed_tokens.weight"] = n(V, d)
        for i in range(cfg["layers"]):
            p = f"model.layers.{i}."
            st[p + "input_layernorm.weight"] = normw(d)
            st[p + "self_attn.q_proj.weight"], st[p + "self_attn.q_proj.bias"] = n(nh * hd, d), bias(nh * hd)
            st[p + "self_attn.k_proj.weight"], st[p + "self_attn.k_proj.bias"] = n(nkv * hd, d), bias(nkv * hd)
            st[p + "self_attn.v_proj.weight"], st[p + "self_attn.v_proj.bias"] = n(nkv * hd, d), bias(nkv * hd)
            st[p + "self_attn.o_proj.weight"] = n(d, nh * hd)
            st[p + "post_attention_layernorm.weight"] = normw(d)
            st[p + "mlp.gate_proj.weight"] = n(f, d)
            st[p + "mlp.up_proj.weight"] = n(f, d)
            st[p + "mlp.down_proj.weight"] = n(d, f)
        st["model.norm.weight"] = normw(d)
        if not cfg["tie"]:
            st["lm_head.weight"] = n(V, d)
    return st
