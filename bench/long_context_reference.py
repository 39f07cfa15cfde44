#!/usr/bin/python3
"""A straightforward PyTorch reference for long-context Jacobian norms (bench/run_long_context.sh).

What a researcher would write to reach long contexts in PyTorch: the models of
tests/models/reference_models.py and reference_families.py (Hugging Face semantics), with their
eager attention replaced by attention per query block under activation checkpointing
(torch.utils.checkpoint, non-reentrant), so that no [L, L] score matrix is kept; then batched
vector-Jacobian products (torch.autograd.grad, one call per cotangent row) at the last position:

* hutchinson: K probes, the mean over probes of ||u^T J_j||^2 per position;
* exact:      the d one-hot cotangents, the sum of their squared gradients per position.

    /usr/bin/python3 bench/long_context_reference.py --weights W.safetensors --config config.json \
        --tokens tokens.json --method hutchinson --probes 8 [--block 512] [--threads 2] [--dtype float32]

The probes are orthogonal blocks read from --probes-file when given (the C++ engine's own, for an
exact comparison), else Gaussian from --seed. Prints one JSON object: seconds, peak RSS (MiB,
getrusage), sq_norm_mean per position.
"""

import argparse
import json
import os
import resource
import sys
import time

import torch
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models"))
import reference_families as rf  # noqa: E402
import reference_models as rm  # noqa: E402

BLOCK = 512


def blocked_attention(q, k, v, scaling, window=None, uniform=False, softcap=None):
    """q [B, H, L, hd], k and v [B, H, L, hd] (repeated for grouped heads): softmax attention per
    block of BLOCK queries, each block checkpointed (its scores recomputed in the backward); scores
    soft-capped c tanh(S / c) where `softcap` says (Gemma 2)."""
    length = q.shape[2]
    outputs = []
    for i0 in range(0, length, BLOCK):
        i1 = min(length, i0 + BLOCK)
        lo = 0 if not window else max(0, i0 - window + 1)

        def block(qb, kb, vb, i0=i0, i1=i1, lo=lo):
            rows = torch.arange(i0, i1, device=qb.device).view(-1, 1)
            keys = torch.arange(lo, i1, device=qb.device).view(1, -1)
            hidden = keys > rows
            if window:
                hidden = hidden | (keys <= rows - window)
            scores = torch.zeros(qb.shape[:-1] + (i1 - lo,), dtype=qb.dtype) if uniform else \
                torch.matmul(qb, kb.transpose(-1, -2)) * scaling
            if softcap and not uniform:
                scores = torch.tanh(scores / softcap) * softcap
            scores = scores.masked_fill(hidden, float("-inf"))
            probs = torch.softmax(scores.to(torch.float32 if qb.dtype != torch.float64 else qb.dtype), -1).to(vb.dtype)
            return torch.matmul(probs, vb)

        outputs.append(checkpoint(block, q[:, :, i0:i1], k[:, :, lo:i1], v[:, :, lo:i1], use_reentrant=False))
    return torch.cat(outputs, 2)


def gpt2_qwen2_attention(q, k, v, scale, uniform):
    return blocked_attention(q, k, v, scale, None, uniform)


def main():
    global BLOCK
    parser = argparse.ArgumentParser()
    parser.add_argument("--weights", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--tokens", required=True, help="JSON list of token id lists (the first is used)")
    parser.add_argument("--length", type=int, required=True,
                        help="L: the first L ids (posbias' report lists one more, the next token)")
    parser.add_argument("--method", choices=["exact", "hutchinson"], default="hutchinson")
    parser.add_argument("--probes", type=int, default=8)
    parser.add_argument("--block", type=int, default=512)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    BLOCK = args.block
    torch.set_num_threads(args.threads)
    dtype = torch.float64 if args.dtype == "float64" else torch.float32
    rm._causal_attention = gpt2_qwen2_attention
    rf.eager_attention = blocked_attention
    state, config = rm.load_model(args.weights, args.config)
    state = rm.cast_state(state, dtype)
    with open(args.tokens) as f:
        ids = torch.tensor(json.load(f)[0][:args.length], dtype=torch.long).unsqueeze(0)
    length = ids.shape[1]
    family = config.get("model_type")
    start = time.monotonic()
    if family in ("llama", "mistral", "gpt_neox") + rf.NEW_FAMILIES:
        # The model's inputs_embeds as transformers builds them (the Gemmas' scaled embedding).
        embeds = rf.input_embeddings(state, config, ids).detach().to(dtype)
        embeds.requires_grad_(True)
        hidden = rf.forward(state, config, embeds)
    else:
        embeds = rm.embed(state, config, ids).detach().to(dtype).requires_grad_(True)
        hidden = rm.forward(state, config, inputs_embeds=embeds, compute_logits=False)["hidden"]
    target = hidden[0, length - 1]
    d = target.shape[-1]
    generator = torch.Generator().manual_seed(args.seed)
    rows = torch.eye(d, dtype=dtype) if args.method == "exact" else \
        torch.randn(args.probes, d, generator=generator, dtype=torch.float64).to(dtype)
    sums = torch.zeros(length, dtype=torch.float64)
    for r in range(rows.shape[0]):
        (g,) = torch.autograd.grad(target, embeds, grad_outputs=rows[r], retain_graph=r + 1 < rows.shape[0])
        sums += g[0].to(torch.float64).pow(2).sum(-1)
    if args.method == "hutchinson":
        sums /= rows.shape[0]
    seconds = time.monotonic() - start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    json.dump({"seconds": seconds, "peak_rss_mib": peak_mib, "length": length, "family": family,
               "method": args.method, "rows": int(rows.shape[0]), "block": BLOCK, "dtype": args.dtype,
               "threads": args.threads, "sq_norm_mean": sums.tolist()}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
