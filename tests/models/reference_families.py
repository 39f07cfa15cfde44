"""Plain PyTorch reimplementations of Hugging Face transformers' LlamaForCausalLM,
MistralForCausalLM and GPTNeoXForCausalLM forward passes (modeling_llama.py, modeling_mistral.py,
modeling_gpt_neox.py, and modeling_rope_utils.py for the rotary frequencies), written from that
code, for checking posbias' LibTorch families. No posbias code is used: configs are read from the
Hugging Face config.json keys, weights from their Hugging Face names.

What follows transformers line by line:
* rotary inverse frequencies: 1 / base^(arange(0, dim, 2) / dim); rope_scaling "linear" divides
  them by factor; "llama3" (_compute_llama3_parameters) divides the low frequencies (wavelength >
  original_max_position_embeddings / low_freq_factor) by factor, keeps the high ones (wavelength <
  original / high_freq_factor) and interpolates between with smooth = (original / wavelength -
  low_freq_factor) / (high_freq_factor - low_freq_factor);
* apply_rotary_pos_emb: q * cos + rotate_half(q) * sin with cos/sin = cat(freqs, freqs);
* repeat_kv for grouped-query attention; eager attention with scale head_dim^-0.5, a causal mask,
  and for Mistral the sliding window (a key j is visible from query i when i - window < j <= i);
  softmax in float32 (float64 here, as the whole pass);
* LlamaRMSNorm: weight * x * rsqrt(mean(x^2) + eps); the MLP down(silu(gate(x)) * up(x)); biases
  where attention_bias / mlp_bias say;
* GPT-NeoX: query_key_value output viewed as [B, L, heads, 3 * head_size] (each head's q, k, v
  side by side), rotary on the first int(head_size * rotary_pct) dimensions of q and k, dense;
  MLP dense_4h_to_h(gelu(dense_h_to_4h(x))) with the exact erf GELU; use_parallel_residual:
  x + attn(ln1(x)) + mlp(ln2(x)), else h = x + attn(ln1(x)); h + mlp(ln2(h)).

The ablations posbias offers (no_position_encoding, uniform_attention, no_mlp) are switches here.
"""

import math

import torch
import torch.nn.functional as F


def rope_inverse_frequencies(config, dim, dtype=torch.float64):
    base = float(config.get("rope_theta", config.get("rotary_emb_base", 10000.0)))
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype) / dim))
    scaling = config.get("rope_scaling")
    if not scaling:
        return inv_freq
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "default":
        return inv_freq
    if kind == "linear":
        return inv_freq / scaling["factor"]
    if kind != "llama3":
        raise NotImplementedError(kind)
    factor = scaling["factor"]
    low_freq_factor = scaling["low_freq_factor"]
    high_freq_factor = scaling["high_freq_factor"]
    old_context_len = scaling["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def _cos_sin(config, dim, length, dtype):
    inv_freq = rope_inverse_frequencies(config, dim, dtype)
    position_ids = torch.arange(length, dtype=torch.int64).to(dtype)
    freqs = torch.outer(position_ids, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(x, cos, sin):
    return (x * cos) + (rotate_half(x) * sin)


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


def eager_attention(query, key, value, scaling, window=None, uniform=False):
    """[B, H, L, hd] each (key/value already repeated). Mask: j <= i, and i - window < j."""
    length = query.shape[-2]
    i = torch.arange(length)[:, None]
    j = torch.arange(length)[None, :]
    visible = j <= i
    if window:
        visible = visible & (j > i - window)
    if uniform:
        weights = torch.zeros(query.shape[:-1] + (length,), dtype=query.dtype)
    else:
        weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    weights = weights.masked_fill(~visible, torch.finfo(weights.dtype).min)
    weights = F.softmax(weights, dim=-1, dtype=torch.float64).to(query.dtype)
    return torch.matmul(weights, value)


def rms_norm(x, weight, eps):
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


def _get(state, name):
    if name not in state:
        raise KeyError(f"{name} not in the checkpoint")
    return state[name]


def _opt(state, name):
    return state.get(name)


def llama_forward(state, config, inputs_embeds, no_position_encoding=False, uniform_attention=False,
                  no_mlp=False):
    """LlamaModel / MistralModel: the final hidden states [B, L, d] (after model.norm)."""
    d = config["hidden_size"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or d // heads
    eps = config.get("rms_norm_eps", 1e-6)
    window = config.get("sliding_window") if config["model_type"] == "mistral" else None
    x = inputs_embeds
    B, L, _ = x.shape
    cos, sin = _cos_sin(config, head_dim, L, x.dtype)
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms_norm(x, _get(state, p + "input_layernorm.weight"), eps)
        q = F.linear(h, _get(state, p + "self_attn.q_proj.weight"), _opt(state, p + "self_attn.q_proj.bias"))
        k = F.linear(h, _get(state, p + "self_attn.k_proj.weight"), _opt(state, p + "self_attn.k_proj.bias"))
        v = F.linear(h, _get(state, p + "self_attn.v_proj.weight"), _opt(state, p + "self_attn.v_proj.bias"))
        q = q.view(B, L, -1, head_dim).transpose(1, 2)
        k = k.view(B, L, -1, head_dim).transpose(1, 2)
        v = v.view(B, L, -1, head_dim).transpose(1, 2)
        if not no_position_encoding:
            q, k = apply_rotary_pos_emb(q, cos, sin), apply_rotary_pos_emb(k, cos, sin)
        k, v = repeat_kv(k, heads // kv_heads), repeat_kv(v, heads // kv_heads)
        a = eager_attention(q, k, v, head_dim ** -0.5, window, uniform_attention)
        a = a.transpose(1, 2).reshape(B, L, heads * head_dim)
        a = F.linear(a, _get(state, p + "self_attn.o_proj.weight"), _opt(state, p + "self_attn.o_proj.bias"))
        x = x + a
        if not no_mlp:
            h = rms_norm(x, _get(state, p + "post_attention_layernorm.weight"), eps)
            gate = F.linear(h, _get(state, p + "mlp.gate_proj.weight"), _opt(state, p + "mlp.gate_proj.bias"))
            up = F.linear(h, _get(state, p + "mlp.up_proj.weight"), _opt(state, p + "mlp.up_proj.bias"))
            x = x + F.linear(F.silu(gate) * up, _get(state, p + "mlp.down_proj.weight"),
                             _opt(state, p + "mlp.down_proj.bias"))
    return rms_norm(x, _get(state, "model.norm.weight"), eps)


def neox_forward(state, config, inputs_embeds, no_position_encoding=False, uniform_attention=False,
                 no_mlp=False):
    """GPTNeoXModel: the final hidden states [B, L, d] (after final_layer_norm)."""
    d = config["hidden_size"]
    heads = config["num_attention_heads"]
    head_size = d // heads
    rotary_ndims = int(head_size * config.get("rotary_pct", 0.25))
    eps = config.get("layer_norm_eps", 1e-5)
    parallel = config.get("use_parallel_residual", True)
    x = inputs_embeds
    B, L, _ = x.shape
    cos, sin = _cos_sin(config, rotary_ndims, L, x.dtype)

    def ln(t, name):
        return F.layer_norm(t, (d,), _get(state, name + ".weight"), _get(state, name + ".bias"), eps)

    for layer in range(config["num_hidden_layers"]):
        p = f"gpt_neox.layers.{layer}."
        h = ln(x, p + "input_layernorm")
        qkv = F.linear(h, _get(state, p + "attention.query_key_value.weight"),
                       _get(state, p + "attention.query_key_value.bias"))
        qkv = qkv.view(B, L, heads, 3 * head_size).transpose(1, 2)
        q, k, v = qkv.chunk(3, dim=-1)
        if not no_position_encoding:
            q_rot, q_pass = q[..., :rotary_ndims], q[..., rotary_ndims:]
            k_rot, k_pass = k[..., :rotary_ndims], k[..., rotary_ndims:]
            q = torch.cat((apply_rotary_pos_emb(q_rot, cos, sin), q_pass), dim=-1)
            k = torch.cat((apply_rotary_pos_emb(k_rot, cos, sin), k_pass), dim=-1)
        a = eager_attention(q, k, v, head_size ** -0.5, None, uniform_attention)
        a = a.transpose(1, 2).reshape(B, L, d)
        a = F.linear(a, _get(state, p + "attention.dense.weight"), _get(state, p + "attention.dense.bias"))

        def mlp(t):
            t = F.linear(t, _get(state, p + "mlp.dense_h_to_4h.weight"), _get(state, p + "mlp.dense_h_to_4h.bias"))
            return F.linear(F.gelu(t), _get(state, p + "mlp.dense_4h_to_h.weight"),
                            _get(state, p + "mlp.dense_4h_to_h.bias"))

        if no_mlp:
            x = x + a
        elif parallel:
            x = x + a + mlp(ln(x, p + "post_attention_layernorm"))
        else:
            h = x + a
            x = h + mlp(ln(h, p + "post_attention_layernorm"))
    return ln(x, "gpt_neox.final_layer_norm")


def embedding_matrix(state, config):
    return _get(state, "gpt_neox.embed_in.weight" if config["model_type"] == "gpt_neox" else "model.embed_tokens.weight")


def forward(state, config, inputs_embeds, **ablations):
    if config["model_type"] == "gpt_neox":
        return neox_forward(state, config, inputs_embeds, **ablations)
    return llama_forward(state, config, inputs_embeds, **ablations)


def jacobian_sq_norms(state, config, input_ids, **ablations):
    """||d hidden[b, L-1] / d e[b, j]||_F^2 [B, L] by one autograd call per output coordinate."""
    state = {k: v.to(torch.float64) for k, v in state.items()}
    e = F.embedding(input_ids, embedding_matrix(state, config)).detach().requires_grad_(True)
    out = forward(state, config, e, **ablations)[:, -1, :]
    acc = torch.zeros(e.shape[:2], dtype=torch.float64)
    for k in range(out.shape[-1]):
        (g,) = torch.autograd.grad(out[:, k].sum(), e, retain_graph=k + 1 < out.shape[-1])
        acc += g.pow(2).sum(-1)
    return acc


def random_state(config, seed=0, std=0.2):
    """A hand-written checkpoint under Hugging Face names: normal(0, std) matrices, random biases
    and norm weights (so that a bias or norm read from the wrong tensor shows)."""
    g = torch.Generator().manual_seed(seed)

    def n(*shape, s=std):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * s

    def norm(m):
        return 1.0 + n(m, s=0.1)

    d, V, f = config["hidden_size"], config["vocab_size"], config["intermediate_size"]
    heads = config["num_attention_heads"]
    st = {}
    if config["model_type"] == "gpt_neox":
        st["gpt_neox.embed_in.weight"] = n(V, d)
        for layer in range(config["num_hidden_layers"]):
            p = f"gpt_neox.layers.{layer}."
            for ln in ("input_layernorm", "post_attention_layernorm"):
                st[p + ln + ".weight"], st[p + ln + ".bias"] = norm(d), n(d, s=0.1)
            st[p + "attention.query_key_value.weight"], st[p + "attention.query_key_value.bias"] = n(3 * d, d), n(3 * d, s=0.1)
            st[p + "attention.dense.weight"], st[p + "attention.dense.bias"] = n(d, d), n(d, s=0.1)
            st[p + "mlp.dense_h_to_4h.weight"], st[p + "mlp.dense_h_to_4h.bias"] = n(f, d), n(f, s=0.1)
            st[p + "mlp.dense_4h_to_h.weight"], st[p + "mlp.dense_4h_to_h.bias"] = n(d, f), n(d, s=0.1)
            # Buffers older transformers wrote; the loader must ignore them.
            st[p + "attention.rotary_emb.inv_freq"] = torch.ones(4, dtype=torch.float64)
        st["gpt_neox.final_layer_norm.weight"], st["gpt_neox.final_layer_norm.bias"] = norm(d), n(d, s=0.1)
        if not config.get("tie_word_embeddings", False):
            st["embed_out.weight"] = n(V, d)
        return st
    kv = config.get("num_key_value_heads") or heads
    hd = config.get("head_dim") or d // heads
    attention_bias = config.get("attention_bias", False)
    mlp_bias = config.get("mlp_bias", False)
    st["model.embed_tokens.weight"] = n(V, d)
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        st[p + "input_layernorm.weight"] = norm(d)
        for name, rows in (("q_proj", heads * hd), ("k_proj", kv * hd), ("v_proj", kv * hd)):
            st[p + f"self_attn.{name}.weight"] = n(rows, d)
            if attention_bias:
                st[p + f"self_attn.{name}.bias"] = n(rows, s=0.1)
        st[p + "self_attn.o_proj.weight"] = n(d, heads * hd)
        if attention_bias:
            st[p + "self_attn.o_proj.bias"] = n(d, s=0.1)
        st[p + "post_attention_layernorm.weight"] = norm(d)
        for name, shape in (("gate_proj", (f, d)), ("up_proj", (f, d)), ("down_proj", (d, f))):
            st[p + f"mlp.{name}.weight"] = n(*shape)
            if mlp_bias:
                st[p + f"mlp.{name}.bias"] = n(shape[0], s=0.1)
    st["model.norm.weight"] = norm(d)
    if not config.get("tie_word_embeddings", False):
        st["lm_head.weight"] = n(V, d)
    return st
