#!/usr/bin/python3
"""The matrix-product floor of the Jacobian benchmark cases.

Times, back to back, the matrix products of posbias' reverse pass for one benchmark sample (the
input-gradient products of every layer below the top one, attention included; the MLP of the
exact case through its per-position Jacobians, as posbias runs it), with the kernels both posbias
and the PyTorch baseline use (torch.mm / bmm on Debian's OpenBLAS), at the same thread count.
The sum bounds from below the seconds per sample of this algorithm on this machine: no
elementwise work, no memory traffic outside the products, no top layer, no forward pass.
Divided into the baseline's seconds, it bounds the speed-up any implementation of the same
products can reach.

    /usr/bin/python3 bench/gemm_floor.py [--threads 2] [--repeats 3]

Prints one JSON object per case: the floor in seconds per sample, the products' GFLOP per sample
and their GFLOP/s.
"""

import argparse
import json
import time

import torch

CASES = {
    # width d, heads, kv heads, MLP width m, MLP kind, length L, cotangent rows K, rows per product
    "gpt2-exact": dict(layers=12, d=768, heads=12, kv_heads=12, m=3072, mlp="gelu", length=128, rows=768,
                       batch=32, mlp_jacobians=True),
    "qwen2-hutchinson": dict(layers=24, d=896, heads=14, kv_heads=2, m=4864, mlp="swiglu", length=256, rows=64,
                             batch=16, mlp_jacobians=False),
}


def attention_products(c):
    """(flop, callable) for the attention of one layer over one group of rows."""
    d, h, length, k = c["d"], c["heads"], c["length"], c["batch"]
    hd = d // h
    kv = c["kv_heads"] * hd
    rows = k * length
    g, w_dd = torch.randn(rows, d), torch.randn(d, d)
    gk, w_kv = torch.randn(rows, kv), torch.randn(kv, d)
    d_out, v_t = torch.randn(h, rows, hd), torch.randn(h, hd, length)
    scores, keys = torch.randn(h, rows, length), torch.randn(h, length, hd)
    scores_b, q_b = torch.randn(h * k, length, length), torch.randn(h * k, length, hd)
    probs_t, d_out_rows = torch.randn(h, length, length), torch.randn(h, length, k * hd)
    return [
        (2 * rows * d * d, lambda: torch.mm(g, w_dd)),                         # output projection
        (2 * rows * d * d, lambda: torch.mm(g, w_dd)),                         # queries
        (2 * 2 * rows * kv * d, lambda: (torch.mm(gk, w_kv), torch.mm(gk, w_kv))),  # keys, values
        (2 * h * rows * hd * length, lambda: torch.bmm(d_out, v_t)),           # dP = dO V^T
        (2 * h * rows * length * hd, lambda: torch.bmm(scores, keys)),         # dQ = dS K
        (2 * h * k * length * length * hd, lambda: torch.bmm(scores_b.transpose(1, 2), q_b)),  # dK
        (2 * h * length * length * k * hd, lambda: torch.bmm(probs_t, d_out_rows)),  # dV = P^T dO
    ]


def mlp_row_products(c):
    """(flop, callable) for the MLP of one layer over one group of rows."""
    d, m, rows = c["d"], c["m"], c["batch"] * c["length"]
    g, z, w_dm, w_md = torch.randn(rows, d), torch.randn(rows, m), torch.randn(d, m), torch.randn(m, d)
    inputs = 2 if c["mlp"] == "swiglu" else 1
    return [(2 * rows * d * m, lambda: torch.mm(g, w_dm))] + \
           [(2 * rows * m * d, lambda: torch.mm(z, w_md))] * inputs


def mlp_jacobian_products(c):
    """(flop, callable) for the MLP of one layer through per-position Jacobians, all K rows."""
    d, m, length, k = c["d"], c["m"], c["length"], c["rows"]
    block = max(1, (128 << 20) // (m * d * 4))
    w_dm, b = torch.randn(d, m), torch.randn(m, block * d)
    rows, jacobians = torch.randn(length, k, d), torch.randn(length, d, d)
    blocks = (length + block - 1) // block
    return [(2 * d * m * block * d * blocks, lambda: [torch.mm(w_dm, b) for _ in range(blocks)]),
            (2 * length * k * d * d, lambda: torch.bmm(rows, jacobians))]


def timed(products, repeats):
    for _, run in products:  # Warm up.
        run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _, run in products:
            run()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2], sum(f for f, _ in products)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for name, c in CASES.items():
        groups = (c["rows"] + c["batch"] - 1) // c["batch"]  # Row groups per layer.
        per_group = attention_products(c) + ([] if c["mlp_jacobians"] else mlp_row_products(c))
        seconds, flop = timed(per_group, args.repeats)
        seconds, flop = seconds * groups, flop * groups
        if c["mlp_jacobians"]:
            s, f = timed(mlp_jacobian_products(c), args.repeats)
            seconds, flop = seconds + s, flop + f
        layers = c["layers"] - 1  # The top layer, mostly on the target row, is left out.
        print(json.dumps({"case": name, "floor_seconds_per_sample": round(seconds * layers, 2),
                          "gflop_per_sample": round(flop * layers / 1e9, 1),
                          "products_gflop_per_s": round(flop / seconds / 1e9, 1), "threads": args.threads}))


if __name__ == "__main__":
    main()
