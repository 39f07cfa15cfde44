#!/usr/bin/python3
"""Golden 95 % Clopper-Pearson intervals and Fisher-z correlation intervals, from Debian's scipy.

Usage (from the repository root):
  /usr/bin/python3 tests/statistics/golden/generate_clopper_pearson.py           writes clopper_pearson.csv
  /usr/bin/python3 tests/statistics/golden/generate_clopper_pearson.py --check   exits 1 when the file differs

An independent route from server/statistics/recall_sweep.cc (Boost.Math's Beta quantiles):
scipy.stats.binomtest(k, n).proportion_ci(0.95, method="exact"), and for Pearson's r of the
listed pairs scipy.stats.pearsonr(x, y).confidence_interval(0.95) (Fisher's z, as the server).
"""

import io
import os
import sys

from scipy import stats

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "clopper_pearson.csv")
CASES = [(0, 1), (1, 1), (0, 10), (1, 10), (5, 10), (9, 10), (10, 10), (3, 16), (16, 16), (1, 26), (7, 32),
         (50, 100), (1, 1000), (999, 1000), (123, 4096)]
CORRELATIONS = [
    ([0.1, 0.2, 0.3, 0.4], [0.2, 0.1, 0.5, 0.6]),
    ([0.05, 0.01, 0.02, 0.08, 0.03], [0.9, 0.4, 0.5, 1.0, 0.45]),
    ([1, 2, 3, 4, 5, 6, 7, 8], [0.3, 0.1, 0.4, 0.15, 0.9, 0.26, 0.5, 0.35]),
]


def table():
    out = io.StringIO()
    out.write("kind,a,b,value,low,high\n")
    for k, n in CASES:
        ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
        out.write("binomial,%d,%d,%.17g,%.17g,%.17g\n" % (k, n, k / n, ci.low, ci.high))
    for x, y in CORRELATIONS:
        result = stats.pearsonr(x, y)
        ci = result.confidence_interval(confidence_level=0.95)
        out.write("pearson,%s,%s,%.17g,%.17g,%.17g\n" % (" ".join(map(repr, x)), " ".join(map(repr, y)),
                                                          result.statistic, ci.low, ci.high))
    return out.getvalue()


if __name__ == "__main__":
    text = table()
    if "--check" in sys.argv:  # Equal rows, numbers within 1e-12 relative (scipy's last digits may move).
        with open(OUT) as f:
            stored = [line.split(",") for line in f.read().splitlines()]
        fresh = [line.split(",") for line in text.splitlines()]
        def same_row(a, b):
            return a[:3] == b[:3] and all(abs(float(u) - float(v)) <= 1e-12 * max(1.0, abs(float(v)))
                                          for u, v in zip(a[3:], b[3:]))
        same = len(stored) == len(fresh) and stored[0] == fresh[0] and all(map(same_row, stored[1:], fresh[1:]))
        print("golden intervals match scipy" if same else "clopper_pearson.csv differs from scipy's values")
        sys.exit(0 if same else 1)
    with open(OUT, "w") as f:
        f.write(text)
