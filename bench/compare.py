#!/usr/bin/python3
"""Compare the C++ Google Benchmark results with the NumPy baseline.

usage: compare.py CPP_JSON NUMPY_JSON [--output SUMMARY_MD]

CPP_JSON   output of `density_bench --benchmark_format=json ...`
NUMPY_JSON output of bench/baseline_numpy.py
--output   where to write the Markdown summary (default: summary.md next to
           CPP_JSON).  The same Markdown is printed to stdout.

Missing or malformed entries are reported as "n/a" rather than failing.
"""

import argparse
import json
import math
import sys
from pathlib import Path

H_LIST = ["12", "24", "96", "1000"]
CPP_DISCRETE_L, CPP_DISCRETE_H = 1_000_000, 24  # BM_DiscreteProfile sizes
NA = "n/a"
_UNIT_TO_S = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def _load_json(path, label):
    try:
        with open(path, "r", encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError) as exc:
        print(f"warning: cannot read {label} results {path}: {exc}",
              file=sys.stderr)
        return None


def _num(v):
    """float(v) if it is a finite-or-infinite number (also 'inf' strings)."""
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def cpp_entry(gb, run_name):
    """The median entry for run_name from Google Benchmark JSON, or None.

    Prefers the aggregate with aggregate_name == "median"; falls back to the
    plain iteration entry (e.g. when run without repetitions), taking the
    median over repetitions if there are several.
    """
    if not gb:
        return None
    benches = gb.get("benchmarks") or []

    def rname(b):
        return b.get("run_name") or b.get("name", "")

    for b in benches:
        if (b.get("run_type") == "aggregate"
                and b.get("aggregate_name") == "median"
                and (rname(b) == run_name
                     or b.get("name") == run_name + "_median")):
            return b
    iters = [b for b in benches
             if b.get("run_type", "iteration") == "iteration"
             and rname(b) == run_name and not b.get("error_occurred")]
    if not iters:
        return None
    iters.sort(key=lambda b: _num(b.get("real_time")) or 0.0)
    return iters[len(iters) // 2]


def cpp_items_per_s(gb, run_name):
    e = cpp_entry(gb, run_name)
    if e is None or e.get("error_occurred"):
        return None
    v = _num(e.get("items_per_second"))
    if v is None:
        v = _num((e.get("counters") or {}).get("items_per_second"))
    return v


def cpp_seconds(gb, run_name):
    e = cpp_entry(gb, run_name)
    if e is None or e.get("error_occurred"):
        return None
    t = _num(e.get("real_time"))
    unit = e.get("time_unit", "ns")
    if t is None or unit not in _UNIT_TO_S:
        return None
    return t * _UNIT_TO_S[unit]


def _get(d, *keys):
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def fmt_rate(v):
    return NA if v is None else f"{v:.4g}"


def fmt_s(v):
    if v is None:
        return NA
    if v >= 1:
        return f"{v:.3f} s"
    if v >= 1e-3:
        return f"{v * 1e3:.3f} ms"
    return f"{v * 1e6:.3f} us"


def fmt_ratio(v):
    return NA if v is None else f"{v:.2f}x"


def fmt_err(v):
    if v is None:
        return NA
    if isinstance(v, str):  # "inf"/"nan" encoded by the baseline
        return v
    f = _num(v)
    return NA if f is None else f"{f:.2e}"


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def build_report(gb, npy, cpp_path, npy_path):
    lines = ["# posbias benchmark: C++ vs NumPy/SciPy baseline", ""]
    ctx = (gb or {}).get("context") or {}
    cfg = _get(npy, "config") or {}
    lines.append(f"- C++ results: `{cpp_path}`"
                 + ("" if gb else " (missing/unreadable)"))
    lines.append(f"- NumPy results: `{npy_path}`"
                 + ("" if npy else " (missing/unreadable)"))
    if ctx:
        build = ctx.get("library_build_type", NA)
        lines.append(
            f"- C++ context: host `{ctx.get('host_name', NA)}`, "
            f"{ctx.get('num_cpus', NA)} CPUs @ {ctx.get('mhz_per_cpu', NA)} "
            f"MHz, benchmark library build `{build}`, date "
            f"{ctx.get('date', NA)}")
        if str(build).lower() == "debug":
            lines.append("- warning: the Google Benchmark library reports a "
                         "debug build; timings may be pessimistic")
        if ctx.get("cpu_scaling_enabled"):
            lines.append("- warning: CPU frequency scaling was enabled "
                         "during the C++ run")
    if npy:
        lines.append(
            f"- NumPy {npy.get('numpy', NA)}, SciPy {npy.get('scipy', NA)}, "
            f"Python {npy.get('python', NA)}; N = {cfg.get('N', NA)} points "
            f"log-uniform in [1e-300, 1], alpha = {cfg.get('alpha', NA)}, "
            f"median of {cfg.get('repeats', NA)} repeats, single-threaded"
            + (" (QUICK mode: reduced sizes)" if cfg.get("quick") else ""))
    lines.append("- speedup = C++ throughput / NumPy throughput "
                 "(> 1 means C++ is faster)")
    lines.append("")

    for kind, bm in (("density", "BM_ContinuumDensity"),
                     ("cdf", "BM_ContinuumCdf")):
        lines.append(f"## Continuum {kind}")
        lines.append("")
        lines.append("| H | C++ points/s | NumPy points/s | speedup "
                     "| NumPy max rel err vs golden |")
        lines.append("|---:|---:|---:|---:|---:|")
        for H in H_LIST:
            c = cpp_items_per_s(gb, f"{bm}/{H}")
            n = _num(_get(npy, kind, H, "points_per_s"))
            err = _get(npy, kind, H, "max_rel_err")
            lines.append(f"| {H} | {fmt_rate(c)} | {fmt_rate(n)} | "
                         f"{fmt_ratio(ratio(c, n))} | {fmt_err(err)} |")
        lines.append("")

    lines.append("## Discrete coherent profile")
    lines.append("")
    d = _get(npy, "discrete") or {}
    lines.append(f"L = {d.get('L', NA)}, H = {d.get('H', NA)}, "
                 "one full profile per iteration.")
    if d and (d.get("L") != CPP_DISCRETE_L or d.get("H") != CPP_DISCRETE_H):
        lines.append("")
        lines.append(f"warning: the C++ benchmark uses L = {CPP_DISCRETE_L}, "
                     f"H = {CPP_DISCRETE_H}; the sizes differ, so the speedup "
                     "is not like-for-like.")
    lines.append("")
    lines.append("| C++ median time | NumPy median time | speedup |")
    lines.append("|---:|---:|---:|")
    c_s = cpp_seconds(gb, "BM_DiscreteProfile")
    n_s = _num(d.get("median_s"))
    lines.append(f"| {fmt_s(c_s)} | {fmt_s(n_s)} | "
                 f"{fmt_ratio(ratio(n_s, c_s))} |")
    lines.append("")

    lines.append("## Baseline accuracy vs golden")
    lines.append("")
    acc = _get(npy, "accuracy")
    if acc is None:
        lines.append("No golden file was available: accuracy n/a.")
    else:
        lines.append(f"Golden: `{_get(npy, 'golden') or NA}` (rows are skipped where x "
                     "does not parse to a double in (0, 1] or the golden "
                     "value is not a normal double).")
        lines.append("")
        lines.append("| quantity | max rel err (all golden rows) "
                     "| rows used | rows skipped |")
        lines.append("|---|---:|---:|---:|")
        for q in ("density", "cdf"):
            a = acc.get(q) or {}
            lines.append(f"| {q} | {fmt_err(a.get('overall_max_rel_err'))} | "
                         f"{a.get('rows', NA)} | {a.get('skipped', NA)} |")
    lines.append("")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cpp_json")
    ap.add_argument("numpy_json")
    ap.add_argument("--output", "-o", default=None,
                    help="summary Markdown path (default: summary.md next to "
                         "CPP_JSON)")
    args = ap.parse_args(argv)

    gb = _load_json(args.cpp_json, "C++")
    npy = _load_json(args.numpy_json, "NumPy")
    report = build_report(gb, npy, args.cpp_json, args.numpy_json)
    sys.stdout.write(report)
    out = Path(args.output) if args.output else \
        Path(args.cpp_json).resolve().parent / "summary.md"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(report, encoding="utf-8")
    except OSError as exc:
        print(f"warning: cannot write {out}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
