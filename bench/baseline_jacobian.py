#!/usr/bin/python3
"""PyTorch baseline of the Jacobian position-bias measurement (THEORY.md section 6).

A straightforward PyTorch implementation of the same measurement the C++ Jacobian engine makes,
written as a researcher would: build the model (tests/models/reference_models.py, Hugging Face
semantics), draw random token ids, embed them, run the forward pass once with the embeddings
requiring grad, and get per-position squared Frobenius norms ||d hidden[:, L-1, :] / d e_j||_F^2
from batched vector-Jacobian products (torch.autograd.grad over a batch of cotangents):

* exact:      d one-hot cotangents at position L-1 -> sum over them of the squared gradients;
* hutchinson: K Gaussian probes u, mean over probes of ||u^T J_j||^2 (unbiased for ||J_j||_F^2),
              with its standard error per position.

    /usr/bin/python3 bench/baseline_jacobian.py --weights W.safetensors --config config.json \
        --length 256 --method exact|hutchinson [--probes 16] [--samples 5] [--seed 0] [--threads 1]

Prints one JSON object: seconds_per_sample (median over samples of forward + all VJPs for one
sequence), sq_norm_mean / sq_norm_std over samples per position (1-based position j is index j-1),
and the measurement's parameters. Needs only Debian's /usr/bin/python3 with python3-torch.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models"))
import reference_models as rm  # noqa: E402


def batched_vjp(out, inp, cotangents, chunk, state):
    """Gradients of ``out`` w.r.t. ``inp`` for each cotangent in ``cotangents`` [n, *out.shape],
    accumulated as sum over cotangents of squared gradients per position -> [L] (batch 1).

    Uses autograd.grad(is_grads_batched=True) in chunks of ``chunk`` cotangents; if vmap cannot
    batch the backward (state["batched"] becomes False) it loops over single cotangents."""
    n = cotangents.shape[0]
    per_cotangent = []  # [n, L] squared norm of each VJP per position
    for s in range(0, n, chunk):
        c = cotangents[s:s + chunk]
        last = s + chunk >= n
        if state["batched"]:
            try:
                (g,) = torch.autograd.grad(out, inp, grad_outputs=c, retain_graph=not last,
                                           is_grads_batched=True)
                per_cotangent.append(g.pow(2).sum(-1).sum(1))  # [chunk, B, L, d] -> [chunk, L]
                continue
            except RuntimeError as err:  # pragma: no cover - depends on the torch build
                state["batched"] = False
                state["batched_error"] = str(err).splitlines()[0]
        for i in range(c.shape[0]):
            (g,) = torch.autograd.grad(out, inp, grad_outputs=c[i],
                                       retain_graph=not (last and i + 1 == c.shape[0]))
            per_cotangent.append(g.pow(2).sum(-1).sum(0)[None])
    return torch.cat(per_cotangent, 0)


def measure_one(state, config, ids, method, probes, chunk, probe_gen, vjp_state, ablations):
    """(per-position estimate [L], per-position standard error [L] or None) for one sequence."""
    e = rm.embed(state, config, ids, **ablations).detach().requires_grad_(True)
    hidden = rm.forward(state, config, inputs_embeds=e, compute_logits=False, **ablations)["hidden"]
    B, L, d = hidden.shape
    if method == "exact":
        cot = torch.zeros(d, B, L, d, dtype=hidden.dtype)
        cot[torch.arange(d), :, L - 1, torch.arange(d)] = 1.0
        sq = batched_vjp(hidden, e, cot, chunk, vjp_state)
        return sq.sum(0), None
    u = torch.randn(probes, B, d, generator=probe_gen, dtype=torch.float64, device="cpu").to(hidden.device, hidden.dtype)
    cot = torch.zeros(probes, B, L, d, dtype=hidden.dtype)
    cot[:, :, L - 1, :] = u
    sq = batched_vjp(hidden, e, cot, chunk, vjp_state)  # [K, L]
    est = sq.mean(0)
    sem = sq.std(0, unbiased=True) / probes ** 0.5 if probes > 1 else torch.full_like(est, float("nan"))
    return est, sem


def main(argv=None):
    ap = argparse.ArgumentParser(description="PyTorch baseline of the Jacobian position-bias measurement")
    ap.add_argument("--weights", required=True, help="model weights, .safetensors with HF names")
    ap.add_argument("--config", required=True, help="HF config.json")
    ap.add_argument("--length", type=int, required=True, help="sequence length L")
    ap.add_argument("--method", choices=("exact", "hutchinson"), default="exact")
    ap.add_argument("--probes", type=int, default=16, help="Hutchinson probes K")
    ap.add_argument("--samples", type=int, default=3, help="random sequences S")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", choices=("float32", "float64", "bfloat16"), default="float32")
    ap.add_argument("--device", default="cpu", help="cpu or cuda:N (torch >= 2.0 for CUDA)")
    ap.add_argument("--chunk", type=int, default=0,
                    help="cotangents per batched autograd.grad call (0: all, capped at 2^26 elements)")
    ap.add_argument("--no-position-encoding", action="store_true")
    ap.add_argument("--uniform-attention", action="store_true")
    ap.add_argument("--no-mlp", action="store_true")
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs before the samples")
    ap.add_argument("--tokens", help="JSON list of token id lists (one per sample; the first "
                    "--length ids of each are used), e.g. the `tokens` of a posbias-measure run")
    ap.add_argument("--output", help="also write the JSON here")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    dtype = {"float64": torch.float64, "bfloat16": torch.bfloat16}.get(args.dtype, torch.float32)
    device = torch.device(args.device)
    if device.type != "cpu":
        # The reference models create their masks and tables without a device argument.
        torch.set_default_device(device)
    state, config = rm.load_model(args.weights, args.config)
    state = {k: v.to(device) for k, v in rm.cast_state(state, dtype).items()}

    def synchronize():
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    cfg = rm.normalize_config(config, state)
    if cfg["arch"] == "gpt2" and args.length > cfg["max_positions"] and not args.no_position_encoding:
        ap.error(f"--length {args.length} exceeds n_positions {cfg['max_positions']}")
    ablations = dict(no_position_encoding=args.no_position_encoding,
                     uniform_attention=args.uniform_attention, no_mlp=args.no_mlp)
    n_cot = cfg["width"] if args.method == "exact" else args.probes
    # Default chunk: all cotangents at once unless the cotangent batch alone would pass 2^26
    # elements (256 MiB in float32); the batched backward's memory grows with the chunk too.
    chunk = args.chunk if args.chunk > 0 else max(1, min(n_cot, (1 << 26) // (args.length * cfg["width"])))

    token_gen = torch.Generator().manual_seed(args.seed)
    probe_gen = torch.Generator().manual_seed(args.seed + 1_000_003)
    vjp_state = {"batched": True}

    warm_gen = torch.Generator().manual_seed(args.seed ^ 0x5EED)
    for _ in range(args.warmup):
        ids = torch.randint(0, cfg["vocab"], (1, args.length), generator=warm_gen, device="cpu").to(device)
        measure_one(state, config, ids, args.method, args.probes, chunk,
                    torch.Generator().manual_seed(0), vjp_state, ablations)

    given = None
    if args.tokens:
        with open(args.tokens) as f:
            given = [row[:args.length] for row in json.load(f)]
        args.samples = len(given)

    times, ests, sems = [], [], []
    for s in range(args.samples):
        if given is not None:
            ids = torch.tensor([given[s]], dtype=torch.long, device="cpu").to(device)
        else:
            ids = torch.randint(0, cfg["vocab"], (1, args.length), generator=token_gen, device="cpu").to(device)
        synchronize()
        t0 = time.perf_counter()
        est, sem = measure_one(state, config, ids, args.method, args.probes, chunk, probe_gen,
                               vjp_state, ablations)
        synchronize()
        times.append(time.perf_counter() - t0)
        ests.append(est.double().cpu())
        if sem is not None:
            sems.append(sem.double().cpu())
    E = torch.stack(ests)
    result = {
        "implementation": "pytorch-autograd",
        "method": args.method,
        "length": args.length,
        "samples": args.samples,
        "probes": args.probes if args.method == "hutchinson" else None,
        "seed": args.seed,
        "threads": args.threads,
        "dtype": args.dtype,
        "device": str(device),
        "output": "final hidden state (after final norm), position L",
        "norm": "squared Frobenius norm of d hidden[L] / d e_j",
        "ablations": {k: v for k, v in ablations.items() if v},
        "model": {k: cfg[k] for k in ("arch", "layers", "width", "heads", "kv_heads", "mlp_width", "vocab")},
        "batched_autograd": vjp_state["batched"],
        "chunk": chunk,
        "seconds_per_sample": statistics.median(times),
        "seconds_all": times,
        "sq_norm_mean": E.mean(0).tolist(),
        "sq_norm_std": (E.std(0, unbiased=True) if args.samples > 1 else torch.zeros(args.length)).tolist(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    if "batched_error" in vjp_state:
        result["batched_error"] = vjp_state["batched_error"]
    if sems:
        # standard error of the probe mean, averaged over samples (per position)
        result["hutchinson_stderr_mean"] = torch.stack(sems).mean(0).tolist()
    text = json.dumps(result)
    print(text)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
