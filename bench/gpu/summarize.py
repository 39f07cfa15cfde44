#!/usr/bin/env python3
"""Time per sample and achieved FLOP/s of the measurements in a bench/gpu/run_on_device.sh folder.

FLOPs are counted as autograd would compute the measurement (the convention of the CPU
benchmark's baseline): one forward pass, then per cotangent row one reverse pass whose input-
gradient products equal the forward pass's (linear maps) plus twice its attention products
(full L x L score matrices, causal masking not subtracted). The model's own reverse pass does
fewer (top layer on the target row, MLP Jacobians for exact norms), so the rate is an effective
one. Peaks (H200 SXM, dense): float32 67 TFLOP/s (no TF32: LibTorch's default), bfloat16 989
TFLOP/s.

    python3 bench/gpu/summarize.py OUT_DIR [LONG_DIR]

LONG_DIR holds the long-context reports (long-<L>.json): their seconds, the attention blocks the
planner chose, and the predicted and measured peak memory go to the summary's long_context.
"""

import glob
import json
import os
import sys

PEAK = {"float32": 67e12, "bfloat16": 989e12, "float16": 989e12}


def measurement_flops(model, m):
    d, layers, length = model["width"], model["layers"], m["length"]
    heads, kv_heads, mlp = model["heads"], model.get("kv_heads", model["heads"]), model["mlp_width"]
    hd = d // heads
    linear = d * heads * hd + 2 * d * kv_heads * hd + heads * hd * d
    linear += (3 if model["family"] == "qwen2" else 2) * d * mlp
    forward = 2 * layers * (length * linear + 2 * heads * length * length * hd)
    reverse = 2 * layers * (length * linear + 4 * heads * length * length * hd)
    rows = m["probes"] if m["method"] == "hutchinson" else d
    return forward + rows * reverse


def row_of(path):
    """One summary row of a posbias-measure report or a baseline_jacobian.py result."""
    report = json.load(open(path))
    if "implementation" in report:  # The PyTorch baseline.
        b = report["model"]
        model = {"family": b["arch"], "layers": b["layers"], "width": b["width"], "heads": b["heads"],
                 "kv_heads": b["kv_heads"], "mlp_width": b["mlp_width"]}
        m = {"length": report["length"], "method": report["method"], "probes": report["probes"] or 0}
        per_sample, device, dtype, side = report["seconds_per_sample"], report.get("device", "cpu"), report["dtype"], "pytorch"
    else:
        model, m = report["model"], report["measurement"]
        per_sample, device, dtype, side = m["seconds"] / m["samples"], m["device"], m["dtype"], "posbias"
    flops = measurement_flops(model, m)
    row = {"file": os.path.basename(path), "side": side, "device": device, "dtype": dtype, "length": m["length"],
           "method": m["method"], "probes": m["probes"], "seconds_per_sample": round(per_sample, 3),
           "tflop_per_sample": round(flops / 1e12, 2), "tflop_per_s": round(flops / per_sample / 1e12, 2)}
    if side == "posbias":
        row.update(reverse_pass=m.get("reverse_pass"), cotangent_batch=m["cotangent_batch"],
                   checkpointed=m["checkpointed"])
    if device.startswith("cuda") and dtype in PEAK:
        row["fraction_of_peak"] = round(flops / per_sample / PEAK[dtype], 3)
    return row


def long_context_row(path):
    """One long-context report: its length, seconds, plan and memory (bytes as reported)."""
    try:
        report = json.load(open(path))
        m, memory = report["measurement"], report.get("memory", {})
        row = {"file": os.path.basename(path), "length": m["length"], "device": m["device"], "dtype": m["dtype"],
               "seconds": round(m["seconds"], 3), "cotangent_batch": m["cotangent_batch"],
               "checkpointed": m["checkpointed"], "reverse_pass": m.get("reverse_pass")}
        row.update({key: value for key, value in memory.items() if key.endswith("_bytes") or key.startswith("blocks")})
        return row
    except (OSError, ValueError, KeyError, TypeError) as error:
        return {"file": os.path.basename(path), "error": str(error)}


def main():
    out = sys.argv[1]
    rows = []
    for path in sorted(glob.glob(os.path.join(out, "measure-*.json")) + glob.glob(os.path.join(out, "baseline-*.json"))):
        try:
            rows.append(row_of(path))
        except (OSError, ValueError, KeyError, TypeError) as error:
            rows.append({"file": os.path.basename(path), "error": str(error)})
    # posbias' speed-up over the baseline per dtype, where both ran.
    per_dtype = {}
    for row in rows:
        if "seconds_per_sample" in row:
            per_dtype.setdefault(row["dtype"], {})[row["side"]] = row["seconds_per_sample"]
    ratios = {dtype: round(sides["pytorch"] / sides["posbias"], 2)
              for dtype, sides in per_dtype.items() if "pytorch" in sides and sides.get("posbias")}
    summary = {"rows": rows, "speedup_over_pytorch": ratios}
    if len(sys.argv) > 2:
        summary["long_context"] = [long_context_row(path) for path in
                                   sorted(glob.glob(os.path.join(sys.argv[2], "long-*.json")),
                                          key=lambda p: int(os.path.basename(p)[5:-5]))]
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
