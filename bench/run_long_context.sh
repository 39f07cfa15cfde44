#!/usr/bin/env bash
# The long-context benchmark on the CPU: posbias-measure (the blocked reverse pass) against
# bench/long_context_reference.py (straightforward PyTorch: attention per query block under
# checkpointing, autograd VJPs) on the same weights and the same token ids, side by side in one
# run, the same dtype and threads; and posbias against the FLOP floor: its pass's matrix-product
# FLOPs (posbias-measure's `work`, server/jacobian/flop_count.h) over the machine's peak
# matrix-product rate in that dtype (bench/gemm_peak.py, same run): efficiency = floor / the
# measurement's own seconds.
#
#   bash bench/run_long_context.sh [BUILD_DIR] [THREADS]     (defaults: build/release, 2)
#
# Environment: LENGTHS (default "1024 2048 4096 8192 16384 32768"), REFERENCE_MAX_L (the longest
# length the reference runs, default 16384: beyond it one case takes tens of minutes), EXACT_LENGTHS
# (exact norms in float64 on both sides, default "1024 2048"; empty for none), REPEATS (runs per point, median;
# default 1), CASES (default "llama gpt2 mistral gemma3 olmo2"), LOSS_LENGTHS (the training signal,
# --output loss, on the llama: default "1024 4096 32768"; its reference columns are posbias' own
# autograd route up to LOSS_AUTOGRAD_MAX_L, default 4096), EARLIER_MEASURE (another build's
# posbias-measure, e.g. an earlier commit's: run right after posbias at every point with the same
# flags, so a change is judged by the ratio of one run, not by seconds across runs; EARLIER_LABEL
# names it in the table).
#
# Models (2 layers, width 64, seeded Hugging Face init): a llama (4 heads of 64 dimensions, Llama
# 3.2's head_dim, 2 kv heads, MLP 128), a
# gpt2 (4 heads, MLP 256), a mistral (as the llama, sliding window 512), a gemma3 (Gemma 3's row:
# layer 1 slides with window 512, layer 2 is full; 4 heads of 64, 1 kv head, sandwich and q/k norms,
# GeGLU), an olmo2 (OLMo 2's row: norms after each branch, q/k norms over the projection; 4 heads
# of 16, 2 kv heads). Hutchinson K = 8 in
# float32 at every length; exact in float64 at EXACT_LENGTHS (the two sides must agree to 1e-10).
# Seconds and peak RSS come from /usr/bin/time around each process (the whole process: the
# model, the inputs, the pass). Writes bench-results/long-context-*.json(l), prints a table and
# writes bench-results/long-context.svg (seconds and MiB against L, log-log).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${1:-build/release}"
THREADS="${2:-2}"
MEASURE="$BUILD_DIR/server/posbias-measure"
PY=/usr/bin/python3
OUT=bench-results
LENGTHS="${LENGTHS:-1024 2048 4096 8192 16384 32768}"
REFERENCE_MAX_L="${REFERENCE_MAX_L:-16384}"
EXACT_LENGTHS="${EXACT_LENGTHS-1024 2048}"
REPEATS="${REPEATS:-1}"
CASES="${CASES:-llama gpt2 mistral gemma3 olmo2}"
LOSS_LENGTHS="${LOSS_LENGTHS-1024 4096 32768}"
LOSS_AUTOGRAD_MAX_L="${LOSS_AUTOGRAD_MAX_L:-4096}"
EARLIER_MEASURE="${EARLIER_MEASURE:-}"
EARLIER_LABEL="${EARLIER_LABEL:-earlier build}"
mkdir -p "$OUT"
[[ -x "$MEASURE" ]] || { echo "error: $MEASURE not built" >&2; exit 1; }
[[ -z "$EARLIER_MEASURE" || -x "$EARLIER_MEASURE" ]] || { echo "error: EARLIER_MEASURE=$EARLIER_MEASURE is not an executable" >&2; exit 1; }
RESULTS="$OUT/long-context.jsonl"
: > "$RESULTS"

flags_of() {
  case "$1" in
    llama) echo "--arch llama --layers 2 --width 64 --heads 4 --kv-heads 2 --mlp-width 128 --vocab 128 --max-positions 65536" ;;
    gpt2) echo "--arch gpt2 --layers 2 --width 64 --heads 4 --mlp-width 256 --vocab 128 --max-positions 65536" ;;
    mistral) echo "--arch mistral --layers 2 --width 64 --heads 4 --kv-heads 2 --mlp-width 128 --vocab 128 --max-positions 65536 --sliding-window 512" ;;
    gemma3) echo "--preset gemma3-tiny --layers 2 --width 64 --heads 4 --kv-heads 1 --head-dim 64 --mlp-width 128 --vocab 128 --max-positions 65536 --sliding-window 512" ;;
    olmo2) echo "--preset olmo2-tiny --layers 2 --width 64 --heads 4 --kv-heads 2 --mlp-width 128 --vocab 128 --max-positions 65536" ;;
  esac
}

timed() {  # output file, command...: runs it under /usr/bin/time; prints "seconds peak_kib"
  local out="$1"
  shift
  /usr/bin/time -f "%e %M" -o "$out.time" "$@" > "$out"
  cat "$out.time"
}

record() {  # case, side, method, dtype, length, seconds, peak_kib, json file
  $PY -c "import json,sys; c,s,m,dt,L,sec,kib,f=sys.argv[1:]; d=json.load(open(f)); w=d.get('work') or {}; \
print(json.dumps({'case':c,'side':s,'method':m,'dtype':dt,'length':int(L),'seconds':float(sec),'peak_mib':int(kib)/1024, \
'sq_norm_mean':d['sq_norm_mean'],'flops_required':w.get('flops_required'), \
'measurement_seconds':(d.get('measurement') or {}).get('seconds')}))" "$@" >> "$RESULTS"
}

for dtype in float32 float64; do
  echo "== peak matrix-product rate ($dtype, $THREADS threads)" >&2
  $PY bench/gemm_peak.py --threads "$THREADS" --dtype "$dtype" | \
    $PY -c "import json,sys; d=json.load(sys.stdin); d['side']='peak'; print(json.dumps(d))" >> "$RESULTS"
done

for case in $CASES; do
  flags=$(flags_of "$case")
  $MEASURE $flags --length 2 --samples 1 --method hutchinson --probes 1 --threads "$THREADS" --seed 0 \
    --export-weights "$OUT/long-$case.safetensors" --export-config "$OUT/long-$case.config.json" > /dev/null
  run_point() {  # length, method, dtype, method flags
    local L="$1" method="$2" dtype="$3" mflags="$4" r
    for ((r = 0; r < REPEATS; ++r)); do
      local base="$OUT/long-$case-$method-$dtype-$L"
      # The earlier build runs first on odd repeats, so neither side always has the first turn.
      local sides=(posbias)
      if [[ -n "$EARLIER_MEASURE" ]]; then
        if ((r % 2)); then sides=(earlier posbias); else sides=(posbias earlier); fi
      fi
      local side
      for side in "${sides[@]}"; do
        local binary="$MEASURE" file="$base-cpp.json" label=posbias
        [[ "$side" == earlier ]] && binary="$EARLIER_MEASURE" file="$base-earlier.json" label="$EARLIER_LABEL"
        echo "== $case $method $dtype L=$L: $label" >&2
        read -r sec kib < <(timed "$file" $binary $flags --length "$L" --samples 1 $mflags --dtype "$dtype" \
          --threads "$THREADS" --seed 0 --input-seed 7)
        record "$case" "$side" "$method" "$dtype" "$L" "$sec" "$kib" "$file"
      done
      $PY -c "import json,sys; json.dump(json.load(open(sys.argv[1]))['tokens'], open(sys.argv[2], 'w'))" \
        "$base-cpp.json" "$base.tokens.json"
      if (( L <= REFERENCE_MAX_L )); then
        echo "== $case $method $dtype L=$L: PyTorch reference" >&2
        read -r sec kib < <(timed "$base-ref.json" $PY bench/long_context_reference.py --weights "$OUT/long-$case.safetensors" \
          --config "$OUT/long-$case.config.json" --tokens "$base.tokens.json" --length "$L" $mflags --dtype "$dtype" --threads "$THREADS")
        record "$case" reference "$method" "$dtype" "$L" "$sec" "$kib" "$base-ref.json"
      fi
    done
  }
  for L in $LENGTHS; do run_point "$L" hutchinson float32 "--method hutchinson --probes 8"; done
  for L in $EXACT_LENGTHS; do run_point "$L" exact float64 "--method exact"; done
  # The training signal (the next-token loss over the sample, one row entering every position)
  # on the llama, float32: the model's own pass against posbias' autograd route (dense attention
  # in autograd's graph: quadratic memory, run up to LOSS_AUTOGRAD_MAX_L) in the reference columns.
  if [ "$case" = llama ]; then
    for L in $LOSS_LENGTHS; do
      base="$OUT/long-$case-loss-float32-$L"
      echo "== $case loss float32 L=$L: posbias (model pass)" >&2
      read -r sec kib < <(timed "$base-cpp.json" $MEASURE $flags --length "$L" --samples 1 --output loss --method exact \
        --dtype float32 --threads "$THREADS" --seed 0 --input-seed 7)
      record "$case" posbias loss float32 "$L" "$sec" "$kib" "$base-cpp.json"
      if [[ -n "$EARLIER_MEASURE" ]]; then
        echo "== $case loss float32 L=$L: $EARLIER_LABEL" >&2
        read -r sec kib < <(timed "$base-earlier.json" $EARLIER_MEASURE $flags --length "$L" --samples 1 --output loss \
          --method exact --dtype float32 --threads "$THREADS" --seed 0 --input-seed 7)
        record "$case" earlier loss float32 "$L" "$sec" "$kib" "$base-earlier.json"
      fi
      if (( L <= LOSS_AUTOGRAD_MAX_L )); then
        echo "== $case loss float32 L=$L: autograd" >&2
        read -r sec kib < <(timed "$base-ref.json" $MEASURE $flags --length "$L" --samples 1 --output loss --method exact \
          --dtype float32 --threads "$THREADS" --seed 0 --input-seed 7 --reverse-pass autograd)
        record "$case" reference loss float32 "$L" "$sec" "$kib" "$base-ref.json"
      fi
    done
  fi
done

EARLIER_LABEL="$EARLIER_LABEL" $PY - "$RESULTS" "$OUT/long-context.svg" <<'PYEOF'
import json, math, os, statistics, sys
from collections import defaultdict
rows = [json.loads(line) for line in open(sys.argv[1])]
points = defaultdict(list)
peaks = {}
for r in rows:
    if r["side"] == "peak":
        peaks[r["dtype"]] = r["peak_gflops"]
    else:
        points[(r["case"], r["side"], r["method"], r["dtype"], r["length"])].append(r)
def med(key, field):
    return statistics.median(p[field] for p in points[key]) if key in points else None
print("| case | method | L | posbias s | posbias MiB | reference s | reference MiB | speed-up | FLOP floor s | efficiency | max rel. diff |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
series = defaultdict(list)
for key in sorted(k for k in points if k[1] == "posbias"):
    case, _, method, dtype, L = key
    ref = (case, "reference", method, dtype, L)
    s, m = med(key, "seconds"), med(key, "peak_mib")
    rs, rmib = med(ref, "seconds"), med(ref, "peak_mib")
    flops = med(key, "flops_required")
    floor = flops / (peaks[dtype] * 1e9) if flops and dtype in peaks else None
    measured = med(key, "measurement_seconds")
    diff = "—"
    if ref in points and method in ("exact", "loss"):
        a, b = points[key][0]["sq_norm_mean"], points[ref][0]["sq_norm_mean"]
        diff = "%.1e" % max(abs(x - y) / abs(y) for x, y in zip(a, b) if y)
    fmt = lambda v, f: f % v if v is not None else "—"
    print(f"| {case} | {method} {dtype} | {L} | {s:.2f} | {m:.0f} | {fmt(rs, '%.2f')} | {fmt(rmib, '%.0f')} | "
          f"{fmt(rs / s if rs else None, '%.2fx')} | {fmt(floor, '%.2f')} | {fmt(100 * floor / measured if floor and measured else None, '%.0f %%')} | {diff} |")
    if method == "hutchinson":
        series[(case, "posbias")].append((L, s, m))
        if rs is not None:
            series[(case, "reference")].append((L, rs, rmib))
# Against another build of posbias-measure, run beside it at every point (EARLIER_MEASURE):
# seconds and peak RSS side by side; ratio > 1 means this build is faster.
earlier = sorted(k for k in points if k[1] == "earlier")
if earlier:
    label = os.environ.get("EARLIER_LABEL", "earlier build")
    print()
    print(f"| case | method | L | posbias s | {label} s | {label} / posbias | posbias MiB | {label} MiB | max rel. diff |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for key in earlier:
        case, _, method, dtype, L = key
        now = (case, "posbias", method, dtype, L)
        if now not in points:
            continue
        s, es = med(now, "seconds"), med(key, "seconds")
        a, b = points[now][0]["sq_norm_mean"], points[key][0]["sq_norm_mean"]
        diff = max((abs(x - y) / abs(y) for x, y in zip(a, b) if y), default=0.0)
        print(f"| {case} | {method} {dtype} | {L} | {s:.2f} | {es:.2f} | {es / s:.2f}x | "
              f"{med(now, 'peak_mib'):.0f} | {med(key, 'peak_mib'):.0f} | {diff:.1e} |")
# SVG: seconds (left) and MiB (right), log-log against L.
W, H, PAD = 900, 380, 60
def axis_labels(x0, w, y_label):
    """The axes' names: L along the bottom, the panel's quantity up the left side."""
    return [f'<text x="{x0 + PAD + w / 2 - 70}" y="{H - PAD + 34}" font-size="11">sequence length L (log scale)</text>',
            f'<text transform="translate({x0 + 14},{H / 2 + 40}) rotate(-90)" font-size="11">{y_label} (log scale)</text>']
def legend_entries():
    """One line sample per series kind: colour is the model, dash the implementation."""
    out, x = [], 20
    for label, color, dash in (("posbias", "black", ""), ("PyTorch reference", "black", ' stroke-dasharray="5,4"'),
                               ("llama", "#1f77b4", ""), ("gpt2", "#d62728", ""), ("mistral (window 512)", "#2ca02c", ""),
                               ("gemma3 (one layer windowed)", "#9467bd", ""), ("olmo2", "#8c564b", "")):
        out.append(f'<line x1="{x}" y1="{H + 15}" x2="{x + 24}" y2="{H + 15}" stroke="{color}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{x + 30}" y="{H + 19}" font-size="12">{label}</text>')
        x += 44 + 7 * len(label)
    return out
def panel(x0, title, index):
    out = [f'<text x="{x0 + 20}" y="20" font-size="14">{title}</text>']
    values = [p[index] for pts in series.values() for p in pts]
    lengths = [p[0] for pts in series.values() for p in pts]
    if not values:
        return out
    lx0, lx1 = math.log2(min(lengths)), math.log2(max(lengths))
    ly0, ly1 = math.log10(min(values)), math.log10(max(values))
    ly1 = ly1 if ly1 > ly0 else ly0 + 1
    lx1 = lx1 if lx1 > lx0 else lx0 + 1
    w = W / 2 - PAD - 20
    X = lambda L: x0 + PAD + (math.log2(L) - lx0) / (lx1 - lx0) * w
    Y = lambda v: H - PAD - (math.log10(v) - ly0) / (ly1 - ly0) * (H - 2 * PAD)
    out += axis_labels(x0, w, "seconds per sample" if index == 1 else "peak RSS MiB")
    out.append(f'<line x1="{x0 + PAD}" y1="{H - PAD}" x2="{x0 + PAD + w}" y2="{H - PAD}" stroke="black"/>')
    out.append(f'<line x1="{x0 + PAD}" y1="{PAD}" x2="{x0 + PAD}" y2="{H - PAD}" stroke="black"/>')
    for L in sorted(set(lengths)):
        out.append(f'<text x="{X(L) - 12}" y="{H - PAD + 16}" font-size="10">{L // 1024}k</text>')
    for e in range(math.floor(ly0), math.ceil(ly1) + 1):
        if ly0 - 0.01 <= e <= ly1 + 0.01:
            out.append(f'<text x="{x0 + 8}" y="{Y(10 ** e) + 4}" font-size="10">1e{e}</text>')
    colors = {"llama": "#1f77b4", "gpt2": "#d62728", "mistral": "#2ca02c", "gemma3": "#9467bd", "olmo2": "#8c564b"}
    for (case, side), pts in sorted(series.items()):
        pts = sorted(pts)
        path = " ".join(f"{X(p[0]):.1f},{Y(p[index]):.1f}" for p in pts)
        dash = "" if side == "posbias" else ' stroke-dasharray="5,4"'
        out.append(f'<polyline points="{path}" fill="none" stroke="{colors.get(case, "black")}" stroke-width="2"{dash}/>')
    return out
parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H + 30}">']
parts += panel(0, "seconds per sample (Hutchinson K = 8, float32)", 1)
parts += panel(W // 2, "peak RSS, MiB", 2)
parts += legend_entries()
parts.append("</svg>")
open(sys.argv[2], "w").write("\n".join(parts) + "\n")
PYEOF
