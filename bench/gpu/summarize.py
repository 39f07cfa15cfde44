#!/usr/bin/env python3
"""The summary of a bench/gpu/run_on_device.sh folder: real shapes against the FLOP floor, and
the long-context runs.

The real-shapes rows (real-shapes-<dtype>.jsonl, written by bench/run_real_shapes.sh on the
device) carry each case's seconds on both sides, the FLOPs posbias' pass requires
(server/jacobian/flop_count.h) and the device's peak matrix-product rate in that dtype
(bench/gemm_peak.py, measured in the same run): floor = FLOPs / peak, efficiency = floor /
seconds, speed-up = baseline seconds / posbias seconds.

    python3 bench/gpu/summarize.py OUT_DIR [LONG_DIR]

LONG_DIR holds the long-context reports (long-<L>.json): their seconds, the attention blocks the
planner chose, and the predicted and measured peak memory go to the summary's long_context.
"""

import glob
import json
import os
import sys


def sig(x, digits=4):
    """x to `digits` significant digits (a tiny case's seconds and FLOPs keep their size)."""
    return float(f"{x:.{digits}g}")


def real_shape_row(row):
    """One case of the real-shapes benchmark, with its floor, efficiencies and speed-up."""
    floor = row["flops_required"] / (row["peak_gflops"] * 1e9)
    posbias, baseline = row["posbias_seconds"], row.get("baseline_seconds")
    return {"case": row["case"], "device": row.get("device"), "dtype": row.get("dtype"), "length": row["length"],
            "rows": row["rows"], "tflop_required": sig(row["flops_required"] / 1e12),
            "peak_tflop_per_s": sig(row["peak_gflops"] / 1e3), "floor_seconds": sig(floor),
            "posbias_seconds": sig(posbias), "posbias_efficiency": round(floor / posbias, 3),
            "baseline_seconds": sig(baseline) if baseline else None,
            "baseline_efficiency": round(floor / baseline, 3) if baseline else None,
            "speedup_over_pytorch": round(baseline / posbias, 2) if baseline else None,
            "max_rel_diff": row.get("max_rel_diff"), "baseline_how": row.get("baseline_how")}


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
    real = []
    for path in sorted(glob.glob(os.path.join(out, "real-shapes-*.jsonl"))):
        try:
            real += [real_shape_row(json.loads(line)) for line in open(path) if line.strip()]
        except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError) as error:
            real.append({"file": os.path.basename(path), "error": str(error)})
    summary = {"real_shapes": real}
    if len(sys.argv) > 2:
        summary["long_context"] = [long_context_row(path) for path in
                                   sorted(glob.glob(os.path.join(sys.argv[2], "long-*.json")),
                                          key=lambda p: int(os.path.basename(p)[5:-5]))]
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
