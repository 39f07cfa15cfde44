#!/usr/bin/env bash
# Run the C++ density benchmark and the NumPy/SciPy baseline, then compare.
#
# usage: bash bench/run.sh [BUILD_DIR]        (default: build/release)
#
# Writes bench-results/cpp.json, bench-results/numpy.json and
# bench-results/summary.md (relative to the repository root); the Markdown
# summary is also printed to stdout.  Both sides are pinned to CPU 0 with
# taskset when it is available, and the baseline runs single-threaded.
# The baseline needs Debian's /usr/bin/python3 (numpy, scipy).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

BUILD_DIR="${1:-build/release}"
BIN="$BUILD_DIR/bench/density_bench"
PY=/usr/bin/python3
OUT_DIR=bench-results

if [[ ! -x "$BIN" ]]; then
  echo "error: benchmark binary not found or not executable: $BIN" >&2
  echo "       build it first (e.g. the release preset), or pass BUILD_DIR" >&2
  exit 1
fi
if [[ ! -x "$PY" ]]; then
  echo "error: $PY not found (the baseline needs Debian's python3 with numpy and scipy)" >&2
  exit 1
fi

PIN=()
if command -v taskset >/dev/null 2>&1 && taskset -c 0 true >/dev/null 2>&1; then
  PIN=(taskset -c 0)
else
  echo "note: taskset unavailable; running unpinned" >&2
fi

mkdir -p "$OUT_DIR"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

echo "== C++: $BIN" >&2
"${PIN[@]}" "$BIN" \
  --benchmark_format=json \
  --benchmark_repetitions=5 \
  --benchmark_report_aggregates_only=true \
  > "$OUT_DIR/cpp.json"

echo "== NumPy baseline: $PY bench/baseline_numpy.py" >&2
"${PIN[@]}" "$PY" bench/baseline_numpy.py > "$OUT_DIR/numpy.json"

echo "== compare" >&2
"$PY" bench/compare.py "$OUT_DIR/cpp.json" "$OUT_DIR/numpy.json" \
  --output "$OUT_DIR/summary.md"
