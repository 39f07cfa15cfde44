#!/usr/bin/python3
"""Stand-in for build/.../tests/model_forward_dump, for testing equivalence_test.py itself.

Same command line as the C++ tool; it draws random HF-named weights, writes them with a config.json,
and writes embeddings / hidden / logits / jacobian_sq_norms computed in float32 by the reference.
FAKE_DUMP_BUG=<name> injects a known HF-semantics mistake so that one can see the harness catch it:
  erf_gelu        exact-erf GELU instead of gelu_new (tanh)
  interleaved_rope  rotate pairs (2i, 2i+1) instead of HF's rotate_half (i, i + hd/2)
  kv_tile         GQA: kv head (h mod kv) instead of (h // n_rep)
  jacobian_scale  Jacobian norms 0.1% too large
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_models as rm  # noqa: E402

torch.set_num_threads(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", required=True, choices=("gpt2", "qwen2"))
    for k in ("layers", "width", "heads", "kv-heads", "mlp-width", "vocab", "max-positions", "seed"):
        ap.add_argument("--" + k, type=int, required=True)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--no-position-encoding", action="store_true")
    ap.add_argument("--uniform-attention", action="store_true")
    ap.add_argument("--no-mlp", action="store_true")
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--weights-out", required=True)
    ap.add_argument("--config-out", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    bug = os.environ.get("FAKE_DUMP_BUG", "")
    if bug == "erf_gelu":
        rm.gelu_new = torch.nn.functional.gelu
    elif bug == "interleaved_rope":
        rm._rotate_half = lambda x: torch.stack((-x[..., 1::2], x[..., 0::2]), -1).flatten(-2)
    elif bug == "kv_tile":
        rm._repeat_kv = lambda x, n: x.repeat(1, n, 1, 1)
    elif bug not in ("", "jacobian_scale"):
        sys.exit(f"unknown FAKE_DUMP_BUG {bug}")

    if a.arch == "gpt2":
        cfg = rm.gpt2_config(n_layer=a.layers, n_embd=a.width, n_head=a.heads, n_inner=a.mlp_width,
                             vocab_size=a.vocab, n_positions=a.max_positions)
    else:
        cfg = rm.qwen2_config(num_hidden_layers=a.layers, hidden_size=a.width,
                              num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
                              intermediate_size=a.mlp_width, vocab_size=a.vocab,
                              max_position_embeddings=a.max_positions, rope_theta=a.rope_theta)
    # Large std so that attention is far from uniform and every ablation matters.
    state = rm.random_state(cfg, seed=a.seed, std=0.2, random_norms=True)
    if a.no_mlp:  # like the C++ models, which do not build the MLP sub-blocks at all
        state = {k: v for k, v in state.items()
                 if not (".mlp." in k or ".ln_2." in k or ".post_attention_layernorm." in k)}
    flags = dict(no_position_encoding=a.no_position_encoding, uniform_attention=a.uniform_attention,
                 no_mlp=a.no_mlp)
    ids = torch.tensor([[int(t) for t in seq.split(",")] for seq in a.tokens.split(";")])
    out = rm.forward(state, cfg, ids, **flags)
    jac = rm.jacobian_sq_norms(state, cfg, ids, dtype=torch.float32, **flags)
    if bug == "jacobian_scale":
        jac = jac * 1.001
    rm.save_safetensors(a.weights_out, state, metadata={"format": "pt"})
    with open(a.config_out, "w") as f:
        json.dump(cfg, f, indent=2)
    rm.save_safetensors(a.out, {"embeddings": out["embeddings"], "hidden": out["hidden"],
                                "logits": out["logits"], "jacobian_sq_norms": jac})


if __name__ == "__main__":
    main()
