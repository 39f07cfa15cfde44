#!/usr/bin/env bash
# The Jacobian measurement at the shapes researchers run, on the CPU: posbias-measure against the
# strongest straightforward PyTorch baseline (bench/baseline_real_shapes.py: scaled-dot-product
# attention, a checkpoint per layer, the rows' VJPs batched through vmap) on the same seeded
# weights, token ids and probes, side by side in one run, float32, the same threads; and both
# against the FLOP floor: the matrix products' FLOPs of posbias' pass (posbias-measure's `work`,
# server/jacobian/flop_count.h) over the machine's peak matrix-product rate (bench/gemm_peak.py,
# measured in the same run). Efficiency = floor / seconds.
#
#   bash bench/run_real_shapes.sh [BUILD_DIR] [THREADS]     (defaults: build/release, 2)
#
# Environment: CASES (default "gpt2-exact gpt2-1k qwen2-2k qwen3-2k llama-1k"), BASELINE_CASES (the
# cases the PyTorch baseline runs for; default "gpt2-exact gpt2-1k llama-1k", so that the default run
# takes under 30 minutes on two cores, about 27: at L = 2048 the baseline takes 17-23 minutes a case,
# and with every baseline the run takes about 75; BASELINE_CASES="$CASES" runs them all),
# APPEND=1 adds to bench-results/real-shapes.jsonl
# instead of starting it anew, KEEP_WEIGHTS=1 keeps the exported safetensors (several GiB),
# OUT (the results' folder, default bench-results), DEVICE (default cpu; cuda:0 on the GPU kit's
# machine: both sides and the peak rate run there), DTYPE (default float32; bfloat16 on a GPU),
# MEMORY_BUDGET_MB (posbias-measure's --memory-budget-mb; its default when unset).
# Cases (presets' shapes, seeded Hugging Face init, one sample each, both sides cold):
#   gpt2-exact  GPT-2 small (12 x 768, vocabulary 50,257), L = 128, exact (768 rows)
#   gpt2-1k     GPT-2 small, L = 1024, Hutchinson K = 8
#   qwen2-2k    Qwen2-0.5B (24 x 896, 14 heads, 2 kv heads, MLP 4864), L = 2048, K = 8
#   qwen3-2k    Qwen3-0.6B (28 x 1024, 16 heads of 128, 8 kv heads, q/k norms), L = 2048, K = 8
#   llama-1k    Llama-3.2-1B (16 x 2048, 32 heads of 64, 8 kv heads, MLP 8192), L = 1024, K = 8
#   qwen2-tiny  the qwen2-tiny preset, L = 64, K = 8 (the GPU kit's dry run on the CPU)
# Seconds are each side's own clock around the measurement (after the model is built or loaded).
# Writes bench-results/real-shapes.jsonl, prints a table, writes bench-results/real-shapes.svg.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${1:-build/release}"
THREADS="${2:-2}"
MEASURE="$BUILD_DIR/server/posbias-measure"
PY="${PY:-/usr/bin/python3}"
OUT="${OUT:-bench-results}"
DEVICE="${DEVICE:-cpu}"
DTYPE="${DTYPE:-float32}"
BUDGET=()
[[ -z "${MEMORY_BUDGET_MB:-}" ]] || BUDGET=(--memory-budget-mb "$MEMORY_BUDGET_MB")
CASES="${CASES:-gpt2-exact gpt2-1k qwen2-2k qwen3-2k llama-1k}"
BASELINE_CASES="${BASELINE_CASES-gpt2-exact gpt2-1k llama-1k}"
mkdir -p "$OUT"
[[ -x "$MEASURE" ]] || { echo "error: $MEASURE not built" >&2; exit 1; }
RESULTS="$OUT/real-shapes.jsonl"
[[ "${APPEND:-0}" == 1 ]] || : > "$RESULTS"

case_of() {  # name -> "preset length method-flags"
  case "$1" in
    gpt2-exact) echo "gpt2 128 --method exact" ;;
    gpt2-1k) echo "gpt2 1024 --method hutchinson --probes 8" ;;
    qwen2-2k) echo "qwen2-0.5b 2048 --method hutchinson --probes 8" ;;
    qwen3-2k) echo "qwen3-0.6b 2048 --method hutchinson --probes 8" ;;
    llama-1k) echo "llama3.2-1b 1024 --method hutchinson --probes 8" ;;
    qwen2-tiny) echo "qwen2-tiny 64 --method hutchinson --probes 8" ;;
    *) echo "unknown case $1" >&2; exit 2 ;;
  esac
}

echo "== peak matrix-product rate ($DTYPE, $THREADS threads, $DEVICE)" >&2
$PY bench/gemm_peak.py --threads "$THREADS" --dtype "$DTYPE" --device "$DEVICE" > "$OUT/real-shapes-peak.json"

for name in $CASES; do
  read -r preset length mflags <<< "$(case_of "$name")"
  base="$OUT/real-$name"
  echo "== $name: posbias ($preset, L = $length, $mflags)" >&2
  # One run exports the weights both sides use, then measures.
  $MEASURE --preset "$preset" --max-positions "$length" --length "$length" --samples 1 $mflags --threads "$THREADS" \
    --device "$DEVICE" --dtype "$DTYPE" "${BUDGET[@]}" --seed 0 --input-seed 7 --export-weights "$base.safetensors" --export-config "$base.config.json" > "$base-cpp.json"
  $PY -c "import json,sys; json.dump(json.load(open(sys.argv[1]))['tokens'], open(sys.argv[2], 'w'))" \
    "$base-cpp.json" "$base.tokens.json"
  rm -f "$base-python.json"
  if [[ " $BASELINE_CASES " == *" $name "* ]]; then
    echo "== $name: PyTorch baseline" >&2
    probes=$(sed -n 's/.*--probes \([0-9]*\).*/\1/p' <<< "$mflags")
    $PY bench/baseline_real_shapes.py --weights "$base.safetensors" --config "$base.config.json" --tokens "$base.tokens.json" \
      --length "$length" --method "$(sed 's/--method \([a-z]*\).*/\1/' <<< "$mflags")" --probes "${probes:-8}" \
      --input-seed 7 --threads "$THREADS" --device "$DEVICE" --dtype "$DTYPE" > "$base-python.json"
  fi
  [[ "${KEEP_WEIGHTS:-0}" == 1 ]] || rm -f "$base.safetensors"
  $PY - "$name" "$preset" "$length" "$base-cpp.json" "$base-python.json" "$OUT/real-shapes-peak.json" >> "$RESULTS" <<'PYEOF'
import json, sys
name, preset, length, cpp_path, py_path, peak_path = sys.argv[1:]
import os
cpp, peak = json.load(open(cpp_path)), json.load(open(peak_path))
py = json.load(open(py_path)) if os.path.exists(py_path) else None  # The baseline did not run.
diff = max(abs(x - y) / abs(y) for x, y in zip(cpp["sq_norm_mean"], py["sq_norm"]) if y) if py else None
work = cpp["work"]
print(json.dumps(dict(case=name, preset=preset, length=int(length), method=cpp["measurement"]["method"],
                      device=cpp["measurement"]["device"], dtype=cpp["measurement"]["dtype"],
                      checkpointed=cpp["measurement"]["checkpointed"],
                      rows=cpp["model"]["width"] if cpp["measurement"]["method"] == "exact" else cpp["measurement"]["probes"],
                      posbias_seconds=cpp["measurement"]["seconds"], baseline_seconds=py["seconds"] if py else None,
                      posbias_peak_mib=cpp["memory"]["measured_peak_bytes"] / 2**20 if cpp["memory"]["measured_peak_bytes"] else None,
                      baseline_peak_mib=py["peak_rss_mib"] if py else None, flops_required=work["flops_required"],
                      flops_forward=work["flops_forward"], flops_reverse=work["flops_reverse"],
                      flops_recomputed=work["flops_recomputed"], peak_gflops=peak["peak_gflops"],
                      baseline_how=py["how"] if py else None, max_rel_diff=diff)))
PYEOF
done

$PY - "$RESULTS" "$OUT/real-shapes.svg" <<'PYEOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print("| case | L | rows | GFLOP required | floor s | posbias s | efficiency | baseline s | baseline eff. | speed-up | max rel. diff |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
fmt = lambda v, f: f.format(v) if v is not None else "—"
for r in rows:
    floor = r["flops_required"] / (r["peak_gflops"] * 1e9)
    r["floor"] = floor
    b = r["baseline_seconds"]
    print(f"| {r['case']} | {r['length']} | {fmt(r['rows'], '{}')} | {r['flops_required'] / 1e9:,.0f} | {floor:.1f} | "
          f"{r['posbias_seconds']:.1f} | {floor / r['posbias_seconds']:.0%} | {fmt(b, '{:.1f}')} | "
          f"{fmt(floor / b if b else None, '{:.0%}')} | {fmt(b / r['posbias_seconds'] if b else None, '{:.2f}x')} | "
          f"{fmt(r['max_rel_diff'], '{:.1e}')} |")
if rows:
    peaks = {}  # Rows appended by runs apart (APPEND=1) each carry their own run's peak.
    for r in rows:
        peaks.setdefault(round(r["peak_gflops"], 1), []).append(r["case"])
    print("\npeak matrix-product rate: " + "; ".join(f"{peak:.1f} GFLOP/s ({', '.join(cases)})" for peak, cases in peaks.items())
          + "; baseline ran "
          + ", ".join(f"{r['case']}: {r['baseline_how']['attention']} + {r['baseline_how']['vjp']}" for r in rows
                      if r["baseline_how"]))
# Bars: seconds of the floor, posbias and the baseline per case (linear scale, per-case groups).
where = ", ".join(sorted({f"{r.get('device', 'cpu')} {r.get('dtype', 'float32')}" for r in rows})) or "cpu float32"
W, H, PAD, BAR = 900, 340, 60, 22
top = max([max(r["posbias_seconds"], r["baseline_seconds"] or 0) for r in rows] + [1e-9])
group = (W - 2 * PAD) / max(1, len(rows))
parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H + 30}">',
         f'<text x="20" y="20" font-size="14">seconds per sample, {where} (one sample, same weights, ids and probes)</text>',
         f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="black"/>',
         f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{H - PAD}" stroke="black"/>',
         f'<text transform="translate(16,{H / 2 + 40}) rotate(-90)" font-size="11">seconds per sample</text>']
Y = lambda v: H - PAD - v / top * (H - 2 * PAD)
for tick in range(0, 6):
    v = top * tick / 5
    parts.append(f'<text x="{PAD - 40}" y="{Y(v) + 4}" font-size="10">{v:.0f}</text>')
colors = (("floor", "#999999"), ("posbias_seconds", "#1f77b4"), ("baseline_seconds", "#d62728"))
for i, r in enumerate(rows):
    x0 = PAD + i * group + (group - 3 * BAR) / 2
    for j, (key, color) in enumerate(colors):
        v = r[key]
        if v is None:
            continue
        parts.append(f'<rect x="{x0 + j * BAR:.1f}" y="{Y(v):.1f}" width="{BAR - 2}" height="{H - PAD - Y(v):.1f}" fill="{color}"/>')
    parts.append(f'<text x="{x0 - 6:.1f}" y="{H - PAD + 16}" font-size="11">{r["case"]} (L {r["length"]})</text>')
x = 20
for label, color in (("FLOP floor", "#999999"), ("posbias", "#1f77b4"), ("PyTorch baseline", "#d62728")):
    parts.append(f'<rect x="{x}" y="{H + 6}" width="14" height="14" fill="{color}"/>')
    parts.append(f'<text x="{x + 20}" y="{H + 18}" font-size="12">{label}</text>')
    x += 40 + 8 * len(label)
parts.append("</svg>")
open(sys.argv[2], "w").write("\n".join(parts) + "\n")
PYEOF
