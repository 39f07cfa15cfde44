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

Also Qwen3ForCausalLM, GemmaForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM (model_type
"gemma3_text"), Phi3ForCausalLM, Olmo2ForCausalLM, GraniteForCausalLM and SmolLM3ForCausalLM
(family_forward), written from transformers' main-branch modeling_<family>.py / modular_<family>.py,
configuration_<family>.py, masking_utils.py and modeling_rope_utils.py (the v5 code with
@strict config classes and rope_parameters); config keys left out of config.json take the config
class's default (_CONFIG_DEFAULTS). What each follows:
* all: eager attention, causal mask, a sliding window as masking_utils' sliding_window_overlay
  (query i sees key j when i - window < j <= i, window = config.sliding_window) on the layers whose
  layer_types entry is "sliding_attention"; rotary as LlamaRotaryEmbedding (cos/sin times the rope
  type's attention factor); rope parameters standardized as the config classes do (rope_scaling
  or rope_parameters, rope_theta or the class's default_theta); the final model.norm; logits
  lm_head(hidden), or the input embedding matrix when tie_word_embeddings (class default when left
  out: True for the Gemmas and SmolLM3, False for the others).
* qwen3: Llama's layout with head_dim, attention_bias on q, k, v and o, self_attn.q_norm /
  k_norm (RMSNorm over head_dim, each head, after the projection and before rotary); the MLP has no
  bias. layer_types, or when absent: "sliding_attention" iff sliding_window is set and layer index >=
  max_window_layers, where Qwen3Config sets sliding_window to None unless use_sliding_window.
* gemma: GemmaRMSNorm x * rsqrt(mean(x^2) + eps) * (1 + w); GemmaModel on main builds embed_tokens as
  GemmaTextScaledWordEmbedding, so the sqrt(hidden_size) scale is inside the embedding
  (input_embeddings) and the model's forward takes inputs_embeds as they are; the MLP is LlamaMLP,
  down(act(gate(x)) * up(x)) with ACT2FN[config.hidden_act] (class default "gelu_pytorch_tanh",
  tanh GELU; a hidden_activation key is not read on main); head_dim; tied LM head by default.
* gemma2: Gemma plus post_attention_layernorm on the attention output and pre_feedforward_layernorm /
  post_feedforward_layernorm around the MLP, each before its residual add; scaling
  query_pre_attn_scalar^-0.5; attention logits c * tanh(S / c) (attn_logit_softcapping, default 50,
  after the scaling, before the mask); logits c * tanh(z / c) (final_logit_softcapping, default 30);
  MLP activation ACT2FN[config.hidden_activation]; layer_types, or when absent layer i sliding iff
  (i + 1) % 2 (layers 0, 2, ... sliding, 1, 3, ... full).
* gemma3_text: Gemma 2's layout with q_norm / k_norm (Gemma RMSNorm over head_dim, after the
  projection, before rotary); Gemma3Attention does not pass softcap to the attention, so
  attn_logit_softcapping has no effect; final_logit_softcapping when set (default None); layer_types,
  or layer i sliding iff (i + 1) % sliding_window_pattern (default 6); rotary per layer type:
  sliding layers rope_local_base_freq (default 1e4, type default), full layers rope_theta (default
  1e6) with rope_scaling (e.g. linear: inv_freq / factor); the embedding scale as Gemma's.
* phi3: self_attn.qkv_proj rows q (heads * head_dim), k, v (kv_heads * head_dim each);
  mlp.gate_up_proj rows gate then up, down(up * act(gate)); head_dim = hidden / heads; rotary on the
  first int(head_dim * partial_rotary_factor) dimensions; the window on every layer when
  sliding_window is set; longrope: inv_freq = 1 / (ext * base^(2i/dim)) with ext = long_factor when
  the sequence is longer than original_max_position_embeddings (Phi3Config's top-level field, default
  4096), short_factor otherwise; cos and sin times attention_factor, or when absent
  sqrt(1 + ln(factor) / ln(original)) with factor = rope_scaling's factor or else
  max_position_embeddings / original (1 when factor <= 1).
* olmo2: no norm before attention or MLP; post_attention_layernorm on the attention output and
  post_feedforward_layernorm on the MLP output, before the residual adds; q_norm (heads * head_dim)
  and k_norm (kv_heads * head_dim) RMSNorms over the whole projections before the split into heads.
* granite: Llama with inputs_embeds * embedding_multiplier inside the model (so in forward), scaling
  attention_multiplier, each branch output * residual_multiplier before its residual add, logits /
  logits_scaling.
* smollm3: Llama (Qwen2Model's masks) with NoPE layers: no_rope_layers[i] 1 = rotary, 0 = none,
  default int((i + 1) % no_rope_layer_interval != 0) (interval 4); layer_types, or when absent
  "sliding_attention" iff use_sliding_window and sliding_window is set and the layer is NoPE; the
  mask's window is config.sliding_window on the sliding layers.

The ablations posbias offers (no_position_encoding, uniform_attention, no_mlp) are switches here:
no rotary on any layer; attention logits 0 (uniform over the visible keys, the window kept; a soft-cap
of 0 is 0); the MLP branch removed with its own norms (the pre-MLP norm, and Gemma 2/3's and OLMo 2's
post_feedforward_layernorm; the attention's post_attention_layernorm stays).
"""

import copy
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


def eager_attention(query, key, value, scaling, window=None, uniform=False, softcap=None):
    """[B, H, L, hd] each (key/value already repeated). Mask: j <= i, and i - window < j.

    softcap (Gemma 2's eager_attention_forward): logits -> softcap * tanh(logits / softcap) after the
    scaling and before the mask; with uniform attention the logits are 0 and stay 0."""
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
    if softcap is not None:
        weights = torch.tanh(weights / softcap) * softcap
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


# ------------------------------------------------------------------------------------------------
# Qwen3, Gemma, Gemma 2, Gemma 3 (text), Phi-3, OLMo 2, Granite, SmolLM3
# ------------------------------------------------------------------------------------------------

NEW_FAMILIES = ("qwen3", "gemma", "gemma2", "gemma3_text", "phi3", "olmo2", "granite", "smollm3")
_GEMMA_FAMILIES = ("gemma", "gemma2", "gemma3_text")

# The config classes' defaults for the keys read below (configuration_<family>.py), used when
# config.json leaves a key out; a key present with null is None, as in transformers.
_CONFIG_DEFAULTS = {
    "qwen3": {"num_key_value_heads": 32, "head_dim": 128, "hidden_act": "silu", "rms_norm_eps": 1e-6,
              "tie_word_embeddings": False, "attention_bias": False, "use_sliding_window": False,
              "sliding_window": 4096, "max_window_layers": 28, "layer_types": None, "rope_theta": 10000.0},
    "gemma": {"num_key_value_heads": 16, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6,
              "tie_word_embeddings": True, "attention_bias": False, "rope_theta": 10000.0},
    "gemma2": {"num_key_value_heads": 4, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
               "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "attention_bias": False,
               "query_pre_attn_scalar": 256, "sliding_window": 4096, "layer_types": None,
               "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0, "rope_theta": 10000.0},
    "gemma3_text": {"num_key_value_heads": 4, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
                    "rms_norm_eps": 1e-6, "tie_word_embeddings": True, "attention_bias": False,
                    "query_pre_attn_scalar": 256, "sliding_window": 4096, "layer_types": None,
                    "sliding_window_pattern": 6, "final_logit_softcapping": None, "attn_logit_softcapping": None,
                    "use_bidirectional_attention": False, "rope_theta": 1_000_000.0,
                    "rope_local_base_freq": 10_000.0},
    "phi3": {"num_key_value_heads": None, "hidden_act": "silu", "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
             "sliding_window": None, "original_max_position_embeddings": 4096, "partial_rotary_factor": 1.0,
             "rope_theta": 10000.0},
    "olmo2": {"num_key_value_heads": None, "hidden_act": "silu", "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
              "attention_bias": False, "rope_theta": 10000.0},
    "granite": {"num_key_value_heads": None, "hidden_act": "silu", "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
                "attention_bias": False, "mlp_bias": False, "embedding_multiplier": 1.0, "logits_scaling": 1.0,
                "residual_multiplier": 1.0, "attention_multiplier": 1.0, "rope_theta": 10000.0},
    "smollm3": {"num_key_value_heads": 4, "hidden_act": "silu", "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
                "attention_bias": False, "mlp_bias": False, "use_sliding_window": False, "sliding_window": None,
                "no_rope_layers": None, "no_rope_layer_interval": 4, "layer_types": None,
                "rope_theta": 2_000_000.0},  # SmolLM3Config.default_theta
}


def setting(config, key):
    """config.json's value for key, else the family's config-class default."""
    if key in config:
        return config[key]
    defaults = _CONFIG_DEFAULTS.get(config["model_type"], {})
    if key not in defaults:
        raise KeyError(f"{config['model_type']}: {key} not in config.json and no class default")
    return defaults[key]


def num_key_value_heads(config):
    return setting(config, "num_key_value_heads") or config["num_attention_heads"]


def head_dim(config):
    """Phi3Attention / Olmo2Attention / LlamaAttention (Granite, SmolLM3): getattr(config, "head_dim",
    hidden // heads); Qwen3 and the Gemmas have a head_dim field with a class default."""
    mt = config["model_type"]
    if mt in ("qwen3",) + _GEMMA_FAMILIES:
        return setting(config, "head_dim")
    return config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]


def _activation(name):
    """ACT2FN (activations.py) for the names these families use."""
    if name in ("silu", "swish"):
        return F.silu
    if name == "gelu":
        return F.gelu  # GELUActivation: the exact erf GELU
    if name in ("gelu_pytorch_tanh", "gelu_new", "gelu_fast"):
        # PytorchGELUTanh: gelu(x, approximate="tanh"); gelu_new / gelu_fast are the same tanh formula.
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "relu":
        return F.relu
    raise NotImplementedError(f"activation {name}")


def mlp_activation(config):
    """Gemma's MLP is LlamaMLP on main (ACT2FN[config.hidden_act], default "gelu_pytorch_tanh"; a
    hidden_activation key is not read); Gemma 2 and Gemma 3 read ACT2FN[config.hidden_activation]
    (default "gelu_pytorch_tanh") and not hidden_act; the others read hidden_act."""
    key = "hidden_activation" if config["model_type"] in ("gemma2", "gemma3_text") else "hidden_act"
    return _activation(setting(config, key))


def gemma_rms_norm(x, weight, eps):
    """GemmaRMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + weight), in float32 (float64 here)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + weight)


def no_rope_layers(config):
    """SmolLM3Config: no_rope_layers (1 = rotary, 0 = NoPE), default int((i + 1) % interval != 0)."""
    n = config["num_hidden_layers"]
    given = setting(config, "no_rope_layers")
    if given is not None:
        return [int(v) for v in given[:n]]
    interval = setting(config, "no_rope_layer_interval")
    return [int((i + 1) % interval != 0) for i in range(n)]


def layer_types(config):
    """Per layer "sliding_attention" / "full_attention", as the config classes fill layer_types."""
    mt, n = config["model_type"], config["num_hidden_layers"]
    if mt in ("qwen3", "gemma2", "gemma3_text", "smollm3"):
        given = setting(config, "layer_types")
        if given is not None:
            return list(given[:n])
    if mt == "qwen3":
        window = attention_window(config)
        return ["sliding_attention" if window is not None and i >= setting(config, "max_window_layers")
                else "full_attention" for i in range(n)]
    if mt == "gemma2":
        return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)]
    if mt == "gemma3_text":
        pattern = setting(config, "sliding_window_pattern")
        return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
    if mt == "smollm3":
        rope = no_rope_layers(config)
        sliding = setting(config, "use_sliding_window") and setting(config, "sliding_window") is not None
        return ["sliding_attention" if sliding and not rope[i] else "full_attention" for i in range(n)]
    if mt == "phi3":  # Phi3Model: create_sliding_window_causal_mask for every layer when sliding_window is set
        return ["sliding_attention" if setting(config, "sliding_window") is not None else "full_attention"] * n
    return ["full_attention"] * n


def attention_window(config):
    """config.sliding_window as create_sliding_window_causal_mask reads it (Qwen3Config sets it to None
    unless use_sliding_window)."""
    if config["model_type"] == "qwen3" and not setting(config, "use_sliding_window"):
        return None
    if config["model_type"] in ("qwen3", "gemma2", "gemma3_text", "smollm3", "phi3"):
        return setting(config, "sliding_window")
    return None


def layer_windows(config):
    windows = []
    for kind in layer_types(config):
        if kind != "sliding_attention":
            windows.append(None)
            continue
        window = attention_window(config)
        if window is None:  # masking_utils.create_sliding_window_causal_mask raises the same way
            raise ValueError("a sliding_attention layer but no sliding_window in the config")
        windows.append(window)
    return windows


def rope_parameters(config, layer_type=None):
    """The dict transformers' config class standardizes (convert_rope_params_to_dict,
    standardize_rope_params) from config.json's rope_scaling / rope_parameters / rope_theta; for
    gemma3_text the one of layer_type: rope_scaling and rope_theta (default 1e6) on "full_attention",
    rope_local_base_freq (default 1e4, type "default") on "sliding_attention"."""
    mt = config["model_type"]
    if mt == "gemma3_text":
        nested = copy.deepcopy(config.get("rope_parameters")) or {
            "sliding_attention": {"rope_type": "default"}, "full_attention": {"rope_type": "default"}}
        if config.get("rope_scaling") is not None:
            nested["full_attention"].update(config["rope_scaling"])
        nested.setdefault("full_attention", {"rope_type": "default"})
        nested["full_attention"].setdefault("rope_theta", setting(config, "rope_theta"))
        nested.setdefault("sliding_attention", {"rope_type": "default"})
        nested["sliding_attention"].setdefault("rope_theta", setting(config, "rope_local_base_freq"))
        params = dict(nested[layer_type])
    else:
        params = dict(config.get("rope_scaling") or config.get("rope_parameters") or {})
        params.setdefault("rope_theta", setting(config, "rope_theta"))
    params.setdefault("rope_type", params.get("type", "default"))
    if mt == "phi3":
        params["partial_rotary_factor"] = setting(config, "partial_rotary_factor")
        if params["rope_type"] in ("su", "yarn"):  # Phi3Config: backward compatibility
            params["rope_type"] = "longrope"
    if params["rope_type"] in ("llama3", "yarn", "longrope"):
        if mt == "phi3" or "original_max_position_embeddings" in config:
            # Phi3Config always has the field (default 4096); it has priority over the dict's value.
            params["original_max_position_embeddings"] = setting(config, "original_max_position_embeddings")
        else:
            params.setdefault("original_max_position_embeddings", config["max_position_embeddings"])
    return params


def rotary_frequencies(config, params, seq_len):
    """(inv_freq, attention_scaling) of ROPE_INIT_FUNCTIONS[rope_type] (or the model's
    compute_default_rope_parameters) for a forward over positions 0 .. seq_len - 1: longrope takes
    long_factor when seq_len > original_max_position_embeddings (dynamic_rope_update's
    longrope_frequency_update), short_factor otherwise, and keeps the attention factor of __init__."""
    dim = int(head_dim(config) * params.get("partial_rotary_factor", 1.0))
    base = float(params["rope_theta"])
    exponent = torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float64) / dim
    kind = params["rope_type"]
    if kind == "default":
        return 1.0 / (base ** exponent), 1.0
    if kind == "linear":
        return 1.0 / (base ** exponent) / params["factor"], 1.0
    if kind == "llama3":
        inv_freq = 1.0 / (base ** exponent)
        factor = params["factor"]
        low_freq_factor, high_freq_factor = params["low_freq_factor"], params["high_freq_factor"]
        old_context_len = params["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        inv_freq_llama = torch.where(wavelen > old_context_len / low_freq_factor, inv_freq / factor, inv_freq)
        smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
        smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
        medium = ~(wavelen < old_context_len / high_freq_factor) * ~(wavelen > old_context_len / low_freq_factor)
        return torch.where(medium, smoothed, inv_freq_llama), 1.0
    if kind == "longrope":
        original = params["original_max_position_embeddings"]
        factor = params.get("factor")
        if factor is None:
            factor = config["max_position_embeddings"] / original
        attention_factor = params.get("attention_factor")
        if attention_factor is None:
            attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
        ext = params["long_factor"] if seq_len > original else params["short_factor"]
        ext = torch.tensor(ext, dtype=torch.float64)
        return 1.0 / (ext * base ** exponent), attention_factor
    raise NotImplementedError(f"rope_type {kind}")


def rotary_cos_sin(config, length, layer_type=None):
    params = rope_parameters(config, layer_type)
    inv_freq, attention_scaling = rotary_frequencies(config, params, length)
    freqs = torch.outer(torch.arange(length, dtype=torch.int64).to(torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * attention_scaling, emb.sin() * attention_scaling


def apply_partial_rotary(x, cos, sin):
    """Phi-3's apply_rotary_pos_emb: rotary on the first cos.shape[-1] dimensions, the rest passed."""
    rotary_dim = cos.shape[-1]
    return torch.cat((apply_rotary_pos_emb(x[..., :rotary_dim], cos, sin), x[..., rotary_dim:]), dim=-1)


def attention_scaling(config):
    mt = config["model_type"]
    if mt in ("gemma2", "gemma3_text"):
        return setting(config, "query_pre_attn_scalar") ** -0.5
    if mt == "granite":
        return setting(config, "attention_multiplier")
    return head_dim(config) ** -0.5


def attention_softcap(config):
    """Gemma 2 passes softcap=attn_logit_softcapping to the attention; Gemma 3's attention keeps the
    field but does not pass it (no soft-capping of attention logits whatever the config says)."""
    return setting(config, "attn_logit_softcapping") if config["model_type"] == "gemma2" else None


def family_forward(state, config, inputs_embeds, no_position_encoding=False, uniform_attention=False,
                   no_mlp=False):
    """<Family>Model: the final hidden states [B, L, d] (after model.norm) from inputs_embeds."""
    mt = config["model_type"]
    if mt == "gemma3_text" and setting(config, "use_bidirectional_attention"):
        raise NotImplementedError("gemma3_text with use_bidirectional_attention")
    heads, kv_heads, hd = config["num_attention_heads"], num_key_value_heads(config), head_dim(config)
    eps = setting(config, "rms_norm_eps")
    gemma = mt in _GEMMA_FAMILIES
    norm = gemma_rms_norm if gemma else rms_norm
    sandwich = mt in ("gemma2", "gemma3_text")  # input, post_attention, pre_feedforward, post_feedforward
    act = mlp_activation(config)
    attention_bias = mt != "phi3" and setting(config, "attention_bias")
    mlp_bias = mt in ("granite", "smollm3") and setting(config, "mlp_bias")
    residual = setting(config, "residual_multiplier") if mt == "granite" else 1.0
    scaling, softcap = attention_scaling(config), attention_softcap(config)
    kinds, windows = layer_types(config), layer_windows(config)
    rotary = no_rope_layers(config) if mt == "smollm3" else [1] * config["num_hidden_layers"]

    x = inputs_embeds
    if mt == "granite":  # GraniteModel.forward: inputs_embeds * embedding_multiplier
        x = x * setting(config, "embedding_multiplier")
    B, L, _ = x.shape
    if mt == "gemma3_text":
        cos_sin = {kind: rotary_cos_sin(config, L, kind) for kind in ("sliding_attention", "full_attention")}
    else:
        cos_sin = {kind: rotary_cos_sin(config, L) for kind in ("sliding_attention", "full_attention")}

    def lin(t, name, bias):
        return F.linear(t, _get(state, name + ".weight"), _get(state, name + ".bias") if bias else None)

    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        # OLMo 2 has no norm before the attention; the others an input_layernorm.
        h = x if mt == "olmo2" else norm(x, _get(state, p + "input_layernorm.weight"), eps)
        if mt == "phi3":
            qkv = F.linear(h, _get(state, p + "self_attn.qkv_proj.weight"))
            q = qkv[..., : heads * hd]
            k = qkv[..., heads * hd: heads * hd + kv_heads * hd]
            v = qkv[..., heads * hd + kv_heads * hd:]
        else:
            q = lin(h, p + "self_attn.q_proj", attention_bias)
            k = lin(h, p + "self_attn.k_proj", attention_bias)
            v = lin(h, p + "self_attn.v_proj", attention_bias)
        if mt == "olmo2":  # over the whole projection, before the split into heads
            q = rms_norm(q, _get(state, p + "self_attn.q_norm.weight"), eps)
            k = rms_norm(k, _get(state, p + "self_attn.k_norm.weight"), eps)
        q = q.view(B, L, -1, hd).transpose(1, 2)
        k = k.view(B, L, -1, hd).transpose(1, 2)
        v = v.view(B, L, -1, hd).transpose(1, 2)
        if mt in ("qwen3", "gemma3_text"):  # per head, over head_dim, before rotary
            q = norm(q, _get(state, p + "self_attn.q_norm.weight"), eps)
            k = norm(k, _get(state, p + "self_attn.k_norm.weight"), eps)
        if not no_position_encoding and rotary[layer]:
            cos, sin = cos_sin[kinds[layer]]
            q, k = apply_partial_rotary(q, cos, sin), apply_partial_rotary(k, cos, sin)
        k, v = repeat_kv(k, heads // kv_heads), repeat_kv(v, heads // kv_heads)
        a = eager_attention(q, k, v, scaling, windows[layer], uniform_attention, softcap)
        a = lin(a.transpose(1, 2).reshape(B, L, heads * hd), p + "self_attn.o_proj", attention_bias)
        if sandwich or mt == "olmo2":  # on the branch, before the residual add
            a = norm(a, _get(state, p + "post_attention_layernorm.weight"), eps)
        x = x + a * residual if mt == "granite" else x + a
        if no_mlp:
            continue
        if sandwich:
            h = norm(x, _get(state, p + "pre_feedforward_layernorm.weight"), eps)
        elif mt == "olmo2":
            h = x
        else:
            h = norm(x, _get(state, p + "post_attention_layernorm.weight"), eps)
        if mt == "phi3":  # Phi3MLP: gate, up = gate_up_proj(x).chunk(2); down(up * act(gate))
            gate, up = F.linear(h, _get(state, p + "mlp.gate_up_proj.weight")).chunk(2, dim=-1)
            m = F.linear(up * act(gate), _get(state, p + "mlp.down_proj.weight"))
        else:
            m = lin(act(lin(h, p + "mlp.gate_proj", mlp_bias)) * lin(h, p + "mlp.up_proj", mlp_bias),
                    p + "mlp.down_proj", mlp_bias)
        if sandwich or mt == "olmo2":
            m = norm(m, _get(state, p + "post_feedforward_layernorm.weight"), eps)
        x = x + m * residual if mt == "granite" else x + m
    return norm(x, _get(state, "model.norm.weight"), eps)


def _tied(config):
    if "tie_word_embeddings" in config:
        return bool(config["tie_word_embeddings"])
    mt = config["model_type"]
    return bool(_CONFIG_DEFAULTS[mt]["tie_word_embeddings"]) if mt in _CONFIG_DEFAULTS else False


def logits(state, config, hidden):
    """<Family>ForCausalLM's logits [B, L, V] from the final hidden states: lm_head (or the input
    embedding matrix when tied), Granite's / logits_scaling, Gemma 2's and Gemma 3's
    final_logit_softcapping c * tanh(logits / c) when set."""
    mt = config["model_type"]
    if mt == "gpt_neox":
        head = "gpt_neox.embed_in.weight" if _tied(config) else "embed_out.weight"
    else:
        head = "model.embed_tokens.weight" if _tied(config) else "lm_head.weight"
    out = F.linear(hidden, _get(state, head).to(hidden.dtype))
    if mt == "granite":
        out = out / setting(config, "logits_scaling")
    if mt in ("gemma2", "gemma3_text"):
        cap = setting(config, "final_logit_softcapping")
        if cap is not None:
            out = torch.tanh(out / cap) * cap
    return out


def embedding_scale(config, weight):
    """Gemma(3)TextScaledWordEmbedding: rows * embed_scale.to(weight.dtype), embed_scale the buffer
    torch.tensor(hidden_size ** 0.5) (created in the default dtype: float32, or float64 when the model
    is built in float64). None for families whose embedding is unscaled."""
    if config["model_type"] not in _GEMMA_FAMILIES:
        return None
    buffer_dtype = torch.float64 if weight.dtype == torch.float64 else torch.float32
    return torch.tensor(config["hidden_size"] ** 0.5, dtype=buffer_dtype).to(weight.dtype)


def embedding_matrix(state, config):
    """The input embedding weight [V, d] (unscaled; see input_embeddings)."""
    return _get(state, "gpt_neox.embed_in.weight" if config["model_type"] == "gpt_neox" else "model.embed_tokens.weight")


def input_embeddings(state, config, input_ids):
    """The model's inputs_embeds [B, L, d] as transformers builds them from ids (embed_tokens(ids)):
    the embedding rows, times sqrt(hidden_size) in the weight dtype for the Gemmas (the scale lives in
    the embedding module). Granite's embedding_multiplier is not here: GraniteModel.forward applies it
    to inputs_embeds, so it is inside forward()."""
    weight = embedding_matrix(state, config)
    e = F.embedding(input_ids, weight)
    scale = embedding_scale(config, weight)
    return e if scale is None else e * scale


def forward(state, config, inputs_embeds, **ablations):
    if config["model_type"] == "gpt_neox":
        return neox_forward(state, config, inputs_embeds, **ablations)
    if config["model_type"] in NEW_FAMILIES:
        return family_forward(state, config, inputs_embeds, **ablations)
    return llama_forward(state, config, inputs_embeds, **ablations)


def jacobian_sq_norms(state, config, input_ids, **ablations):
    """||d hidden[b, L-1] / d e[b, j]||_F^2 [B, L] by one autograd call per output coordinate, e the
    model's inputs_embeds (input_embeddings)."""
    state = {k: v.to(torch.float64) for k, v in state.items()}
    e = input_embeddings(state, config, input_ids).detach().requires_grad_(True)
    out = forward(state, config, e, **ablations)[:, -1, :]
    acc = torch.zeros(e.shape[:2], dtype=torch.float64)
    for k in range(out.shape[-1]):
        (g,) = torch.autograd.grad(out[:, k].sum(), e, retain_graph=k + 1 < out.shape[-1])
        acc += g.pow(2).sum(-1)
    return acc


def random_state(config, seed=0, std=0.2):
    """A hand-written checkpoint under Hugging Face names: normal(0, std) matrices, random biases
    and norm weights (so that a bias or norm read from the wrong tensor shows). Norm weights are
    1 + normal(0, 0.1), or normal(0, 0.1) for the Gemmas' (1 + w) norms."""
    g = torch.Generator().manual_seed(seed)

    def n(*shape, s=std):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * s

    def norm(m):
        return 1.0 + n(m, s=0.1)

    d, V, f = config["hidden_size"], config["vocab_size"], config["intermediate_size"]
    heads = config["num_attention_heads"]
    st = {}
    if config["model_type"] in NEW_FAMILIES:
        return _random_family_state(config, n)
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


def _random_family_state(config, n):
    """random_state for NEW_FAMILIES, n(*shape, s=std) the seeded normal draw."""
    mt = config["model_type"]
    d, V, f = config["hidden_size"], config["vocab_size"], config["intermediate_size"]
    heads, kv, hd = config["num_attention_heads"], num_key_value_heads(config), head_dim(config)
    gemma = mt in _GEMMA_FAMILIES

    def norm(m):
        return n(m, s=0.1) if gemma else 1.0 + n(m, s=0.1)

    attention_bias = mt != "phi3" and setting(config, "attention_bias")
    mlp_bias = mt in ("granite", "smollm3") and setting(config, "mlp_bias")
    st = {"model.embed_tokens.weight": n(V, d)}
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        if mt != "olmo2":
            st[p + "input_layernorm.weight"] = norm(d)
        if mt == "phi3":  # rows: q (heads * hd), then k, then v (kv * hd each)
            st[p + "self_attn.qkv_proj.weight"] = n((heads + 2 * kv) * hd, d)
        else:
            for name, rows in (("q_proj", heads * hd), ("k_proj", kv * hd), ("v_proj", kv * hd)):
                st[p + f"self_attn.{name}.weight"] = n(rows, d)
                if attention_bias:
                    st[p + f"self_attn.{name}.bias"] = n(rows, s=0.1)
        st[p + "self_attn.o_proj.weight"] = n(d, heads * hd)
        if attention_bias:
            st[p + "self_attn.o_proj.bias"] = n(d, s=0.1)
        if mt in ("qwen3", "gemma3_text"):
            st[p + "self_attn.q_norm.weight"], st[p + "self_attn.k_norm.weight"] = norm(hd), norm(hd)
        if mt == "olmo2":
            st[p + "self_attn.q_norm.weight"], st[p + "self_attn.k_norm.weight"] = norm(heads * hd), norm(kv * hd)
        st[p + "post_attention_layernorm.weight"] = norm(d)
        if mt in ("gemma2", "gemma3_text"):
            st[p + "pre_feedforward_layernorm.weight"] = norm(d)
        if mt in ("gemma2", "gemma3_text", "olmo2"):
            st[p + "post_feedforward_layernorm.weight"] = norm(d)
        if mt == "phi3":  # rows: gate (f), then up (f)
            st[p + "mlp.gate_up_proj.weight"] = n(2 * f, d)
            st[p + "mlp.down_proj.weight"] = n(d, f)
        else:
            for name, shape in (("gate_proj", (f, d)), ("up_proj", (f, d)), ("down_proj", (d, f))):
                st[p + f"mlp.{name}.weight"] = n(*shape)
                if mlp_bias:
                    st[p + f"mlp.{name}.bias"] = n(shape[0], s=0.1)
    st["model.norm.weight"] = norm(d)
    if not _tied(config):
        st["lm_head.weight"] = n(V, d)
    return st
