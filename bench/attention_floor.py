#!/usr/bin/python3
"""The attention products' floor of posbias' blocked reverse pass (bench/run_long_context.sh).

For a model shape, a length L, an optional window and K cotangent rows, counts the query x key
block pairs the pass visits (causal: those on or below the diagonal; windowed: those the window
reaches), times the matrix products of one block pair with the same kernels (torch.bmm, the
dtype and threads given) and multiplies: forward (scores, P V) once per layer, then per layer of
the reverse pass the scores again and dV, dP, dQ, dK for the K rows (the top layer: the target's
block row only). The sum bounds the attention's seconds from below: the pass's seconds over it say
how close the rest (exponentials, masks, copies, MLP, norms) keeps it.

    /usr/bin/python3 bench/attention_floor.py --length 8192 --heads 4 --kv-heads 2 --head-dim 16 \
        --layers 2 --rows 8 [--window 512] [--block 256] [--threads 2] [--dtype float32]

Prints one JSON object: block_pairs per layer, seconds per block pair, floor_seconds.
"""

import argparse
import json
import statistics
import sys
import time

import torch


def visited_pairs(length, block, window):
    pairs = 0
    for i0 in range(0, length, block):
        i1 = min(length, i0 + block)
        lowest = max(0, i0 - window + 1) if window else 0
        pairs += (i1 - 1) // block - lowest // block + 1
    return pairs


def median_seconds(fn, repeats=7):
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--length", type=int, required=True)
    parser.add_argument("--heads", type=int, required=True)
    parser.add_argument("--kv-heads", type=int, required=True)
    parser.add_argument("--head-dim", type=int, required=True)
    parser.add_argument("--layers", type=int, required=True)
    parser.add_argument("--rows", type=int, required=True, help="cotangent rows per product K")
    parser.add_argument("--window", type=int, default=0)
    parser.add_argument("--block", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = torch.float64 if args.dtype == "float64" else torch.float32
    kv, groups, hd, b, k = args.kv_heads, args.heads // args.kv_heads, args.head_dim, min(args.block, args.length), args.rows
    q = torch.randn(kv, groups * b, hd, dtype=dtype)
    key = torch.randn(kv, b, hd, dtype=dtype)
    p = torch.randn(kv, groups * b, b, dtype=dtype)
    d_o = torch.randn(kv, groups * b, k * hd, dtype=dtype)
    d_s = torch.randn(kv, groups * b * k, b, dtype=dtype)

    def forward_pair():
        torch.bmm(q, key.transpose(1, 2))
        torch.bmm(p, key)  # P V (V has K's shape).

    def reverse_pair():
        torch.bmm(q, key.transpose(1, 2))                                    # the scores again
        torch.bmm(p.transpose(1, 2), d_o)                                    # dV = P^T dO
        torch.bmm(d_o.view(kv, groups * b * k, hd), key.transpose(1, 2))     # dP = dO V^T
        torch.bmm(d_s, key)                                                  # dQ = dS K
        torch.bmm(d_s.view(kv, groups * b, k * b).transpose(1, 2), q)        # dK = dS^T Q

    pairs = visited_pairs(args.length, b, args.window)
    # The top layer's reverse pass has one query row: its key blocks cost about 1 / block of a pair.
    top_keys = args.length - (max(0, args.length - args.window) if args.window else 0)
    top_pairs = (top_keys + b - 1) // b / b
    forward_s, reverse_s = median_seconds(forward_pair), median_seconds(reverse_pair)
    floor = args.layers * pairs * forward_s + ((args.layers - 1) * pairs + top_pairs) * reverse_s
    json.dump({"length": args.length, "window": args.window, "block": b, "rows": k, "block_pairs_per_layer": pairs,
               "forward_pair_seconds": forward_s, "reverse_pair_seconds": reverse_s, "floor_seconds": floor}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
