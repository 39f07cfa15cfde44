#!/usr/bin/env bash
# Hutchinson's probe distributions side by side: the relative RMS error of the estimate of
# ||J_j||_F^2 against the exact norms, per distribution and number of probes K, at equal VJPs
# (K reverse-pass rows each).
#
#   bash bench/run_probes.sh [BUILD_DIR] [THREADS] [REPEATS] [FIRST_REPEAT]
#        (defaults: build/release, 2, 2, 1; PROBE_COUNTS="16 64 256" picks the K)
#
# Model: the gpt2 preset (12 layers, width d = 768) at seeded initialization, L = 128, the final
# hidden state at T = L, one input sample of random token ids (input seed 7), float32. The exact
# norms come first (768 rows); then every distribution (gaussian, rademacher, orthogonal) at
# K = 16, 64 and 256 on the same token ids, REPEATS times with different probe seeds. Error per
# case: sqrt(mean over repeats and positions j of ((estimate_j - exact_j) / exact_j)^2). Also the
# mean of the estimator's own standard error over exact_j (what a run reports about itself), and
# the seconds per run. Writes bench-results/probes-*.json and prints a table.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${1:-build/release}"
THREADS="${2:-2}"
REPEATS="${3:-2}"
FIRST_REPEAT="${4:-1}"
PROBE_COUNTS="${PROBE_COUNTS:-16 64 256}"
MEASURE="$BUILD_DIR/server/posbias-measure"
PY=/usr/bin/python3
OUT=bench-results
mkdir -p "$OUT"
[[ -x "$MEASURE" ]] || { echo "error: $MEASURE not built" >&2; exit 1; }
COMMON=(--preset gpt2 --seed 0 --length 128 --samples 1 --threads "$THREADS" --dtype float32)

if [[ ! -s "$OUT/probes-exact.json" || "$FIRST_REPEAT" == 1 ]]; then
  echo "== exact (768 rows)" >&2
  $MEASURE "${COMMON[@]}" --method exact --input-seed 7 > "$OUT/probes-exact.json"
  $PY -c "import json,sys; json.dump(json.load(open(sys.argv[1]))['tokens'], open(sys.argv[2], 'w'))" \
    "$OUT/probes-exact.json" "$OUT/probes.tokens.json"
fi
for repeat in $(seq "$FIRST_REPEAT" $((FIRST_REPEAT + REPEATS - 1))); do
  for probes in $PROBE_COUNTS; do
    for distribution in gaussian rademacher orthogonal; do
      echo "== $distribution K = $probes, repeat $repeat" >&2
      $MEASURE "${COMMON[@]}" --tokens "$OUT/probes.tokens.json" --method hutchinson --probes "$probes" \
        --probe-distribution "$distribution" --input-seed $((100 + repeat)) \
        > "$OUT/probes-$distribution-$probes-$repeat.json"
    done
  done
done

# Every repeat on disk counts (a later call with FIRST_REPEAT > 1 adds repeats to earlier ones).
$PY - "$OUT" <<'PYEOF'
import glob, json, math, sys
out = sys.argv[1]
exact = json.load(open(f"{out}/probes-exact.json"))["sq_norm_mean"]
print(f"exact: {json.load(open(f'{out}/probes-exact.json'))['measurement']['seconds']:.1f} s")
print("| K | distribution | repeats | relative RMS error | mean reported stderr / exact | seconds per run (median) |")
print("|---:|---|---:|---:|---:|---:|")
summary = []
for probes in (16, 64, 256):
    for distribution in ("gaussian", "rademacher", "orthogonal"):
        errors, reported, seconds = [], [], []
        files = sorted(glob.glob(f"{out}/probes-{distribution}-{probes}-*.json"))
        if not files:
            continue
        for path in files:
            run = json.load(open(path))
            for estimate, stderr, truth in zip(run["sq_norm_mean"], run["sq_norm_estimator_stderr"], exact):
                if truth > 0:
                    errors.append(((estimate - truth) / truth) ** 2)
                    reported.append(stderr / truth)
            seconds.append(run["measurement"]["seconds"])
        seconds.sort()
        rms = math.sqrt(sum(errors) / len(errors))
        summary.append({"probes": probes, "distribution": distribution, "relative_rms_error": rms,
                        "mean_reported_relative_stderr": sum(reported) / len(reported),
                        "median_seconds": seconds[len(seconds) // 2], "repeats": len(files)})
        print(f"| {probes} | {distribution} | {len(files)} | {rms:.4f} | {summary[-1]['mean_reported_relative_stderr']:.4f} | "
              f"{summary[-1]['median_seconds']:.1f} |")
json.dump(summary, open(f"{out}/probes-summary.json", "w"), indent=1)
PYEOF
