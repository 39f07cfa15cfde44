#!/usr/bin/python3
"""Vectorized NumPy/SciPy baseline for the posbias position-bias formulas.

This is the reference "researcher would write it in NumPy" implementation that
the C++ library (bench/density_bench) is compared against by bench/run.sh.

Formulas (t = ln(1/x), x in (0, 1]):

  c_r        = C(H, r) (1 - alpha)^(H - r) alpha^r,            r = 0..H
  density(x) = sum_{r=1..H} c_r t^(r-1) / (r-1)!
  cdf(x)     = sum_{r=1..H} c_r Q(r, t)      (Q = scipy.special.gammaincc)
  discrete coherent row of length L:
      u_0 = e_L;  u_{r+1}[j] = sum_{i>=j} u_r[i] / i  (1-based i, j);
      v   = sum_{r=0..H} c_r u_r

Run as a script it benchmarks these single-threaded and prints one JSON
object to stdout.  Environment knobs:

  BENCH_QUICK=1      small sizes (N=2000, L=1e5, fewer repeats) for smoke tests
  BENCH_GOLDEN=PATH  golden CSV to measure accuracy against
                     (default: tests/density/golden/continuum.csv)
  BENCH_SEED=INT     seed of the point sample (default 20240613)

Must be run with Debian's /usr/bin/python3 (numpy, scipy available).
"""

import os

# Single-threaded: must be set before numpy is imported.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import scipy  # noqa: E402
from scipy import special  # noqa: E402

# Keep each [chunk, H] work array at most this many elements (16 MB of float64).
MAX_CHUNK_ELEMS = 2_000_000
DBL_MIN = 2.2250738585072014e-308  # smallest normal double


# --------------------------------------------------------------------------
# Formulas
# --------------------------------------------------------------------------

def log_coeffs(H, alpha):
    """log c_r for r = 0..H (array of length H+1).  -inf where c_r == 0."""
    r = np.arange(H + 1, dtype=np.float64)
    with np.errstate(divide="ignore"):
        log_binom = (special.gammaln(H + 1) - special.gammaln(r + 1)
                     - special.gammaln(H - r + 1))
        # xlogy / xlog1py give 0 for 0*log(0), so alpha in {0, 1} works.
        return (log_binom + special.xlogy(r, alpha)
                + special.xlog1py(H - r, -alpha))


def coeffs(H, alpha):
    """c_r for r = 0..H."""
    return np.exp(log_coeffs(H, alpha))


def _chunk_size(H):
    return max(1, MAX_CHUNK_ELEMS // max(1, H))


def _as_points(x):
    return np.atleast_1d(np.asarray(x, dtype=np.float64))


def log_density(H, alpha, x):
    """log density(x), vectorized over x, via log-sum-exp over r = 1..H."""
    x = _as_points(x)
    out = np.empty_like(x)
    if H < 1:
        out.fill(-np.inf)
        return out
    r = np.arange(1, H + 1, dtype=np.float64)
    # Per-term constant: log c_r - log (r-1)!
    base = log_coeffs(H, alpha)[1:] - special.gammaln(r)
    rm1 = r - 1.0
    chunk = _chunk_size(H)
    with np.errstate(divide="ignore"):
        for s in range(0, x.size, chunk):
            t = -np.log(x[s:s + chunk])  # t = ln(1/x) >= 0
            # (r-1) log t, with 0 * log 0 = 0 at x = 1 (t = 0).
            terms = base[None, :] + special.xlogy(rm1[None, :], t[:, None])
            out[s:s + chunk] = special.logsumexp(terms, axis=1)
    return out


def density(H, alpha, x):
    """density(x) = sum_{r=1..H} c_r t^(r-1)/(r-1)!, t = ln(1/x)."""
    return np.exp(log_density(H, alpha, x))


def cdf(H, alpha, x):
    """cdf(x) = P[X <= x] = sum_{r=1..H} c_r gammaincc(r, t), t = ln(1/x).

    The atom c_0 sits at x = 1, so it is added only there (cdf(1) = 1), as in
    the golden data (tests/density/golden/continuum.csv).
    """
    x = _as_points(x)
    c = coeffs(H, alpha)
    out = np.zeros_like(x)
    if H >= 1:
        r = np.arange(1, H + 1, dtype=np.float64)
        chunk = _chunk_size(H)
        for s in range(0, x.size, chunk):
            t = -np.log(x[s:s + chunk])
            q = special.gammaincc(r[None, :], t[:, None])  # [chunk, H]
            out[s:s + chunk] = q @ c[1:]
    out[x >= 1.0] += c[0]
    return out


def discrete(H, alpha, L):
    """Discrete coherent row v (length L) = sum_{r=0..H} c_r u_r.

    u_0 = e_L, u_{r+1}[j] = sum_{i>=j} u_r[i]/i (1-based): H reverse cumsums.
    """
    c = coeffs(H, alpha)
    inv_i = 1.0 / np.arange(1, L + 1, dtype=np.float64)
    u = np.zeros(L, dtype=np.float64)
    u[-1] = 1.0
    v = c[0] * u
    w = np.empty(L, dtype=np.float64)
    for r in range(1, H + 1):
        np.multiply(u, inv_i, out=w)
        # reverse cumulative sum: u[j] = sum_{i >= j} w[i]
        np.cumsum(w[::-1], out=u[::-1])
        v += c[r] * u
    return v


# --------------------------------------------------------------------------
# Benchmark and accuracy harness
# --------------------------------------------------------------------------

def _time_median(fn, repeats):
    fn()  # warm-up (not timed)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), times


def _is_normal(v):
    return math.isfinite(v) and abs(v) >= DBL_MIN


def read_golden(path):
    """Return list of dicts (H, alpha, x, density, cdf) from the golden CSV.

    Values that do not fit a double (e.g. '1.2e-500') are parsed with float(),
    giving 0.0 or inf; callers filter those out.
    """
    rows = []
    header = None
    with open(path, "r", encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            fields = [f.strip() for f in line.split(",")]
            if header is None and not _looks_numeric(fields[0]):
                header = fields
                continue
            if header is None:
                header = ["H", "alpha", "x", "density", "log_density",
                          "cdf", "ccdf", "atom"]
            rec = dict(zip(header, fields))
            try:
                rows.append({
                    "H": int(float(rec["H"])),
                    "alpha": float(rec["alpha"]),
                    "x": float(rec["x"]),
                    "density": float(rec["density"]),
                    "cdf": float(rec["cdf"]),
                })
            except (KeyError, ValueError):
                continue
    return rows


def _looks_numeric(s):
    try:
        float(s)
        return True
    except ValueError:
        return False


def _json_num(v):
    """JSON has no inf/nan: encode non-finite values as strings."""
    if v is None:
        return None
    v = float(v)
    if math.isfinite(v):
        return v
    return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")


def accuracy(golden_path, H_set):
    """Max relative error of baseline density/cdf vs the golden file.

    Returns None if the golden file is missing; otherwise
    {"density": {"per_H": {H: err}, "overall": err, "rows": n, "skipped": k},
     "cdf": {...}}.  A row is used for a quantity only if its x parses to a
    double in (0, 1] (subnormal x is kept; '1e-500' -> 0.0 is not) and the
    golden value of that quantity is a normal double (>= DBL_MIN, finite).
    """
    if golden_path is None or not Path(golden_path).is_file():
        return None
    rows = read_golden(golden_path)
    result = {}
    groups = {}
    for row in rows:
        groups.setdefault((row["H"], row["alpha"]), []).append(row)
    for qty, fn in (("density", density), ("cdf", cdf)):
        per_H = {}
        overall = None
        used = skipped = 0
        for (H, alpha), grp in sorted(groups.items()):
            ok = [g for g in grp if 0.0 < g["x"] <= 1.0
                  and _is_normal(g[qty])]
            skipped += len(grp) - len(ok)
            if not ok:
                continue
            xs = np.array([g["x"] for g in ok])
            ref = np.array([g[qty] for g in ok])
            with np.errstate(all="ignore"):
                got = fn(H, alpha, xs)
                rel = np.abs(got - ref) / np.abs(ref)
            rel = np.where(np.isnan(rel), np.inf, rel)
            err = float(np.max(rel))
            used += len(ok)
            per_H[H] = err if H not in per_H else max(per_H[H], err)
            overall = err if overall is None else max(overall, err)
        result[qty] = {
            "per_H": {str(h): _json_num(e) for h, e in sorted(per_H.items())
                      if h in H_set},
            "overall": _json_num(overall),
            "rows": used,
            "skipped": skipped,
        }
    return result


def main():
    quick = os.environ.get("BENCH_QUICK", "") not in ("", "0")
    seed = int(os.environ.get("BENCH_SEED", "20240613"))
    H_list = [12, 24, 96, 1000]
    alpha = 0.5
    N = 2000 if quick else 20000
    repeats = 3 if quick else 7
    disc_H, disc_L = 24, (10**5 if quick else 10**6)
    disc_repeats = 2 if quick else 5

    default_golden = (Path(__file__).resolve().parent.parent
                      / "tests" / "density" / "golden" / "continuum.csv")
    golden_path = os.environ.get("BENCH_GOLDEN", str(default_golden))

    rng = np.random.default_rng(seed)
    x = 10.0 ** rng.uniform(-300.0, 0.0, size=N)  # log-uniform in [1e-300, 1]

    acc = accuracy(golden_path, set(H_list))

    out = {"density": {}, "cdf": {}}
    for name, fn in (("density", density), ("cdf", cdf)):
        for H in H_list:
            med, times = _time_median(lambda: fn(H, alpha, x), repeats)
            err = None
            if acc is not None:
                err = acc[name]["per_H"].get(str(H))
            out[name][str(H)] = {
                "median_s": med,
                "points_per_s": N / med,
                "max_rel_err": err,
            }
            print(f"[baseline] {name:8s} H={H:5d}: median {med:.4g} s, "
                  f"{N / med:.4g} points/s", file=sys.stderr)

    med, _ = _time_median(lambda: discrete(disc_H, alpha, disc_L),
                          disc_repeats)
    out["discrete"] = {"L": disc_L, "H": disc_H, "alpha": alpha,
                       "median_s": med}
    print(f"[baseline] discrete H={disc_H} L={disc_L}: median {med:.4g} s",
          file=sys.stderr)

    out["accuracy"] = None if acc is None else {
        q: {"overall_max_rel_err": acc[q]["overall"],
            "rows": acc[q]["rows"], "skipped": acc[q]["skipped"]}
        for q in ("density", "cdf")}
    out["golden"] = golden_path if acc is not None else None
    out["config"] = {"N": N, "alpha": alpha, "repeats": repeats,
                     "discrete_repeats": disc_repeats, "seed": seed,
                     "quick": quick, "x_range": [1e-300, 1.0],
                     "max_chunk_elems": MAX_CHUNK_ELEMS}
    out["numpy"] = np.__version__
    out["scipy"] = scipy.__version__
    out["python"] = platform.python_version()
    out["executable"] = sys.executable
    json.dump(out, sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
