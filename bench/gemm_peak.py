#!/usr/bin/python3
"""The machine's peak matrix-product rate: what no pass can beat, for the FLOP floor.

Times torch.mm on square matrices of several sizes (and the tall products the reverse pass runs:
[8 L, d] x [d, m]) through Debian's libtorch (the same library posbias links), in the dtype and at
the thread count given, each the best of several repeats after a warm-up, and reports the best
rate over all sizes. bench/run_real_shapes.sh and bench/run_long_context.sh divide a measurement's
FLOPs (posbias-measure's `work`, server/jacobian/flop_count.h) by it: the floor in seconds, and
efficiency = floor / measured seconds.

    /usr/bin/python3 bench/gemm_peak.py [--threads 2] [--dtype float32] [--repeats 5] [--device cpu]

On a CUDA device (--device cuda:0, the GPU kit's run) each product is timed between two
synchronizations, with 8192 x 8192 x 8192 added to the sizes (a GPU's peak needs large products);
float32 is timed as LibTorch runs it by default (TF32 off).

Prints one JSON object: peak_gflops, and gflops per shape.
"""

import argparse
import json
import time

import torch


def rate(m, k, n, dtype, repeats, device):
    a, b = torch.randn(m, k, dtype=dtype, device=device), torch.randn(k, n, dtype=dtype, device=device)
    out = torch.empty(m, n, dtype=dtype, device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    torch.mm(a, b, out=out)  # Warm-up: packing buffers, thread pool, the library's kernels.
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b, out=out)
        sync()
        best = min(best, time.perf_counter() - start)
    return 2.0 * m * k * n / best / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", choices=("float32", "float64", "bfloat16", "float16"), default="float32")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    shapes = [(n, n, n) for n in (512, 1024, 2048, 4096)] + [(8192, 896, 4864), (8192, 2048, 8192)]
    if device.type == "cuda":
        shapes.append((8192, 8192, 8192))
    rates = {f"{m}x{k}x{n}": rate(m, k, n, dtype, args.repeats, device) for m, k, n in shapes}
    print(json.dumps(dict(peak_gflops=max(rates.values()), dtype=args.dtype, threads=args.threads,
                          device=args.device, torch=torch.__version__, gflops=rates)))


if __name__ == "__main__":
    main()
