#!/usr/bin/python3
"""The matrix-product floor of the Jacobian benchmark cases.

Times, alone and back to back, the matrix products that any float32 reverse pass of the
measurement has to compute (the input-gradient products of every layer for every cotangent row,
attention included) with the same kernels posbias and the PyTorch baseline use (torch.mm / bmm
on Debian's OpenBLAS), at the same thread count. Their sum is a lower bound on the seconds per
sample of any implementation built on these kernels: no elementwise work, no memory traffic
outside the products, the top layer counted as a full layer below it (it is cheaper), and the
forward pass left out.

    /usr/bin/python3 bench/gemm_floor.py [--threads 2] [--repeats 3]

Prints one JSON object per case: the floor in seconds per sample and the products' GFLOP/s.
"""

import argparse
import json
import time

import torch

CASES = {
    # name: layers, width d, heads, kv heads, MLP width, MLP kind, length L, cotangent rows, rows per pass K_b
    "gpt2-exact": dict(layers=12, d=768, heads=12, kv_heads=12, m=3072, mlp="gelu", length=128, rows=768, batch=32),
    "qwen2-hutchinson": dict(layers=24, d=896, heads=14, kv_heads=2, m=4864, mlp="swiglu", length=256, rows=64,
                             batch=16),
}


def layer_products(c):
    """(flop, callable) for one dense layer's reverse pass over K_b rows."""
    d, h, m, length, k = c["d"], c["heads"], c["m"], c["length"], c["batch"]
    hd = d // h
    kv = c["kv_heads"] * hd
    rows = k * length
    g = torch.randn(rows, d)
    z = torch.randn(rows, m)
    w_dm, w_md, w_dd = torch.randn(d, m), torch.randn(m, d), torch.randn(d, d)
    w_kv = torch.randn(kv, d)
    gk = torch.randn(rows, kv)
    d_out = torch.randn(h, rows, hd)
    v_t = torch.randn(h, hd, length)
    scores = torch.randn(h, rows, length)
    keys = torch.randn(h, length, hd)
    probs_t = torch.randn(h, length, length)
    d_out_rows = torch.randn(h, length, k * hd)
    scores_b = torch.randn(h * k, length, length)
    q_b = torch.randn(h * k, length, hd)
    products = [
        (2 * rows * d * m, lambda: torch.mm(g, w_dm)),             # MLP output projection
        (2 * rows * m * d, lambda: torch.mm(z, w_md)),             # MLP input projection
        (2 * rows * d * d, lambda: torch.mm(g, w_dd)),             # attention output projection
        (2 * rows * d * d, lambda: torch.mm(g, w_dd)),             # queries
        (2 * 2 * rows * kv * d, lambda: (torch.mm(gk, w_kv), torch.mm(gk, w_kv))),  # keys, values
        (2 * h * rows * hd * length, lambda: torch.bmm(d_out, v_t)),           # dP = dO V^T
        (2 * h * rows * length * hd, lambda: torch.bmm(scores, keys)),         # dQ = dS K
        (2 * h * k * length * length * hd, lambda: torch.bmm(scores_b.transpose(1, 2), q_b)),  # dK
        (2 * h * length * length * k * hd, lambda: torch.bmm(probs_t, d_out_rows)),  # dV = P^T dO
    ]
    if c["mlp"] == "swiglu":
        products.append((2 * rows * m * d, lambda: torch.mm(z, w_md)))  # the second input projection
    return products


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for name, c in CASES.items():
        products = layer_products(c)
        for _, run in products:  # Warm up.
            run()
        per_layer = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            for _, run in products:
                run()
            per_layer.append(time.perf_counter() - start)
        seconds = sorted(per_layer)[len(per_layer) // 2]
        passes = c["layers"] * (c["rows"] + c["batch"] - 1) // c["batch"]
        flop = sum(f for f, _ in products)
        print(json.dumps({"case": name, "floor_seconds_per_sample": round(seconds * passes, 2),
                          "products_gflop_per_s": round(flop / seconds / 1e9, 1),
                          "gflop_per_sample": round(flop * passes / 1e9, 1), "threads": args.threads}))


if __name__ == "__main__":
    main()
