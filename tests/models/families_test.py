#!/usr/bin/python3
"""posbias' decoder families (Llama, Mistral, GPT-NeoX, Qwen3, Gemma, Gemma 2, Gemma 3 text, Phi-3,
OLMo 2, Granite, SmolLM3) against an independent PyTorch implementation of Hugging Face's modeling
code (tests/models/reference_families.py), in float64.

    /usr/bin/python3 tests/models/families_test.py --dump-binary build/release/tests/model_forward_dump

Two routes per case:
* hand-written checkpoints: the test writes config.json and random weights under Hugging Face
  names (random biases and norm weights; one case sharded with model.safetensors.index.json, one
  with the rotary buffers older transformers wrote), model_forward_dump loads the directory
  (--checkpoint) and measures; every option is one case (grouped-query attention, head_dim,
  attention and MLP biases, rope_scaling linear and llama3, tied and untied, a sliding window
  shorter than L, parallel and sequential residual, partial and full rotary, the ablations);
* exported checkpoints: model_forward_dump builds a preset at seeded initialization, exports it,
  and the reference reads the export.
Both compare the final hidden states and the exact per-position Jacobian norms
||d hidden[L] / d e_j||_F^2 (the reference: one autograd call per output coordinate) at most 1e-10
relative (the largest difference over the largest value, and per position for the norms: both
sides run the checkpoint's float32 values in float64). For the
families added with Qwen3 (NEW_FAMILIES) the dump's embeddings (the model's inputs_embeds, e_j, built
from the ids as transformers does: the Gemmas scale the rows by sqrt(hidden_size) inside their
embedding module) and logits [B, L, V] (LM head, Granite's logits_scaling, Gemma 2/3's
final_logit_softcapping) are compared too; their cases cover grouped-query attention with 1 and 2
kv heads, windows on the sliding layers only (default rules and layer_types), soft-capping, q/k
norms, partial rotary, longrope with long and short factors, Gemma 3's two rotary bases and linear
scaling, NoPE layers, Granite's multipliers and the ablations.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_families as rf  # noqa: E402
import reference_models as rm  # noqa: E402 (safetensors reading and writing)

torch.set_num_threads(1)
# The hand-written checkpoints hold float32 values (the loader reads float32), so both sides run
# the same numbers in float64: agreement to rounding. Exported presets compare at the same bound.
TOLERANCE = 1e-10
BATCH, LENGTH = 2, 12
DUMP_BINARY = None


def llama(**extra):
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "hidden_size": 32,
              "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48, "vocab_size": 64,
              "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
              "tie_word_embeddings": False}
    config.update(extra)
    return config


def mistral(**extra):
    config = llama(model_type="mistral", architectures=["MistralForCausalLM"], sliding_window=4)
    config.update(extra)
    return config


def neox(**extra):
    config = {"model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"], "num_hidden_layers": 2,
              "hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 64, "vocab_size": 64,
              "max_position_embeddings": 64, "layer_norm_eps": 1e-5, "rotary_emb_base": 10000.0,
              "rotary_pct": 0.25, "use_parallel_residual": True, "hidden_act": "gelu",
              "tie_word_embeddings": False}
    config.update(extra)
    return config


# The families written from transformers' main branch: config.json as the Hugging Face checkpoints
# spell it (keys a reader ignores included), tiny shapes.

def qwen3(**extra):
    config = {"architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
              "bos_token_id": 1, "eos_token_id": 2, "head_dim": 16, "hidden_act": "silu", "hidden_size": 32,
              "initializer_range": 0.02, "intermediate_size": 48, "max_position_embeddings": 64,
              "max_window_layers": 28, "model_type": "qwen3", "num_attention_heads": 4, "num_hidden_layers": 2,
              "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000.0,
              "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
              "transformers_version": "4.51.0", "use_cache": True, "use_sliding_window": False, "vocab_size": 64}
    config.update(extra)
    return config


def gemma(**extra):
    # No tie_word_embeddings key, as google/gemma-*: GemmaConfig's default (True) ties the LM head.
    config = {"architectures": ["GemmaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
              "bos_token_id": 2, "eos_token_id": 1, "head_dim": 16, "hidden_act": "gelu_pytorch_tanh",
              "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 32, "initializer_range": 0.02,
              "intermediate_size": 48, "max_position_embeddings": 64, "model_type": "gemma",
              "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 1, "pad_token_id": 0,
              "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 10000.0, "torch_dtype": "bfloat16",
              "transformers_version": "4.38.0", "use_cache": True, "vocab_size": 64}
    config.update(extra)
    return config


def gemma2(**extra):
    config = {"architectures": ["Gemma2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
              "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid",
              "eos_token_id": 1, "final_logit_softcapping": 30.0, "head_dim": 16,
              "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 32,
              "initializer_range": 0.02, "intermediate_size": 48, "max_position_embeddings": 64,
              "model_type": "gemma2", "num_attention_heads": 4, "num_hidden_layers": 4, "num_key_value_heads": 2,
              "pad_token_id": 0, "query_pre_attn_scalar": 16, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
              "sliding_window": 4, "torch_dtype": "float32", "transformers_version": "4.42.4", "use_cache": True,
              "vocab_size": 64}
    config.update(extra)
    return config


def gemma3_text(**extra):
    config = {"architectures": ["Gemma3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
              "attn_logit_softcapping": None, "bos_token_id": 2, "cache_implementation": "hybrid",
              "eos_token_id": 1, "final_logit_softcapping": None, "head_dim": 16,
              "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 32, "initializer_range": 0.02,
              "intermediate_size": 48, "max_position_embeddings": 64, "model_type": "gemma3_text",
              "num_attention_heads": 4, "num_hidden_layers": 4, "num_key_value_heads": 1, "pad_token_id": 0,
              "query_pre_attn_scalar": 16, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000.0,
              "rope_scaling": None, "rope_theta": 1000000.0, "sliding_window": 4, "sliding_window_pattern": 2,
              "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0", "use_cache": True,
              "vocab_size": 64}
    config.update(extra)
    return config


def phi3(**extra):
    config = {"architectures": ["Phi3ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
              "embd_pdrop": 0.0, "eos_token_id": 3, "hidden_act": "silu", "hidden_size": 32,
              "initializer_range": 0.02, "intermediate_size": 48, "max_position_embeddings": 64,
              "model_type": "phi3", "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
              "original_max_position_embeddings": 64, "pad_token_id": 0, "resid_pdrop": 0.0,
              "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0, "sliding_window": None,
              "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.40.2",
              "use_cache": True, "vocab_size": 64}
    config.update(extra)
    return config


def phi3_longrope(original, **extra):
    # Phi-4-mini's layout: partial_rotary_factor 0.75 (6 of 8 dimensions, 3 frequencies), "type" as the
    # checkpoints spell it, no "factor" (so factor = 64 / original and attention_factor follows).
    return phi3(partial_rotary_factor=0.75, original_max_position_embeddings=original, rope_scaling={
        "long_factor": [1.0, 3.5, 11.0], "short_factor": [1.0, 1.25, 1.5], "type": "longrope"}, **extra)


def olmo2(**extra):
    config = {"architectures": ["Olmo2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
              "bos_token_id": None, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 32,
              "initializer_range": 0.02, "intermediate_size": 48, "max_position_embeddings": 64,
              "model_type": "olmo2", "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 1,
              "pad_token_id": 1, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 500000,
              "tie_word_embeddings": False, "torch_dtype": "float32", "transformers_version": "4.47.0.dev0",
              "use_cache": True, "vocab_size": 64}
    config.update(extra)
    return config


def granite(**extra):
    config = {"architectures": ["GraniteForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
              "attention_multiplier": 0.125, "bos_token_id": 0, "embedding_multiplier": 12.0, "eos_token_id": 0,
              "hidden_act": "silu", "hidden_size": 32, "initializer_range": 0.02, "intermediate_size": 48,
              "logits_scaling": 8.0, "max_position_embeddings": 64, "mlp_bias": False, "model_type": "granite",
              "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "pad_token_id": 0,
              "residual_multiplier": 0.22, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0,
              "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.46.0.dev0",
              "use_cache": True, "vocab_size": 64}
    config.update(extra)
    return config


def smollm3(**extra):
    config = {"architectures": ["SmolLM3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
              "bos_token_id": None, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 32,
              "initializer_range": 0.02, "intermediate_size": 48, "max_position_embeddings": 64,
              "max_window_layers": 28, "mlp_bias": False, "model_type": "smollm3", "no_rope_layer_interval": 4,
              "num_attention_heads": 4, "num_hidden_layers": 4, "num_key_value_heads": 1, "pad_token_id": 0,
              "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 5000000.0, "sliding_window": None,
              "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.53.0.dev0",
              "use_cache": False, "use_sliding_window": False, "vocab_size": 64}
    config.update(extra)
    return config


# name -> (config, ablation flags, how the checkpoint is written)
CASES = {
    "llama_gqa": (llama(), {}, "single"),
    "llama_one_kv_head": (llama(num_key_value_heads=1), {}, "single"),
    "llama_head_dim": (llama(head_dim=16), {}, "single"),  # 4 heads x 16 != 32.
    "llama_biases": (llama(attention_bias=True, mlp_bias=True), {}, "sharded"),
    "llama_rope_linear": (llama(rope_scaling={"rope_type": "linear", "factor": 4.0}), {}, "single"),
    # original 16 positions: the 4 rotary frequencies fall below, inside and above the ramp.
    "llama_rope_llama3": (llama(rope_theta=500000.0, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16}), {}, "single"),
    "llama_tied": (llama(tie_word_embeddings=True), {}, "single"),
    "llama_no_position_encoding": (llama(), {"no_position_encoding": True}, "single"),
    "llama_uniform_attention": (llama(), {"uniform_attention": True}, "single"),
    "mistral_window_shorter_than_l": (mistral(), {}, "single"),
    "mistral_window_uniform": (mistral(), {"uniform_attention": True}, "single"),
    "mistral_no_window": (mistral(sliding_window=None), {}, "single"),
    "neox_parallel": (neox(), {}, "buffers"),
    "neox_sequential": (neox(use_parallel_residual=False), {}, "single"),
    "neox_full_rotary": (neox(rotary_pct=1.0), {}, "sharded"),
    "neox_no_mlp": (neox(), {"no_mlp": True}, "single"),
    # Qwen3: head_dim 16 != 32 / 4; q/k norms in every case.
    "qwen3_gqa": (qwen3(), {}, "single"),
    "qwen3_one_kv_head_attention_bias": (qwen3(num_key_value_heads=1, attention_bias=True), {}, "sharded"),
    # No layer_types: layers >= max_window_layers (1, 2) slide with window 4 < L, layer 0 is full.
    "qwen3_window_default_rule": (qwen3(num_hidden_layers=3, use_sliding_window=True, sliding_window=4,
                                       max_window_layers=1), {}, "single"),
    "qwen3_window_layer_types": (qwen3(num_hidden_layers=3, use_sliding_window=True, sliding_window=4,
                                      layer_types=["sliding_attention", "full_attention", "sliding_attention"]),
                                 {}, "single"),
    "qwen3_no_position_encoding": (qwen3(), {"no_position_encoding": True}, "single"),
    # Gemma: tied by default, 1 kv head, (1 + w) norms, sqrt(d)-scaled embeddings.
    "gemma_one_kv_head": (gemma(), {}, "single"),
    # google/gemma-2b's config.json spells hidden_act "gelu": main's GemmaMLP reads hidden_act (exact GELU).
    "gemma_hidden_act_gelu": (gemma(hidden_act="gelu"), {}, "single"),
    "gemma_untied_gqa_attention_bias": (gemma(num_key_value_heads=2, tie_word_embeddings=False,
                                              attention_bias=True), {}, "sharded"),
    # Gemma 2: layers 0 and 2 slide (window 4), 1 and 3 are full; caps small enough that tanh bends.
    "gemma2_softcaps_window": (gemma2(attn_logit_softcapping=2.0, final_logit_softcapping=5.0,
                                      query_pre_attn_scalar=4), {}, "single"),
    "gemma2_no_softcaps_one_kv_head": (gemma2(attn_logit_softcapping=None, final_logit_softcapping=None,
                                              num_key_value_heads=1), {}, "single"),
    # hidden_act is not read by Gemma 2 (hidden_activation is).
    "gemma2_layer_types": (gemma2(hidden_act="gelu", layer_types=[
        "full_attention", "sliding_attention", "sliding_attention", "full_attention"]), {}, "sharded"),
    "gemma2_uniform_attention": (gemma2(attn_logit_softcapping=2.0, query_pre_attn_scalar=4),
                                 {"uniform_attention": True}, "single"),
    "gemma2_no_mlp": (gemma2(), {"no_mlp": True}, "single"),
    # Gemma 3: sliding_window_pattern 2 (layers 0, 2 slide with rope_local_base_freq; 1, 3 full with
    # rope_theta and rope_scaling), q/k norms, 1 kv head.
    "gemma3_local_global_rope": (gemma3_text(), {}, "single"),
    "gemma3_linear_rope_scaling": (gemma3_text(num_key_value_heads=2,
                                               rope_scaling={"factor": 8.0, "rope_type": "linear"}), {}, "single"),
    # final_logit_softcapping applies; Gemma3Attention does not pass attn_logit_softcapping on.
    "gemma3_softcaps": (gemma3_text(final_logit_softcapping=5.0, attn_logit_softcapping=2.0), {}, "single"),
    "gemma3_layer_types_untied": (gemma3_text(tie_word_embeddings=False, layer_types=[
        "sliding_attention", "sliding_attention", "full_attention", "sliding_attention"]), {}, "sharded"),
    "gemma3_no_position_encoding": (gemma3_text(), {"no_position_encoding": True}, "single"),
    # Phi-3: fused qkv_proj / gate_up_proj; window 4 on every layer.
    "phi3_window": (phi3(sliding_window=4), {}, "single"),
    # original_max_position_embeddings 8 < L = 12: long_factor; 16 >= L: short_factor.
    "phi3_longrope_long": (phi3_longrope(8), {}, "single"),
    "phi3_longrope_short": (phi3_longrope(16), {}, "sharded"),
    "phi3_partial_rotary_one_kv_head_tied": (phi3(partial_rotary_factor=0.5, num_key_value_heads=1,
                                                  tie_word_embeddings=True), {}, "single"),
    # OLMo 2: post-branch norms, q/k norms over whole projections (k_norm 1 * 8 wide here).
    "olmo2_one_kv_head": (olmo2(), {}, "single"),
    "olmo2_gqa_attention_bias": (olmo2(num_key_value_heads=2, attention_bias=True), {}, "sharded"),
    "olmo2_no_mlp": (olmo2(), {"no_mlp": True}, "single"),
    # Granite: multipliers != 1, attention_multiplier 1/8 != 8^-0.5, tied.
    "granite_multipliers": (granite(), {}, "single"),
    "granite_untied_one_kv_head_biases": (granite(tie_word_embeddings=False, num_key_value_heads=1,
                                                  attention_bias=True, mlp_bias=True), {}, "sharded"),
    "granite_uniform_attention": (granite(), {"uniform_attention": True}, "single"),
    # SmolLM3: no no_rope_layers key, interval 4: layer 3 is NoPE.
    "smollm3_nope_default_rule": (smollm3(), {}, "single"),
    "smollm3_nope_list": (smollm3(no_rope_layers=[1, 0, 1, 0], num_key_value_heads=2), {}, "single"),
    # use_sliding_window: the NoPE layers (1, 3) slide with window 4.
    "smollm3_nope_sliding": (smollm3(no_rope_layers=[1, 0, 1, 0], use_sliding_window=True, sliding_window=4),
                             {}, "single"),
}
NEW_FAMILIES = ("qwen3", "gemma", "gemma2", "gemma3_text", "phi3", "olmo2", "granite", "smollm3")
EXPORTED = {"llama-tiny": {}, "mistral-tiny": {}, "pythia-tiny": {}, "qwen3-tiny": {}, "gemma-tiny": {}, "gemma2-tiny": {},
            "gemma3-tiny": {}, "phi3-tiny": {}, "olmo2-tiny": {}, "granite-tiny": {}, "smollm3-tiny": {}}
FLAGS = {"no_position_encoding": "--no-position-encoding", "uniform_attention": "--uniform-attention",
         "no_mlp": "--no-mlp"}


def tokens_for(name, vocab):
    rng = random.Random(name)
    return [[rng.randrange(vocab) for _ in range(LENGTH)] for _ in range(BATCH)]


def relative(got, want):
    scale = want.abs().max().item()
    return (got.double() - want).abs().max().item() / (scale if scale > 0 else 1.0)


def write_checkpoint(directory, config, state, layout):
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)
    if layout != "sharded":
        rm.save_safetensors(os.path.join(directory, "model.safetensors"), state)
        return
    names = sorted(state)
    halves = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    weight_map = {}
    for file, part in halves.items():
        rm.save_safetensors(os.path.join(directory, file), {n: state[n] for n in part})
        weight_map.update({n: file for n in part})
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


def run_dump(args):
    proc = subprocess.run([DUMP_BINARY] + args, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"model_forward_dump {' '.join(args)} exited {proc.returncode}: {proc.stderr}")


class Families(unittest.TestCase):
    def compare(self, name, config, state, flags, out_path):
        out, _ = rm.load_safetensors(out_path)
        ids = torch.tensor(tokens_for(name, config["vocab_size"]), dtype=torch.int64)
        state = {k: v.to(torch.float64) for k, v in state.items()}
        embeds = rf.input_embeddings(state, config, ids)
        new_family = config["model_type"] in NEW_FAMILIES
        if new_family:  # the model's inputs_embeds (the Gemmas' sqrt(d) scale included)
            self.assertIn("embeddings", out)
            self.assertLessEqual(relative(out["embeddings"], embeds), TOLERANCE, "embeddings")
        hidden = rf.forward(state, config, embeds, **flags)
        self.assertEqual(out["hidden"].dtype, torch.float64)
        self.assertLessEqual(relative(out["hidden"], hidden), TOLERANCE, "hidden states")
        if new_family:  # [B, L, V]: LM head, logits_scaling, final_logit_softcapping
            self.assertIn("logits", out)
            want_logits = rf.logits(state, config, hidden)
            self.assertEqual(tuple(out["logits"].shape), tuple(want_logits.shape))
            self.assertLessEqual(relative(out["logits"], want_logits), TOLERANCE, "logits")
        want = rf.jacobian_sq_norms(state, config, ids, **flags)
        self.assertLessEqual(relative(out["jacobian_sq_norms"], want), TOLERANCE, "Jacobian norms")
        # Per position too; where a window leaves a position no influence at all (want = 0), the
        # measured norm must be 0 up to rounding of the largest.
        reached = want > 0
        per_position = ((out["jacobian_sq_norms"] - want).abs()[reached] / want[reached]).max().item()
        self.assertLessEqual(per_position, TOLERANCE, "Jacobian norms per position")
        self.assertLessEqual(out["jacobian_sq_norms"][~reached].abs().max().item() if (~reached).any() else 0.0,
                             1e-12 * want.max().item(), "norms where no influence reaches")
        return hidden

    def test_hand_written_checkpoints_match_the_reference(self):
        for name, (config, flags, layout) in CASES.items():
            with self.subTest(case=name), tempfile.TemporaryDirectory(prefix=f"family-{name}-") as directory:
                state = {k: v.float().double() for k, v in rf.random_state(config, seed=len(name)).items()}
                write_checkpoint(directory, config, state, layout)
                out_path = os.path.join(directory, "out.safetensors")
                tokens = ";".join(",".join(map(str, row)) for row in tokens_for(name, config["vocab_size"]))
                run_dump(["--checkpoint", directory, "--float64", "--tokens", tokens, "--out", out_path]
                         + [FLAGS[k] for k, v in flags.items() if v])
                hidden = self.compare(name, config, {k: v for k, v in state.items() if "inv_freq" not in k},
                                      flags, out_path)
                if flags:  # The ablation must change the model, or the case tests nothing.
                    plain = rf.forward({k: v for k, v in state.items() if "inv_freq" not in k}, config,
                                       rf.input_embeddings(state, config,
                                                           torch.tensor(tokens_for(name, config["vocab_size"]))))
                    self.assertGreater(relative(hidden, plain), 1e-3)

    def test_the_window_changes_the_model(self):
        # The window of 4 < L = 12 must matter, else the Mistral cases would not test the mask.
        config = mistral()
        state = rf.random_state(config, seed=3)
        ids = torch.tensor(tokens_for("window", 64))
        embeds = torch.nn.functional.embedding(ids, rf.embedding_matrix(state, config))
        windowed = rf.forward(state, config, embeds)
        full = rf.forward(state, mistral(sliding_window=None), embeds)
        self.assertGreater(relative(windowed, full), 1e-3)

    def test_new_family_features_change_the_model(self):
        # Each feature the new cases exercise must move the reference (else its case tests nothing),
        # and Gemma 3's attn_logit_softcapping must not (Gemma3Attention does not pass it on).
        ids = torch.tensor(tokens_for("features", 64))

        def outputs(config, state_config=None, **flags):
            state = rf.random_state(state_config or config, seed=5)
            hidden = rf.forward(state, config, rf.input_embeddings(state, config, ids), **flags)
            return hidden, rf.logits(state, config, hidden)

        pairs = {
            "qwen3 window": (qwen3(num_hidden_layers=3, use_sliding_window=True, sliding_window=4,
                                   max_window_layers=1), qwen3(num_hidden_layers=3)),
            "gemma2 attention soft-cap": (gemma2(attn_logit_softcapping=2.0, query_pre_attn_scalar=4),
                                          gemma2(attn_logit_softcapping=None, query_pre_attn_scalar=4)),
            "gemma2 window": (gemma2(), gemma2(layer_types=["full_attention"] * 4)),
            "gemma3 linear scaling": (gemma3_text(rope_scaling={"factor": 8.0, "rope_type": "linear"}),
                                      gemma3_text()),
            "gemma3 local base": (gemma3_text(), gemma3_text(rope_local_base_freq=1000000.0)),
            "phi3 long vs short factors": (phi3_longrope(8), phi3_longrope(16)),
            "phi3 partial rotary": (phi3(partial_rotary_factor=0.5), phi3()),
            "phi3 window": (phi3(sliding_window=4), phi3()),
            "smollm3 NoPE layers": (smollm3(no_rope_layers=[1, 0, 1, 0]), smollm3(no_rope_layers=[1] * 4)),
            "smollm3 window": (smollm3(no_rope_layers=[1, 0, 1, 0], use_sliding_window=True, sliding_window=4),
                               smollm3(no_rope_layers=[1, 0, 1, 0])),
            "granite multipliers": (granite(), granite(embedding_multiplier=1.0, residual_multiplier=1.0,
                                                       attention_multiplier=8 ** -0.5)),
        }
        for what, (a, b) in pairs.items():
            with self.subTest(feature=what):
                self.assertGreater(relative(outputs(a)[0], outputs(b, state_config=a)[0]), 1e-3)
        with self.subTest(feature="gemma2 final soft-cap"):
            self.assertGreater(relative(outputs(gemma2(final_logit_softcapping=5.0))[1],
                                        outputs(gemma2(final_logit_softcapping=None))[1]), 1e-3)
        with self.subTest(feature="gemma hidden_act"):  # exact vs tanh GELU: small, far above TOLERANCE
            self.assertGreater(relative(outputs(gemma(hidden_act="gelu"))[0], outputs(gemma())[0]), 1e-5)
        with self.subTest(feature="gemma3 attn_logit_softcapping has no effect"):
            self.assertEqual(relative(outputs(gemma3_text(attn_logit_softcapping=2.0))[0],
                                      outputs(gemma3_text())[0]), 0.0)

    def test_exported_presets_match_the_reference(self):
        for preset, flags in EXPORTED.items():
            with self.subTest(preset=preset), tempfile.TemporaryDirectory(prefix=f"export-{preset}-") as directory:
                weights, config_path = os.path.join(directory, "w.safetensors"), os.path.join(directory, "config.json")
                out_path = os.path.join(directory, "out.safetensors")
                config_vocab = 128
                tokens = ";".join(",".join(map(str, row)) for row in tokens_for(preset, config_vocab))
                # A large init spread makes the layers strongly nonlinear (a wrong pairing shows).
                run_dump(["--preset", preset, "--initializer-range", "0.2", "--seed", "7", "--float64",
                          "--layers", "2", "--tokens", tokens, "--weights-out", weights, "--config-out", config_path,
                          "--out", out_path])
                state, _ = rm.load_safetensors(weights)
                with open(config_path) as f:
                    config = json.load(f)
                self.assertEqual(config["vocab_size"], config_vocab)
                self.compare(preset, config, state, flags, out_path)


def main():
    global DUMP_BINARY
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dump-binary", required=True)
    args, rest = parser.parse_known_args()
    DUMP_BINARY = os.path.abspath(args.dump_binary)
    program = unittest.main(argv=[sys.argv[0]] + rest, exit=False)
    return 0 if program.result.wasSuccessful() and program.result.testsRun > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
