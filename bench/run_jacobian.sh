#!/usr/bin/env bash
# The Jacobian benchmark on the CPU: posbias-measure (C++ engine) and bench/baseline_jacobian.py
# (straightforward PyTorch, batched torch.autograd.grad over cotangents) on the same weights and
# the same token ids, one after the other, with the same number of threads.
#
#   bash bench/run_jacobian.sh [BUILD_DIR] [THREADS]      (defaults: build/release, 2)
#
# Cases (the issue's): exact norms of a gpt2-shaped model (12 layers, width 768) at L = 128, and
# Hutchinson K = 64 of a qwen2-0.5b-shaped model at L = 256. One sample each, both sides starting
# cold (no warm-up). Then bench/gemm_floor.py times the matrix products of posbias' reverse pass
# alone (their sum bounds the seconds per sample of that algorithm from below, and the baseline's
# seconds over it bound the ratio). Writes bench-results/jacobian-*.json and prints a table
# (seconds per sample, ratio, floor, ratio bound, max relative difference of the profiles).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${1:-build/release}"
THREADS="${2:-2}"
MEASURE="$BUILD_DIR/server/posbias-measure"
PY=/usr/bin/python3
OUT=bench-results
mkdir -p "$OUT"
[[ -x "$MEASURE" ]] || { echo "error: $MEASURE not built" >&2; exit 1; }

run_case() {  # name, posbias-measure model flags, method flags
  local name="$1" model_flags="$2" method_flags="$3" length="$4"
  echo "== $name: C++ engine" >&2
  # Writes the weights both sides use (its own measurement is a trivial L = 2).
  $MEASURE $model_flags --length 2 --samples 1 --method hutchinson --probes 1 --threads "$THREADS" --seed 0 \
    --export-weights "$OUT/$name.safetensors" --export-config "$OUT/$name.config.json" > /dev/null
  $MEASURE $model_flags --length "$length" --samples 1 $method_flags --threads "$THREADS" --seed 0 \
    --input-seed 7 > "$OUT/jacobian-$name-cpp.json"
  $PY -c "import json,sys; json.dump(json.load(open(sys.argv[1]))['tokens'], open(sys.argv[2], 'w'))" \
    "$OUT/jacobian-$name-cpp.json" "$OUT/$name.tokens.json"
  echo "== $name: PyTorch baseline" >&2
  $PY bench/baseline_jacobian.py --weights "$OUT/$name.safetensors" --config "$OUT/$name.config.json" \
    --length "$length" $method_flags --threads "$THREADS" --tokens "$OUT/$name.tokens.json" --warmup 0 \
    > "$OUT/jacobian-$name-python.json"
}

run_case gpt2-exact "--preset gpt2" "--method exact" 128
run_case qwen2-hutchinson "--preset qwen2-0.5b" "--method hutchinson --probes 64" 256
echo "== matrix-product floor" >&2
$PY bench/gemm_floor.py --threads "$THREADS" > "$OUT/jacobian-gemm-floor.jsonl"

$PY - "$OUT" <<'PYEOF'
import json, sys
out = sys.argv[1]
floors = {r["case"]: r for r in map(json.loads, open(f"{out}/jacobian-gemm-floor.jsonl"))}
print("| case | posbias s/sample | PyTorch s/sample | ratio | product floor s | ratio bound | max rel. diff of sq_norm_mean |")
print("|---|---:|---:|---:|---:|---:|---:|")
for name in ("gpt2-exact", "qwen2-hutchinson"):
    cpp = json.load(open(f"{out}/jacobian-{name}-cpp.json"))
    py = json.load(open(f"{out}/jacobian-{name}-python.json"))
    c = cpp["measurement"]["seconds"] / cpp["measurement"]["samples"]
    p = py["seconds_per_sample"]
    floor = floors[name]["floor_seconds_per_sample"]
    diff = max(abs(a - b) / abs(b) for a, b in zip(cpp["sq_norm_mean"], py["sq_norm_mean"]) if b)
    note = " (different probes: compare within the estimators' errors)" if "hutchinson" in name else ""
    print(f"| {name} | {c:.2f} | {p:.2f} | {p / c:.2f}x | {floor:.2f} | {p / floor:.2f}x | {diff:.2e}{note} |")
PYEOF
